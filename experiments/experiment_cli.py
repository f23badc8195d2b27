"""``bobox experiment NAME``: argument parsing (light); the experiments live in
``experiments/locality.py`` (the Bobox paper's) and ``experiments/ordered.py``
(``ordered``: Prasaad et al.'s figures 8-14; not part of ``all``)."""

from __future__ import annotations

EXPERIMENTS = ("numa-factor", "packet-size", "numa-placement", "schedulers", "balancer", "all", "ordered")


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
    p.add_argument("--workers", metavar="LIST", default=None,
                   help="ordered: worker counts, e.g. 1,2,4 (default 1,2,4,8,12,16 up to the CPUs)")
    p.add_argument("--rows", type=int, default=None, metavar="N",
                   help="ordered: input rows per query (default 1000000, 150000 with --quick)")
    p.add_argument("--figures", metavar="LIST", default=None,
                   help="ordered: which figures, e.g. 8,9 (default all of 8-14)")
    p.add_argument("--emulate", action="store_true",
                   help="ordered: operators sleep their per-row cost instead of computing it (a core per worker)")
    p.add_argument("--json", action="store_true", help="print the summary as a JSON object on the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    import json

    from bobox_sched.errors import BoboxError

    from . import locality

    for k in ("repeat", "sf", "threads_per_node", "virtual_nodes", "rows"):
        v = getattr(args, k, None)
        if v is not None and v <= 0:
            raise BoboxError(f"--{k.replace('_', '-')} must be positive, got {v}")
    if args.name != "ordered":
        for k in ("workers", "rows", "figures", "emulate"):
            if getattr(args, k, None) not in (None, False):
                raise BoboxError(f"--{k} applies to 'bobox experiment ordered' only")
        summary = locality.run_experiment(args)
    else:
        _check_ordered_args(args)
        from . import ordered

        summary = ordered.run_experiment(args)
    if args.json:
        print(json.dumps(summary))
    return 0


def _check_ordered_args(args) -> None:
    """Bad --workers/--figures: one-line errors before any work."""
    from bobox_sched.errors import BoboxError

    from .ordered import FIGURES

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
