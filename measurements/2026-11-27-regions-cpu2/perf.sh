#!/bin/bash
# experiment regions --quick, old tree (170066d, a git worktree at /work/old) and new (main,
# /work/main) alternating, two rounds, one venv; nothing else running on the machine.
set -u
PY=/work/main/.venv/bin/python
OUT=/work/main/measurements/2026-11-27-regions-cpu2
for round in 1 2; do
  for tree in old new; do
    dir=/work/old; [ $tree = new ] && dir=/work/main
    res=$(mktemp -d)
    (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched experiment regions --quick --repeat 3 --out $res --json --no-progress \
       > $OUT/regions-$tree-$round.json 2> $OUT/regions-$tree-$round.err)
    cp $res/regions.csv $OUT/regions-$tree-$round.csv 2>/dev/null
    rm -rf $res
  done
done
