#!/bin/bash
# Issue 31's performance goal at one commit: the old tree (170066d, a git worktree at
# /work/old) against main's HEAD (/work/main), alternating old/new, two rounds, one venv,
# one SF 0.1 data set; nothing else running on the machine. Raw outputs next to this file.
#   bench overhead --json; bench queries --data data/tpch-sf0.1 --json;
#   experiment regions --quick --repeat 3 --json
# The loop now lives in ../2026-11-28-goals-cpu2/perf.sh (the same commands, plus the
# warm-up this run did by hand before it: one bench queries and one experiment regions
# --quick --repeat 1 per tree); this reruns it on those two trees into this folder.
OUT=$(cd "$(dirname "$0")" && pwd) OLD=/work/old NEW=/work/main exec "$(dirname "$0")/../2026-11-28-goals-cpu2/perf.sh"
