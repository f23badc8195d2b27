#!/bin/bash
# Issue 31's performance goal at one commit: the old tree (170066d, a git worktree at
# /work/old) against main's HEAD (/work/main), alternating old/new, two rounds, one venv,
# one SF 0.1 data set; nothing else running on the machine. Raw outputs next to this file.
#   bench overhead --json; bench queries --data data/tpch-sf0.1 --json;
#   experiment regions --quick --repeat 3 --json
set -u
PY=/work/main/.venv/bin/python
OUT=$(cd "$(dirname "$0")" && pwd)
DATA=/work/main/data/tpch-sf0.1
git -C /work/main rev-parse HEAD > $OUT/new-commit.txt
git -C /work/old rev-parse HEAD > $OUT/old-commit.txt
for round in 1 2; do
  for tree in old new; do
    dir=/work/old; [ $tree = new ] && dir=/work/main
    echo "round $round $tree $(date +%T)" >&2
    (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched bench overhead --json > $OUT/overhead-$tree-$round.txt 2>&1)
    (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched bench queries --data $DATA --json > $OUT/queries-$tree-$round.txt 2>&1)
    res=$(mktemp -d)
    (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched experiment regions --quick --repeat 3 --out $res --json \
       --no-progress > $OUT/regions-$tree-$round.json 2> $OUT/regions-$tree-$round.err)
    cp $res/regions.csv $OUT/regions-$tree-$round.csv 2>/dev/null
    rm -rf $res
  done
done
echo "done $(date +%T)" >&2
