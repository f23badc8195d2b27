"""Worker threads: each runs ``policy.next_task`` then ``run_task``, forever.

Fields are owned by the worker's own thread except where noted: the immediate list
``imm`` is appended to and popped at its newest end only by its owner, and popped at the
oldest end by thieves of the same node (``collections.deque`` makes each of those one
atomic operation); ``park`` is the worker's binary semaphore, released by exactly one
waker per sleep (the one that took the worker out of its node's idle list).

``released_ns`` is the time this worker spent in calls that release the GIL (nogil
kernels, large numpy copies), added by the operator library's timing wrappers while
they are switched on (``operators.released``); like every metric here, only the
worker's own thread writes it, so it needs no lock (with or without the GIL: one
writer, and readers only sum snapshots). ``current_worker()`` lets such code, which has
no context argument, find the worker of the thread it runs on.

A policy's ``next_task`` that raises (a policy bug) must not kill the worker, nor make it
spin: the worker warns once (a :class:`~bobox_sched.errors.SchedulerWarning`) and calls
it again after a bounded exponential back-off (``BACKOFF_START_S`` doubling up to
``BACKOFF_MAX_S``) until it returns; once the scheduler is stopping it ends instead (a
failing ``next_task`` cannot return the None that ends it, and shutdown waits for it).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque

from topology import PinningWarning, current_mask, numa_available, pin_to_cpus, prefer_node
from topology.memory import live_nodes

from bobox_sched.core.lifecycle import RuntimeThread
from bobox_sched.core.operator import Context

# Back-off of a worker whose policy's next_task raised (module doc). The first retry waits
# 1 ms: a failure that came from a transient race is retried almost at once, far below
# anything a person notices. Each further failure in a row doubles the wait, up to 100 ms,
# the balancer's period: a policy that keeps failing then costs about ten calls a second
# per worker instead of a core, and a worker in back-off notices a shutdown within that.
BACKOFF_START_S = 0.001
BACKOFF_MAX_S = 0.1
_sleep = time.sleep  # the back-off's sleep (tests replace it with a clock of their own)

_current = threading.local()  # .worker: the Worker whose thread this is (set once, by it)


def thread_schedstat(native_id: int) -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one) of thread `native_id` of this
    process, from /proc/self/task/<tid>/schedstat; (0, 0) where the kernel lacks it."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            a, b, _ = f.read().split()
        return int(a), int(b)
    except (OSError, ValueError):
        return 0, 0


def current_worker():
    """The :class:`Worker` running on the calling thread, or None on any other thread."""
    return getattr(_current, "worker", None)


class Worker:
    def __init__(self, scheduler, wid: int, node=None, cpus=None):
        self.id = wid
        self.scheduler = scheduler
        self.node = node  # the policy's per-node state (None: not bound to a node)
        self.node_id = node.os_index if node is not None else None
        self.cpus = tuple(cpus) if cpus else None  # CPU set to pin to, or None
        self.imm = deque()  # immediate tasks (operators), newest on the right
        self.last_req = None  # the request this worker ran last (locality step 2)
        self.park = threading.Lock()  # binary semaphore: held = no wake-up pending
        self.park.acquire()
        self.ctx = Context(self, scheduler)
        self.locality_sampler = scheduler._locality_sampler
        self.pinned_mask: set | None = None
        # metrics, written by this thread only
        self.steps = [0] * 6  # index 1..5 = locality step that found the task / slept
        self.last_step = 0  # step that found the task being run (set by the policy)
        self.tasks = 0
        self.steals = 0
        self.sleeps = 0
        self.wakeups = 0
        self.busy_ns = 0
        self.released_ns = 0  # part of busy_ns spent with the GIL released (module doc)
        self.loc_seen = 0  # packets taken (locality sampling counts them)
        self.loc_samples = 0
        self.loc_pages = 0
        self.loc_local = 0
        self.stolen_from = -1  # the victim of the last steal (set by policies.base.steal)
        self.trace = None  # this worker's trace buffer while the run is traced (bobox_sched/trace)
        self.thread = RuntimeThread(
            self._main,
            f"bobox-{scheduler.policy.name}-w{wid}" + (f"-n{self.node_id}" if node is not None else ""),
            group=getattr(scheduler, "_thread_group", None),
        )

    def start(self) -> None:
        self.thread.start()

    def _bind_to_node(self) -> None:
        """Pin to the node's CPUs and prefer its memory. Never fatal: a worker that
        cannot be pinned still schedules correctly (with less locality), and says so."""
        try:
            if self.cpus:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", PinningWarning)
                    self.pinned_mask = pin_to_cpus(self.cpus)
                if caught:
                    self.scheduler._warn(str(caught[0].message), PinningWarning)
                # Only real nodes have memory to prefer (a topology may be a captured or
                # a virtual one).
                if self.node_id is not None and numa_available() and self.node_id in live_nodes():
                    prefer_node(self.node_id)
            else:
                self.pinned_mask = current_mask()
        except Exception as e:  # noqa: BLE001 - see docstring
            self.pinned_mask = current_mask()
            self.scheduler._warn(f"worker {self.id}: could not bind to node {self.node_id}: {e}", PinningWarning)

    def _main(self) -> None:
        _current.worker = self
        self._bind_to_node()
        next_task = self.scheduler.policy.next_task
        run_task = self.scheduler.policy.run_task
        if self.trace is not None:
            self._main_traced(next_task, run_task)
            return
        if not self.scheduler.task_stats:
            self._main_lean(next_task, run_task)
            return
        clock = time.perf_counter_ns
        wid = self.id
        while True:
            try:
                task = next_task(self)
            except Exception as e:  # noqa: BLE001 - a policy bug must not kill the worker
                task = self._retry_next_task(next_task, e)
            if task is None:
                return
            self.tasks += 1
            req = task.req
            req.wsteps[wid][self.last_step] += 1  # this worker's row: no other writer
            t0 = clock()
            try:
                run_task(self, task)
            except BaseException as e:  # noqa: BLE001 - a runtime bug must not kill the worker
                req.fail(e, task)  # its request fails with the error; the others carry on
            self.busy_ns += clock() - t0
            # Drop our references before possibly sleeping in next_task: a sleeping
            # worker must not pin the last request's operators and packets.
            task = req = None

    def _main_traced(self, next_task, run_task) -> None:
        """The loop of a traced run (``Scheduler(trace=...)``): ``_main``'s steps and
        counters, plus one record per task in this worker's own trace buffer
        (``bobox_sched/trace/recorder.py`` states what and its protocol). Chosen once at
        the thread's start: a run without a tracer never enters it. ``t0``/``t1`` are
        the clock reads that ``busy_ns`` sums, so the trace's per-worker busy time is
        the stats' busy time exactly."""
        clock = time.perf_counter_ns
        wid = self.id
        tr = self.trace
        tasks, sleeps, memory = tr.tasks, tr.sleeps, tr.memory
        totals = self.scheduler.bytes
        from bobox_sched.trace.recorder import MEMORY_SAMPLE_NS

        while True:
            s0 = self.sleeps
            tn = clock()
            try:
                task = next_task(self)
            except Exception as e:  # noqa: BLE001 - a policy bug must not kill the worker
                task = self._retry_next_task(next_task, e)
            if task is None:
                return
            self.tasks += 1
            req = task.req
            step = self.last_step
            req.wsteps[wid][step] += 1  # this worker's row: no other writer
            victim = self.stolen_from if step == 4 else -1
            ports = getattr(task, "inq", ())
            rows0 = bytes0 = 0
            for q in ports:
                rows0 += getattr(q, "rows", 0)
                bytes0 += getattr(q, "bytes", 0)
            rel0 = self.released_ns
            t0 = clock()
            if self.sleeps != s0:
                sleeps.append((tn, t0))
            try:
                run_task(self, task)
            except BaseException as e:  # noqa: BLE001 - a runtime bug must not kill the worker
                req.fail(e, task)
            t1 = clock()
            self.busy_ns += t1 - t0
            rows, nbytes = -rows0, -bytes0
            for q in ports:
                rows += getattr(q, "rows", 0)
                nbytes += getattr(q, "bytes", 0)
            tasks.append((t0, t1, task.name, req.id, step, rows, nbytes, self.released_ns - rel0, victim))
            if t1 >= tr.next_sample:
                tr.next_sample = t1 + MEMORY_SAMPLE_NS
                memory.append((t1, *totals.held_by_request()))
            task = req = ports = None

    def _main_lean(self, next_task, run_task) -> None:
        """The loop of ``Scheduler(task_stats=False)``: no clock read and no per-request
        locality-step counter per task (``busy_s``, a request's ``tasks``/``steps`` and
        the serial fraction then read 0; the worker's own counters, which the policy
        keeps, go on). Two ``perf_counter_ns`` calls and a nested list
        increment are about 0.15 us of the ~1.2 us a trivial task costs
        (``bobox bench overhead`` runs both loops side by side)."""
        while True:
            try:
                task = next_task(self)
            except Exception as e:  # noqa: BLE001 - a policy bug must not kill the worker
                task = self._retry_next_task(next_task, e)
            if task is None:
                return
            self.tasks += 1
            try:
                run_task(self, task)
            except BaseException as e:  # noqa: BLE001 - a runtime bug must not kill the worker
                task.req.fail(e, task)
            task = None

    def _retry_next_task(self, next_task, e: Exception):
        """``next_task`` raised `e`: warn (once for this run of failures), then call it
        again after a back-off that doubles from BACKOFF_START_S up to BACKOFF_MAX_S
        until it returns; returns what it returned. None (the worker ends) once the
        scheduler is stopping (module doc). The worker loop itself pays nothing for this:
        the failures are counted here, not per task."""
        self.scheduler._warn(f"worker {self.id}: {type(e).__name__} while looking for work: {e} "
                             f"(retrying with a back-off of up to {BACKOFF_MAX_S * 1e3:.0f} ms)")
        del e  # its traceback holds the policy's frames
        delay = BACKOFF_START_S
        while True:
            if self.scheduler._stopping:
                return None
            _sleep(delay)
            delay = min(2 * delay, BACKOFF_MAX_S)
            try:
                return next_task(self)
            except Exception:  # noqa: BLE001 - the same policy bug, most likely: warned already
                pass
