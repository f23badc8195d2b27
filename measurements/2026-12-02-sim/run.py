"""The simulator's first figures (bobox_sched/sim, uncalibrated): (1) how long a 64-core,
8-node, 256-request mix of synthetic chains takes to simulate; (2) the speedup of one mix
over 1-16 workers of one node when 5.7 % of each task holds the GIL (the share measured per
worker on the 16-core machine, design.md section 4), beside Amdahl's prediction for that
share. Usage: .venv/bin/python measurements/2026-12-02-sim/run.py OUT.json"""
import json
import sys
import time

from bobox_sched import policies  # noqa: F401
from bobox_sched.sim import Costs, Simulation, chain_mix, describe

out = {}
t = time.perf_counter()
big = Simulation(describe("8 nodes x 8 cores"), chain_mix(256, length=5, packets=32), seed=1).run()
out["big"] = {"wall_s": round(time.perf_counter() - t, 2), **big}
print("64 cores, 8 nodes, 256 requests:", out["big"]["wall_s"], "s to simulate;", big, flush=True)
share = 0.057
sweep = {}
for cores in (1, 2, 4, 8, 16):
    plans = chain_mix(64, length=4, packets=32, rows=4096, seed=1, gil_share=share)
    r = Simulation(describe(f"1x{cores}"), plans, seed=1, costs=Costs(jitter=0.0)).run()
    sweep[cores] = r["makespan_ms"]
base = sweep[1]
out["sweep"] = {c: {"makespan_ms": v, "speedup": round(base / v, 3),
                    "amdahl": round(1 / (share + (1 - share) / c), 3)} for c, v in sweep.items()}
for c, d in out["sweep"].items():
    print(c, d, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
