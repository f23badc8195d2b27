"""The simulator against the NUMA VM (issue 34): replays each guest's 1-worker trace on a
described machine of the guest's shape and compares the local fraction and the remote /
local time ratio with the guest's measurements (vm_point.py's JSON).

Usage: .venv/bin/python measurements/2026-12-02-sim-numa-vm/sim_points.py vm-2.json [vm-4.json ...]
Writes sim.json and table.md next to this file.
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = (1, 2, 3)


def simulate(doc, spec, memory, numa):
    from bobox_sched.sim import Costs, Simulation, machine, replay_plans

    runs = [Simulation(machine(spec), replay_plans(doc), seed=s, memory=memory, costs=Costs(numa=numa)).run()
            for s in SEEDS]
    return {"makespan_ms": statistics.median(r["makespan_ms"] for r in runs),
            "local_fraction": statistics.median(r["local_fraction"] for r in runs), "workers": runs[0]["workers"]}


def main():
    from bobox_sched import policies  # noqa: F401

    rows, out = [], {}
    for path in sys.argv[1:]:
        with open(path) as f:
            vm = json.load(f)
        n, c = vm["nodes"], len(vm["cpus"][0])
        remote = max(max(d) for d in vm["distances"])
        spec = f"{n} nodes x {c} cores, distances 10/{remote}"
        doc = vm.pop("trace_1w")
        one = simulate(doc, "1 nodes x 1 cores", "local", 0.0)
        res = {"spec": spec, "one_worker": one}
        # numa 0: the guest's memory is the host's, local or "remote" (its NUMA factor,
        # bobox topology --numa-factor in the guest, read 0.78-1.09: numa_factor.txt);
        # numa 0.5: the simulator's default, a two-socket host's
        for numa in (0.0, 0.5):
            res[str(numa)] = {m: simulate(doc, spec, m, numa) for m in ("local", "remote")}
        out[os.path.basename(path)] = {"vm": vm, "sim": res}
        m_ratio = vm["remote"]["wall_s"] / vm["local"]["wall_s"]
        for numa in ("0.0", "0.5"):
            s = res[numa]
            s_ratio = s["remote"]["makespan_ms"] / s["local"]["makespan_ms"]
            rows.append(f"| {n} nodes x {c} | {numa} | {vm['local']['local_fraction']:.3f} / "
                        f"{vm['remote']['local_fraction']:.3f} | {s['local']['local_fraction']:.3f} / "
                        f"{s['remote']['local_fraction']:.3f} | {m_ratio:.3f} | {s_ratio:.3f} | "
                        f"{100 * (s_ratio / m_ratio - 1):+.1f} % | {vm['local']['wall_s']:.2f} | "
                        f"{s['local']['makespan_ms'] / 1000:.2f} | {100 * (s['local']['makespan_ms'] / 1000 / vm['local']['wall_s'] - 1):+.1f} % |")
        rows.append(f"| {n} nodes x {c}, 1 worker | | | | | | | {vm['one_worker_s']:.2f} | "
                    f"{one['makespan_ms'] / 1000:.2f} | {100 * (one['makespan_ms'] / 1000 / vm['one_worker_s'] - 1):+.1f} % |")
    with open(os.path.join(HERE, "sim.json"), "w") as f:
        json.dump(out, f, indent=1)
    text = ("| guest | sim numa | local fraction (local / remote memory) measured | simulated | remote/local measured | simulated | error | "
            "wall s (local) measured | simulated | error |\n|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    with open(os.path.join(HERE, "table.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
