"""The overhead bench (``bench_overhead``, ``bobox spark bench``): the Spark path against
``bobox run``'s on one machine, side by side once the JVM is up.

A measurement over stage 2 (``run``) and ``bobox run``'s code path
(``experiments.workload``), kept apart from both: neither path needs it to run.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bobox_sched.core.errors import BoboxError
from experiments.spark.layout import data_sf, stored_partitions
from experiments.spark.messages import say
from experiments.spark.run import check_queries, spark_run
from experiments.spark.session import DEFAULT_MASTER, default_partitions, spark_session

def bench_overhead(data, queries=None, repeat: int = 5, master: str = DEFAULT_MASTER, policy: str = "bobox",
                   threads_per_node: int | None = None, packet_bytes: int | None = None, spark=None,
                   progress: bool = True, partitions: int | None = None) -> dict:
    """The Spark path vs ``bobox run``'s on one machine, side by side, once the JVM is up.

    ``bobox run`` path: a long-lived local Scheduler; per run, the plans are built
    (columns cached in memory after the first) and the mix submitted at once
    (``experiments.workload.run_mix``, one copy of each query). Spark path: ``spark_run``
    with a warm session (executor Python worker, its Scheduler and loaded columns kept).
    One untimed run of each first, then `repeat` runs of each, interleaved; medians and
    their ratio (spark / bobox run). Both answer sets are compared once.
    """
    from operators.tpch_sql import compare_tables

    from bobox_sched import Scheduler

    from experiments.workload import build_plans, choose_parallel, run_mix

    names = check_queries(queries)
    if repeat < 1:
        raise BoboxError(f"repeat must be positive, got {repeat}")
    data = Path(data).expanduser().absolute()
    stored = stored_partitions(data)  # any TPC-H folder; split on the fly unless stored (see spark_run)
    t0 = time.perf_counter()
    spark = spark or spark_session(master)
    jvm_s = time.perf_counter() - t0  # 0 where the caller's session was up already
    parts = partitions or stored or default_partitions(spark)
    local_s, spark_s = [], []

    def run_local(sched):
        t = time.perf_counter()
        plans = build_plans(names, data, choose_parallel(len(names), len(sched.workers)))  # as bobox run
        res = run_mix(sched, plans, 1, progress=False)
        return time.perf_counter() - t, res.results

    def run_spark():
        t = time.perf_counter()
        tables = spark_run(names, data, spark=spark, partitions=parts, policy=policy, threads_per_node=threads_per_node,
                           packet_bytes=packet_bytes)
        return time.perf_counter() - t, tables

    with Scheduler(policy=policy, threads_per_node=threads_per_node, packet_bytes=packet_bytes) as sched:
        say(progress, "warming up both paths (kernels, columns, Python workers) ...")
        _, want = run_local(sched)
        _, got = run_spark()
        for q in names:
            try:
                compare_tables(got[q], want[q], rel_tol=1e-9)
            except AssertionError as e:
                raise BoboxError(f"query {q}: the Spark path's answer differs from bobox run's: "
                                 f"{str(e).splitlines()[0]}") from None
        for i in range(repeat):
            a, _ = run_local(sched)
            b, _ = run_spark()
            local_s.append(a)
            spark_s.append(b)
            say(progress, f"run {i + 1}/{repeat}: bobox run {a:.3f} s, spark {b:.3f} s")
    lm, sm = statistics.median(local_s), statistics.median(spark_s)
    return {
        "sf": data_sf(data),
        "partitions": parts,
        "queries": names,
        "repeat": repeat,
        "master": spark.sparkContext.master,
        "jvm_startup_s": round(jvm_s, 3),
        "bobox_run_s": round(lm, 4),
        "spark_s": round(sm, 4),
        "ratio": round(sm / lm, 3) if lm else None,
        "bobox_run_all_s": [round(x, 4) for x in local_s],
        "spark_all_s": [round(x, 4) for x in spark_s],
    }
