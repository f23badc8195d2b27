"""``bobox run`` (the main job) and ``bobox datagen``: light argument parsing here, heavy
imports only when a command runs."""

from __future__ import annotations

import json
import sys


def _parse_bytes(text: str) -> int:
    from topology.cli import parse_bytes

    return parse_bytes(text)


def add_scheduler_arguments(p) -> None:
    p.add_argument("--policy", choices=["bobox", "simple", "streams"], default="bobox", help="scheduling policy (default bobox)")
    p.add_argument("--threads-per-node", type=int, metavar="T", help="worker threads per NUMA node (default: all CPUs)")
    p.add_argument("--packet-bytes", type=_parse_bytes, metavar="B",
                   help="packet size, e.g. 64K (default: the policy's; half the L2 for bobox)")


def add_run_arguments(p) -> None:
    p.add_argument("queries", nargs="*", metavar="QUERY",
                   help="TPC-H queries to run (default: q1 q3 q5 q6 q10 q12 q14 q18)")
    p.add_argument("--data", metavar="DIR", help="TPC-H Parquet folder (default: data/tpch-sf<SF>, generated if missing)")
    p.add_argument("--sf", type=float, metavar="X", help="scale factor to generate if the data is missing (default 0.1)")
    p.add_argument("--concurrency", type=int, default=2, metavar="N", help="N in N x M concurrent copies (default 2)")
    p.add_argument("--repeat", type=int, default=2, metavar="M", help="M in N x M concurrent copies (default 2)")
    p.add_argument("--parallel", type=int, metavar="K",
                   help="decompose each query K ways (default: 1 when there are at least as many requests as "
                   "workers, else the number of workers)")
    add_scheduler_arguments(p)
    p.add_argument("--output", metavar="DIR", help="write each query's result to DIR/<query>.parquet")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check_positive(**kw):
    from bobox_sched.errors import BoboxError

    for k, v in kw.items():
        if v is not None and v <= 0:
            raise BoboxError(f"--{k.replace('_', '-')} must be positive, got {v}")


def run(args) -> int:
    _check_positive(concurrency=args.concurrency, repeat=args.repeat, parallel=args.parallel,
                    threads_per_node=args.threads_per_node, sf=args.sf)
    from operators import tpch

    from bobox_sched.errors import BoboxError

    queries = [q.lower() for q in (args.queries or tpch.DEFAULT_MIX)]
    unknown = [q for q in queries if q not in tpch.QUERIES]
    if unknown:
        raise BoboxError(f"unknown query {unknown[0]!r} (known: {', '.join(tpch.QUERIES)})")
    from bobox_sched import Scheduler

    from .workload import build_plans, choose_parallel, ensure_data, format_table, run_mix, write_results

    data = ensure_data(args.data, args.sf, progress=not args.no_progress)
    with Scheduler(policy=args.policy, threads_per_node=args.threads_per_node, packet_bytes=args.packet_bytes) as s:
        requests = len(queries) * args.concurrency * args.repeat
        parallel = args.parallel or choose_parallel(requests, len(s.workers))
        print(f"data {data}; {len(queries)} queries x {args.concurrency}x{args.repeat} copies, parallel={parallel}, "
              f"policy {args.policy}, {len(s.workers)} workers on {len(s.topology.cpu_nodes)} node(s)",
              file=sys.stderr)
        plans = build_plans(queries, data, parallel)  # loads the needed columns once
        # One untimed request per query first: loads the numba kernels (compiled and
        # cached on disk the first time ever) and fills the packet pools.
        print("warming up (kernels, packet pools) ...", file=sys.stderr)
        run_mix(s, plans, 1, progress=False)
        res = run_mix(s, plans, args.concurrency * args.repeat, progress=not args.no_progress)
    print(format_table(res))
    if args.output:
        paths = write_results(res.results, args.output)
        print(f"wrote {len(paths)} result files to {args.output}/")
    if args.json:
        print(json.dumps(res.summary()))
    return 1 if res.mismatches else 0


def add_datagen_arguments(p) -> None:
    p.add_argument("--sf", type=float, default=0.1, metavar="X", help="scale factor (default 0.1)")
    p.add_argument("--out", metavar="DIR", help="output folder (default data/tpch-sf<SF>, with --spark "
                   "data/tpch-sf<SF>-spark)")
    p.add_argument("--spark", action="store_true",
                   help="generate with Spark, partitioned for the executors (as bobox spark datagen)")
    p.add_argument("--partitions", type=int, metavar="P",
                   help="with --spark: data partitions (default: one per executor and NUMA node)")
    p.add_argument("--master", metavar="URL", help="with --spark: Spark master (default local[*])")


def datagen_cmd(args) -> int:
    _check_positive(sf=args.sf, partitions=args.partitions)
    if args.spark:
        from .spark_pipeline import DEFAULT_MASTER, default_spark_data_dir, spark_datagen

        path = spark_datagen(args.sf, args.out or default_spark_data_dir(args.sf), master=args.master or DEFAULT_MASTER,
                             partitions=args.partitions)
        print(path)
        return 0
    if args.partitions is not None or args.master is not None:
        from bobox_sched.errors import BoboxError

        raise BoboxError("--partitions and --master need --spark")
    from operators.data import datagen

    from .workload import default_data_dir

    path = datagen(args.sf, args.out or default_data_dir(args.sf))
    print(path)
    return 0
