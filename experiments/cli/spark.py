"""``bobox spark``: the Spark data pipeline (datagen, run, report) and its overhead bench.

Light argument parsing here; PySpark and the pipeline are imported only when a
subcommand runs (the package ``experiments/spark/``).
"""

from __future__ import annotations

import json
from pathlib import Path

from bobox_sched.core import limits as L
from experiments.cli.argtypes import byte_size, count, path, scale_factor

DEFAULT_SF = 0.1
_parse_bytes = byte_size()


def _master(p) -> None:
    p.add_argument("--master", default="local[*]", metavar="URL",
                   help="Spark master: local[*] (default: embedded, PySpark's own JVM), local[N], local[N,F], "
                   "spark://HOST:PORT (a standalone cluster), yarn, k8s://...")
    p.add_argument("--executor-cores", type=count(L.MAX_EXECUTOR_CORES), metavar="C",
                   help="cores per executor on a cluster (default: Spark's); one task per executor at a time uses "
                   "them all, and the Scheduler inside spreads them over the machine's NUMA nodes")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="spark_command", metavar="SUBCOMMAND")
    sub.required = True

    d = sub.add_parser("datagen", help="stage 1: TPC-H as Parquet partitioned for the executors (cached)",
                       description="Generate TPC-H with one Spark task per partition (tpchgen-cli part i of orders "
                       "and lineitem) plus one for the small tables (replicated), then place orders and lineitem "
                       "by order key (one Spark task per partition), so that partition i of both tables holds the "
                       "same orders. Writes DIR/<table>/part-<i>.parquet, DIR/<table>.parquet and a manifest. A "
                       "second call with the same arguments does nothing.")
    d.add_argument("--sf", type=scale_factor, default=DEFAULT_SF, metavar="X",
                   help=f"scale factor (default {DEFAULT_SF}, at most {L.MAX_SF:g})")
    d.add_argument("--out", type=path, metavar="DIR", help="output folder (default data/tpch-sf<SF>-spark)")
    d.add_argument("--partitions", type=count(L.MAX_PARTITIONS), metavar="P",
                   help="data partitions (default: one per executor and NUMA node)")
    _master(d)
    d.set_defaults(spark_func=_datagen)

    r = sub.add_parser("run", help="stage 2: run TPC-H queries on Spark, each executor on its own Scheduler",
                       description="Fan the queries and data partitions out to the executors; each runs its "
                       "partial plans at once on one long-lived Scheduler; the partial results are shuffled by "
                       "query and combined on the executors. Answers go to DIR/<query>.parquet as with bobox run. "
                       "Any TPC-H Parquet folder works: one from bobox spark datagen runs on its stored partitions, "
                       "any other (bobox datagen's, <table>/*.parquet parts) is split by order key on the fly, the "
                       "executors keeping the partition views in $BOBOX_SPARK_VIEWS (default "
                       "~/.cache/bobox-sched/spark-views).")
    r.add_argument("queries", nargs="*", metavar="QUERY",
                   help="TPC-H queries (default: q1 q3 q5 q6 q10 q12 q14 q18; also q4 q19)")
    r.add_argument("--data", type=path, metavar="DIR",
                   help="TPC-H Parquet folder: from bobox spark datagen, bobox datagen or any <table>.parquet or "
                   "<table>/*.parquet layout (default data/tpch-sf<SF>-spark, generated if missing)")
    r.add_argument("--partitions", type=count(L.MAX_PARTITIONS), metavar="P",
                   help="partitions to split --data into by order key (default: a bobox spark datagen folder's own, "
                   "else one per executor and NUMA node)")
    r.add_argument("--sf", type=scale_factor, metavar="X", help=f"scale factor to generate when --data is not given "
                   f"(default {DEFAULT_SF})")
    r.add_argument("--output", type=path, metavar="DIR",
                   help="write each answer to DIR/<query>.parquet (DIR/_bobox_results.json marks a complete set)")
    r.add_argument("--policy", choices=["bobox", "simple"], default="bobox", help="scheduling policy (default bobox)")
    r.add_argument("--threads-per-node", type=count(L.MAX_THREADS_PER_NODE), metavar="T",
                   help="executor worker threads per NUMA node (default: the executor's cores)")
    r.add_argument("--packet-bytes", type=_parse_bytes, metavar="B",
                   help="packet size, e.g. 64K (default: the policy's)")
    r.add_argument("--inject-failure", metavar="Q:P[:N|all]",
                   help="make query Q's task on partition P fail its first attempt (N attempts, or all): Spark "
                   "retries it; with 'all' the run fails with an error naming Q")
    r.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    _master(r)
    r.set_defaults(spark_func=_run)

    rep = sub.add_parser("report", help="stage 3: summarize experiment CSVs of many runs and hosts",
                         description="Read every <experiment>.csv of the result folders (columns experiment, host, "
                         "run_id, series, x, metric, value, repeat) into one Spark DataFrame; write "
                         "OUT/summary.csv (median, min, max, runs, hosts per experiment, series, x, metric) and a "
                         "section 'Summary of N runs on M hosts' in OUT/report.md.")
    rep.add_argument("result_dirs", type=path, nargs="+", metavar="RESULT_DIR",
                     help="folders written by bobox experiment")
    rep.add_argument("--out", type=path, default="results", metavar="DIR", help="output folder (default results/)")
    rep.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    _master(rep)
    rep.set_defaults(spark_func=_report)

    b = sub.add_parser("bench", help="overhead of the Spark path vs bobox run on one machine",
                       description="Run the query mix through bobox run's code path (one long-lived local "
                       "Scheduler) and through bobox spark run (warm session), interleaved, and print the median "
                       "times and their ratio. The JVM start is reported apart, not in the ratio.")
    b.add_argument("queries", nargs="*", metavar="QUERY", help="queries (default: the mix q1 q3 q5 q6 q10 q12 q14 q18)")
    b.add_argument("--sf", type=scale_factor, metavar="X", help=f"scale factor to generate (default {DEFAULT_SF})")
    b.add_argument("--data", type=path, metavar="DIR", help="TPC-H Parquet folder, as for run (default "
                   "data/tpch-sf<SF>-spark, generated if missing)")
    b.add_argument("--partitions", type=count(L.MAX_PARTITIONS), metavar="P",
                   help="partitions when generating the data, or to split --data into")
    b.add_argument("--repeat", type=count(L.MAX_REPEAT), default=9, metavar="N",
                   help="timed runs of each path (default 9)")
    b.add_argument("--policy", choices=["bobox", "simple"], default="bobox", help="scheduling policy (default bobox)")
    b.add_argument("--threads-per-node", type=count(L.MAX_THREADS_PER_NODE), metavar="T",
                   help="worker threads per NUMA node")
    b.add_argument("--packet-bytes", type=_parse_bytes, metavar="B", help="packet size, e.g. 64K")
    b.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    _master(b)
    b.set_defaults(spark_func=_bench)


def check_master(master: str) -> None:
    """A bad URL, an unreachable standalone master or ``local[N]`` beyond the cap fail
    here, before anything starts."""
    from bobox_sched.core.limits import check_count

    from experiments.spark.session import parse_master

    _, cores = parse_master(master)
    if cores is not None:
        check_count(f"--master {master}: local cores", cores, L.MAX_EXECUTOR_CORES)


def run(args) -> int:
    check_master(args.master)
    try:
        return args.spark_func(args)
    finally:
        _stop_session()


def _stop_session() -> None:
    """Stop the session this command started, if any: the JVM then ends its Python
    workers in order (left to the interpreter's exit, PySpark's daemon may print a
    BrokenPipeError traceback)."""
    import sys

    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def _session(args):
    from experiments.spark.session import spark_session

    return spark_session(args.master, executor_cores=args.executor_cores)


def check_spark_out(out, sf: float, partitions: int | None) -> None:
    """Before a JVM starts: unless `out` already holds this data set, it must be a place
    where stage 1 can write SF `sf` (``experiments.datagen.check_datagen_out``)."""
    from experiments.datagen import check_datagen_out, target_of

    from experiments.spark.datagen import _check_existing

    if not str(out).strip():
        from bobox_sched.core.errors import BoboxError

        raise BoboxError("--out must not be empty")
    if not _check_existing(target_of(Path(out).expanduser()).absolute(), sf, partitions):
        check_datagen_out(out, sf, "spark datagen output")


def _check_data_types(data) -> None:
    """Every TPC-H column of --data typed as the plans expect, read on the driver from
    the Parquet footers before a JVM starts (executors would fail each attempt)."""
    from experiments.workload import check_data

    check_data(data)


def _data(args, partitions=None):
    """The folder to run on: --data (any TPC-H folder), or the default one, generated."""
    from experiments.spark.datagen import spark_datagen
    from experiments.spark.layout import data_sf, default_spark_data_dir, stored_partitions

    if args.data:
        stored_partitions(args.data)  # one-line DataError where it is missing or not TPC-H data
        if getattr(args, "sf", None) is not None:
            sf = data_sf(args.data)
            if sf is not None and abs(sf - args.sf) > 1e-12 * max(sf, args.sf):
                from bobox_sched.core.errors import BoboxError

                raise BoboxError(f"--data {args.data} holds SF {sf:g}, not --sf {args.sf:g}")
        return Path(args.data), None
    sf = args.sf if args.sf is not None else DEFAULT_SF
    out = default_spark_data_dir(sf)
    if partitions is not None and out.is_dir() and any(out.iterdir()):
        partitions = None  # use the generated folder as it is (split on the fly where its count differs)
    check_spark_out(out, sf, partitions)
    spark = _session(args)
    return spark_datagen(sf, out, partitions=partitions, spark=spark), spark


def _datagen(args) -> int:
    from experiments.spark.datagen import spark_datagen
    from experiments.spark.layout import default_spark_data_dir

    out = args.out or default_spark_data_dir(args.sf)
    check_spark_out(out, args.sf, args.partitions)  # before a JVM starts
    spark = _session(args)
    path = spark_datagen(args.sf, out, partitions=args.partitions, spark=spark)
    print(path)
    return 0


def _run(args) -> int:
    from experiments.spark.faults import parse_injection
    from experiments.spark.layout import stored_partitions
    from experiments.spark.run import check_queries, spark_run_detailed

    queries = check_queries(args.queries)  # bad input fails before a JVM starts
    if args.output is not None:
        from experiments.cli.outputs import check_output_dir

        check_output_dir(args.output, "--output")
    stored = None
    if args.data:
        stored = stored_partitions(args.data)  # one-line DataError where it is not TPC-H data
        _check_data_types(args.data)
    parse_injection(args.inject_failure, queries, args.partitions or stored)
    data, spark = _data(args, partitions=args.partitions)
    spark = spark or _session(args)
    run = spark_run_detailed(queries, data, output=args.output, policy=args.policy,
                             threads_per_node=args.threads_per_node, packet_bytes=args.packet_bytes,
                             inject_failure=args.inject_failure, spark=spark, progress=True,
                             partitions=args.partitions)
    print(f"{'query':<8}{'rows':>6}")
    for q, t in run.tables.items():
        print(f"{q:<8}{t.num_rows:>6}")
    print(f"\n{len(run.tables)} queries over {run.partitions} partitions in {run.wall_s:.3f} s on {run.master}"
          + (f"; retried: {', '.join(f'{q}:{p}' for q, p in run.retried)}" if run.retried else ""))
    if args.output is not None:
        print(f"wrote {len(run.output)} result files to {args.output}/")
    if args.json:
        print(json.dumps(run.summary()))
    return 0


def _report(args) -> int:
    from experiments.spark.report import _experiment_csvs, spark_report

    from experiments.cli.outputs import check_output_dir

    _experiment_csvs(args.result_dirs)  # bad folders fail before a JVM starts
    check_output_dir(args.out, "--out")
    summary = spark_report(args.result_dirs, args.out, spark=_session(args))
    print(summary["report"])
    if args.json:
        print(json.dumps(summary))
    return 0


def _bench(args) -> int:
    from experiments.spark.bench import bench_overhead
    from experiments.spark.layout import default_spark_data_dir, stored_partitions
    from experiments.spark.run import check_queries

    import time

    queries = check_queries(args.queries)
    if args.data:
        stored_partitions(args.data)  # before a JVM starts
        _check_data_types(args.data)
    else:
        sf = args.sf if args.sf is not None else DEFAULT_SF
        check_spark_out(default_spark_data_dir(sf), sf, args.partitions)
    t0 = time.perf_counter()
    spark = _session(args)
    jvm_s = time.perf_counter() - t0
    data, _ = _data(args, partitions=args.partitions)
    res = bench_overhead(data, queries, repeat=args.repeat, policy=args.policy, threads_per_node=args.threads_per_node,
                         packet_bytes=args.packet_bytes, spark=spark, partitions=args.partitions)
    res["jvm_startup_s"] = round(jvm_s, 3)
    what = f"SF {res['sf']:g}" if res["sf"] is not None else str(data)
    print(f"TPC-H {what}, {res['partitions']} partition(s), {len(res['queries'])} queries, "
          f"median of {res['repeat']} runs each (master {res['master']}; JVM up in {res['jvm_startup_s']:.1f} s, "
          "not counted)")
    print(f"  bobox run path   {res['bobox_run_s'] * 1e3:9.1f} ms")
    print(f"  spark run path   {res['spark_s'] * 1e3:9.1f} ms")
    print(f"  ratio            {res['ratio']:9.2f} x   (goal: under 1.5 x)")
    if args.json:
        print(json.dumps(res))
    return 0
