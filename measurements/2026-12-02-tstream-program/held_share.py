"""GIL-held time per event of TStream and LOCK at 1 worker, the apps' access programs
against their methods: the txn kernels and the programs' derived-column kernels timed as
released (operators/released.py), everything else counted as held (2026-12-02).

Usage: .venv/bin/python measurements/2026-12-02-tstream-program/held_share.py [APPS] [EVENTS] [REPEAT]
Prints one JSON line per (app, cc, form): median held ns per event, serial fraction
(held / busy) and throughput.
"""
import json
import statistics
import sys

from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig
from operators import released
from operators.txn import make_app, run_once

apps = (sys.argv[1] if len(sys.argv) > 1 else "gs,sl,ob,tp").split(",")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
rep = int(sys.argv[3]) if len(sys.argv) > 3 else 3
s = Scheduler(threads_per_node=1, pin=False, balance_interval=None)
was = released.enable(True)
for a in apps:
    ev = make_app(a).events(n, seed=1)
    res: dict = {}
    for r in range(rep + 1):  # the first round warms every kernel up, not counted
        for cc in ("tstream", "lock"):
            for prog in (True, False):
                app = make_app(a, program=prog)
                st = app.make_store()
                cfg = TxnConfig(st, 1, interval=500, cc=cc, kernel_wrap=released.timed_namespace)
                o = run_once(s, app, st, ev, cfg)
                if r:
                    res.setdefault((cc, prog), []).append(o)
    for (cc, prog), rs in res.items():
        med = lambda f: statistics.median(f(o) for o in rs)
        print(json.dumps({
            "app": a, "cc": cc, "form": "program" if prog else "methods", "workers": 1, "interval": 500,
            "events": n, "repeat": rep,
            "held_ns_per_event": round(med(lambda o: (o["busy_s"] - o["released_s"]) / o["events"] * 1e9), 1),
            "serial_fraction": round(med(lambda o: (o["busy_s"] - o["released_s"]) / o["busy_s"]), 3),
            "throughput": round(med(lambda o: o["throughput"]))}), flush=True)
released.enable(was)
s.shutdown()
