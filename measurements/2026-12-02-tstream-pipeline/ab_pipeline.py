"""TStream with and without TxnConfig.pipeline, alternating in one process (2026-12-02).

Usage: .venv/bin/python measurements/2026-12-02-tstream-pipeline/ab_pipeline.py [APPS] [EVENTS] [REPEAT]
Prints one JSON line per (numa_mode, app, setting): median throughput, p50/p99 latency,
state-access wall time per batch and busy/wall (workers' busy time over wall time).
Runs on every worker of one node (Scheduler defaults), interval 500, LOCK beside them.
"""
import json
import statistics
import sys

from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig
from operators.txn import make_app, run_once

apps = (sys.argv[1] if len(sys.argv) > 1 else "gs,sl,ob,tp").split(",")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
rep = int(sys.argv[3]) if len(sys.argv) > 3 else 3
s = Scheduler(balance_interval=None)
W = len(s.workers)
for mode in ("shared-nothing", "shared-everything"):
    for a in apps:
        app = make_app(a, nparts=W)
        ev = app.events(n, seed=1)
        res: dict = {}
        for _ in range(rep):
            for v in ("paper", "pipeline", "lock"):
                st = app.make_store()
                cc = "lock" if v == "lock" else "tstream"
                cfg = TxnConfig(st, W, interval=500, cc=cc, numa_mode=mode, pipeline=v == "pipeline")
                res.setdefault(v, []).append(run_once(s, app, st, ev, cfg))
        for v, rs in res.items():
            med = lambda f: statistics.median(f(o) for o in rs)
            print(json.dumps({
                "numa_mode": mode, "app": a, "setting": v, "workers": W, "events": n, "repeat": rep,
                "throughput": round(med(lambda o: o["throughput"])),
                "p50_ms": round(med(lambda o: o["p50_ms"]), 3), "p99_ms": round(med(lambda o: o["p99_ms"]), 3),
                "state_access_us_per_batch": round(med(lambda o: o["group"].get("state_access_s", 0.0)
                                                       / max(o["group"].get("batches", 1), 1) * 1e6)),
                "busy_over_wall": round(med(lambda o: o["busy_s"] / o["elapsed_s"]), 3)}), flush=True)
s.shutdown()
