"""Stage 2, execution (``spark_run``): TPC-H queries fanned out to the executors, each
running its part on its own Scheduler (``executor``), over partition views (``views``).

One Spark job of two stages::

    work items (query, partition), P slices     -- slice i = every query over partition i
      -> mapPartitions(_partial_task)           -- executor: the partial plans of slice i run
                                                   at once on the executor's Scheduler
      -> partitionBy(query)                     -- Spark shuffle: partials of one query meet
      -> mapPartitions(_combine_task)           -- executor: exactly one partial per
                                                   partition checked, combine plan run
      -> collect()                              -- driver: one final table per query

or, when the cluster runs one task at a time (local mode: one executor that one task
fills), one stage: a single task runs every partial plan, then every combine plan
(``_fused_task``), since the shuffle would only move the partials from the executor to
itself. Partial and combine plans are in ``operators/tpch_partial.py``; both run on the
executor's Scheduler. Partial results of different queries have different schemas, so
each travels as Arrow IPC bytes in one record per (query, partition).

Why this shape (measured on our 2-core machines, Spark 4, local[2], warm JVM): a PySpark
job has a fixed latency of ~50-90 ms per stage of Python tasks, and the whole TPC-H mix
takes ~0.16 s on one machine at SF 0.1. One job per query would pay that latency 8 times
and run the queries one after the other, where the Scheduler is built to run many
requests at once; combining on the driver with Spark SQL (partials into DataFrames, one
aggregation job per query) cost 0.6 s for the 8 queries even with the jobs submitted
concurrently, against ~10 ms for the 8 combine plans on the executor (warm).
``mapInArrow`` would need pandas (PySpark checks for it), which this project does not
depend on; the work items are an RDD instead, and the partials are Arrow already.

Failures: a failed task attempt is retried by Spark (``spark.task.maxFailures``; local
masters get ``local[N,F]`` so that local mode retries too); the output of a failed
attempt is discarded by Spark, and the combine task checks that it got exactly one
partial per partition, so a retry never duplicates results. A task that fails raises
``RuntimeError("bobox-spark: query Q partition P: ...")``; when Spark gives up, the
driver finds that text in the job's error and raises a one-line ``BoboxError`` naming
the query (``messages``). Failures are injected and retries traced by ``faults``.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bobox_sched.core.errors import BoboxError
from experiments.spark.executor import executor_scheduler
from experiments.spark.faults import injected, parse_injection, trace
from experiments.spark.layout import data_sf, stored_partitions
from experiments.spark.messages import fail, job_error, say
from experiments.spark.session import DEFAULT_MASTER, default_partitions, max_failures, slots, spark_session
from experiments.spark.views import partition_dirs, plan_split

def _to_ipc(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes):
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _partial_task(cfg: dict, items):
    """Executor side, stage A: every (query, partition) item of this slice, submitted at
    once to the executor's Scheduler; yields ``(query, (partition, attempt, host, ipc))``
    for each, in submission order, once its request has finished."""
    from pyspark import TaskContext

    from operators import tpch_partial

    from experiments.workload import choose_parallel

    items = list(items)
    ctx = TaskContext.get()
    attempt = ctx.attemptNumber()
    here = sorted({p for _, p in items})
    for part in here:
        trace(cfg, f"part-{part}", attempt)
    views = partition_dirs(cfg, here, ctx.cpus())
    sched = executor_scheduler(cfg["policy"], cfg["threads_per_node"], cfg["packet_bytes"], ctx.cpus())
    # the slice's requests run at once: decompose them only if they cannot keep every
    # worker busy by themselves (as bobox run does)
    parallel = choose_parallel(len(items), len(sched.workers))
    host = f"{socket.gethostname()}:{os.getpid()}"
    handles = []
    try:
        for query, part in items:
            try:
                plan = tpch_partial.partial_plan(query, views[part], parallel)
                handles.append((query, part, sched.submit(plan)))
            except Exception as e:
                raise fail(query, f"partition {part}", e) from e
        for query, part, h in handles:
            try:
                table = h.result()
            except Exception as e:
                raise fail(query, f"partition {part}", e) from e
            if injected(cfg, query, part, attempt):
                raise fail(query, f"partition {part}", f"injected failure (attempt {attempt})")
            yield query, (part, attempt, host, _to_ipc(table))
    finally:
        for _, _, h in handles:
            if not h.done():
                h.cancel()


def _combine_task(cfg: dict, records):
    """Executor side, stage B: the partials of this reducer's queries (after the shuffle
    by query). Checks exactly one partial per partition, then runs every combine plan at
    once on the executor's Scheduler; yields ``(query, attempts, ipc of the answer)``."""
    import pyarrow as pa
    from pyspark import TaskContext

    from operators import tpch_partial

    ctx = TaskContext.get()
    parts = cfg["partitions"]
    got: dict[str, dict[int, tuple]] = {}
    for query, (part, attempt, host, ipc) in records:
        seen = got.setdefault(query, {})
        if part in seen:
            raise fail(query, "combine", f"two partial results for partition {part} "
                                          f"(attempts {seen[part][0]} and {attempt})")
        seen[part] = (attempt, host, ipc)
    sched = executor_scheduler(cfg["policy"], cfg["threads_per_node"], cfg["packet_bytes"], ctx.cpus())
    handles = []
    try:
        for query, seen in got.items():
            missing = sorted(set(range(parts)) - set(seen))
            if missing:
                raise fail(query, "combine", f"no partial result for partition {missing[0]}")
            try:
                partials = pa.concat_tables([_from_ipc(seen[p][2]) for p in range(parts)])
                plan = tpch_partial.combine_plan(query, partials, cfg["data"], 1)
                handles.append((query, sched.submit(plan)))
            except Exception as e:
                raise fail(query, "combine", e) from e
        for query, h in handles:
            try:
                table = h.result()
            except Exception as e:
                raise fail(query, "combine", e) from e
            info = {p: [a, host] for p, (a, host, _) in got[query].items()}
            yield query, json.dumps(info), _to_ipc(table)
    finally:
        for _, h in handles:
            if not h.done():
                h.cancel()


def _fused_task(cfg: dict, items):
    """Both stages in one task (the job shape when the cluster runs one task at a time,
    e.g. local mode): every partial plan at once, then every combine plan, with no
    shuffle of the partials from this executor back to itself."""
    yield from _combine_task(cfg, list(_partial_task(cfg, items)))


def _query_index(queries: tuple, query: str) -> int:
    """The shuffle's partitioner: a query's reducer (PySpark takes it modulo the count)."""
    return queries.index(query)


@dataclass
class SparkRun:
    """What one ``spark_run_detailed`` call did."""

    tables: dict  # query -> pyarrow Table (the answer)
    partitions: int
    master: str
    wall_s: float
    run_id: str
    fused: bool  # one stage (partials and combines in one task) or two
    split: bool = False  # partitions cut on the fly (else: stored by spark_datagen)
    # (query, partition) -> [attempt number of the accepted partial, "host:pid"]
    attempts: dict = field(default_factory=dict)
    output: list = field(default_factory=list)  # written files

    @property
    def retried(self) -> list:
        """(query, partition) pairs whose accepted partial came from a retry."""
        return sorted(k for k, (a, _) in self.attempts.items() if a > 0)

    def summary(self) -> dict:
        return {
            "master": self.master,
            "partitions": self.partitions,
            "stages": 1 if self.fused else 2,
            "split_on_the_fly": self.split,
            "wall_s": round(self.wall_s, 4),
            "queries": {q: {"rows": t.num_rows} for q, t in self.tables.items()},
            "executors": sorted({h for _, h in self.attempts.values()}),
            "retried": [f"{q}:{p}" for q, p in self.retried],
            "output": [str(p) for p in self.output],
        }


def check_queries(queries) -> list[str]:
    from operators import tpch, tpch_partial

    names = [str(q).strip().lower() for q in (queries or tpch.DEFAULT_MIX)]
    for q in names:
        if q not in tpch_partial.SUPPORTED:
            raise BoboxError(f"unknown query {q!r} (known: {', '.join(tpch_partial.SUPPORTED)})")
    if len(set(names)) != len(names):
        dup = next(q for q in names if names.count(q) > 1)
        raise BoboxError(f"query {dup!r} given twice")
    return names


def spark_run_detailed(queries, data, output=None, master: str = DEFAULT_MASTER, policy: str = "bobox",
                       threads_per_node: int | None = None, packet_bytes: int | None = None,
                       inject_failure: str | None = None, spark=None, progress: bool = False,
                       fuse: bool | None = None, partitions: int | None = None, view_cache=None) -> SparkRun:
    """Run TPC-H `queries` over the TPC-H folder `data` on Spark (see the module
    docstring for the job's shape); answers per query, and who computed what.

    `data`: a folder from ``spark_datagen`` runs on its stored partitions; any other
    TPC-H Parquet folder (``bobox datagen``'s, folders of parts), or a Spark folder with
    `partitions` other than its own, is split by order key on the fly into `partitions`
    (default ``default_partitions``), the executors keeping the partition views in
    `view_cache` (default ``view_cache_dir()``; see ``views``).

    `output`: write ``output/<query>.parquet`` (the layout of ``bobox run --output``).
    `inject_failure`: ``"q3:1"`` fails the first attempt of query q3's partial on
    partition 1 (``"q3:1:2"`` the first two attempts, ``"q3:1:all"`` every attempt).
    `fuse`: run partials and combines in one task, without the shuffle; by default when
    the cluster runs one task at a time (local mode: one executor, one task filling it),
    where the shuffle would only move the partials from the executor to itself (measured
    at SF 0.1, local[2]: 70-80 ms of a 0.33 s run).
    Raises BoboxError for bad arguments and for a query failing on every attempt.
    """
    from bobox_sched.policies import get_policy

    from experiments.workload import write_results

    names = check_queries(queries)
    try:
        get_policy(policy)
    except ValueError as e:
        raise BoboxError(str(e)) from None
    if threads_per_node is not None and (not isinstance(threads_per_node, int) or threads_per_node < 1):
        raise BoboxError(f"threads per node must be a positive integer, got {threads_per_node!r}")
    if packet_bytes is not None and (not isinstance(packet_bytes, int) or packet_bytes < 64):
        raise BoboxError(f"packet bytes must be an integer of at least 64, got {packet_bytes!r}")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise BoboxError(f"partitions must be a positive integer, got {partitions!r}")
    data = Path(data).expanduser().absolute()
    stored = stored_partitions(data)  # DataError here for a folder that is no TPC-H data
    if partitions or stored:  # bad input fails before a JVM starts where the count is known
        parse_injection(inject_failure, names, partitions or stored)
    spark = spark or spark_session(master)
    sc = spark.sparkContext
    parts = partitions or stored or default_partitions(spark)
    inject = parse_injection(inject_failure, names, parts)
    split = None if parts == stored else plan_split(data, parts, view_cache)
    run_id = uuid.uuid4().hex[:12]
    cfg = {"run_id": run_id, "data": str(data), "partitions": parts, "policy": policy, "split": split,
           "threads_per_node": threads_per_node, "packet_bytes": packet_bytes, "inject": inject}
    at_once = slots(spark)
    reducers = min(len(names), at_once)
    fused = at_once == 1 if fuse is None else bool(fuse)
    shape = "1 fused task" if fused else f"{parts} partial tasks, {reducers} combine task(s)"
    sf = data_sf(data)
    say(progress, f"{' '.join(names)} over {parts} partitions"
                   f"{' (split by order key on the fly)' if split else ''} of "
                   f"{f'SF {sf:g}' if sf is not None else str(data)} on {sc.master} ({shape}) ...")
    t0 = time.perf_counter()
    # Work items sorted by partition; parallelize cuts the list into `parts` equal
    # consecutive slices, so slice i holds exactly the items of partition i.
    items = [(q, p) for p in range(parts) for q in names]
    if fused:
        finals_rdd = sc.parallelize(items, 1).mapPartitions(functools.partial(_fused_task, cfg))
    else:
        finals_rdd = (
            sc.parallelize(items, parts)
            .mapPartitions(functools.partial(_partial_task, cfg))
            .partitionBy(reducers, functools.partial(_query_index, tuple(names)))
            .mapPartitions(functools.partial(_combine_task, cfg))
        )
    sc.setJobDescription(f"bobox spark run {' '.join(names)}")
    try:
        finals = finals_rdd.collect()
    except Exception as e:
        raise job_error(e, "Spark run", max_failures(spark)) from None
    wall = time.perf_counter() - t0

    by_query = {}
    for query, info, ipc in finals:
        if query in by_query:
            raise BoboxError(f"query {query}: two answers came back from Spark")
        by_query[query] = (json.loads(info), ipc)
    missing = [q for q in names if q not in by_query]
    if missing:
        raise BoboxError(f"query {missing[0]}: no answer came back from Spark")
    run = SparkRun({}, parts, sc.master, wall, run_id, fused, split is not None)
    for q in names:
        info, ipc = by_query[q]
        run.tables[q] = _from_ipc(ipc)
        for p, (attempt, host) in info.items():
            run.attempts[(q, int(p))] = [attempt, host]
    if output is not None:
        run.output = write_results(run.tables, output)
    if run.retried:
        say(progress, "retried tasks: " + ", ".join(
            f"partition {p} (accepted attempt {max(run.attempts[(q, p)][0] for q in names if (q, p) in run.attempts)})"
            for p in sorted({p for _, p in run.retried})))
    say(progress, f"done in {wall:.3f} s")
    return run


def spark_run(queries, data, output=None, master: str = DEFAULT_MASTER, policy: str = "bobox",
              threads_per_node: int | None = None, packet_bytes: int | None = None,
              inject_failure: str | None = None, spark=None, progress: bool = False, fuse: bool | None = None,
              partitions: int | None = None, view_cache=None) -> dict:
    """``spark_run_detailed(...).tables``: {query: pyarrow Table}, in the order given."""
    return spark_run_detailed(queries, data, output, master, policy, threads_per_node, packet_bytes,
                              inject_failure, spark, progress, fuse, partitions, view_cache).tables
