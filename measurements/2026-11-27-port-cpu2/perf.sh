#!/bin/bash
# Old tree (170066d, /work/old) and the Port branch (/work/port) alternating, one venv, one data set.
set -u
PY=/work/main/.venv/bin/python
OUT=/work/main/.scratch/perf2; mkdir -p $OUT
DATA=/work/main/data/tpch-sf0.1
for round in 1 2; do
  for tree in old new; do
    dir=/work/old; [ $tree = new ] && dir=/work/port
    (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched bench overhead --json > $OUT/overhead-$tree-$round.txt 2>&1)
  done
done
for tree in old new; do
  dir=/work/old; [ $tree = new ] && dir=/work/port
  (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched bench queries --data $DATA --json > $OUT/queries-$tree.txt 2>&1)
done
echo done > $OUT/done
