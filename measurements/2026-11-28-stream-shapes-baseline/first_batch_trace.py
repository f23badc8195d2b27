"""Where the first batch of a (warm) TStream GS request spends its time: every call of the
group's and instances' steps, with its thread, start and end, relative to the parser's
first stamp."""
import functools, threading, time, sys
import numpy as np
from bobox_sched import Scheduler
from bobox_sched.txn import TxnConfig, coordinator, operator as top
from bobox_sched.txn import progress
from operators.txn import make_app, build_plan

LOG = []
ON = [False]
def wrap(cls, name):
    f = getattr(cls, name)
    @functools.wraps(f)
    def w(*a, **k):
        if not ON[0]:
            return f(*a, **k)
        t0 = time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            LOG.append((t0, time.perf_counter_ns(), threading.current_thread().name, f"{cls.__name__}.{name}"))
    setattr(cls, name, w)
for n in ("__init__", "arrive", "gate", "_start_batch", "_submit_round", "_run_task", "_advance", "_finish", "posted"):
    wrap(coordinator.Group, n)
for n in ("_run_dual", "_arrive", "_post_dual", "_emit", "pre_process", "post_process"):
    if hasattr(top.TransactionalOperator, n):
        wrap(top.TransactionalOperator, n)
wrap(progress.ArrayParser, "process")
with Scheduler(threads_per_node=2, balance_interval=None, pin=False) as s:
    app = make_app("gs", nparts=2)
    events = app.events(6000, seed=1)
    for rep in range(3):
        ON[0] = rep == 2
        store = app.make_store()
        t_sub = time.perf_counter_ns()
        res = s.submit(build_plan(app, TxnConfig(store, 2, interval=500), events)).result(600)
    lat = res["latency_ns"]
    print("first batch latency ms", lat[0] / 1e6, "second", lat[1500] / 1e6)
base = t_sub
for a, b, th, n in sorted(LOG)[:60]:
    print(f"{(a - base) / 1e6:8.3f} {(b - a) / 1e6:7.3f} ms  {th[-12:]:12} {n}")
