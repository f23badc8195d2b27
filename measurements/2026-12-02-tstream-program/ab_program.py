"""TStream and LOCK with the apps' access programs (one kernel call per packet for the
state access, one per derived column: bobox_sched.txn.program) against their methods
(pre_process / state_access / post_process in Python), alternating in one process
(2026-12-02).

Usage: .venv/bin/python measurements/2026-12-02-tstream-program/ab_program.py [APPS] [EVENTS] [REPEAT] [INTERVAL]
Prints one JSON line per (app, cc, form): median throughput, p50/p99 latency, busy/wall.
"""
import json
import statistics
import sys

from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig
from operators.txn import make_app, run_once

apps = (sys.argv[1] if len(sys.argv) > 1 else "gs,sl,ob,tp").split(",")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
rep = int(sys.argv[3]) if len(sys.argv) > 3 else 3
interval = int(sys.argv[4]) if len(sys.argv) > 4 else 500
s = Scheduler(balance_interval=None)
W = len(s.workers)
for a in apps:
    ev = make_app(a, nparts=W).events(n, seed=1)
    # warm-up: every kernel of both forms compiled or loaded before the timed runs
    for prog in (True, False):
        app = make_app(a, nparts=W, program=prog)
        for cc in ("tstream", "lock"):
            st = app.make_store()
            run_once(s, app, st, {k: v[:20_000] for k, v in ev.items()}, TxnConfig(st, W, interval=interval, cc=cc))
    res: dict = {}
    for _ in range(rep):
        for cc in ("tstream", "lock"):
            for prog in (True, False):
                app = make_app(a, nparts=W, program=prog)
                st = app.make_store()
                res.setdefault((cc, prog), []).append(run_once(s, app, st, ev, TxnConfig(st, W, interval=interval, cc=cc)))
    for (cc, prog), rs in res.items():
        med = lambda f: statistics.median(f(o) for o in rs)
        print(json.dumps({
            "app": a, "cc": cc, "form": "program" if prog else "methods", "workers": W, "interval": interval,
            "events": n, "repeat": rep,
            "throughput": round(med(lambda o: o["throughput"])),
            "p50_ms": round(med(lambda o: o["p50_ms"]), 3), "p99_ms": round(med(lambda o: o["p99_ms"]), 3),
            "busy_over_wall": round(med(lambda o: o["busy_s"] / o["elapsed_s"]), 3)}), flush=True)
s.shutdown()
