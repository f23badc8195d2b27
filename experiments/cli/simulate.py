"""``bobox simulate``: the scheduling policies on a machine you may not have
(``bobox_sched/sim``): the unchanged policy code on virtual workers and a virtual clock,
with the runtime's invariants checked at every step, over one seed or many."""

from __future__ import annotations

import json
import sys

from experiments.cli.argtypes import count, path, real
from experiments.cli.run import domains_arg

MAX_SEEDS = 100_000
MAX_SIM_REQUESTS = 4096
# --bandwidth-gbs at most: bobox_sched/sim/machine.py's MAX_BANDWIDTH_GBS (not imported here:
# --help would import the simulator; tests/test_sim.py checks that they agree)
MAX_BANDWIDTH_GBS = 10_000.0


def add_arguments(p) -> None:
    p.add_argument("--machine", default="live", metavar="SPEC",
                   help="live (default), a captured sysfs tree (a folder with sys/ and proc/), or a description: "
                   "'NODES x CORES[, smt K][, l2 SIZE][, distances L/R][, bandwidth GBPS]', e.g. "
                   "'4 nodes x 16 cores, smt 2, bandwidth 40G'")
    p.add_argument("--policy", choices=["bobox", "simple"], default="bobox", help="policy to simulate (default bobox)")
    p.add_argument("--threads-per-node", type=count(4096), metavar="T", help="workers per node (default: its CPUs)")
    p.add_argument("--requests", type=count(MAX_SIM_REQUESTS), default=64, metavar="N",
                   help="requests of the synthetic mix, all submitted at time 0 (default 64)")
    p.add_argument("--length", type=count(64), default=4, metavar="L", help="operators per chain (default 4)")
    p.add_argument("--packets", type=count(100_000), default=64, metavar="P", help="packets per request (default 64)")
    p.add_argument("--rows", type=count(1 << 20), default=4096, metavar="R", help="rows per packet (default 4096)")
    p.add_argument("--gil-share", type=real(0.99), default=0.1, metavar="F",
                   help="share of a task's time with the GIL held, at the mean cost, above 0 (default 0.1)")
    p.add_argument("--replay", type=path, metavar="TRACE",
                   help="replay the requests of a real run's trace (bobox run --trace, best with one worker) instead "
                   "of the synthetic mix: each request's operators with their traced GIL-held and released time")
    p.add_argument("--copies", type=count(1024), default=1, metavar="K",
                   help="with --replay: submit each traced request K times (default 1)")
    p.add_argument("--domains", type=domains_arg, metavar="auto|off|N",
                   help="simulate the runtime in domains, one interpreter and GIL each, cut as bobox run --domains "
                   "cuts the machine (default: off, one interpreter); not with --trace")
    p.add_argument("--gil-handoff-us", type=real(10_000.0), metavar="US",
                   help="microseconds between a GIL holder letting go and a waiting thread running, above 0 "
                   "(default: the calibrated Costs.gil_handoff_ns of bobox_sched/sim/engine.py, printed with the run; "
                   "measurements/2026-12-02-sim-calibration/; 0.001 for an almost ideal queue)")
    p.add_argument("--bandwidth-gbs", type=real(MAX_BANDWIDTH_GBS), metavar="GBPS",
                   help="memory bandwidth per NUMA node in GB/s, above 0, shared by the tasks reading from the node at "
                   "once (default: the --machine description's 'bandwidth', else unlimited; Costs.node_bandwidth_gbs "
                   "of bobox_sched/sim/engine.py says what this VM measures)")
    p.add_argument("--gil-barging", action="store_true",
                   help="a thread that asks for the GIL during an idle hand-off takes it if done before the woken "
                   "waiter runs (bobox_sched/sim/engine.py; default: the FIFO queue, the calibrated model)")
    p.add_argument("--seed", type=count(2**62), default=1, metavar="S", help="first seed (default 1)")
    p.add_argument("--seeds", type=count(MAX_SEEDS), default=1, metavar="K",
                   help="run K seeds (S .. S+K-1), each checked for the runtime's invariants (default 1)")
    p.add_argument("--trace", type=path, metavar="FILE",
                   help="write the first seed's trace (Chrome trace JSON, virtual time) and its picture FILE.png")
    p.add_argument("--out", type=path, metavar="DIR",
                   help="also write the experiments' files to DIR: simulate.csv (one row per seed and metric, the "
                   "long format of bobox experiment), simulate.json and the 'simulate' section of report.md")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    import statistics

    from bobox_sched import policies  # noqa: F401 - registers the policies
    from bobox_sched.core.errors import BoboxError
    from bobox_sched.sim import Costs, DomainsSimulation, Simulation, Violation, bandwidth_of, chain_mix, machine
    from topology.errors import TopologyError

    try:
        topo = machine(args.machine)
        bandwidth = args.bandwidth_gbs if args.bandwidth_gbs is not None else bandwidth_of(args.machine)
    except TopologyError as e:
        raise BoboxError(f"--machine: {e}") from None
    if args.trace is not None:
        from experiments.cli.run import check_trace_arg

        if args.domains not in (None, "off"):
            raise BoboxError("--trace: not with --domains (each domain keeps its own trace: "
                             "DomainsSimulation.sims[i].document() in Python)")
        check_trace_arg(args.trace)
    if args.out is not None:
        from experiments.cli.outputs import check_output_dir

        check_output_dir(args.out, "--out")  # before any work
    replayed = None
    if args.replay is not None:
        from bobox_sched.sim import ReplayError, replay_plans

        try:
            with open(args.replay) as f:
                replay_doc = json.load(f)
            replayed = replay_plans(replay_doc, rows=args.rows, copies=args.copies)
        except OSError as e:
            raise BoboxError(f"--replay: cannot read {args.replay}: {e.strerror or e}") from None
        except (ValueError, ReplayError) as e:
            raise BoboxError(f"--replay: {args.replay}: {e}") from None
    handoff = {} if args.gil_handoff_us is None else {"gil_handoff_ns": args.gil_handoff_us * 1000.0}
    costs = Costs(node_bandwidth_gbs=bandwidth, gil_barging=args.gil_barging, **handoff)
    bw = "unlimited" if bandwidth is None else f"{bandwidth:g} GB/s per node"
    workers = sum(min(args.threads_per_node or len(n.cpus), 4096) for n in topo.cpu_nodes)
    what = (f"{len(replayed)} requests replayed from {args.replay}" if replayed is not None else
            f"{args.requests} requests (chains of {args.length}, {args.packets} packets of {args.rows} rows, "
            f"GIL share {args.gil_share})")
    print(f"simulating {what} under {args.policy} on {topo.root} ({len(topo.cpu_nodes)} nodes, "
          f"{workers} workers), GIL hand-off {costs.gil_handoff_ns / 1000:g} us, memory bandwidth {bw}, seeds "
          f"{args.seed}..{args.seed + args.seeds - 1}", file=sys.stderr)
    bar = None
    if not args.no_progress and args.seeds > 1:
        from tqdm import tqdm

        bar = tqdm(total=args.seeds, desc="seeds", file=sys.stderr, leave=False)
    runs, doc = [], None
    for seed in range(args.seed, args.seed + args.seeds):
        if replayed is not None:
            plans = replayed  # a plan is a recipe: every submit makes fresh operators
        else:
            plans = chain_mix(args.requests, args.length, args.packets, args.rows, seed, args.gil_share)
        label = "bobox " + " ".join(getattr(args, "argv", []))
        if args.domains not in (None, "off"):
            try:
                sim = DomainsSimulation(topo, plans, domains=args.domains, policy=args.policy,
                                        threads_per_node=args.threads_per_node, seed=seed, costs=costs, label=label)
            except ValueError as e:
                raise BoboxError(f"--domains: {e}") from None
        else:
            sim = Simulation(topo, plans, policy=args.policy, threads_per_node=args.threads_per_node, seed=seed,
                             costs=costs, label=label)
        try:
            runs.append(sim.run())
        except Violation as e:
            if bar is not None:
                bar.close()
            print(f"invariant broken at seed {seed}: {e}", file=sys.stderr)
            if args.json:
                print(json.dumps({"violation": str(e), "seed": seed, "runs": runs}))
            return 1
        if doc is None and args.trace is not None:
            doc = sim.document()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    spans = [r["makespan_ms"] for r in runs]
    first = runs[0]
    where = f" in {first['domains']} domains" if "domains" in first else ""
    print(f"{first['workers']} workers on {first['nodes']} nodes{where}: makespan {statistics.median(spans):.2f} ms "
          f"(median of {len(runs)} seeds; {min(spans):.2f}-{max(spans):.2f}), utilisation {first['utilisation']:.3f}, "
          f"tasks {first['tasks']}, steals {first['steals']}, sleeps {first['sleeps']}, migrations "
          f"{first['migrations']}, shares {first['shares']}, {first['bytes'] / 1e6:.1f} MB read "
          f"({first['bandwidth_bound']} tasks waited for memory) (seed {first['seed']}); invariants held in every seed")
    if doc is not None:
        from experiments.cli.run import write_trace_doc

        write_trace_doc(doc, args.trace)
    summary = {"runs": runs, "makespan_ms_median": statistics.median(spans), "violations": 0}
    if args.out is not None:
        write_outputs(args, topo, costs, what, summary)
    if args.json:
        print(json.dumps(summary))
    return 0


# what each run's summary says, in the CSV and the report's table (name, unit)
METRICS = [("makespan_ms", "ms"), ("utilisation", ""), ("tasks", ""), ("steals", ""), ("sleeps", ""),
           ("migrations", ""), ("shares", ""), ("events", ""), ("busy_ms", "ms"), ("local_fraction", ""),
           ("bytes", "B"), ("bandwidth_bound", "")]


def write_outputs(args, topo, costs, what: str, summary: dict) -> None:
    """``--out DIR``: the experiments' files (``experiments/framework.py``): the long-format
    CSV, the JSON summary and a report.md section whose machine summary is the simulated
    machine's; each written atomically."""
    import shlex
    import statistics

    from experiments.cli.outputs import write_atomic
    from experiments.framework import Ctx, Recorder, md_table, output_folder, write_section

    argv = getattr(args, "argv", None) or ["simulate"]
    ctx = Ctx(out=output_folder(args.out), repeat=1, quick=False, data_arg=None, sf=None,
              threads_per_node=args.threads_per_node, virtual_nodes=None, progress=False,
              command="bobox " + " ".join(shlex.quote(a) for a in argv), topo=topo)
    rec = Recorder(ctx, "simulate")
    runs = summary["runs"]
    for r in runs:
        for m, unit in METRICS:
            if r.get(m) is not None:
                rec.add(r["policy"], r["seed"], m, r[m], unit=unit)
    rec.write()
    write_atomic(ctx.out / "simulate.json", lambda tmp: open(tmp, "w").write(json.dumps(summary, indent=1) + "\n"))
    shown = [m for m, _ in METRICS if all(r.get(m) is not None for r in runs)]
    rows = [[r["seed"]] + [r[m] for m in shown] for r in runs[:20]]
    if len(runs) > 1:
        rows.append(["median"] + [round(statistics.median(r[m] for r in runs), 4) for m in shown])
    first = runs[0]
    bw = f"{costs.node_bandwidth_gbs:g} GB/s per node" if costs.node_bandwidth_gbs else "unlimited"
    body = (f"{what} under **{first['policy']}** on `{topo.root}`: {first['workers']} workers on {first['nodes']} "
            f"node(s); GIL hand-off {costs.gil_handoff_ns / 1000:g} us, memory bandwidth {bw}. "
            f"{len(runs)} seed(s), the runtime's invariants held in every one.\n\n"
            + md_table(["seed"] + shown, rows)
            + ("\n\n(first 20 seeds shown; all of them in simulate.csv)" if len(runs) > 20 else ""))
    write_section(ctx, "simulate", f"Simulation: {first['policy']} on {topo.root}", body)
    print(f"wrote {ctx.out}/simulate.csv, simulate.json and report.md", file=sys.stderr)
