#!/bin/bash
# Tracing off costs nothing: `bobox bench overhead --json` of the tree before the trace
# commit (OLD, a worktree of 3ce230c) and of this one (NEW), alternating, ROUNDS rounds,
# each run with the project's venv (PYTHONPATH picks the tree). The NEW runs also print the
# traced loop's cost (trace_on_cost). Usage: ab_overhead.sh OLD_TREE NEW_TREE OUT_DIR [ROUNDS]
set -u
OLD=$1 NEW=$2 OUT=$3 ROUNDS=${4:-3}
PY=$NEW/.venv/bin/python
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for side in old new; do
    tree=$OLD; [ $side = new ] && tree=$NEW
    (cd "$tree" && PYTHONPATH="$tree" "$PY" -m bobox_sched bench overhead --repeat 3 --json 2>/dev/null | tail -n 1) \
      > "$OUT/overhead-$side-$r.json"
    echo "$side $r $(cat "$OUT/overhead-$side-$r.json")"
  done
done
