"""Why the simulated 16-core curve flattens between 8 and 16 workers sooner than measured:
a bound from the measured figures alone.

With the GIL modelled as a FIFO queue whose every contended taking costs a constant
hand-off h (``Costs.gil_handoff_ns``), a mix whose tasks hold the GIL H seconds in all
and take it A times cannot end before H + A * h once the GIL is the bottleneck. The 16-core
sweep (``../2026-11-27-scaling-16core/``, tree "new") gives each round's wall time per
worker count and its serial fraction (GIL-held share of task time); H is the 1-worker
run's held time (serial fraction x wall: one worker never waits for the GIL), A twice the
tasks of the replayed trace (``trace-1w.json``: the same 128-request mix; every task takes
the GIL before and after its kernels). The largest h each measured wall allows is then
(wall - H) / A: a constant h at or above it cannot give that wall.

    python3 measurements/2026-12-02-sim-calibration/handoff_bound.py
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SWEEP = HERE.parent / "2026-11-27-scaling-16core"


def main():
    tasks = sum(1 for e in json.load(open(HERE / "trace-1w.json"))["traceEvents"]
                if e.get("ph") == "X" and e.get("cat") == "task")
    acquisitions = 2 * tasks
    print(f"replayed mix: {tasks} tasks, {acquisitions} GIL acquisitions; fitted hand-off 40 us")
    for rnd in ("round-1", "round-2"):
        runs = {}
        for line in open(SWEEP / rnd / "scaling.jsonl"):
            d = json.loads(line)
            if d["tree"] == "new":
                runs[d["threads"]] = d["summary"]
        held = runs[1]["serial_fraction"] * runs[1]["wall_s"]
        print(f"{rnd}: GIL held {held:.3f} s in all (1 worker: serial fraction {runs[1]['serial_fraction']} x "
              f"{runs[1]['wall_s']} s)")
        for w in (4, 8, 16):
            wall = runs[w]["wall_s"]
            bound = (wall - held) / acquisitions * 1e6
            model = held + acquisitions * 40e-6
            print(f"  {w:2d} workers: measured {wall:.3f} s; a constant hand-off must be <= {bound:.1f} us "
                  f"to allow it; with 40 us the queue alone needs >= {model:.3f} s")


if __name__ == "__main__":
    main()
