"""``bobox experiment NAME``: argument parsing (light). The experiments live in
``experiments/locality.py`` (the Bobox paper's figures and ``all``), ``regions.py``
(parallel regions, seed 001), ``ordered.py`` (ordered stream processing, seed 000),
``streams_exp.py`` (IBM Streams' threading, seed 004), ``tstream.py`` (transactional
state, seed 002) and ``policies.py`` (every policy side by side on one workload), all on
``experiments/framework.py`` (context, recorder, tables, figures, report sections).

Every option is checked before any work starts: a bad value, or an option that does not
apply to the chosen experiment, is a one-line error (exit 2)."""

from __future__ import annotations

LOCALITY = ("numa-factor", "packet-size", "numa-placement", "schedulers", "balancer", "all")
EXPERIMENTS = LOCALITY + ("regions", "ordered", "streams", "tstream", "policies")

# The options that only some experiments read (the rest apply to every one, or to the
# TPC-H based ones: --data/--sf/--threads-per-node/--virtual-nodes).
ONLY = {
    "workers": ("ordered", "policies"), "rows": ("ordered", "policies"), "figures": ("ordered",),
    "emulate": ("ordered",), "ops": ("streams",), "shapes": ("streams",), "tuple_rows": ("streams",),
    "batch": ("streams",),
    "events": ("tstream",), "bytes": ("numa-factor", "all"),
    # the experiments whose scheduler is made by framework.make_scheduler on the real
    # machine; a request under ordered, streams or txn runs inside one domain anyway
    "domains": ("packet-size", "numa-placement", "schedulers", "all", "regions"),
}
# Options an experiment does not read (it generates its own streams, or sizes its own
# thread counts): refused instead of silently ignored.
NOT_READ = {
    "streams": ("data", "sf", "threads_per_node", "virtual_nodes", "repeat"),
    "ordered": ("data", "sf", "threads_per_node", "virtual_nodes"),
    "tstream": ("data", "sf"),
    "policies": ("data", "sf", "threads_per_node", "virtual_nodes"),
}


def add_arguments(p) -> None:
    from bobox_sched.core import limits as L
    from experiments.cli.argtypes import count, path, scale_factor
    from topology.cli import array_bytes

    p.add_argument("name", choices=EXPERIMENTS, metavar="NAME",
                   help="one of: " + ", ".join(EXPERIMENTS))
    p.add_argument("--out", type=path, default="results", metavar="DIR",
                   help="folder for <name>.csv, <name>.png and report.md (default results/)")
    p.add_argument("--repeat", type=count(L.MAX_REPEAT), default=None, metavar="N",
                   help="measurements per point, the median is plotted (default 5, 3 with --quick)")
    p.add_argument("--quick", action="store_true", help="a reduced version that finishes in a few minutes on 2 cores")
    p.add_argument("--data", type=path, metavar="DIR",
                   help="TPC-H Parquet folder (default data/tpch-sf<SF>, generated if missing)")
    p.add_argument("--sf", type=scale_factor, default=None, help="scale factor of the generated data (default 0.1)")
    p.add_argument("--threads-per-node", type=count(L.MAX_THREADS_PER_NODE), default=None, metavar="T",
                   help="worker threads per NUMA node (default: one per CPU)")
    p.add_argument("--virtual-nodes", type=count(L.MAX_THREADS_PER_NODE), default=None, metavar="K",
                   help="balancer on a one-node machine: split its CPUs into K virtual nodes (default 2 there; at "
                   "most one per CPU)")
    p.add_argument("--workers", metavar="LIST", default=None,
                   help="ordered: worker counts, e.g. 1,2,4 (default 1,2,4,8,12,16 up to the CPUs); policies: one "
                   "worker count for every policy (default: one per CPU)")
    p.add_argument("--rows", type=count(L.MAX_QUERY_ROWS), default=None, metavar="N",
                   help="ordered: input rows per query (default 1000000, 150000 with --quick); policies: rows per "
                   "run (default 2000000, 300000 with --quick)")
    p.add_argument("--figures", metavar="LIST", default=None,
                   help="ordered: which figures, e.g. 8,9 (default all of 8-14)")
    p.add_argument("--emulate", action="store_true",
                   help="ordered: operators sleep their per-row cost instead of computing it (a core per worker)")
    p.add_argument("--ops", type=count(L.MAX_STREAM_OPS, minimum=10), default=None, metavar="N",
                   help="streams: worker operators per graph (default 1000, 100 with --quick; at least 10, the "
                   "mixed graph is 10 pipelines)")
    p.add_argument("--shapes", metavar="LIST", default=None,
                   help="streams: which graph shapes, e.g. mixed or pipeline,dp (default all of pipeline, dp, "
                   "mixed; run in that order)")
    p.add_argument("--tuple-rows", type=count(L.MAX_TUPLE_ROWS), default=None, metavar="N",
                   help="streams: rows per tuple, each costing the shape's FLOPs (default 1, the paper's tuples; "
                   f"at most {L.MAX_TUPLE_ROWS}; more rows amortize each hand-off's Python; throughput is then in "
                   "rows/s)")
    p.add_argument("--batch", type=count(L.MAX_STREAM_BATCH), default=None, metavar="N",
                   help="streams: rows per hand-off between operators (tuples, with one-row tuples; default 64: batched ports, and the mixed "
                   "graph also once with 1 for comparison; 1: the paper's one-tuple hand-off only; at most "
                   f"{L.MAX_STREAM_BATCH})")
    p.add_argument("--events", type=count(L.MAX_EVENTS), default=None, metavar="N",
                   help="tstream: at most N events per run (default 200000, 20000 with --quick)")
    p.add_argument("--bytes", type=array_bytes, default=None, metavar="SIZE",
                   help="numa-factor: the array reversed on each node pair, e.g. 4M (default 4x the L3, at least "
                   "64 MiB: memory, not cache; at most half of the memory available)")
    from experiments.cli.run import domains_arg

    p.add_argument("--domains", type=domains_arg, default=None, metavar="auto|off|N",
                   help="packet-size, numa-placement, schedulers, all, regions: run the scheduler's runtime in N "
                   "domain processes (auto: one per NUMA node, at most 8 workers each; default: in this process)")
    p.add_argument("--json", action="store_true", help="print the summary as a JSON object on the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _check_applicable(args) -> None:
    from bobox_sched.core.errors import BoboxError

    for k, names in ONLY.items():
        if getattr(args, k, None) not in (None, False) and args.name not in names:
            raise BoboxError(f"--{k.replace('_', '-')} applies to 'bobox experiment {' / '.join(names)}' only")
    for k in NOT_READ.get(args.name, ()):
        if getattr(args, k, None) is not None:
            raise BoboxError(f"--{k.replace('_', '-')} does not apply to the {args.name} experiment")


def _check_ordered_args(args) -> None:
    """Bad --workers/--figures: one-line errors before any work."""
    from bobox_sched.core.errors import BoboxError

    from experiments.ordered import FIGURES

    for k, allowed in (("workers", None), ("figures", FIGURES)):
        v = getattr(args, k, None)
        if v is None:
            continue
        try:
            xs = [int(x) for x in v.split(",")]
        except ValueError:
            raise BoboxError(f"--{k} takes comma-separated integers, got {v!r}") from None
        if not xs or min(xs) < 1 or (allowed and any(x not in allowed for x in xs)):
            raise BoboxError(f"--{k}: {v!r} is not a list of " + (f"figures among {', '.join(map(str, allowed))}"
                                                                  if allowed else "positive integers"))


def run(args) -> int:
    import json

    import psutil

    from bobox_sched.core.errors import BoboxError
    from experiments.cli.outputs import check_output_dir

    _check_applicable(args)
    cpus = psutil.cpu_count() or 1
    if args.virtual_nodes is not None and args.virtual_nodes > cpus:
        raise BoboxError(f"--virtual-nodes {args.virtual_nodes}: this machine has only {cpus} CPUs to split")
    if args.name == "ordered":
        _check_ordered_args(args)
    elif args.name == "streams":
        from experiments.streams_exp import parse_shapes

        parse_shapes(args.shapes)
    elif args.name == "policies":
        from experiments.policies import check_args

        check_args(args)
    check_output_dir(args.out, "--out")  # before any measurement
    if args.data is not None and args.sf is None:
        from experiments.workload import check_data, ensure_data

        check_data(ensure_data(args.data, None, progress=False))

    # The files of this run form a set marked complete by a manifest written last
    # (experiments.cli.outputs.ResultSet): removed before the first measurement, written once
    # the experiment has written every file (each one atomically, by the experiment). It
    # lists the files this run wrote, with their sizes; report.md is shared by the
    # experiments (a section each), so it is not listed.
    import sys
    import time
    from pathlib import Path

    from experiments.cli.outputs import ResultSet

    rs = ResultSet(args.out, manifest=f"_bobox_experiment_{args.name}.json", what="--out",
                   command=["bobox", *getattr(args, "argv", sys.argv[1:])])
    with rs:  # a clean exit writes the manifest
        t0 = time.time() - 2.0  # file times may be coarser than the clock
        summary = _dispatch(args)
        for f in sorted(Path(rs.folder).iterdir()):
            if f.is_file() and f.name != "report.md" and not f.name.startswith((".", "_bobox_")) \
                    and f.stat().st_mtime >= t0:
                rs.files[f.name] = f.stat().st_size
    if args.json:
        print(json.dumps(summary))
    return 0


def _dispatch(args) -> dict:
    """Import the experiment, then run it with the heap frozen (framework.frozen_heap: the
    collection before each measured run walks only what the runs made)."""
    from experiments.framework import frozen_heap

    if args.name == "regions":  # parallel regions (seed 001); not part of "all"
        from experiments.regions import run_experiment
    elif args.name == "ordered":  # seed 000
        from experiments.ordered import run_experiment
    elif args.name == "streams":  # seed 004
        from experiments.streams_exp import run as run_experiment
    elif args.name == "tstream":  # seed 002
        from experiments.tstream import run_experiment
    elif args.name == "policies":  # every policy on one workload
        from experiments.policies import run_experiment
    else:
        from experiments.locality import run_experiment
    with frozen_heap():
        return run_experiment(args)
