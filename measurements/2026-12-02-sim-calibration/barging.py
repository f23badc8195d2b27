"""The GIL with barging (``Costs.gil_barging``) against the 16-core sweep: a thread that asks
for the GIL while it lies idle in a hand-off takes it at once when it is done before the
woken waiter runs. The 1-worker trace replayed as calibrate.py does, for hand-offs given in
us, barging on (1) or off (0); prints the errors on this VM (1, 2 workers, wall), the
16-core speedups and their errors against the mean of the two measured rounds, and 16/8.

    .venv/bin/python measurements/2026-12-02-sim-calibration/barging.py 40,60,80,100,130 1
"""
import json, statistics, sys, time, os
sys.path.insert(0, "measurements/2026-12-02-sim-calibration")
from calibrate import measured_16core, SWEEP
from bobox_sched import policies  # noqa
from bobox_sched.sim import Costs, Simulation, machine, replay_plans
doc = json.load(open("measurements/2026-12-02-sim-calibration/trace-1w.json"))
real = json.load(open("measurements/2026-12-02-sim-calibration/real.json"))
m16 = measured_16core(); mean16 = {t: (m16["round-1"][t] + m16["round-2"][t]) / 2 for t in SWEEP}
def sim(spec, t, h, barge):
    spans = []
    for seed in (1, 2, 3):
        r = Simulation(machine(spec), replay_plans(doc), threads_per_node=t, seed=seed,
                       costs=Costs(gil_handoff_ns=h * 1000.0, gil_barging=barge)).run()
        spans.append(r["makespan_ms"])
    return statistics.median(spans)
for h in [float(x) for x in sys.argv[1].split(",")]:
    barge = sys.argv[2] == "1"
    here = {t: sim("1 nodes x 2 cores", t, h, barge) for t in (1, 2)}
    s16 = {t: sim("1 nodes x 16 cores", t, h, barge) for t in SWEEP}
    sp = {t: s16[1] / s16[t] for t in SWEEP}
    errs = {t: 100 * (sp[t] / mean16[t] - 1) for t in SWEEP[1:]}
    r16_8 = sp[16] / sp[8]
    print(f"h={h} barge={barge}: here {[round(here[t]/1000/real[str(t)]['wall_s']*100-100,1) for t in (1,2)]}% ; "
          f"16c speedups {[round(sp[t],2) for t in SWEEP]} errs {[round(e,1) for e in errs.values()]} ; 16/8 {r16_8:.2f}",
          flush=True)
