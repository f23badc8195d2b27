"""What the Spark pipeline tells its user: progress lines on the driver, and failures
as they travel from an executor task to the driver as one line.

Executor-side failures are raised as ``RuntimeError("bobox-spark: ...")`` (``fail`` for
a query's partial or combine, ``TAG`` followed by the text elsewhere); Spark wraps them
into its job error with stack traces of both JVM and Python. When Spark gives up, the
driver finds that text in the job's error and raises a one-line ``BoboxError`` naming
the query (``job_error``). The tag's format and its parser live together here because
stage 1 (``datagen``), stage 2's input (``views``) and its execution (``run``) all raise
tagged errors that one parser reads back.
"""

from __future__ import annotations

import re
import sys

from bobox_sched.core.errors import BoboxError
from experiments.cli import procs

# The text executor-side failures start with; the driver looks for it in Spark's errors.
TAG = "bobox-spark:"
_FAIL_RE = re.compile(r"bobox-spark: query (\S+) (partition \d+|combine): ([^\n\r]*)")
_TAG_RE = re.compile(r"bobox-spark: ([^\n\r]*)")


def say(progress: bool, msg: str) -> None:
    if progress:
        print(f"spark: {msg}", file=sys.stderr, flush=True)


def first_line(e: BaseException) -> str:
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()
    return type(e).__name__


def fail(query: str, where: str, e: BaseException | str) -> RuntimeError:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {first_line(e)}"
    return RuntimeError(f"{TAG} query {query} {where}: {text}")


def job_error(e: BaseException, what: str, attempts: int | None = None) -> BoboxError:
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
    return BoboxError(f"{what} failed{tries}: " + (f"{py[-1][0]}: {py[-1][1].strip()}" if py else first_line(e)))
