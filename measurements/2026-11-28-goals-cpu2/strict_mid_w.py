"""The regions experiment's fig. 9 point that perf.sh's two rounds could not settle:
strict ordering (seqno merge + pulses) against round-robin, N=2, w=2^8, the --quick
sizes. Runs in the tree on sys.path (PYTHONPATH), either layout (before the
restructuring: bobox_sched.stream.fission). Each repeat times round-robin then strict,
side by side, a collection before each; prints one JSON line: the median of
time(strict)/time(rr) - 1 over `repeat` pairs, as the experiment's strict_overhead_mid_w."""
import gc
import json
import statistics
import sys
import time

import numpy as np

import os

import bobox_sched
from bobox_sched import Scheduler

# Choose by the tree's layout, not by trying the new import: the venv's editable install
# of the new tree would answer `bobox_sched.regions` for the old tree's package.
if os.path.isdir(os.path.join(os.path.dirname(bobox_sched.__file__), "regions")):
    from bobox_sched.regions.fission import parallelize
else:  # the base tree (170066d)
    from bobox_sched.stream.fission import parallelize
import experiments.regions as E

repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 9
w = 1 << 8
rows, prow = E.sizes(w, True)
plan = E.plan_fig7("stateless", w, E.columns(np.random.default_rng(2024), rows), prow)
rr, strict = parallelize(plan, 2), parallelize(plan, 2, ordering="strict")


def timed(s, p):
    gc.collect()
    t = time.perf_counter()
    res = s.submit(p).result(600)
    return time.perf_counter() - t, res


with Scheduler() as s:
    timed(s, rr), timed(s, strict)  # warm-up
    over = []
    for _ in range(repeat):
        t_rr, a = timed(s, rr)
        t_st, b = timed(s, strict)
        assert a == b, "strict output differs from round-robin's"
        over.append(t_st / t_rr - 1.0)
print(json.dumps({"strict_overhead_mid_w": round(statistics.median(over), 4), "pairs": [round(x, 4) for x in over]}))
