import numpy as np, sys, time
from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig
from operators.txn import make_app, build_plan
with Scheduler(threads_per_node=2, balance_interval=None, pin=False) as s:
    app = make_app("gs", nparts=2)
    events = app.events(6000, seed=1)
    for rep in range(3):
        store = app.make_store()
        cfg = TxnConfig(store, 2, interval=500)
        t0 = time.perf_counter()
        h = s.submit(build_plan(app, cfg, events))
        res = h.result(600)
        lat = res["latency_ns"] / 1e6
        print(rep, round(time.perf_counter() - t0, 4), "min/med/max per 250:", [(round(float(c.min()),2), round(float(np.median(c)),2), round(float(c.max()),2)) for c in (lat[i:i+250] for i in range(0, 3000, 250))])
