"""The Spark session the pipeline runs in, and what it says about the cluster.

``parse_master`` checks a master URL (and gives local masters retries),
``spark_session`` builds the one session of this process with the settings the
executors' Schedulers need (one task per executor, reused Python workers running the
driver's interpreter, quiet logs: ``spark-log4j2.properties`` next to this module), and
``slots``, ``default_partitions`` and ``max_failures`` read the cluster's shape back
from a session. Every stage starts here, so this module imports no other stage.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path

from bobox_sched.core.errors import BoboxError
from experiments.cli import procs
from experiments.spark.messages import first_line

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
LOG4J_CONFIG = Path(__file__).resolve().parent / "spark-log4j2.properties"

DEFAULT_MASTER = "local[*]"
# Attempts per task before Spark gives up on the job: Spark's own default
# (spark.task.maxFailures), applied to local masters too.
DEFAULT_MAX_FAILURES = 4


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


# The value spark_session last wrote to PYSPARK_PYTHON when it was not the user's (one
# slot; read and written by spark_session only, which runs on the driver's main thread).
_exported_python: list[str | None] = [None]


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
    env_python = os.environ.get("PYSPARK_PYTHON")
    if env_python is not None and env_python == _exported_python[0]:
        env_python = None  # our own export for an earlier session, not the user's choice
    user_python = env_python or (conf or {}).get("spark.pyspark.python")
    if user_python:
        settings["spark.pyspark.python"] = str(user_python)
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    # SparkContext reads the workers' interpreter from this variable, not from the conf.
    # What we put there is remembered, so that a later session of this process without a
    # choice of interpreter does not take it for the user's.
    python = settings["spark.pyspark.python"]
    if python != env_python:
        os.environ["PYSPARK_PYTHON"] = python
        _exported_python[0] = python
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
        raise BoboxError(f"cannot start Spark with master {url}: {first_line(e)}") from None
    return spark


def slots(spark) -> int:
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
    return slots(spark) * nodes


def max_failures(spark) -> int:
    """Attempts Spark makes per task: F of ``local[N,F]``, else spark.task.maxFailures
    (plain ``local[N]``: 1)."""
    sc = spark.sparkContext
    m = re.match(r"^local\[\s*[\d*]+\s*(?:,\s*(\d+)\s*)?\]$", sc.master)
    if m:
        return int(m.group(1) or 1)
    return int(sc.getConf().get("spark.task.maxFailures", str(DEFAULT_MAX_FAILURES)))
