"""The elastic algorithm alone (no threads, no clock) on the load-change run's shape: a
throughput curve over levels 1..4 that changes half-way (cost 1000 -> 1), with multiplicative
noise of a given coefficient of variation per period sample. How often does each form settle
within 2 periods of the change (10 periods after it, as in the 30 s run)? Curves: the quick
run's static mixed-graph medians at levels 1, 2, 4 (measurements/2026-12-02-goals/streams.json),
level 3 interpolated."""
import json, sys
import numpy as np
from bobox_sched.policies.streams.elastic import Elasticity

def curve(pts):
    return {1: pts[0], 2: pts[1], 3: (pts[1] + pts[2]) / 2, 4: pts[2]}

d = json.loads(open(sys.argv[1]).read().split("\n", 1)[1])
st = d["static"]["mixed"]
before = curve([st["1000"]["1"], st["1000"]["2"], st["1000"]["4"]])
after = curve([st["1"]["1"], st["1"]["2"], st["1"]["4"]])
PERIODS_BEFORE, PERIODS_AFTER = 9, 10

def settles(form, cv, seed):
    rng = np.random.default_rng(seed)
    e = Elasticity(1, 4, form=form)
    levels = []
    for p in range(PERIODS_BEFORE + PERIODS_AFTER):
        f = before if p < PERIODS_BEFORE else after
        x = f[e.level] * max(0.05, 1 + cv * rng.standard_normal())
        levels.append(e.update_thread_level(x))
    after_lv = levels[PERIODS_BEFORE:]
    final = after_lv[-1]
    last = max((i + 1 for i, l in enumerate(after_lv) if l != final), default=0)
    return last <= 2 and last < len(after_lv) - 1

out = {"curve_before": before, "curve_after": after, "rows": []}
for cv in (0.0, 0.02, 0.05, 0.1, 0.2):
    row = {"cv": cv}
    for form in ("oss", "paper"):
        row[form] = sum(settles(form, cv, s) for s in range(500)) / 500
    out["rows"].append(row)
    print(row, flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
