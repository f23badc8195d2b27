"""Calibrate and validate the simulator's GIL model (issue 34) against measured runs of
the TPC-H mix (2026-12-02).

Usage (repository root):
  .venv/bin/python measurements/2026-12-02-sim-calibration/calibrate.py real   # the real runs here
  .venv/bin/python measurements/2026-12-02-sim-calibration/calibrate.py sim    # the simulations
  .venv/bin/python measurements/2026-12-02-sim-calibration/calibrate.py table  # table.md from both

real: `bobox run --sf 1 --concurrency 4 --repeat 4` (8 queries x 16 = 128 requests, the
16-core sweep's mix) on this machine at 1 and 2 workers, each with --trace; the 1-worker
trace is the work the simulator replays (bobox_sched/sim/replay.py).
sim: that trace replayed (a) on this machine's description at 1 and 2 workers, (b) on a
16-core one-node machine at 1/2/4/8/16 workers, for each GIL hand-off in a grid; the
speedups of (b) are compared with the committed 16-core sweep
(measurements/2026-11-27-scaling-16core/, rounds 1 and 2, the "new" tree).
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
BOBOX = os.path.join(TOP, ".venv", "bin", "bobox")
HANDOFFS_US = (0, 10, 20, 30, 35, 40, 45, 50, 60, 80)
SWEEP = (1, 2, 4, 8, 16)


def real():
    out = {}
    for t in (1, 2):
        trace = os.path.join(HERE, f"trace-{t}w.json")
        cmd = [BOBOX, "run", "--sf", "1", "--concurrency", "4", "--repeat", "4", "--threads-per-node", str(t),
               "--trace", trace, "--json", "--no-progress"]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=TOP)
        if p.returncode:
            sys.exit(f"{' '.join(cmd)} failed: {p.stderr[-2000:]}")
        summary = json.loads(p.stdout.strip().splitlines()[-1])
        out[t] = {"command": " ".join(cmd[1:]), "wall_s": summary["wall_s"], "summary": summary}
        print(f"real {t} workers: {summary['wall_s']} s", file=sys.stderr)
    with open(os.path.join(HERE, "real.json"), "w") as f:
        json.dump(out, f, indent=1)


SEEDS = (1, 2, 3)


def _sim(doc, spec, t, handoff_us):
    """The median makespan over SEEDS (each seed draws its own task-time jitter)."""
    import statistics

    from bobox_sched.sim import Costs, Simulation, machine, replay_plans

    topo = machine(spec)
    t0 = time.perf_counter()
    spans, tasks = [], 0
    for seed in SEEDS:
        r = Simulation(topo, replay_plans(doc), threads_per_node=t, seed=seed,
                       costs=Costs(gil_handoff_ns=handoff_us * 1000.0)).run()
        spans.append(r["makespan_ms"])
        tasks = r["tasks"]
    return {"makespan_ms": statistics.median(spans), "makespan_ms_seeds": spans, "tasks": tasks,
            "sim_s": round(time.perf_counter() - t0, 2)}


def sim():
    from bobox_sched import policies  # noqa: F401
    from bobox_sched.sim.replay import totals

    with open(os.path.join(HERE, "trace-1w.json")) as f:
        doc = json.load(f)
    out = {"trace_totals": totals(doc), "here": {}, "16core": {}}
    for h in HANDOFFS_US:
        out["here"][str(h)] = {str(t): _sim(doc, "1 nodes x 2 cores", t, h) for t in (1, 2)}
        out["16core"][str(h)] = {str(t): _sim(doc, "1 nodes x 16 cores", t, h) for t in SWEEP}
        print(f"handoff {h} us: here {[out['here'][str(h)][str(t)]['makespan_ms'] for t in (1, 2)]} ms, "
              f"16 cores {[out['16core'][str(h)][str(t)]['makespan_ms'] for t in SWEEP]} ms", file=sys.stderr)
    with open(os.path.join(HERE, "sim.json"), "w") as f:
        json.dump(out, f, indent=1)


def measured_16core():
    """Speedups of the "new" tree per round: {round: {workers: speedup}}."""
    out = {}
    for rnd in ("round-1", "round-2"):
        walls = {}
        with open(os.path.join(TOP, "measurements", "2026-11-27-scaling-16core", rnd, "scaling.jsonl")) as f:
            for line in f:
                d = json.loads(line)
                if d.get("tree") == "new":
                    walls[d["threads"]] = d["summary"]["wall_s"]
        out[rnd] = {t: walls[1] / walls[t] for t in SWEEP if t in walls}
    return out


def table():
    with open(os.path.join(HERE, "real.json")) as f:
        re_ = json.load(f)
    with open(os.path.join(HERE, "sim.json")) as f:
        si = json.load(f)
    m16 = measured_16core()
    mean16 = {t: (m16["round-1"][t] + m16["round-2"][t]) / 2 for t in SWEEP}

    def err16(h):
        s = si["16core"][str(h)]
        sp = {t: s["1"]["makespan_ms"] / s[str(t)]["makespan_ms"] for t in SWEEP}
        return sp, max(abs(sp[t] / mean16[t] - 1) for t in SWEEP[1:])

    best = min(HANDOFFS_US, key=lambda h: err16(h)[1])
    lines = ["# Simulated against measured: the TPC-H mix (SF 1, 128 requests)", ""]
    lines += ["## This machine (2 vCPUs), wall time of the timed mix", "",
              "| workers | measured s | simulated s, hand-off 0 | simulated s, hand-off "
              f"{best} us | error at {best} us |", "|---|---|---|---|---|"]
    for t in (1, 2):
        meas = re_[str(t)]["wall_s"]
        s0 = si["here"]["0"][str(t)]["makespan_ms"] / 1000
        sb = si["here"][str(best)][str(t)]["makespan_ms"] / 1000
        lines.append(f"| {t} | {meas:.2f} | {s0:.2f} | {sb:.2f} | {100 * (sb / meas - 1):+.1f} % |")
    lines += ["", "## The 16-core sweep (speedup over 1 worker; measured: the committed rounds, 'new' tree)", "",
              "| hand-off us | " + " | ".join(f"{t} w" for t in SWEEP) + " | worst error vs mean of rounds |",
              "|---|" + "---|" * (len(SWEEP) + 1)]
    lines.append("| measured round 1 | " + " | ".join(f"{m16['round-1'][t]:.2f}" for t in SWEEP) + " | |")
    lines.append("| measured round 2 | " + " | ".join(f"{m16['round-2'][t]:.2f}" for t in SWEEP) + " | |")
    for h in HANDOFFS_US:
        sp, e = err16(h)
        mark = " (best)" if h == best else ""
        lines.append(f"| {h}{mark} | " + " | ".join(f"{sp[t]:.2f}" for t in SWEEP) + f" | {100 * e:.1f} % |")
    sp, _ = err16(best)
    lines.append(f"| error at {best} us | " + " | ".join(f"{100 * (sp[t] / mean16[t] - 1):+.1f} %" for t in SWEEP)
                 + " | |")
    lines += ["", f"16 vs 8 workers: measured {m16['round-1'][16] / m16['round-1'][8]:.2f} (round 1), "
              f"{m16['round-2'][16] / m16['round-2'][8]:.2f} (round 2); simulated {sp[16] / sp[8]:.2f} at {best} us."]
    tt = si["trace_totals"]
    lines += ["", f"Trace replayed: {tt['tasks']} tasks, GIL held {tt['held_ns'] / 1e9:.3f} s, released "
              f"{tt['released_ns'] / 1e9:.3f} s (held share {tt['held_ns'] / (tt['held_ns'] + tt['released_ns']):.3f}), "
              f"wall {tt['wall_ns'] / 1e9:.2f} s."]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(HERE, "table.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    {"real": real, "sim": sim, "table": table}[sys.argv[1]]()
