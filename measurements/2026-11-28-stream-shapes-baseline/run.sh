#!/bin/bash
# Issue 33's starting figures at one commit: the three stream papers' experiments and the
# policies comparison, --quick, one run each, on this 2-core machine, nothing else running.
# Outputs (CSV, PNG, report.md, the JSON line, stderr) next to this file, or in the
# folder given as the first argument.
set -u
D=$(cd "${1:-$(dirname "$0")}" && pwd)
TOP=$(git -C "$D" rev-parse --show-toplevel)
git -C "$TOP" rev-parse HEAD > "$D/commit.txt"
python3 "$TOP/measurements/2026-11-27-test-time/speed.py" > "$D/speed.txt"
for name in ordered streams tstream policies; do
  echo "$name $(date +%T)" >&2
  /usr/bin/time -f "%e s wall" "$TOP/.venv/bin/bobox" experiment "$name" --quick --out "$D/out" --json --no-progress \
     > "$D/$name.json" 2> "$D/$name.err"
  echo "$name rc $? $(tail -n 1 "$D/$name.err")" >&2
done
python3 "$TOP/measurements/2026-11-27-test-time/speed.py" >> "$D/speed.txt"
