import sys, time, numpy as np
from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig, coordinator, chains
from operators.txn import make_app, build_plan
mode = sys.argv[1]
orig_init = coordinator.Group.__init__
orig_nb = chains.new_batch
seen = []
def nb(group, nops, *a, **k):
    seen.append(nops)
    return orig_nb(group, nops, *a, **k)
coordinator.new_batch = nb if hasattr(coordinator, "new_batch") else None
def init(self, *a, **k):
    orig_init(self, *a, **k)
    if mode == "prefault":
        cap = 16384
        from bobox_sched.txn.kernels.fields import NF
        self._cols = {"oi": np.zeros((cap, NF), np.int64), "of": np.zeros((cap, 2), np.float64),
            "o_viol": np.zeros(cap, np.int8), "ch": np.zeros((cap, 3), np.int64),
            "ch_next": np.zeros(cap, np.int64), "ch_snap": np.zeros((2, cap), np.int64),
            "ch_sval": np.zeros(cap, np.float64), "ch_own": np.zeros(cap, np.int64)}
        for v in self._cols.values():
            v.fill(0)
        self._cap = cap
coordinator.Group.__init__ = init
with Scheduler(threads_per_node=2, balance_interval=None, pin=False) as s:
    app = make_app("gs", nparts=2)
    events = app.events(20000, seed=1)
    for rep in range(6):
        store = app.make_store()
        res = s.submit(build_plan(app, TxnConfig(store, 2, interval=500), events)).result(600)
        lat = res["latency_ns"] / 1e6
        print(mode, rep, "first", round(float(lat[0]), 2), "p99", round(float(np.percentile(lat, 99)), 2), "nops", seen[-1] if seen else "?")
