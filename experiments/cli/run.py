"""``bobox run`` (the main job) and ``bobox datagen``: light argument parsing here, heavy
imports only when a command runs."""

from __future__ import annotations

import json
import sys

from bobox_sched.core import limits
from experiments.cli.argtypes import byte_size, count, path, scale_factor


def add_scheduler_arguments(p) -> None:
    p.add_argument("--policy", choices=["bobox", "simple", "ordered", "streams"], default="bobox", help="scheduling policy (default bobox)")
    p.add_argument("--threads-per-node", type=count(limits.MAX_THREADS_PER_NODE), metavar="T",
                   help=f"worker threads per NUMA node (default: all CPUs; at most {limits.MAX_THREADS_PER_NODE}, "
                   "a warning when above the node's CPUs)")
    p.add_argument("--packet-bytes", type=byte_size(), metavar="B",
                   help=f"packet size, e.g. 64K (default: the policy's; half the L2 for bobox; "
                   f"{limits.MIN_PACKET_BYTES} B to {limits.MAX_PACKET_BYTES // 2**20} MiB)")


def add_run_arguments(p) -> None:
    p.add_argument("queries", nargs="*", metavar="QUERY",
                   help="TPC-H queries to run (default: q1 q3 q5 q6 q10 q12 q14 q18)")
    p.add_argument("--sql", type=path, nargs="+", metavar="FILE",
                   help="submit the SQL queries of these files instead (one query per file, named by the file)")
    p.add_argument("--all", action="store_true",
                   help="run the 22 TPC-H queries, written as SQL with the validation parameters")
    p.add_argument("--data", type=path, metavar="DIR",
                   help="TPC-H Parquet folder (default: data/tpch-sf<SF>, generated if missing)")
    p.add_argument("--sf", type=scale_factor, metavar="X",
                   help=f"scale factor to generate if the data is missing (default 0.1, at most {limits.MAX_SF:g})")
    p.add_argument("--concurrency", type=count(limits.MAX_REQUESTS), default=2, metavar="N",
                   help="N in N x M concurrent copies (default 2)")
    p.add_argument("--repeat", type=count(limits.MAX_REQUESTS), default=2, metavar="M",
                   help=f"M in N x M concurrent copies (default 2); queries x N x M is at most {limits.MAX_REQUESTS}")
    p.add_argument("--parallel", type=count(limits.MAX_PARALLEL), metavar="K",
                   help="decompose each query K ways (default: 1 when there are at least as many requests as "
                   f"workers, else the number of workers, at most {limits.MAX_PARALLEL})")
    add_scheduler_arguments(p)
    p.add_argument("--output", type=path, metavar="DIR",
                   help="write each query's result to DIR/<query>.parquet (atomically; DIR/_bobox_results.json "
                   "marks a complete set)")
    p.add_argument("--domains", type=domains_arg, metavar="auto|off|N",
                   help="run the runtime in N processes (domains), each pinned to part of the machine; auto: one per "
                   "NUMA node, at most 8 CPUs each (default: off, one process)")
    p.add_argument("--trace", type=path, metavar="FILE",
                   help="write a timeline of the timed mix to FILE (Chrome trace JSON: open it in Perfetto or "
                   "chrome://tracing) and its picture next to it (FILE.png)")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def domains_arg(v: str):
    """``--domains``: auto, off or a positive integer (argparse type: one-line error)."""
    import argparse

    if v in ("auto", "off"):
        return v
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1 or n > limits.MAX_THREADS_PER_NODE:
        raise argparse.ArgumentTypeError(f"--domains takes auto, off or 1 to {limits.MAX_THREADS_PER_NODE}, got {v!r}")
    return n


def check_queries(names, known, default, more: str = "--concurrency and --repeat") -> list[str]:
    """The queries to run, lower-cased: unknown ones and repeats (case-insensitive) are
    refused (``run q6 q6 Q6`` ran q6 once under a header saying 3 queries)."""
    from bobox_sched.core.errors import BoboxError

    queries = [q.strip().lower() for q in (names or default)]
    unknown = [q for q in queries if q not in known]
    if unknown:
        raise BoboxError(f"unknown query {unknown[0]!r} (known: {', '.join(known)})")
    for q in queries:
        if queries.count(q) > 1:
            given = [n for n in names if n.strip().lower() == q]
            raise BoboxError(f"query {q!r} given {len(given)} times ({' '.join(given)}); each query runs once per "
                             f"copy (use {more} for more copies)")
    return queries


def check_requests(queries: int, copies: int, flags: str = "--concurrency x --repeat") -> int:
    """queries x copies requests at once, at most ``limits.MAX_REQUESTS``."""
    from bobox_sched.core.errors import BoboxError

    n = queries * copies
    if n > limits.MAX_REQUESTS:
        raise BoboxError(f"{queries} queries x {copies} copies ({flags}) = {n} requests at once, above the cap of "
                         f"{limits.MAX_REQUESTS} (bobox_sched/core/limits.py)")
    return n


def sql_texts(args) -> dict | None:
    """``--sql FILE ...`` / ``--all``: {name: SQL text}, each text parsed (one line and exit 2 on
    a syntax error, before any work); None without them."""
    from bobox_sched.core.errors import BoboxError

    if not args.sql and not args.all:
        return None
    if args.queries:
        raise BoboxError(f"query names ({' '.join(args.queries)}) and {'--all' if args.all else '--sql'}: "
                         "give one or the other")
    if args.sql and args.all:
        raise BoboxError("--sql and --all: give one or the other")
    from operators.sql import SqlError
    from operators.sql.frontend import statements

    if args.all:
        from operators.tpch_sql import QUERIES

        texts = dict(QUERIES)
    else:
        from pathlib import Path

        texts = {}
        for f in args.sql:
            name = Path(f).stem
            if name in texts:
                raise BoboxError(f"--sql: two files named {name!r} (results are named by the file)")
            try:
                texts[name] = Path(f).read_text()
            except OSError as e:
                raise BoboxError(f"--sql: cannot read {f}: {e.strerror or e}") from None
            except UnicodeDecodeError:
                raise BoboxError(f"--sql: {f} is not UTF-8 text") from None
    for name, text in texts.items():
        try:
            statements(text)
        except SqlError as e:
            raise BoboxError(f"{name}: {e}") from None
    return texts


def sql_plans(texts: dict, data, parallel: int) -> dict:
    """{name: plan} of SQL texts; the first error is one line naming the query."""
    from bobox_sched.core.errors import BoboxError
    from operators.sql import SqlError, sql_plan

    plans = {}
    for name, text in texts.items():
        try:
            plans[name] = sql_plan(text, data, parallel, name=name)
        except SqlError as e:
            raise BoboxError(f"{name}: {e}") from None
    return plans


def run(args) -> int:
    from operators import tpch

    texts = sql_texts(args)
    queries = list(texts) if texts is not None else check_queries(args.queries, tpch.QUERIES, tpch.DEFAULT_MIX)
    check_requests(len(queries), args.concurrency * args.repeat)
    if args.output is not None:
        from experiments.cli.outputs import check_output_dir

        check_output_dir(args.output, "--output")  # before the run, not after it
    if args.trace is not None:
        check_trace_arg(args.trace)  # before the run, not after it
    from bobox_sched import Scheduler

    from experiments.workload import build_plans, check_data, choose_parallel, ensure_data, format_table, run_mix, write_results

    from operators import released

    released.enable()  # serial fraction: time with the GIL released, per worker
    data = ensure_data(args.data, args.sf, progress=not args.no_progress)
    check_data(data)  # every column typed as TPC-H says, before any query runs
    dom = {} if args.domains is None else {"domains": args.domains, "domain_init": released.enable}
    tracer = None
    if args.trace is not None:
        from bobox_sched.trace import Tracer

        tracer = dom["trace"] = Tracer(label="bobox " + " ".join(getattr(args, "argv", [])))
    with Scheduler(policy=args.policy, threads_per_node=args.threads_per_node, packet_bytes=args.packet_bytes,
                   **dom) as s:
        requests = len(queries) * args.concurrency * args.repeat
        parallel = args.parallel or choose_parallel(requests, len(s.workers))
        doms = getattr(s, "domains", None)
        where = f" in {len(doms)} domains" if doms else ""
        print(f"data {data}; {len(queries)} queries x {args.concurrency}x{args.repeat} copies, parallel={parallel}, "
              f"policy {args.policy}, {len(s.workers)} workers{where} on {len(s.topology.cpu_nodes)} node(s)",
              file=sys.stderr)
        # loads the needed columns once; SQL errors are reported here, before any query runs
        plans = sql_plans(texts, data, parallel) if texts is not None else build_plans(queries, data, parallel)
        # One untimed request per query first: loads the numba kernels (compiled and
        # cached on disk the first time ever) and fills the packet pools.
        print("warming up (kernels, packet pools) ...", file=sys.stderr)
        if doms:  # each domain loads its own kernels and fills its own pools: every plan on each
            for h in [s.submit_to(i, p) for i in range(len(doms)) for p in plans.values()]:
                h.result()
        else:
            run_mix(s, plans, 1, progress=False)
        if tracer is not None:
            tracer.begin_window()  # the timed mix only
        res = run_mix(s, plans, args.concurrency * args.repeat, progress=not args.no_progress)
    print(format_table(res))
    if tracer is not None:
        write_trace_doc(tracer.document(), args.trace)
    if args.output is not None:
        paths = write_results(res.results, args.output, command=["bobox", *getattr(args, "argv", [])])
        print(f"wrote {len(paths)} result files to {args.output}/")
    if args.json:
        print(json.dumps(res.summary()))
    return 1 if res.mismatches else 0


def check_trace_arg(path) -> None:
    """``--trace FILE`` (``bobox run``, ``bobox simulate``): one line if no trace can be
    written there, before any work."""
    from bobox_sched.trace import check_trace_path

    from experiments.cli.outputs import OutputError

    try:
        check_trace_path(path)
    except ValueError as e:
        raise OutputError(f"--trace: {e}") from None


def write_trace_doc(doc, path) -> None:
    """``--trace FILE``: a trace document to `path` (atomically) and its picture next to it."""
    from bobox_sched.trace import chrome

    from experiments.trace_view import png_beside, timeline_png

    chrome.write(doc, path)
    tasks = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "task")
    png = png_beside(path)
    timeline_png(doc, png)
    print(f"wrote trace {path} ({tasks} tasks; open it in Perfetto or chrome://tracing) and its picture {png}")


def add_datagen_arguments(p) -> None:
    p.add_argument("--sf", type=scale_factor, default=0.1, metavar="X",
                   help=f"scale factor (default 0.1, at most {limits.MAX_SF:g}; the free disk space is checked)")
    p.add_argument("--out", type=path, metavar="DIR", help="output folder (default data/tpch-sf<SF>, with --spark "
                   "data/tpch-sf<SF>-spark); a symlink is followed")
    p.add_argument("--spark", action="store_true",
                   help="generate with Spark, partitioned for the executors (as bobox spark datagen)")
    p.add_argument("--partitions", type=count(limits.MAX_PARTITIONS), metavar="P",
                   help="with --spark: data partitions (default: one per executor and NUMA node)")
    p.add_argument("--master", metavar="URL", help="with --spark: Spark master (default local[*])")


def datagen_cmd(args) -> int:
    if args.spark:
        from experiments.cli.spark import check_master, check_spark_out
        from experiments.spark.datagen import spark_datagen
        from experiments.spark.layout import default_spark_data_dir
        from experiments.spark.session import DEFAULT_MASTER

        master = args.master or DEFAULT_MASTER
        check_master(master)
        out = args.out or default_spark_data_dir(args.sf)
        check_spark_out(out, args.sf, args.partitions)  # before a JVM starts
        path = spark_datagen(args.sf, out, master=master, partitions=args.partitions)
        print(path)
        return 0
    if args.partitions is not None or args.master is not None:
        from bobox_sched.core.errors import BoboxError

        raise BoboxError("--partitions and --master need --spark")
    from experiments.datagen import datagen

    from experiments.workload import default_data_dir

    path = datagen(args.sf, args.out or default_data_dir(args.sf))
    print(path)
    return 0
