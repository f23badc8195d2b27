"""The Spark data pipeline: PySpark distributes the work, the Bobox scheduler runs each
executor's part of it.

    spark = spark_session("local[*]")                       # or "spark://host:7077"
    data = spark_datagen(0.1, "data/tpch-sf0.1-spark")      # stage 1: partitioned Parquet
    tables = spark_run(["q1", "q3"], data, output="out")    # stage 2: out/q1.parquet, ...
    spark_report(["results-host1", "results-host2"], "report")  # stage 3: summary.csv, report.md

Stage 1, data (``spark_datagen``), two Spark jobs. First, one task per data partition runs
``tpchgen-cli --parts P --part i`` for ``orders`` and ``lineitem``, and one more task writes
the six small tables whole. Then one task per partition places orders and lineitem by
order key, so that partition ``i`` of both tables holds the same orders. tpchgen-cli does
not guarantee that by itself: its generators make an order's line items with the order,
but the CLI cuts each table's part ``i`` into ``c`` generator chunks of its own, ``c``
estimated from the table's bytes per row and the row-group size (4.0: lineitem 14, orders
4 at SF 1 with 4 parts), and a chunk starts at order ``floor(T / (P*c)) * k`` (T orders).
Where P*c does not divide T the two tables' parts start at different orders (SF 1, P 4:
lineitem part 2 after 374,990 orders, orders part 2 after 375,000: c = 14 and 4, T/(P*c)
rounded down; read in tpchgen-cli's ``GenerationPlan`` and tpchgen's
``calculate_start_index``, and measured), so the run failed there.
Placing: the split keys are lineitem's parts' first order keys (``_plan_placement``), so
lineitem, 4x the rows, stays as generated (renamed), and only the orders rows near the
cuts move (the overlapping row groups are rewritten); every task then checks that each of
its line items has its order in the same partition. Layout::

    DIR/lineitem/part-<i>.parquet   DIR/orders/part-<i>.parquet      (i = 0 .. P-1)
    DIR/customer.parquet ... DIR/region.parquet                       (replicated)
    DIR/_partitions/part-<i>/<table>.parquet -> relative links: partition i's view
    DIR/_bobox_spark_manifest.json  sf, partitions, split keys, rows per table and part,
                                    generator

``DIR`` is also an ordinary data folder (``bobox run --data DIR``, DuckDB): a table is
either ``<table>.parquet`` or a folder of parts.

Stage 2 reads any TPC-H Parquet folder: a folder from stage 1 through its stored views;
any other one (``bobox datagen``'s single files, folders of parts, or a stage-1 folder
asked for another partition count) is split by order key on the fly, each executor
writing the views of the partitions it runs into a cache folder on its host (see "stage 2
input" below).

Stage 2, execution (``spark_run``), one Spark job of two stages::

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
the query.

Stage 3, results (``spark_report``): experiment CSVs in long format from many runs and
hosts are read into one Spark DataFrame and summarized per (experiment, series, x,
metric) into ``summary.csv`` and a section of ``report.md``.
"""

from __future__ import annotations

import csv
import datetime
import functools
import hashlib
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass, field
from pathlib import Path

from experiments.cli import procs
from bobox_sched.core.errors import BoboxError
from bobox_sched.tools import find_tool

REPO_ROOT = Path(__file__).resolve().parent.parent
LOG4J_CONFIG = Path(__file__).resolve().parent / "spark-log4j2.properties"

DEFAULT_MASTER = "local[*]"
# Attempts per task before Spark gives up on the job: Spark's own default
# (spark.task.maxFailures), applied to local masters too.
DEFAULT_MAX_FAILURES = 4

MANIFEST = "_bobox_spark_manifest.json"
MANIFEST_FORMAT = 1
VIEWS = "_partitions"
PARTITIONED = ("lineitem", "orders")
REPLICATED = ("customer", "part", "partsupp", "supplier", "nation", "region")

# Executors write one empty marker file per task attempt into this folder when the
# variable is set in their environment (spark.executorEnv.BOBOX_SPARK_TRACE_DIR): tests
# check with it that a failed task really ran again.
TRACE_ENV = "BOBOX_SPARK_TRACE_DIR"

# The text executor-side failures start with; the driver looks for it in Spark's errors.
_TAG = "bobox-spark:"
_FAIL_RE = re.compile(r"bobox-spark: query (\S+) (partition \d+|combine): ([^\n\r]*)")
_TAG_RE = re.compile(r"bobox-spark: ([^\n\r]*)")

__all__ = [
    "DEFAULT_MASTER",
    "MANIFEST",
    "SparkRun",
    "default_spark_data_dir",
    "parse_master",
    "read_spark_manifest",
    "spark_datagen",
    "spark_report",
    "spark_run",
    "spark_run_detailed",
    "spark_session",
]


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"spark: {msg}", file=sys.stderr, flush=True)


def default_spark_data_dir(sf: float) -> Path:
    """``data/tpch-sf<SF>-spark``: next to ``bobox run``'s single-file data sets."""
    return Path("data") / f"tpch-sf{sf:g}-spark"


# =========================================================================== the session

_LOCAL_RE = re.compile(r"^local(?:\[\s*(\*|\d+)\s*(?:,\s*(\d+)\s*)?\])?$")
_STANDALONE_RE = re.compile(r"^spark://([^,/:\s]+:\d+)(,[^,/:\s]+:\d+)*$")
_OTHER_RE = re.compile(r"^(yarn|k8s://\S+|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\])$")


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parse_master(master: str, max_failures: int = DEFAULT_MAX_FAILURES) -> tuple[str, int | None]:
    """(the master URL to give Spark, the local core count or None).

    ``local``, ``local[N]`` and ``local[*]`` become ``local[N,F]`` with F = `max_failures`:
    Spark retries failed tasks in local mode only when F is given. ``local[N,F]`` is kept;
    ``spark://HOST:PORT[,HOST:PORT...]`` must answer a TCP connect (else Spark would retry
    registering for minutes); ``yarn``, ``k8s://...`` and ``local-cluster[...]`` pass as
    they are. Anything else: BoboxError.
    """
    text = (master or "").strip()
    m = _LOCAL_RE.match(text)
    if m:
        n = _usable_cpus() if m.group(1) in (None, "*") and text != "local" else int(m.group(1) or 1)
        if n < 1:
            raise BoboxError(f"bad Spark master URL {master!r}: local needs at least 1 core")
        f = int(m.group(2)) if m.group(2) else max_failures
        return f"local[{n},{f}]", n
    if _STANDALONE_RE.match(text):
        hosts = text[len("spark://"):].split(",")
        errors = []
        for hp in hosts:
            host, port = hp.rsplit(":", 1)
            try:
                with socket.create_connection((host, int(port)), timeout=5):
                    return text, None
            except OSError as e:
                errors.append(f"{hp}: {e.strerror or e}")
        raise BoboxError(f"cannot reach Spark master {text} ({'; '.join(errors)})")
    if _OTHER_RE.match(text):
        return text, None
    raise BoboxError(
        f"bad Spark master URL {master!r} (expected local, local[N], local[*], local[N,F], "
        "spark://HOST:PORT, yarn or k8s://...)"
    )


def spark_session(master: str = DEFAULT_MASTER, app: str = "bobox", conf: dict | None = None,
                  executor_cores: int | None = None, max_failures: int = DEFAULT_MAX_FAILURES):
    """A SparkSession for the pipeline, reused while the arguments are the same.

    An active session built with other arguments is stopped first (a Python process holds
    one SparkContext). Settings, and why:

    * one task per executor at a time (``spark.task.cpus`` = the executor's cores: all
      local cores in local mode, `executor_cores` elsewhere): the task's Python worker
      runs one Scheduler over the whole machine, pinned per NUMA node, instead of one per
      core fighting for the same CPUs;
    * ``spark.python.worker.reuse``: Python workers, and the Scheduler, packet pools and
      loaded columns in them, live across tasks and jobs;
    * Python workers run this interpreter (``sys.executable``) with the repository root
      on ``PYTHONPATH``, unless the user chose one (``PYSPARK_PYTHON`` in the environment
      or ``spark.pyspark.python`` in `conf`). PySpark's driver decides the workers'
      interpreter from ``PYSPARK_PYTHON`` alone (default: whatever ``python3`` is first
      on PATH, which has none of our packages when no venv is activated), so the variable
      is set in this process too. Nothing else is shipped: on a cluster, every host needs
      the same checkout and environment at the same path (or ``PYSPARK_PYTHON`` naming an
      interpreter with bobox-sched installed on every host);
    * quiet: no console progress bars, no web UI (set ``spark.ui.enabled`` in `conf` to
      get it), driver log level ``error`` (``spark-log4j2.properties``);
    * ``spark.sql.shuffle.partitions`` 4: only stage 3 uses Spark SQL shuffles, over a few
      thousand rows. With adaptive execution (on by default) Spark coalesces its default
      of 200 itself (measured: 0.5 s per report either way, local[2]); the small number
      keeps it cheap where adaptive execution is off (200 task launches for nothing).

    `conf` entries are applied last and win.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if executor_cores is not None and executor_cores < 1:
        raise BoboxError(f"executor cores must be positive, got {executor_cores}")
    if max_failures < 1:
        raise BoboxError(f"max failures must be positive, got {max_failures}")
    url, local_cores = parse_master(master, max_failures)
    settings = {
        "spark.master": url,
        "spark.app.name": app,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        # Executor JVM <-> Python worker over a Unix domain socket instead of TCP loopback:
        # an empty one-task PySpark job took 55 ms instead of 85 ms (local[2], 2 cores,
        # Spark 4.x; older Sparks ignore the key).
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
        "spark.task.maxFailures": str(max_failures),
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}",
    }
    if local_cores is not None:
        settings["spark.task.cpus"] = str(local_cores)
    elif executor_cores is not None:
        settings["spark.executor.cores"] = str(executor_cores)
        settings["spark.task.cpus"] = str(executor_cores)
    user_python = os.environ.get("PYSPARK_PYTHON") or (conf or {}).get("spark.pyspark.python")
    if user_python:
        settings["spark.pyspark.python"] = str(user_python)
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    # SparkContext reads the workers' interpreter from this variable, not from the conf.
    os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    key = json.dumps(sorted(settings.items()))

    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None and active._sc._jsc is not None:
        if active.conf.get("spark.bobox.session", None) == key:
            return active
        active.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()

    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    builder = builder.config("spark.bobox.session", key)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # Java missing, a master refusing us, ...
        procs.reraise_interrupt(e)
        raise BoboxError(f"cannot start Spark with master {url}: {_first_line(e)}") from None
    return spark


def _first_line(e: BaseException) -> str:
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()
    return type(e).__name__


def _slots(spark) -> int:
    """Tasks the cluster runs at once (= executors, as one task fills an executor)."""
    sc = spark.sparkContext
    cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    return max(1, sc.defaultParallelism // cpus)


def default_partitions(spark) -> int:
    """Data partitions by default: one per NUMA node of each executor (machines assumed
    alike; this machine's node count is used), so that every node's workers get requests
    of their own to run."""
    import topology

    try:
        nodes = len(topology.probe().cpu_nodes) or 1
    except Exception:  # a probe failure must not stop data generation
        nodes = 1
    return _slots(spark) * nodes


def _max_failures(spark) -> int:
    """Attempts Spark makes per task: F of ``local[N,F]``, else spark.task.maxFailures
    (plain ``local[N]``: 1)."""
    sc = spark.sparkContext
    m = re.match(r"^local\[\s*[\d*]+\s*(?:,\s*(\d+)\s*)?\]$", sc.master)
    if m:
        return int(m.group(1) or 1)
    return int(sc.getConf().get("spark.task.maxFailures", str(DEFAULT_MAX_FAILURES)))


def _job_error(e: BaseException, what: str, attempts: int | None = None) -> BoboxError:
    """A one-line BoboxError from a failed Spark job: the query and partition named by
    our own executor-side error text when there is one. A job fails once a task has
    failed `attempts` times (Spark 3 says so in the error, Spark 4 does not). A Ctrl-C or
    kill that py4j/pyspark turned into an error is raised as what it is."""
    procs.reraise_interrupt(e)
    text = str(e)
    found = _FAIL_RE.findall(text)
    said = re.search(r"failed (\d+) times", text)
    n = int(said.group(1)) if said else attempts
    tries = f" in all {n} attempts" if n and n > 1 else (" in its only attempt" if n == 1 else "")
    if found:
        query, where, msg = found[-1]
        return BoboxError(f"query {query} failed on {where}{tries}: {msg.strip()}")
    tagged = _TAG_RE.findall(text)
    if tagged:
        return BoboxError(f"{what} failed{tries}: {tagged[-1].strip()}")
    # Not ours: the last Python exception line of the executor's traceback, if any.
    py = re.findall(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", text, re.M)
    py = [(name, msg) for name, msg in py if not name.startswith(("py4j", "org.", "java."))]
    return BoboxError(f"{what} failed{tries}: " + (f"{py[-1][0]}: {py[-1][1].strip()}" if py else _first_line(e)))


# --------------------------------------------------------------------------- the split by order key
#
# Both stages cut orders and lineitem into P partitions such that partition i of both
# tables holds the rows of the same order keys: P-1 increasing split keys
# b_1 < ... < b_{P-1}, and partition i holds the rows with b_i <= key < b_{i+1}
# (b_0 = -inf, b_P = +inf) of both tables. Whatever the split keys, every row lands in
# exactly one partition and every order's line items in its order's partition; the keys
# only decide the balance. Row groups are chosen by the key range in the footers'
# statistics, so a partition reads only the row groups that overlap its range, and a
# file lying wholly inside one range is moved or linked instead of being rewritten.

KEY = {"orders": "o_orderkey", "lineitem": "l_orderkey"}
PIECES = "_work/pieces"  # stage 1: the generator's parts, before they are placed


@dataclass(frozen=True)
class _Group:
    """One non-empty row group of a Parquet file: the key's range and its row count."""

    file: int  # index into the table's file list
    index: int  # row group number in that file
    lo: int
    hi: int
    rows: int


def _key_groups(files, key: str, table: str) -> list[_Group]:
    """Every non-empty row group of `files`, with the range of the integer column `key`
    from the footer's statistics (the column is read where a group has none)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from operators.data import DataError

    groups = []
    for fi, f in enumerate(files):
        try:
            pf = pq.ParquetFile(f)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise DataError(f"cannot read Parquet file {f}: {_first_line(e)}") from None
        with pf:
            names = pf.schema_arrow.names
            if key not in names:
                raise DataError(f"table {table!r}: {f} has no column {key!r}")
            typ = pf.schema_arrow.field(key).type
            if not pa.types.is_integer(typ):
                raise DataError(f"table {table!r}: column {key!r} in {f} is {typ}, expected an integer type")
            md = pf.metadata
            col = None
            for r in range(md.num_row_groups):
                rg = md.row_group(r)
                if rg.num_rows == 0:
                    continue
                if col is None:
                    col = next(c for c in range(rg.num_columns) if rg.column(c).path_in_schema == key)
                st = rg.column(col).statistics
                if st is not None and st.has_min_max and st.has_null_count and st.null_count == 0:
                    lo, hi = int(st.min), int(st.max)
                else:
                    keys = pf.read_row_group(r, columns=[key]).column(0)
                    if keys.null_count:
                        raise DataError(f"table {table!r}: column {key!r} in {f} holds {keys.null_count} nulls")
                    mm = pc.min_max(keys).as_py()
                    lo, hi = int(mm["min"]), int(mm["max"])
                groups.append(_Group(fi, r, lo, hi, rg.num_rows))
    return groups


def _balanced_bounds(groups: list[_Group], parts: int) -> list[int]:
    """P-1 increasing split keys cutting `groups` into P parts of about equal row counts,
    the keys of a row group taken as spread evenly over its range."""
    if parts <= 1:
        return []
    if not groups:  # no rows: any increasing keys will do
        return list(range(parts - 1))
    gs = sorted(groups, key=lambda g: (g.lo, g.hi))
    total = sum(g.rows for g in gs)
    bounds: list[int] = []
    cum, i = 0, 0
    for k in range(1, parts):
        target = total * k / parts
        while i < len(gs) - 1 and cum + gs[i].rows < target:
            cum += gs[i].rows
            i += 1
        g = gs[i]
        frac = min(1.0, max(0.0, (target - cum) / g.rows))
        b = g.lo + math.ceil(frac * (g.hi - g.lo))
        if bounds and b <= bounds[-1]:
            b = bounds[-1] + 1
        bounds.append(b)
    return bounds


def _piece_bounds(groups: list[_Group], parts: int) -> list[int]:
    """Split keys for P pieces (file i = piece i): each piece's first key where the
    pieces cover disjoint ascending key ranges (then none of that table moves), else
    balanced ones."""
    spans: dict[int, list[int]] = {}
    for g in groups:
        s = spans.setdefault(g.file, [g.lo, g.hi])
        s[0], s[1] = min(s[0], g.lo), max(s[1], g.hi)
    if sorted(spans) == list(range(parts)) and all(spans[i][1] < spans[i + 1][0] for i in range(parts - 1)):
        return [spans[i][0] for i in range(1, parts)]
    return _balanced_bounds(groups, parts)


def _span(bounds: list[int], p: int) -> tuple[int | None, int | None]:
    """Partition p's key range [lo, hi); None: unbounded."""
    return (bounds[p - 1] if p > 0 else None, bounds[p] if p < len(bounds) else None)


def _inside(g: _Group, lo, hi) -> bool:
    return (lo is None or g.lo >= lo) and (hi is None or g.hi < hi)


def _overlaps(g: _Group, lo, hi) -> bool:
    return (lo is None or g.hi >= lo) and (hi is None or g.lo < hi)


def _pick(groups: list[_Group], lo, hi) -> tuple[list[int], list[_Group]]:
    """What the partition [lo, hi) is made of: (files wholly inside it, the row groups of
    the other files that overlap it)."""
    by_file: dict[int, list[_Group]] = {}
    for g in groups:
        by_file.setdefault(g.file, []).append(g)
    whole, cut = [], []
    for fi in sorted(by_file):
        gs = by_file[fi]
        if all(_inside(g, lo, hi) for g in gs):
            whole.append(fi)
        else:
            cut.extend(g for g in gs if _overlaps(g, lo, hi))
    return whole, cut


def _filter(t, mask):
    """``t.filter(mask)``; view-typed columns (tpchgen-cli writes strings as string_view)
    go through their plain type, since pyarrow has no take/filter kernel for them."""
    import pyarrow as pa

    views = {"string_view": pa.string(), "binary_view": pa.binary()}
    if not any(str(f.type) in views for f in t.schema):
        return t.filter(mask)
    cols = []
    for f, c in zip(t.schema, t.columns):
        plain = views.get(str(f.type))
        cols.append(c.filter(mask) if plain is None else c.cast(plain).filter(mask).cast(f.type))
    return pa.Table.from_arrays(cols, schema=t.schema)


def _write_rows(files, groups: list[_Group], key: str, lo, hi, dest: Path, schema, group_rows: int) -> int:
    """Write the rows of `groups` whose `key` is in [lo, hi) to `dest` (a temporary file
    renamed into place), in row groups of `group_rows` rows; returns the row count. One
    row group is read at a time, so memory stays at about two row groups."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    group_rows = max(1, int(group_rows))
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    opened: dict[int, object] = {}
    n = 0
    try:
        with pq.ParquetWriter(tmp, schema) as w:
            held: list = []
            count = 0
            for g in groups:
                pf = opened.get(g.file)
                if pf is None:
                    pf = opened[g.file] = pq.ParquetFile(files[g.file])
                t = pf.read_row_group(g.index)
                if not _inside(g, lo, hi):
                    k = t.column(key)
                    mask = None
                    if lo is not None:
                        mask = pc.greater_equal(k, lo)
                    if hi is not None:
                        below = pc.less(k, hi)
                        mask = below if mask is None else pc.and_(mask, below)
                    t = _filter(t, mask)
                if t.num_rows == 0:
                    continue
                if not t.schema.equals(schema):
                    t = t.cast(schema)
                held.append(t)
                count += t.num_rows
                if count >= group_rows:
                    full = pa.concat_tables(held)
                    cut = (count // group_rows) * group_rows
                    w.write_table(full.slice(0, cut), row_group_size=group_rows)
                    n += cut
                    held, count = [full.slice(cut)], count - cut
            if count:
                w.write_table(pa.concat_tables(held), row_group_size=group_rows)
                n += count
        os.replace(tmp, dest)
    finally:
        for pf in opened.values():
            pf.close()
        if tmp.exists():
            tmp.unlink()
    return n


# =========================================================================== stage 1: data


def read_spark_manifest(data_dir) -> dict:
    """The manifest of a folder written by ``spark_datagen``; DataError without one."""
    from operators.data import DataError

    data_dir = Path(data_dir)
    if not data_dir.exists():
        raise DataError(f"Spark data folder {data_dir} does not exist "
                        f"(generate it with: bobox spark datagen --sf 0.1 --out {data_dir})")
    path = data_dir / MANIFEST
    if not path.is_file():
        raise DataError(f"{data_dir} is not a partitioned TPC-H folder (no {MANIFEST}; "
                        f"generate one with: bobox spark datagen --sf 0.1 --out DIR)")
    try:
        manifest = json.loads(path.read_text())
        float(manifest["sf"])
        int(manifest["partitions"])
        manifest["tables"]["lineitem"]["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"unreadable manifest {path}: {e}") from None
    return manifest


def _check_existing(out: Path, sf: float, partitions: int | None) -> bool:
    """True where `out` holds this data set already (cached); DataError where it holds
    something else; False where it is absent or empty."""
    from operators.data import DataError

    if not out.exists():
        return False
    if not out.is_dir():
        raise DataError(f"Spark datagen output {out} exists and is not a folder")
    if not (out / MANIFEST).is_file():
        if any(out.iterdir()):
            raise DataError(f"Spark datagen output {out} already holds other files and no {MANIFEST}; "
                            "choose another folder (nothing was changed)")
        return False
    m = read_spark_manifest(out)
    if not math.isclose(float(m["sf"]), sf, rel_tol=1e-12):
        raise DataError(f"Spark datagen output {out} holds TPC-H SF {float(m['sf']):g}, not SF {sf:g}; "
                        "choose another folder (nothing was changed)")
    if partitions is not None and int(m["partitions"]) != partitions:
        raise DataError(f"Spark datagen output {out} holds {m['partitions']} partitions, not {partitions}; "
                        "choose another folder (nothing was changed)")
    missing = [f for info in m["tables"].values() for f in info["files"] if not (out / f).is_file()]
    missing += [v for v in m.get("views", []) if not (out / v).is_dir()]
    if missing:
        raise DataError(f"Spark datagen output {out} is incomplete ({missing[0]} is missing); "
                        "remove the folder to regenerate it")
    return True


def _find_tool(tool: str, hint: str | None) -> str:
    """The generator's path on this host: `hint` (the driver's) if it exists here, else
    next to this interpreter, else PATH (``bobox_sched.tools.find_tool``)."""
    for cand in (hint, find_tool(tool)):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError(f"TPC-H generator {tool!r} not found on host {socket.gethostname()}; "
                       "install it with: pip install tpchgen-cli")


def _run_tool(cmd: list[str], what: str) -> None:
    # Own process group, killed with this Python worker (experiments.cli.procs): a cancelled
    # task (Ctrl-C of the driver) must not leave the generator writing on.
    from experiments.cli import procs

    proc = procs.run(cmd)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        raise RuntimeError(f"{what}: {Path(cmd[0]).name} exited {proc.returncode}: "
                           f"{lines[-1] if lines else '(no output)'}")


def _tagged(work, cfg: dict, indexes):
    """Executor side of stage 1: `work`'s records, its errors tagged for the driver
    (see ``_job_error``)."""
    try:
        yield from work(cfg, indexes)
    except Exception as e:
        text = _first_line(e) if type(e) is RuntimeError else f"{type(e).__name__}: {_first_line(e)}"
        raise RuntimeError(f"{_TAG} {text}") from e


def _datagen_task(cfg: dict, indexes):
    yield from _tagged(_datagen_pieces, cfg, indexes)


def _place_task(cfg: dict, indexes):
    yield from _tagged(_place_pieces, cfg, indexes)


def _datagen_pieces(cfg: dict, indexes):
    """Stage 1, step 1 (executor side). Index i < P: tpchgen-cli's part i of orders and
    lineitem, moved to ``_work/pieces/<table>/piece-<i>.parquet``; index P: the six small
    tables, moved into place. Files are generated into a folder private to this attempt
    and then renamed, so a retried attempt never meets a half-written file."""
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tmp, parts = Path(cfg["tmp"]), cfg["partitions"]
    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx else 0
    threads = max(1, ctx.cpus() if ctx else 1)
    from experiments.cli import procs

    exe = _find_tool(cfg["tool"], cfg["tool_hint"])
    version = procs.run([exe, "--version"], timeout=60).stdout.split()
    for i in indexes:
        if not tmp.is_dir():  # the driver gave up and removed it: never create it again
            raise RuntimeError(f"staging folder {tmp} is gone (the run was cancelled)")
        work = tmp / "_work" / f"{i}-attempt-{attempt}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        base = [exe, "parquet", "-s", cfg["sf_text"], "--output-dir", str(work), "--num-threads", str(threads),
                "--quiet"]
        rows = {}
        if i < parts:
            what = f"datagen part {i} of {parts}"
            _run_tool(base + ["--tables", ",".join(PARTITIONED), "--parts", str(parts), "--part", str(i + 1)], what)
            files = {t: work / t / f"{t}.{i + 1}.parquet" for t in PARTITIONED}
            for t, f in files.items():
                if not f.is_file():
                    raise RuntimeError(f"{what}: the generator wrote no {f.relative_to(work)}")
            for t, f in files.items():
                rows[t] = pq.ParquetFile(f).metadata.num_rows
                (tmp / PIECES / t).mkdir(parents=True, exist_ok=True)
                os.replace(f, tmp / PIECES / t / f"piece-{i}.parquet")
        else:
            what = "datagen of the small tables"
            _run_tool(base + ["--tables", ",".join(REPLICATED)], what)
            for t in REPLICATED:
                f = work / f"{t}.parquet"
                if not f.is_file():
                    raise RuntimeError(f"{what}: the generator wrote no {t}.parquet")
                rows[t] = pq.ParquetFile(f).metadata.num_rows
                os.replace(f, tmp / f"{t}.parquet")
        shutil.rmtree(work, ignore_errors=True)
        yield json.dumps({"index": i, "rows": rows, "attempt": attempt, "host": socket.gethostname(),
                          "generator": version})


def _place_pieces(cfg: dict, indexes):
    """Stage 1, step 2 (executor side): partition j of orders and lineitem from the
    pieces, as the driver planned it (``_plan_placement``): one piece wholly inside j's
    key range is renamed into place, anything else is written from the overlapping row
    groups of the pieces. Then the check that every line item of partition j has its
    order in partition j. An attempt may find its renames done by an earlier one.

    Tasks of different partitions never touch one file: a piece renamed into partition j
    lies wholly inside j's key range, so no other partition reads it; the pieces that
    straddle a cut are only read, and removed with ``_work`` by the driver at the end."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tmp, parts = Path(cfg["tmp"]), cfg["partitions"]
    for j in indexes:
        lo, hi = _span(cfg["bounds"], j)
        rewritten = []
        for t in PARTITIONED:
            spec = cfg["place"][t][j]
            pieces = [tmp / PIECES / t / f"piece-{k}.parquet" for k in range(parts)]
            dest = tmp / t / f"part-{j}.parquet"
            dest.parent.mkdir(exist_ok=True)
            if spec["move"] is not None:
                src = pieces[spec["move"]]
                if src.is_file():
                    os.replace(src, dest)
                elif not dest.is_file():
                    raise RuntimeError(f"placing {t} partition {j}: {src.name} is gone")
            else:
                schema = pa.ipc.read_schema(pa.py_buffer(cfg["schemas"][t]))
                groups = [_Group(*g) for g in spec["groups"]]
                _write_rows(pieces, groups, KEY[t], lo, hi, dest, schema, cfg["group_rows"][t])
                rewritten.append(t)
        okeys = pq.read_table(tmp / "orders" / f"part-{j}.parquet", columns=[KEY["orders"]]).column(0)
        lkeys = pq.read_table(tmp / "lineitem" / f"part-{j}.parquet", columns=[KEY["lineitem"]]).column(0)
        if not pc.all(pc.is_in(lkeys, value_set=okeys)).as_py():
            raise RuntimeError(f"partition {j}: lineitem holds order keys that orders partition {j} lacks")
        yield json.dumps({"index": j, "rows": {"orders": len(okeys), "lineitem": len(lkeys)},
                          "rewritten": rewritten})


def _plan_placement(tmp: Path, parts: int) -> dict:
    """Driver side of stage 1, between the two steps: the split keys and, per table and
    partition, which piece to rename or which row groups to write (see ``_place_pieces``).

    The split keys are lineitem's pieces' first keys where those pieces are disjoint and
    ascending (tpchgen's are): lineitem, four times the rows of orders, then stays as
    generated, and only orders rows near the cuts move."""
    import pyarrow.parquet as pq

    groups = {t: _key_groups([tmp / PIECES / t / f"piece-{k}.parquet" for k in range(parts)], KEY[t], t)
              for t in PARTITIONED}
    bounds = _piece_bounds(groups["lineitem"], parts)
    place: dict[str, list] = {}
    for t in PARTITIONED:
        place[t] = []
        for j in range(parts):
            whole, cut = _pick(groups[t], *_span(bounds, j))
            if len(whole) == 1 and not cut:
                place[t].append({"move": whole[0]})
            else:
                take = sorted([g for g in groups[t] if g.file in whole] + cut, key=lambda g: (g.file, g.index))
                place[t].append({"move": None, "groups": [astuple(g) for g in take]})
    return {
        "bounds": bounds,
        "place": place,
        "schemas": {t: pq.read_schema(tmp / PIECES / t / "piece-0.parquet").serialize().to_pybytes()
                    for t in PARTITIONED},
        "group_rows": {t: max((g.rows for g in groups[t]), default=1) for t in PARTITIONED},
    }


def spark_datagen(sf: float, out, master: str = DEFAULT_MASTER, partitions: int | None = None, spark=None,
                  progress: bool = True, tool: str = "tpchgen-cli") -> Path:
    """Generate TPC-H at scale factor `sf` into `out`, partitioned for the executors.

    `partitions` P defaults to ``default_partitions`` (one per executor and NUMA node).
    Two Spark jobs: P + 1 tasks generate (tpchgen-cli's part i of orders and lineitem,
    and the small tables), then P tasks place partition i of orders and lineitem by
    order key (see the module docstring: tpchgen-cli's parts of the two tables need not
    cover the same orders). Cached (same sf, and same P where given: nothing to do),
    atomic (generated into a temporary sibling folder that is renamed into place), and a
    folder holding other data is refused with a one-line DataError. `out` must be
    visible at the same path to the driver and every executor (a local path in local
    mode, a shared file system on a cluster). Returns `out` as an absolute Path.
    """
    from operators.data import DataError
    from experiments.datagen import check_sf, fmt_sf, publish, staging_dir

    sf = check_sf(sf)
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise DataError(f"partitions must be a positive integer, got {partitions!r}")
    out = Path(out).expanduser().absolute()
    if _check_existing(out, sf, partitions):
        _say(progress, f"{out} already holds TPC-H SF {sf:g} in {read_spark_manifest(out)['partitions']} "
                       "partitions (cached)")
        return out
    spark = spark or spark_session(master)
    sc = spark.sparkContext
    parts = partitions or default_partitions(spark)

    tmp = staging_dir(out)
    sf_text = fmt_sf(sf)
    cfg = {"tmp": str(tmp), "partitions": parts, "sf": sf, "sf_text": sf_text, "tool": tool,
           "tool_hint": find_tool(tool)}
    t0 = time.monotonic()
    _say(progress, f"generating TPC-H SF {sf:g} in {parts} partitions into {out} "
                   f"({parts + 1} Spark tasks, master {sc.master}) ...")
    try:
        tmp.mkdir()
        n = parts + 1
        # parallelize(range(n), n) puts exactly element i in Spark partition i.
        rdd = sc.parallelize(range(n), n).mapPartitions(functools.partial(_datagen_task, cfg))
        sc.setJobDescription(f"bobox datagen SF {sf:g} x{parts}")
        try:
            infos = [json.loads(s) for s in rdd.collect()]
        except Exception as e:
            raise DataError(str(_job_error(e, "Spark datagen", _max_failures(spark)))) from None
        got = sorted(info["index"] for info in infos)
        if got != list(range(n)):
            raise DataError(f"Spark datagen returned pieces {got}, expected 0..{n - 1}")
        infos.sort(key=lambda info: info["index"])
        gen = infos[-1]["generator"]

        t1 = time.monotonic()
        plan = _plan_placement(tmp, parts)
        moved = {t: [j for j, s in enumerate(plan["place"][t]) if s["move"] is None] for t in PARTITIONED}
        _say(progress, f"generated in {t1 - t0:.1f} s; placing orders and lineitem by order key ({parts} Spark "
                       f"tasks; rows to rewrite: " + ", ".join(
                           f"{t} in {len(moved[t])} of {parts} partitions" for t in PARTITIONED) + ") ...")
        cfg.update(plan)
        rdd = sc.parallelize(range(parts), parts).mapPartitions(functools.partial(_place_task, cfg))
        sc.setJobDescription(f"bobox datagen SF {sf:g} x{parts}: placing by order key")
        try:
            placed = sorted((json.loads(s) for s in rdd.collect()), key=lambda info: info["index"])
        except Exception as e:
            raise DataError(str(_job_error(e, "Spark datagen", _max_failures(spark)))) from None
        if [info["index"] for info in placed] != list(range(parts)):
            raise DataError(f"Spark datagen placed partitions {[info['index'] for info in placed]}, "
                            f"expected 0..{parts - 1}")
        for t in PARTITIONED:
            generated = sum(info["rows"][t] for info in infos[:parts])
            kept = sum(info["rows"][t] for info in placed)
            if kept != generated:
                raise DataError(f"Spark datagen: {t} has {kept} rows after placing by order key, "
                                f"the generator wrote {generated}")
        tables = {}
        for t in PARTITIONED:
            part_rows = [info["rows"][t] for info in placed]
            tables[t] = {"rows": sum(part_rows), "part_rows": part_rows,
                         "files": [f"{t}/part-{i}.parquet" for i in range(parts)]}
        for t in REPLICATED:
            tables[t] = {"rows": infos[-1]["rows"][t], "files": [f"{t}.parquet"]}
        views = _write_views(tmp, parts)
        manifest = {
            "format": MANIFEST_FORMAT,
            "sf": sf,
            "partitions": parts,
            "co_partitioned_on": dict(KEY),
            "split_keys": plan["bounds"],
            "rewritten": {t: [info["index"] for info in placed if t in info["rewritten"]] for t in PARTITIONED},
            "replicated": list(REPLICATED),
            "generator": {"name": gen[0] if len(gen) > 1 else tool, "version": gen[-1] if gen else "?", "tool": tool},
            "command": [tool, "parquet", "-s", sf_text, "--parts", str(parts), "--part", "I"],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "hosts": sorted({info["host"] for info in infos}),
            "tables": tables,
            "views": views,
        }
        shutil.rmtree(tmp / "_work", ignore_errors=True)
        if not publish(tmp, out, MANIFEST, manifest, lambda: _check_existing(out, sf, partitions)):
            _say(progress, f"{out} was generated concurrently (kept that copy)")
            return out
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    summary = ", ".join(f"{t} {tables[t]['rows']}" for t in PARTITIONED + REPLICATED)
    _say(progress, f"done in {time.monotonic() - t0:.1f} s ({summary} rows)")
    return out


def _write_views(root: Path, parts: int) -> list[str]:
    """``_partitions/part-<i>/<table>.parquet``: relative links to partition i's parts and
    to the replicated tables. A view is a data folder ``operators.data`` reads as is."""
    views = []
    for i in range(parts):
        rel = f"{VIEWS}/part-{i}"
        v = root / rel
        v.mkdir(parents=True)
        for t in PARTITIONED:
            os.symlink(f"../../{t}/part-{i}.parquet", v / f"{t}.parquet")
        for t in REPLICATED:
            os.symlink(f"../../{t}.parquet", v / f"{t}.parquet")
        views.append(rel)
    return views


# =========================================================================== stage 2: execution
#
# The executor-side Scheduler -- protocol.
#
# * One Scheduler per PySpark Python worker process, created lazily by the first task
#   that needs one (``_executor_scheduler``), under ``_SCHED_LOCK``. A Python worker runs
#   one task at a time and, with ``spark.python.worker.reuse``, serves many tasks and jobs
#   in turn, so the Scheduler (its worker threads pinned per NUMA node, its node-local
#   packet pools) and the TableStore caches of the data it read outlive any one task.
#   ``spark_session`` sets ``spark.task.cpus`` to the executor's cores, so one task, thus
#   one Python worker and one Scheduler, is busy per executor at a time.
# * It is never shut down while the process lives: its worker threads are daemon
#   threads, idle ones sleep on their own semaphores (no CPU), and PySpark ends a worker
#   process with ``os._exit``. One exception: a task asking for other settings (policy,
#   threads per node, packet size). Tasks of one process are sequential, so the old
#   Scheduler then has no request of ours left; it is shut down (joined) and replaced.
# * A task that fails cancels the requests it submitted before raising, so that the
#   next attempt (often in the same process) does not compete with orphans.

_SCHED = None
_SCHED_KEY = None
_SCHED_LOCK = threading.Lock()


def _executor_scheduler(policy: str, threads_per_node: int | None, packet_bytes: int | None, task_cpus: int):
    """This process's Scheduler (see the protocol above). Without `threads_per_node`,
    the task's CPU share (``spark.task.cpus``) decides: the whole machine -> every CPU of
    every node; less -> that many threads spread over the nodes."""
    global _SCHED, _SCHED_KEY
    import topology

    from bobox_sched import Scheduler

    with _SCHED_LOCK:
        key = (policy, threads_per_node, packet_bytes, task_cpus)
        if _SCHED is not None and _SCHED_KEY == key:
            return _SCHED
        if _SCHED is not None:
            _SCHED.shutdown(wait=True, cancel=True)
            _SCHED = None
        topo = topology.probe()
        tpn = threads_per_node
        usable = sum(len(n.cpus) for n in topo.cpu_nodes)
        if tpn is None and task_cpus < usable:
            tpn = max(1, task_cpus // max(1, len(topo.cpu_nodes)))
        _SCHED = Scheduler(topology=topo, policy=policy, threads_per_node=tpn, packet_bytes=packet_bytes)
        _SCHED_KEY = key
        return _SCHED


def _to_ipc(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes):
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _fail(query: str, where: str, e: BaseException | str) -> RuntimeError:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {_first_line(e)}"
    return RuntimeError(f"{_TAG} query {query} {where}: {text}")


def _trace(cfg: dict, what: str, attempt: int) -> None:
    folder = os.environ.get(TRACE_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{cfg['run_id']}.{what}.attempt-{attempt}.pid-{os.getpid()}").touch()


def _injected(cfg: dict, query: str, part: int, attempt: int) -> bool:
    inj = cfg.get("inject")
    return bool(inj) and inj[0] == query and inj[1] == part and (inj[2] is None or attempt < inj[2])


# --------------------------------------------------------------------------- stage 2 input: any TPC-H folder
#
# A folder from ``spark_datagen`` is read through its stored partition views. Any other
# TPC-H folder (``bobox datagen``'s one file per table, folders of parts, or a Spark
# folder asked for another partition count) is split on the fly: the driver chooses P-1
# split keys that balance lineitem's rows (``plan_split``, from the footers alone), and
# the executor task that needs partition p writes p's view into a cache folder on its own
# host (``_split_view``): lineitem and orders rows of p's key range (files wholly inside
# the range linked, the overlapping row groups of the others written), the small tables
# linked. Views are named by a hash of the source files (path, size, mtime) and the split
# keys, so later runs (and the TableStore columns cached in reused Python workers) reuse
# them; a view whose source files changed since is removed when a new view is made.
#
# Protocol of the view cache, shared by the threads of a task (one per partition it
# needs), by the tasks of one host and by runs: a view appears only by the rename of a
# complete folder private to its maker (``.part-<p>.tmp-<pid>-<random>``), is never
# changed afterwards, and is removed only once its source files changed (then no run can
# ask for it again: the set id hashes the files' sizes and mtimes). Two makers of one
# view race harmlessly: the first rename wins, the other deletes its copy. The threads
# share no Python objects (each writes its own folder); pyarrow reads, filters and writes
# without the GIL, which is all the parallelism there is, so a free-threaded build needs
# nothing more.

VIEW_CACHE_ENV = "BOBOX_SPARK_VIEWS"
_SPLIT_FORMAT = 1


def view_cache_dir() -> Path:
    """Where executors keep on-the-fly partition views: ``$BOBOX_SPARK_VIEWS``, default
    ``~/.cache/bobox-sched/spark-views`` (on each executor's host)."""
    d = os.environ.get(VIEW_CACHE_ENV)
    return Path(d).expanduser() if d else Path.home() / ".cache" / "bobox-sched" / "spark-views"


def _fingerprint(files: dict) -> list:
    from operators.data import DataError

    out = []
    for t, paths in files.items():
        for p in paths:
            try:
                st = os.stat(p)
            except OSError as e:
                raise DataError(f"cannot stat Parquet file {p}: {e.strerror or e}") from None
            out.append([t, str(p), st.st_size, st.st_mtime_ns])
    return out


def stored_partitions(data) -> int | None:
    """The partition count of a folder written by ``spark_datagen``; None for any other
    TPC-H folder. DataError where `data` is neither (missing, or a table missing)."""
    from operators.data import find_tables

    data = Path(data).expanduser()
    if (data / MANIFEST).is_file():
        return int(read_spark_manifest(data)["partitions"])
    find_tables(data)
    return None


def data_sf(data) -> float | None:
    """The scale factor a manifest (``spark_datagen``'s or ``bobox datagen``'s) records."""
    from operators.data import read_manifest

    data = Path(data).expanduser()
    if (data / MANIFEST).is_file():
        return float(read_spark_manifest(data)["sf"])
    try:
        m = read_manifest(data)
        return None if m is None else float(m["sf"])
    except (BoboxError, OSError, ValueError, KeyError, TypeError):
        return None


def plan_split(data, parts: int, cache=None) -> dict:
    """Driver side: how to cut the TPC-H folder `data` into `parts` partitions by order
    key (see above). `cache`: the executors' view folder (default ``view_cache_dir()``
    on each executor)."""
    from operators.data import DataError, find_tables

    data = Path(data).expanduser().absolute()
    files = {t: [str(p.absolute()) for p in ps] for t, ps in find_tables(data).items()}
    groups = _key_groups(files["lineitem"], KEY["lineitem"], "lineitem")
    rows = sum(g.rows for g in groups)
    if rows < parts:
        raise DataError(f"table 'lineitem' in {data} has {rows} rows, too few for {parts} partitions")
    bounds = _balanced_bounds(groups, parts)
    fingerprint = _fingerprint(files)
    key = json.dumps([_SPLIT_FORMAT, fingerprint, bounds])
    return {"id": hashlib.sha256(key.encode()).hexdigest()[:20], "data": str(data), "bounds": bounds,
            "files": files, "fingerprint": fingerprint, "cache": str(cache) if cache else None}


def _split_view(split: dict, part: int) -> Path:
    """Executor side: partition `part`'s view folder (made here unless a view of the same
    source and split keys is there already)."""
    import pyarrow.parquet as pq

    root = Path(split["cache"]) if split["cache"] else view_cache_dir()
    home = root / split["id"]
    view = home / f"part-{part}"
    if view.is_dir():
        return view
    if _fingerprint(split["files"]) != split["fingerprint"]:
        raise RuntimeError(f"the files in {split['data']} changed while the run was starting")
    home.mkdir(parents=True, exist_ok=True)
    source = home / "source.json"
    if not source.is_file():
        _remove_stale_views(root, split["id"])
        tmp = home / f".source.json.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps({"data": split["data"], "fingerprint": split["fingerprint"],
                                   "split_keys": split["bounds"]}) + "\n")
        os.replace(tmp, source)
    tmp = home / f".part-{part}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        lo, hi = _span(split["bounds"], part)
        for t in PARTITIONED:
            files = [Path(f) for f in split["files"][t]]
            groups = _key_groups(files, KEY[t], t)
            whole, cut = _pick(groups, lo, hi)
            folder = tmp / t
            folder.mkdir()
            for fi in whole:
                os.symlink(files[fi], folder / f"part-{fi}.parquet")
            if cut or not whole:  # (an empty range still needs a file with the table's columns)
                _write_rows(files, cut, KEY[t], lo, hi, folder / "rows.parquet", pq.read_schema(files[0]),
                            max((g.rows for g in groups), default=1))
        for t, paths in split["files"].items():
            if t in PARTITIONED:
                continue
            single = Path(split["data"]) / f"{t}.parquet"
            if paths == [str(single)]:
                os.symlink(single, tmp / f"{t}.parquet")
            else:
                os.symlink(Path(split["data"]) / t, tmp / t)
        try:
            os.rename(tmp, view)
        except OSError:
            if not view.is_dir():  # else another task made the same view at the same time
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return view


def _remove_stale_views(root: Path, keep: str) -> None:
    """Remove the views under `root` whose source files changed or are gone."""
    for home in root.iterdir():
        if home.name == keep or home.name.startswith(".") or not home.is_dir():
            continue
        try:
            recorded = json.loads((home / "source.json").read_text())["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being made, or not ours
        for _, path, size, mtime in recorded:
            try:
                st = os.stat(path)
                if (st.st_size, st.st_mtime_ns) == (size, mtime):
                    continue
            except OSError:
                pass
            shutil.rmtree(home, ignore_errors=True)
            break


def _partition_dirs(cfg: dict, parts: list[int], threads: int) -> dict[int, Path]:
    """Executor side: the view folder of each partition in `parts` (on-the-fly views are
    made on `threads` threads: pyarrow reads, filters and writes without the GIL)."""
    split = cfg.get("split")
    if split is None:
        return {p: Path(cfg["data"]) / VIEWS / f"part-{p}" for p in parts}

    def one(p):
        try:
            return _split_view(split, p)
        except Exception as e:
            text = f"{type(e).__name__}: {_first_line(e)}" if type(e) is not RuntimeError else _first_line(e)
            raise RuntimeError(f"{_TAG} partition {p}: cannot split {split['data']} by order key: {text}") from e

    if len(parts) == 1 or threads <= 1:
        return {p: one(p) for p in parts}
    with ThreadPoolExecutor(min(len(parts), threads)) as pool:
        return dict(zip(parts, pool.map(one, parts)))


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
        _trace(cfg, f"part-{part}", attempt)
    views = _partition_dirs(cfg, here, ctx.cpus())
    sched = _executor_scheduler(cfg["policy"], cfg["threads_per_node"], cfg["packet_bytes"], ctx.cpus())
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
                raise _fail(query, f"partition {part}", e) from e
        for query, part, h in handles:
            try:
                table = h.result()
            except Exception as e:
                raise _fail(query, f"partition {part}", e) from e
            if _injected(cfg, query, part, attempt):
                raise _fail(query, f"partition {part}", f"injected failure (attempt {attempt})")
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
            raise _fail(query, "combine", f"two partial results for partition {part} "
                                          f"(attempts {seen[part][0]} and {attempt})")
        seen[part] = (attempt, host, ipc)
    sched = _executor_scheduler(cfg["policy"], cfg["threads_per_node"], cfg["packet_bytes"], ctx.cpus())
    handles = []
    try:
        for query, seen in got.items():
            missing = sorted(set(range(parts)) - set(seen))
            if missing:
                raise _fail(query, "combine", f"no partial result for partition {missing[0]}")
            try:
                partials = pa.concat_tables([_from_ipc(seen[p][2]) for p in range(parts)])
                plan = tpch_partial.combine_plan(query, partials, cfg["data"], 1)
                handles.append((query, sched.submit(plan)))
            except Exception as e:
                raise _fail(query, "combine", e) from e
        for query, h in handles:
            try:
                table = h.result()
            except Exception as e:
                raise _fail(query, "combine", e) from e
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


def parse_injection(spec: str | None, queries: list[str], partitions: int | None) -> tuple | None:
    """``QUERY:PARTITION[:N|all]`` -> (query, partition, N failing attempts or None = all).
    `partitions` None: the partition number is checked later."""
    if not spec:
        return None
    parts = spec.strip().lower().split(":")
    if len(parts) not in (2, 3):
        raise BoboxError(f"bad --inject-failure {spec!r} (expected QUERY:PARTITION[:ATTEMPTS|all], e.g. q3:1)")
    query, part = parts[0], parts[1]
    if query not in queries:
        raise BoboxError(f"--inject-failure names query {query!r}, which is not run (running: {', '.join(queries)})")
    if not part.isdigit() or (partitions is not None and int(part) >= partitions):
        raise BoboxError(f"--inject-failure partition must be "
                         f"{'a number' if partitions is None else f'0..{partitions - 1}'}, got {parts[1]!r}")
    n = 1
    if len(parts) == 3:
        if parts[2] == "all":
            n = None
        elif parts[2].isdigit() and int(parts[2]) > 0:
            n = int(parts[2])
        else:
            raise BoboxError(f"bad --inject-failure attempts {parts[2]!r} (a positive number or 'all')")
    return (query, int(part), n)


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
    `view_cache` (default ``view_cache_dir()``; see "stage 2 input" above).

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
    slots = _slots(spark)
    reducers = min(len(names), slots)
    fused = slots == 1 if fuse is None else bool(fuse)
    shape = "1 fused task" if fused else f"{parts} partial tasks, {reducers} combine task(s)"
    sf = data_sf(data)
    _say(progress, f"{' '.join(names)} over {parts} partitions"
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
        raise _job_error(e, "Spark run", _max_failures(spark)) from None
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
        _say(progress, "retried tasks: " + ", ".join(
            f"partition {p} (accepted attempt {max(run.attempts[(q, p)][0] for q in names if (q, p) in run.attempts)})"
            for p in sorted({p for _, p in run.retried})))
    _say(progress, f"done in {wall:.3f} s")
    return run


def spark_run(queries, data, output=None, master: str = DEFAULT_MASTER, policy: str = "bobox",
              threads_per_node: int | None = None, packet_bytes: int | None = None,
              inject_failure: str | None = None, spark=None, progress: bool = False, fuse: bool | None = None,
              partitions: int | None = None, view_cache=None) -> dict:
    """``spark_run_detailed(...).tables``: {query: pyarrow Table}, in the order given."""
    return spark_run_detailed(queries, data, output, master, policy, threads_per_node, packet_bytes,
                              inject_failure, spark, progress, fuse, partitions, view_cache).tables


# =========================================================================== stage 3: results

REPORT_COLUMNS = ("experiment", "host", "run_id", "series", "x", "metric", "value", "repeat")
REPORT_MANIFEST = "_bobox_report.json"
SUMMARY_COLUMNS = ("experiment", "series", "x", "metric", "median", "min", "max", "n", "runs", "hosts")


def _experiment_csvs(result_dirs) -> dict[tuple, list[Path]]:
    """{header: [files]}: every ``*.csv`` of the folders (``summary.csv`` excepted),
    grouped by their header line (CSV files are read by position, so each header is
    read with its own schema)."""
    from operators.data import DataError

    groups: dict[tuple, list[Path]] = {}
    dirs = [Path(d).expanduser().absolute() for d in result_dirs]
    if not dirs:
        raise DataError("no result folder given")
    for d in dirs:
        if not d.is_dir():
            raise DataError(f"result folder {d} does not exist" if not d.exists() else f"{d} is not a folder")
        for f in sorted(d.glob("*.csv")):
            if f.name == "summary.csv":
                continue
            with open(f, newline="") as fh:
                header = tuple(h.strip() for h in next(csv.reader(fh), []))
            missing = [c for c in REPORT_COLUMNS if c not in header]
            if missing:
                raise DataError(f"{f} lacks column {missing[0]!r} (expected at least: {', '.join(REPORT_COLUMNS)})")
            groups.setdefault(header, []).append(f)
    if not groups:
        raise DataError(f"no experiment CSV files in {', '.join(str(d) for d in dirs)}")
    return groups


def spark_report(result_dirs, out, master: str = DEFAULT_MASTER, spark=None, progress: bool = True) -> dict:
    """Summarize experiment results of many runs and hosts with Spark.

    Reads every ``<experiment>.csv`` of `result_dirs` (long format: at least
    experiment, host, run_id, series, x, metric, value, repeat) into one DataFrame;
    per (experiment, series, x, metric): median, min, max of value, n values, distinct
    runs ((host, run_id) pairs) and hosts. Writes ``out/summary.csv`` and puts the
    section "## Summary of N runs on M hosts" (one table per experiment) into
    ``out/report.md``, replacing that section where an earlier report left one.
    Returns {"runs", "hosts", "files", "rows", "experiments", "summary_csv", "report"}.
    """
    from operators.data import DataError
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from experiments.cli.outputs import ResultSet, check_output_dir

    groups = _experiment_csvs(result_dirs)
    out = check_output_dir(out, "report output")  # before the job, not after it
    spark = spark or spark_session(master)
    frames = []
    for header, files in groups.items():
        schema = StructType([StructField(h, StringType()) for h in header])
        df = spark.read.csv([str(f) for f in files], header=True, schema=schema, mode="FAILFAST")
        frames.append(df.select(
            F.col("experiment"), F.col("host"), F.col("run_id"), F.col("series"), F.col("x"), F.col("metric"),
            F.expr("try_cast(value AS double)").alias("value"),  # ANSI mode: NULL, not an error
        ))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    median = F.median("value") if hasattr(F, "median") else F.percentile_approx("value", 0.5)
    summary = (
        df.where(F.col("value").isNotNull())
        .groupBy("experiment", "series", "x", "metric")
        .agg(median.alias("median"), F.min("value").alias("min"), F.max("value").alias("max"),
             F.count("value").alias("n"), F.countDistinct("host", "run_id").alias("runs"),
             F.countDistinct("host").alias("hosts"))
        .orderBy("experiment", "series", "metric", F.expr("try_cast(x AS double)"), "x")
    )
    totals = df.agg(F.countDistinct("host", "run_id").alias("runs"), F.countDistinct("host").alias("hosts"),
                    F.count(F.lit(1)).alias("rows"), F.sum(F.col("value").isNull().cast("int")).alias("bad"))
    spark.sparkContext.setJobDescription("bobox spark report")
    try:
        rows = [r.asDict() for r in summary.collect()]
        tot = totals.collect()[0].asDict()
    except Exception as e:
        procs.reraise_interrupt(e)
        raise DataError(f"cannot read the experiment CSVs: {_first_line(e)}") from None
    if tot["bad"]:
        _say(progress, f"{tot['bad']} rows without a numeric value left out")

    def write_summary(tmp):
        with open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(SUMMARY_COLUMNS)
            for r in rows:
                w.writerow([r[c] for c in SUMMARY_COLUMNS])

    n_files = sum(len(v) for v in groups.values())
    section = _report_section(rows, tot, n_files, result_dirs)
    report = out / "report.md"
    old = report.read_text() if report.is_file() else "# Experiments\n"
    # Each file atomically, then a manifest: a full disk never leaves a set that looks
    # complete (experiments.cli.outputs.ResultSet).
    with ResultSet(out, REPORT_MANIFEST, what="report output") as rs:
        summary_csv = rs.write("summary.csv", write_summary)
        rs.write_text("report.md", _replace_section(old, section))
    experiments = sorted({r["experiment"] for r in rows})
    _say(progress, f"summarized {tot['rows']} measurements of {len(experiments)} experiment(s) from "
                   f"{tot['runs']} runs on {tot['hosts']} hosts into {summary_csv} and {report}")
    return {"runs": tot["runs"], "hosts": tot["hosts"], "files": n_files, "rows": tot["rows"],
            "experiments": experiments, "summary_csv": str(summary_csv), "report": str(report)}


def _num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _report_section(rows: list[dict], tot: dict, n_files: int, result_dirs) -> str:
    heading = f"## Summary of {tot['runs']} runs on {tot['hosts']} hosts"
    lines = [heading, "",
             f"Collected by `bobox spark report` from {n_files} CSV files ({tot['rows']} measurements) in "
             + ", ".join(f"`{d}`" for d in result_dirs) + ". Per point: median, min and max over every "
             "repeat of every run; n = measurements, runs = distinct (host, run id), hosts = distinct hosts.", ""]
    by_exp: dict[str, list[dict]] = {}
    for r in rows:
        by_exp.setdefault(r["experiment"], []).append(r)
    for exp, rs in by_exp.items():
        lines += [f"### {exp}", "", "| series | x | metric | median | min | max | n | runs | hosts |",
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in rs:
            lines.append(f"| {r['series']} | {r['x']} | {r['metric']} | {_num(r['median'])} | {_num(r['min'])} | "
                         f"{_num(r['max'])} | {r['n']} | {r['runs']} | {r['hosts']} |")
        lines.append("")
    return "\n".join(lines)


def _replace_section(text: str, section: str) -> str:
    """`text` with its "## Summary of ..." section (up to the next "## " heading)
    replaced by `section`, or `section` appended."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("## Summary of ")), None)
    if start is None:
        body = text.rstrip("\n")
        return (body + "\n\n" if body else "") + section.rstrip("\n") + "\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    new = lines[:start] + section.rstrip("\n").splitlines() + ([""] + lines[end:] if end < len(lines) else [])
    return "\n".join(new) + "\n"


# =========================================================================== overhead bench


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
        _say(progress, "warming up both paths (kernels, columns, Python workers) ...")
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
            _say(progress, f"run {i + 1}/{repeat}: bobox run {a:.3f} s, spark {b:.3f} s")
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
