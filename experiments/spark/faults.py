"""Failures on purpose, and the trace that shows them retried.

``parse_injection`` reads ``--inject-failure QUERY:PARTITION[:N|all]`` on the driver;
``injected`` tells a partial task on the executor to fail that query's attempt; with
``TRACE_ENV`` set in the executors' environment, ``trace`` leaves one marker file per
task attempt, so that tests see a failed task really run again. These are one concept
-- making a run fail and watching Spark's retries -- apart from running a query, which
only asks them (``run``).
"""

from __future__ import annotations

import os
from pathlib import Path

from bobox_sched.core.errors import BoboxError

# Executors write one empty marker file per task attempt into this folder when the
# variable is set in their environment (spark.executorEnv.BOBOX_SPARK_TRACE_DIR): tests
# check with it that a failed task really ran again.
TRACE_ENV = "BOBOX_SPARK_TRACE_DIR"


def trace(cfg: dict, what: str, attempt: int) -> None:
    folder = os.environ.get(TRACE_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{cfg['run_id']}.{what}.attempt-{attempt}.pid-{os.getpid()}").touch()


def injected(cfg: dict, query: str, part: int, attempt: int) -> bool:
    inj = cfg.get("inject")
    return bool(inj) and inj[0] == query and inj[1] == part and (inj[2] is None or attempt < inj[2])


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
