#!/bin/bash
# Issue 31's scaling goal on a lent 16-core machine (and issue 32's baseline at the current
# code): the TPC-H mix at SF 1 on 1/2/4/8/16 workers, the tree before the restructuring
# (170066d, unpacked by `git archive` into .scratch/old) against this commit, alternating
# old/new at each worker count; then bench queries (new: 1 worker vs 16 and DuckDB with 16
# threads) and bench overhead (both trees).
# Run from the repository root on the device machine (tool `run`, carry .whl .scratch/old):
#   bash measurements/2026-11-27-scaling-16core/run.sh
# .whl holds duckdb 2.0.1 and tpchgen-cli 4.0.0 wheels for cp312 (the machine's image has
# numba, numpy, pyarrow, psutil, py-cpuinfo, matplotlib, tqdm). Every result is appended to
# $OUT as it arrives, so a run stopped at its limit keeps what it measured.
set -u
NEW=$(pwd); OLD=$NEW/.scratch/old; O=${OUT:-/tmp/scaling-out}; mkdir -p $O
export PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache
log() { echo "@@ $(date +%T) $*" | tee -a $O/log.txt >&2; }
# SKIP_INSTALL=1: a local dry run with an interpreter that has them already
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PATH=/tmp/site/bin:$PATH
PY=$(command -v python3)
# py TREE ARGS...: python in TREE with TREE first on the path, stopped after LIMIT s (default 200)
py() { (cd "$1" && shift && PYTHONPATH="$PWD:/tmp/site" timeout ${LIMIT:-200} $PY "$@"); }
log "machine"
py $NEW - > $O/machine.json <<'PYEOF'
import json, os, platform, subprocess, sys
import cpuinfo, numba, numpy, psutil, pyarrow, duckdb
info = cpuinfo.get_cpu_info()
out = {"python": sys.version, "platform": platform.platform(), "cpu": info.get("brand_raw"),
       "hz_advertised": info.get("hz_advertised_friendly"), "cpus_logical": psutil.cpu_count(),
       "cpus_physical": psutil.cpu_count(logical=False), "affinity": sorted(os.sched_getaffinity(0)),
       "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
       "l2_bytes": info.get("l2_cache_size"), "l3_bytes": info.get("l3_cache_size"),
       "numa_nodes": sorted(os.listdir("/sys/devices/system/node")) if os.path.isdir("/sys/devices/system/node") else None,
       "versions": {m.__name__: m.__version__ for m in (numba, numpy, psutil, pyarrow, duckdb)},
       "lscpu": subprocess.run(["lscpu"], capture_output=True, text=True).stdout}
print(json.dumps(out, indent=1))
PYEOF
py $NEW -m bobox_sched topology >> $O/log.txt 2>&1
log "datagen"
py $NEW -m bobox_sched datagen --sf 1 --out /tmp/sf1 >> $O/log.txt 2>&1 || exit 1
for tree in new old; do
  d=$NEW; [ $tree = old ] && d=$OLD
  log "warm-up $tree (numba cache)"
  py $d -m bobox_sched run --data /tmp/sf1 --concurrency 1 --repeat 1 --no-progress >> $O/log.txt 2>&1
done
# 128 requests (8 queries x 4 x 4): 13 s on one worker of the 2-core machine; each query one
# task graph (--parallel defaults to 1 with at least as many requests as workers).
for T in ${THREADS:-1 2 4 8 16}; do
  for tree in old new; do
    d=$NEW; [ $tree = old ] && d=$OLD
    log "run $tree T=$T"
    py $d -m bobox_sched run --data /tmp/sf1 --threads-per-node $T --concurrency 4 --repeat 4 \
      --json --no-progress > /tmp/run.txt 2>> $O/log.txt
    tail -n 1 /tmp/run.txt | py $NEW -c "import json,sys; print(json.dumps({'tree': '$tree', 'threads': $T, 'summary': json.loads(sys.stdin.read())}))" >> $O/scaling.jsonl
  done
done
log "bench queries new"
LIMIT=150 py $NEW -m bobox_sched bench queries --data /tmp/sf1 --repeat 3 --json > $O/queries-new.txt 2>> $O/log.txt
for tree in old new; do
  d=$NEW; [ $tree = old ] && d=$OLD
  log "bench overhead $tree"
  LIMIT=100 py $d -m bobox_sched bench overhead --json > /tmp/ovh.txt 2>> $O/log.txt
  tail -n 1 /tmp/ovh.txt | py $NEW -c "import json,sys; print(json.dumps({'tree': '$tree', 'overhead': json.loads(sys.stdin.read())}))" >> $O/overhead.jsonl
done
log "done"
