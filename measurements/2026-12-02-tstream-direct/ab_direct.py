"""TStream with and without chain-free pools (``coordinator.Group.direct_pools``),
alternating in one process, LOCK beside them (2026-12-02).

Usage: .venv/bin/python measurements/2026-12-02-tstream-direct/ab_direct.py [APPS] [EVENTS] [REPEAT] [INTERVAL]
Prints one JSON line per (app, setting): median throughput, p50/p99 latency, state-access
wall time per batch, the batches that ran without chains, busy/wall.
"""
import json
import statistics
import sys

from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig
from bobox_sched.txn import coordinator as coord
from operators.txn import make_app, run_once

apps = (sys.argv[1] if len(sys.argv) > 1 else "gs,sl,ob,tp").split(",")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
rep = int(sys.argv[3]) if len(sys.argv) > 3 else 3
interval = int(sys.argv[4]) if len(sys.argv) > 4 else 500
s = Scheduler(balance_interval=None)
W = len(s.workers)
for a in apps:
    app = make_app(a, nparts=W)
    ev = app.events(n, seed=1)
    res: dict = {}
    for _ in range(rep):
        for v in ("direct", "chains", "lock"):
            coord.Group.direct_pools = v == "direct"
            st = app.make_store()
            cfg = TxnConfig(st, W, interval=interval, cc="lock" if v == "lock" else "tstream")
            res.setdefault(v, []).append(run_once(s, app, st, ev, cfg))
    coord.Group.direct_pools = True
    for v, rs in res.items():
        med = lambda f: statistics.median(f(o) for o in rs)
        print(json.dumps({
            "app": a, "setting": v, "workers": W, "interval": interval, "events": n, "repeat": rep,
            "throughput": round(med(lambda o: o["throughput"])),
            "p50_ms": round(med(lambda o: o["p50_ms"]), 3), "p99_ms": round(med(lambda o: o["p99_ms"]), 3),
            "state_access_us_per_batch": round(med(lambda o: o["group"].get("state_access_s", 0.0)
                                                   / max(o["group"].get("batches", 1), 1) * 1e6)),
            "direct_batches": med(lambda o: o["group"].get("direct_batches", 0)),
            "busy_over_wall": round(med(lambda o: o["busy_s"] / o["elapsed_s"]), 3)}), flush=True)
s.shutdown()
