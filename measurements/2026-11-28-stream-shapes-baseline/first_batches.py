import numpy as np, sys
from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig
from operators.txn import make_app, build_plan
N = int(sys.argv[1])
with Scheduler(threads_per_node=2, balance_interval=None, pin=False) as s:
    app = make_app("gs", nparts=2)
    events = app.events(N, seed=1)
    for rep in range(4):
        store = app.make_store()
        cfg = TxnConfig(store, 2, interval=500)
        res = s.submit(build_plan(app, cfg, events)).result(600)
        lat = res["latency_ns"] / 1e6
        k = len(lat)
        chunks = [lat[i:i + 2000] for i in range(0, min(k, 20000), 2000)]
        print(rep, k, "p99", round(float(np.percentile(lat, 99)), 2), "per 2000 events max:", [round(float(c.max()), 1) for c in chunks])
