"""What a traced run records: one buffer per worker, and the few events of other threads.

``Scheduler(trace=...)`` makes a :class:`Tracer`. Its workers then run the traced loop
(``core/worker.py``: chosen once when a worker thread starts, so a run without a tracer
runs the plain loop and pays nothing per task) and append one record per task to their
own :class:`WorkerTrace`. Everything is in ``perf_counter_ns`` of this process;
``chrome.py`` turns the records into the Chrome trace event format.

Records:

* a worker's **task** (``WorkerTrace.tasks``): ``(t0, t1, name, request id, locality
  step, rows taken, bytes taken, ns with the GIL released, victim)``, where ``t0``/``t1``
  are the very clock reads that ``busy_s`` sums (so a trace's per-worker busy time equals
  the scheduler's stats to the nanosecond), the step is the policy's ``last_step`` (4: a
  steal, and ``victim`` is the worker it was stolen from; -1 otherwise), the rows and
  bytes are those of the packets the task popped from its inputs (``Packet.nrows`` and
  ``Packet.nbytes``, counted by ``port.CountingPort``, the core policies' ports while
  tracing; 0 where a policy queues input elsewhere), and the released time is the
  worker's ``released_ns`` growth over the task (counted while ``operators.released``
  timing is on; 0 otherwise);
* a worker's **sleep** (``WorkerTrace.sleeps``): ``(t0, t1)`` of a ``next_task`` call
  in which the worker slept at least once (its ``sleeps`` counter grew);
* a worker's **memory sample** (``WorkerTrace.memory``): ``(t, bytes held, {request id:
  bytes held})``, taken after a task when ``MEMORY_SAMPLE_NS`` passed since the
  worker's last sample (the packet bytes held, summed lock-free as ``ByteTotals`` does
  for its peak);
* a **balancer action** (``Tracer.actions``): ``(t, "migrate" | "share", request id,
  from node, to node)``;
* a **request** (``Tracer.requests``): ``request id -> [name, submitted, ended, state]``.

Protocol (who touches what, when):

* a ``WorkerTrace`` is appended to only by its worker's thread. Nobody else reads it
  while that thread runs: ``Tracer.write``/``chrome.document`` read it once the workers
  have been joined (``Scheduler.shutdown(wait=True)`` writes the file after joining them;
  a join orders everything the thread did before everything after it, with or without
  the GIL);
* ``actions`` and ``requests`` are written by any thread (the balancer, a submitting
  thread, the thread that ends a request) under ``_lock``, a plain lock held for one
  append or one store; never taken from ``__del__`` or a weakref callback;
* ``workers`` is filled once, before any worker thread starts (``attach``).
"""

from __future__ import annotations

import os
import threading
import time

# How often a worker samples the packet bytes held while tracing: every 10 ms of its own
# time at most. A sample walks the live request accounts (~1 us for the mix's 16); at 10 ms
# a timeline shows the memory of a 100 ms request as ten steps, and a 10 s run's trace
# gets ~1000 counter events per worker.
MEMORY_SAMPLE_NS = 10_000_000


class WorkerTrace:
    """One worker's records (module doc); written by that worker's thread only."""

    __slots__ = ("wid", "node", "name", "tasks", "sleeps", "memory", "next_sample")

    def __init__(self, wid: int, node, name: str):
        self.wid = wid
        self.node = node  # the worker's NUMA node (None: not bound to one)
        self.name = name
        self.tasks: list = []
        self.sleeps: list = []
        self.memory: list = []
        self.next_sample = 0


class Tracer:
    """The records of one traced run (module doc). ``path``: where
    ``Scheduler.shutdown`` writes the Chrome trace (None: the caller calls
    :meth:`write`)."""

    def __init__(self, path=None, label: str | None = None):
        self.path = None if path is None else os.fspath(path)
        self.label = label
        self.t0 = time.perf_counter_ns()
        self.wall0 = time.time()
        self.workers: list[WorkerTrace] = []
        self.actions: list = []
        self.requests: dict = {}
        self.meta: dict = {}
        self.window_ns: int | None = None  # begin_window(): records that ended before it are left out
        self.window_hooks: list = []  # called by begin_window (a domain front forwards it)
        self.parts: list = []  # [(domain, its Chrome trace)]: a domain front's, merged by document()
        self._lock = threading.Lock()

    # -- set-up (before the workers start) ------------------------------------------------
    def attach(self, workers, policy: str, meta: dict | None = None) -> None:
        """One buffer per worker (each worker keeps its own as ``worker.trace``)."""
        self.workers = []
        for w in workers:
            wt = WorkerTrace(w.id, w.node_id, w.thread.name)
            w.trace = wt
            self.workers.append(wt)
        self.meta = {"policy": policy, "pid": os.getpid(), **(meta or {})}

    def begin_window(self, ns: int | None = None) -> None:
        """Leave out of the written trace what ended before now (or `ns`, a
        ``perf_counter_ns`` reading: a front passes its own to its domains), and count
        its times from then. One store by the caller's thread; the workers never read it
        (the document is made after they were joined), so recording goes on unchanged.
        The ``window_hooks`` (a domain front's) are called with the reading."""
        self.window_ns = time.perf_counter_ns() if ns is None else int(ns)
        for hook in self.window_hooks:
            hook(self.window_ns)

    # -- events of other threads ------------------------------------------------------------
    def request_submitted(self, rid: int, name: str) -> None:
        with self._lock:
            self.requests[rid] = [name, time.perf_counter_ns(), None, None]

    def request_ended(self, rid: int, state: str) -> None:
        t = time.perf_counter_ns()
        with self._lock:
            rec = self.requests.get(rid)
            if rec is not None and rec[2] is None:
                rec[2], rec[3] = t, state

    def action(self, kind: str, rid: int, src, dst) -> None:
        t = time.perf_counter_ns()
        with self._lock:
            self.actions.append((t, kind, rid, src, dst))

    # -- output ---------------------------------------------------------------------------
    def document(self) -> dict:
        """The Chrome trace of the records so far (read them only once the workers
        have been joined: module doc)."""
        from bobox_sched.trace.chrome import document, merge

        if self.parts:
            return merge(self)
        return document(self)

    def write(self, path=None) -> str:
        """Write the Chrome trace JSON to `path` (default ``self.path``), atomically."""
        from bobox_sched.trace.chrome import write

        target = os.fspath(path) if path is not None else self.path
        if target is None:
            raise ValueError("no path to write the trace to")
        write(self.document(), target)
        return target


def check_trace_path(path) -> str:
    """`path` as a string if a trace file can be created there (its folder exists and is
    writable, and it is not a folder); a ``ValueError`` of one line otherwise, before any
    work starts."""
    p = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(p)
    if os.path.isdir(p):
        raise ValueError(f"trace {path}: is a folder")
    if not os.path.isdir(folder):
        raise ValueError(f"trace {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"trace {path}: folder {folder} is not writable")
    return os.fspath(path)


__all__ = ["MEMORY_SAMPLE_NS", "Tracer", "WorkerTrace", "check_trace_path"]
