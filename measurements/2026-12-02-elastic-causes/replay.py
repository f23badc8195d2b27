"""Replay a load-change run's per-period throughput samples through the elastic algorithm
(a pure function of the samples) and say, per period, whether changeInLoad fired; and the
period-to-period spread of the samples taken at one level."""
import json, statistics, sys
from bobox_sched.policies.streams.elastic import Elasticity, SENS, LOAD_CHANGE_SENS
d = json.load(open(sys.argv[1]))
res = {}
for form in ("oss", "paper"):
    tr = [r for r in d[form]["trace"] if r[3] != "warm-up"]  # the warm-up sample is not fed (dynamic.py)
    levels = []
    e = Elasticity(1, 4, form=form)
    fired = []
    for t, x, lvl, ev in tr:
        orig = e.change_in_load
        seen = []
        def spy(thput, _o=orig, _s=seen):
            r = _o(thput); _s.append(r); return r
        e.change_in_load = spy
        levels.append(e.update_thread_level(x))
        fired.append(seen[0] if seen else None)
    ok = [lvl for *_, lvl, _ in tr]
    # the trace's level is the level *after* the update of that period
    res[form] = {"replayed_levels": levels, "run_levels": ok, "same": levels == ok,
                 "load_changes": [i for i, f in enumerate(fired) if f == "change"],
                 "noise": [i for i, f in enumerate(fired) if f == "noise"]}
    print(form, res[form])
# spread at one level: consecutive samples in the OSS run after the change while its level stayed 1
half = d["elastic_s"] / 2
for form in ("oss", "paper"):
    xs = [x for t, x, lvl, _ in d[form]["trace"] if t >= half]
    steps = [abs(b - a) / a for a, b in zip(xs, xs[1:])]
    print(form, "after the change: samples", xs, "cv %.3f" % (statistics.pstdev(xs) / statistics.fmean(xs)),
          "median period-to-period change %.3f" % statistics.median(steps), "SENS", SENS, "OSS sens", LOAD_CHANGE_SENS)
    res[form + "_after"] = {"samples": xs, "cv": statistics.pstdev(xs) / statistics.fmean(xs),
                            "median_step": statistics.median(steps)}
json.dump(res, open(sys.argv[2], "w"), indent=1)
