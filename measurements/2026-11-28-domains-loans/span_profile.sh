#!/bin/bash
# Where a domain's CPU goes while the SF 1 mix, every query decomposed 2 ways, spans 2
# domains x 1 worker: py-spy samples one domain process (200 Hz, 5 s, busy threads only,
# every thread) while span_mix.py runs the mix three times; span_profile.py counts the
# samples per thread and per innermost frame. From the repository root:
#     bash measurements/2026-11-28-domains-loans/span_profile.sh
set -u
D=$(cd "$(dirname "$0")" && pwd)
TOP=$(git -C "$D" rev-parse --show-toplevel)
PY="$TOP/.venv/bin/python"
cd "$TOP" || exit 2
"$PY" "$D/span_mix.py" > "$D/span-mix.txt" 2>&1 &
for _ in $(seq 1 120); do grep -q PIDS "$D/span-mix.txt" && break; sleep 1; done
pid=$(grep PIDS "$D/span-mix.txt" | awk '{print $2}')
sleep 1.2
"$TOP/.venv/bin/py-spy" record --nonblocking --threads --format raw -d 5 -r 200 -p "$pid" -o "$D/span-pyspy.txt" > /dev/null 2>&1
wait
"$PY" "$D/span_profile.py" "$D/span-pyspy.txt" > "$D/span-profile.txt"
cat "$D/span-profile.txt"
