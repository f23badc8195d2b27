# GS latency and TStream ratios of one tree: bash ab_tstream.sh TREE (TREE: a checkout or git worktree; uses /work/main/.venv)
# $1 = tree; prints GS p99/p50 at interval 500 and tstream_vs_best_baseline
cd $1 && "${VENV:-/work/main/.venv}/bin/python" -c "import sys; sys.argv=['bobox']+sys.argv[1:]; from experiments.cli.main import main; sys.exit(main(sys.argv[1:]))" experiment tstream --quick --json --no-progress --out /tmp/tsout-$(basename $1) 2>/dev/null | tail -1 | python3 -c "
import json,sys; d=json.loads(sys.stdin.read()); print(sys.argv[1], 'p99', d['p99_latency_ms'], 'p50', d['p50_latency_ms'], 'ratio', d['tstream_vs_best_baseline'])" $1
