"""``bobox experiment NAME``: argument parsing (light); the experiments live in
``experiments/locality.py`` and ``experiments/tstream.py``."""

from __future__ import annotations

EXPERIMENTS = ("numa-factor", "packet-size", "numa-placement", "schedulers", "balancer", "all", "tstream")


def add_arguments(p) -> None:
    p.add_argument("name", choices=EXPERIMENTS, metavar="NAME",
                   help="one of: " + ", ".join(EXPERIMENTS))
    p.add_argument("--out", default="results", metavar="DIR",
                   help="folder for <name>.csv, <name>.png and report.md (default results/)")
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="measurements per point, the median is plotted (default 5, 3 with --quick)")
    p.add_argument("--quick", action="store_true", help="a reduced version that finishes in a few minutes on 2 cores")
    p.add_argument("--data", metavar="DIR", help="TPC-H Parquet folder (default data/tpch-sf<SF>, generated if missing)")
    p.add_argument("--sf", type=float, default=None, help="scale factor of the generated data (default 0.1)")
    p.add_argument("--threads-per-node", type=int, default=None, metavar="T",
                   help="worker threads per NUMA node (default: one per CPU)")
    p.add_argument("--virtual-nodes", type=int, default=None, metavar="K",
                   help="balancer on a one-node machine: split its CPUs into K virtual nodes (default 2 there)")
    p.add_argument("--events", type=int, default=None, metavar="N",
                   help="tstream: at most N events per run (default 200000, 20000 with --quick)")
    p.add_argument("--json", action="store_true", help="print the summary as a JSON object on the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    import json

    from bobox_sched.errors import BoboxError

    from . import locality

    for k in ("repeat", "sf", "threads_per_node", "virtual_nodes", "events"):
        v = getattr(args, k)
        if v is not None and v <= 0:
            raise BoboxError(f"--{k.replace('_', '-')} must be positive, got {v}")
    if args.name == "tstream":
        from . import tstream

        summary = tstream.run_experiment(args)
    else:
        summary = locality.run_experiment(args)
    if args.json:
        print(json.dumps(summary))
    return 0
