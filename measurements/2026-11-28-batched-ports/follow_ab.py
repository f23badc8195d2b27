"""A/B of dynamic's follow_pushed (batched ports): sink tuples/s of the mixed graph (100
operators, batch 64) with the thread following the batch it pushed (the default) and
without (Fig. 3's LRU order after every port), alternating, 3 rounds; and the time one
batched operator's ``xs_of`` (gathering a batch's rows: the per-tuple memory reads) takes
per call under manual and dynamic.

    .venv/bin/python measurements/2026-11-28-batched-ports/follow_ab.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import numpy as np  # noqa: E402

import experiments.streams_ops as O  # noqa: E402
from bobox_sched.policies.streams import dynamic as D  # noqa: E402
from experiments.streams_exp import queue_for, run_once, static_value  # noqa: E402

one = np.zeros(1, np.int64)
O.burn_rows(one, 10), O.burn_rows_held(one, 10)
acc = [0.0, 0]
orig_xs = O.xs_of


def timed_xs_of(p):
    t = time.perf_counter()
    r = orig_xs(p)
    acc[0] += time.perf_counter() - t
    acc[1] += 1
    return r


O.xs_of = timed_xs_of
orig_init = D.StreamsPolicy.__init__
FOLLOW = [True]


def init(self, *a, **k):
    orig_init(self, *a, **k)
    self.follow = self.follow and FOLLOW[0]


D.StreamsPolicy.__init__ = init
res: dict = {}
for rnd in range(3):
    for cost in (1, 1000):
        for name, kw, follow in (("manual", {"model": "manual"}, True), ("dynamic-2 follow", {"threads": 2}, True),
                                 ("dynamic-2 lru", {"threads": 2}, False)):
            FOLLOW[0] = follow
            acc[:] = [0.0, 0]
            r = run_once("mixed", 100, cost, {"queue_capacity": queue_for("mixed", 100, 64), **kw}, 3, 1.0, batch=64)
            res.setdefault((cost, name), []).append((static_value(r["samples"]), acc[0] / max(acc[1], 1) * 1e6))
for (cost, name), v in res.items():
    print(f"cost {cost:5d} {name:18s} tuples/s {statistics.median(x for x, _ in v):9.0f}   "
          f"xs_of us/call {statistics.median(y for _, y in v):6.1f}   runs {[round(x) for x, _ in v]}")
