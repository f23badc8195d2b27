#!/bin/bash
# Q1 under HYBRID-QUEUE (p = 100) and PARTITIONED-QUEUE (p = 2), 2 workers, 150k rows,
# 16 runs each in one process, sampled by py-spy at 2 kHz; then the split by function.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(git -C "$here" rev-parse --show-toplevel)
cd "$top"
.venv/bin/py-spy record -r 2000 -f raw -o "$here/q1-hybrid.pyspy.txt" -- .venv/bin/python -W ignore "$here/q1_mix.py" q1 hybrid
.venv/bin/py-spy record -r 2000 -f raw -o "$here/q1-partitioned.pyspy.txt" -- .venv/bin/python -W ignore "$here/q1_mix.py" q1 partitioned 2
gzip -9 -f "$here/q1-hybrid.pyspy.txt" "$here/q1-partitioned.pyspy.txt"
python3 "$here/q1_profile.py" "$here/q1-hybrid.pyspy.txt.gz" "$here/q1-partitioned.pyspy.txt.gz"
