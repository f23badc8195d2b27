#!/bin/bash
# Issue 31's performance goal at one commit: the issue's base (170066d) against main's
# HEAD, both unpacked by `git archive` (old: .scratch/old, new: .scratch/new, so that
# edits to the working tree during the run change nothing), alternating old/new, two
# rounds, one venv, one SF 0.1 data set; nothing else running on the machine. Raw outputs
# next to this file (OUT=DIR: there); `python3 ../2026-11-27-goals-cpu2/summarize.py DIR`
# prints the table. OLD=DIR / NEW=DIR: run those trees as they are instead.
#   bench overhead --json; bench queries --data data/tpch-sf0.1 --json;
#   experiment regions --quick --repeat 3 --json
# (after one discarded warm-up of bench queries and experiment regions per tree)
set -u
TOP=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
PY=$TOP/.venv/bin/python
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)}
DATA=$TOP/data/tpch-sf0.1
if [ -z "${OLD:-}" ]; then
  OLD=$TOP/.scratch/old
  [ -d $OLD ] || { mkdir -p $OLD && git -C $TOP archive 170066d | tar -x -C $OLD; }
  git -C $TOP rev-parse 170066d > $OUT/old-commit.txt
else
  git -C $OLD rev-parse HEAD > $OUT/old-commit.txt
fi
if [ -z "${NEW:-}" ]; then
  NEW=$TOP/.scratch/new
  rm -rf $NEW && mkdir -p $NEW && git -C $TOP archive HEAD | tar -x -C $NEW
  git -C $TOP rev-parse HEAD > $OUT/new-commit.txt
else
  git -C $NEW rev-parse HEAD > $OUT/new-commit.txt
fi
# warm-up, discarded: numba's caches of a freshly unpacked tree are cold
for dir in $OLD $NEW; do
  echo "warm-up $dir $(date +%T)" >&2
  (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched bench queries --data $DATA --json > /dev/null 2>&1)
  res=$(mktemp -d)
  (cd $dir && PYTHONPATH=$dir $PY -m bobox_sched experiment regions --quick --repeat 1 --out $res --json \
     --no-progress > /dev/null 2>&1)
  rm -rf $res
done
for round in 1 2; do
  for tree in old new; do
    dir=$OLD; [ $tree = new ] && dir=$NEW
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
