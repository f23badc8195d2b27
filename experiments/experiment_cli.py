"""``bobox experiment NAME``: argument parsing (light); the experiments live in
``experiments/locality.py``."""

from __future__ import annotations

EXPERIMENTS = ("numa-factor", "packet-size", "numa-placement", "schedulers", "balancer", "all", "regions")


def add_arguments(p) -> None:
    from bobox_sched import limits as L
    from bobox_sched.argtypes import count, path, scale_factor

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
    p.add_argument("--json", action="store_true", help="print the summary as a JSON object on the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    import json

    import psutil

    from bobox_sched.errors import BoboxError
    from bobox_sched.outputs import check_output_dir

    cpus = psutil.cpu_count() or 1
    if args.virtual_nodes is not None and args.virtual_nodes > cpus:
        raise BoboxError(f"--virtual-nodes {args.virtual_nodes}: this machine has only {cpus} CPUs to split")
    check_output_dir(args.out, "--out")  # before any measurement
    if args.data is not None and args.sf is None:
        from .workload import check_data, ensure_data

        check_data(ensure_data(args.data, None, progress=False))

    from . import locality

    if args.name == "regions":  # parallel regions (seed 001): experiments/regions.py; not part of "all"
        from . import regions

        summary = regions.run_experiment(args)
    else:
        summary = locality.run_experiment(args)
    if args.json:
        print(json.dumps(summary))
    return 0
