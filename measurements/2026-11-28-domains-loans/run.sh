#!/bin/bash
# Issue 32's 2-core figures at one commit, on this machine, nothing else running:
# `bobox bench domains --json` (gil_bound_speedup, span_gil_speedup, a cross-domain
# edge's cost, the ring's hop, a domain killed mid-mix), `bobox bench ring --json`, the
# main job at SF 1 on 1 worker, on 2 workers in one process and on 2 domains x 1 worker
# (`bobox run --json`: wall time, peak RSS, peak PSS; ROUNDS runs of each, median), and the same mix with every query
# decomposed 2 ways (`--parallel 2`: in one process, and spanning 2 domains), with the
# machine's description, and this machine's own 2-CPU ceiling (ceiling.py). `python3 table.py`
# prints the goals table from the outputs.
# Outputs next to this file, or in the folder given as the first argument.
set -u
D=$(cd "${1:-$(dirname "$0")}" && pwd)
TOP=$(git -C "$D" rev-parse --show-toplevel)
B="$TOP/.venv/bin/bobox"
git -C "$TOP" rev-parse HEAD > "$D/commit.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "python: $("$TOP/.venv/bin/python" -c 'import sys; print(sys.version.split()[0])')"
  echo "kernel: $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)'
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$D/machine.txt"
"$B" bench domains --json > "$D/bench-domains.txt" 2> "$D/bench-domains.err"
"$B" bench ring --json > "$D/bench-ring.txt" 2> "$D/bench-ring.err"
"$TOP/.venv/bin/python" "$D/ceiling.py" > "$D/ceiling.txt" 2> "$D/ceiling.err"
"$B" datagen --sf 1 --out "$TOP/data/tpch-sf1" > /dev/null 2>&1
# Each configuration ROUNDS times, the configurations alternating: one SF 1 mix is 1-2.5 s,
# and single runs here moved the per-core figure from 0.75 to 1.10 (table.py takes each
# configuration's run of median wall time).
ROUNDS=${ROUNDS:-5}
for round in $(seq 1 "$ROUNDS"); do
  for cfg in "threads1:--threads-per-node 1" "threads2:--threads-per-node 2" "domains2:--domains 2 --threads-per-node 1" \
             "threads2-par2:--threads-per-node 2 --parallel 2" "domains2-par2:--domains 2 --threads-per-node 1 --parallel 2"; do
    name=${cfg%%:*}
    # shellcheck disable=SC2086
    "$B" run --data "$TOP/data/tpch-sf1" ${cfg#*:} --no-progress --json > "$D/run-sf1-$name-$round.txt" \
      2> "$D/run-sf1-$name-$round.err"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$D/machine.txt"
# The NUMA figure, in a 2-node guest (about 1.5 min; needs the VM tier's packages)
"$TOP/.venv/bin/python" "$D/vm.py" > "$D/vm.txt" 2> "$D/vm.err"
python3 "$D/table.py" "$D" > "$D/table.md"
