#!/usr/bin/env bash
# bench overhead, old tree (26333b9: runtime fields on the operator) against new (Task
# records), alternating, 3 rounds of each policy, on this 2-core VM. Run from the repo
# root with the old tree extracted to .scratch/base (git archive 26333b9 | tar -x).
set -euo pipefail
PY=$PWD/.venv/bin/python
OUT=measurements/2026-11-28-task-record/overhead.jsonl
: > $OUT
for round in 1 2 3; do
  for policy in bobox simple; do
    for tree in old new; do
      d=$PWD; [ $tree = old ] && d=$PWD/.scratch/base
      (cd $d && $PY -m bobox_sched bench overhead --policy $policy --json 2>/dev/null | tail -n 1) |
        $PY -c "import json,sys; print(json.dumps({'tree': '$tree', 'round': $round, 'overhead': json.loads(sys.stdin.read())}))" >> $OUT
    done
  done
done
