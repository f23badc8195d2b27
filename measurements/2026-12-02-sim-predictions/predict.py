"""Predictions for machines we do not have (issue 34): the TPC-H mix replayed from a real
run's trace (measurements/2026-12-02-sim-calibration/trace-1w.json, one worker on the
2-core VM) under bobox and simple, in one interpreter (threads) and in domains ("auto":
one per NUMA node, at most 8 workers each), on two captured machines and one described:

  16 cores: 16amd64-8n2c        (hwloc capture: 8 nodes x 2 cores, AMD)
  64 cores: 64amd64-4s2n4ca2co  (hwloc capture: 4 sockets, 8 nodes x 8 cores, AMD)
  128 cores: "8 nodes x 16 cores" (described, distances 10/21)

with the GIL hand-off calibrated against the 16-core sweep (Costs default). Each point
is the speedup over the same replay on one worker of one interpreter.

Usage: .venv/bin/python measurements/2026-12-02-sim-predictions/predict.py [COPIES] [SEEDS]
Writes predictions.json and predictions.png next to this file.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TRACE = os.path.join(TOP, "measurements", "2026-12-02-sim-calibration", "trace-1w.json")
FIXTURES = os.path.join(os.path.dirname(TOP), "shared", "fixtures", "hwloc-linux")
MACHINES = [("16 cores (16amd64-8n2c)", "16amd64-8n2c"), ("64 cores (64amd64-4s2n4ca2co)", "64amd64-4s2n4ca2co"),
            ("128 cores (8 nodes x 16, described)", "8 nodes x 16 cores, distances 10/21")]


def main():
    from bobox_sched import policies  # noqa: F401
    from bobox_sched.sim import Costs, DomainsSimulation, machine, replay_plans

    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with open(TRACE) as f:
        doc = json.load(f)
    tmp = tempfile.mkdtemp(prefix="bobox-hw-")
    out = {"trace": os.path.relpath(TRACE, TOP), "copies": copies, "seeds": seeds, "costs": Costs().__dict__,
           "machines": {}}
    base = None
    for label, spec in MACHINES:
        if os.path.exists(os.path.join(FIXTURES, spec + ".tar.bz2")):  # a capture: unpack it
            dst = os.path.join(tmp, spec)
            os.makedirs(dst)
            subprocess.run(["tar", "-xjf", os.path.join(FIXTURES, spec + ".tar.bz2"), "-C", dst, "--no-same-owner",
                            "-m"], check=True)
            (top,) = os.listdir(dst)
            topo = machine(os.path.join(dst, top))
        else:
            topo = machine(spec)
        if base is None:  # one worker, one interpreter: the denominator of every speedup
            one = topo.restrict(nodes=[topo.cpu_nodes[0].os_index], cpus=[topo.cpu_nodes[0].cpus[0]])
            base = DomainsSimulation(one, replay_plans(doc, copies=copies), domains="off", seed=1).run()["makespan_ms"]
            out["one_worker_ms"] = base
        res = {}
        for policy in ("bobox", "simple"):
            for dom in ("off", "auto"):
                spans = []
                for seed in range(1, seeds + 1):
                    t0 = time.perf_counter()
                    r = DomainsSimulation(topo, replay_plans(doc, copies=copies), domains=dom, policy=policy,
                                          seed=seed).run()
                    spans.append(r["makespan_ms"])
                    print(f"{label} {policy} domains={dom} seed {seed}: {r['makespan_ms']:.1f} ms "
                          f"({r['workers']} workers, {r['domains']} domains, simulated in "
                          f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
                span = sorted(spans)[len(spans) // 2]
                res[f"{policy}/{'threads' if dom == 'off' else 'domains'}"] = {
                    "makespan_ms": span, "speedup": round(base / span, 2), "workers": r["workers"],
                    "domains": r["domains"], "utilisation": r["utilisation"]}
        out["machines"][label] = res
    with open(os.path.join(HERE, "predictions.json"), "w") as f:
        json.dump(out, f, indent=1)
    plot(out)


def plot(out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(out["machines"])
    series = list(next(iter(out["machines"].values())))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(series)
    for k, s in enumerate(series):
        ys = [out["machines"][m][s]["speedup"] for m in labels]
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        bars = ax.bar(xs, ys, width, label=s)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("speedup over 1 worker (simulated)")
    ax.set_title("TPC-H mix (SF 1, replayed trace): predicted speedup, bobox vs simple, threads vs domains",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "predictions.png"), dpi=120)


if __name__ == "__main__":
    main()
