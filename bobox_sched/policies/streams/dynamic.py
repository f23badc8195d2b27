"""Policy ``streams``: the dynamic threading model of IBM Streams 4.2 (Schneider & Wu,
*Low-Synchronization, Mostly Lock-Free, Elastic Scheduling for Streaming Runtimes*).

Any scheduler thread may execute any operator input port. Each port has a bounded SPSC
queue guarded by a producer and a consumer try-lock (``core.port.Port``, the paper's SPSCEnforcer);
free ports wait on ``freePorts``, an LRU free list. A sender pushes into the receiving
port's queue; when the push fails (the queue is full, or another producer holds it) the
sender executes that port itself (reSchedule), so no thread waits for another. The
number of scheduler threads is fixed (``threads=N``, "dynamic static") or adapted every
period to the measured throughput (``elastic=True``, "dynamic elastic", Fig. 7,
``elastic.py``). Use it as::

    Scheduler(policy="streams", threads=8)
    Scheduler(policy="streams", elastic=True, min_level=1, max_level=16, period_s=10)
    Scheduler(policy="streams", model="manual")      # or "dedicated": the comparisons

The algorithms, in the figures' step order (names are the paper's):

``schedule()`` (Fig. 3) is the worker loop (``worker.py``): ``next_task`` is
``findWorkBlocking`` and returns a port whose consumer lock this thread holds, checked out
of ``freePorts``, with the popped tuple in ``worker.item``; ``run_task`` executes it, drains
the same port (checking ``suspended``/``shutdown``/``portsClosed`` after each further
tuple; at most one queue's worth, [OSS]), unlocks and pushes the port at the tail
(``run_port``).

``findWorkBlocking()`` (Fig. 4): until ``shutdown`` or ``portsClosed``: suspend if told
to, mark the thread ``active``, ``findWorkNonBlocking`` (``streams_ports``), else
``block(delay)`` on the thread's condition variable with the delay growing tenfold from
1 ns up to ``DELAY_THRESHOLD``.

``push()`` / ``reSchedule()`` (Fig. 5): ``deliver`` pushes; on failure, reSchedule loops
while the push fails and the thread is not finished: if it gets the blocked port's
consumer lock it executes at most ``RESCHED_LIMIT + 1`` tuples of *that* port (stopping
early when finished or suspended), never anything else and never the free list (L418-420);
otherwise it yields and retries. A thread without a record (a source's thread, the timer)
reads the global flags. A tuple whose request ended while it waited is dropped.

Elasticity (section 4.2): a controller thread wakes every ``period_s``, measures the
tuples executed by all threads per second (throughput across all operators, L465; the
first period, which counts the queues filling up, is recorded but not used), and,
as [OSS] ``ScheduledQueue::threadElasticity`` does: threads that were told to suspend
but are not parked (stuck in operator code) are marked unsuspendable, other threads are
suspended in their place and the adaptation is postponed (L552-554); if no thread was
active or parked during the period, ``min`` is raised; otherwise ``updateThreadLevel``
gives the level and the controller suspends the highest-numbered running threads or
wakes the lowest-numbered suspended ones (so with ``placement="fill"`` a level of k uses
the first k CPUs of the NUMA order). The thread pool is created up front (``max_level``
threads, those above the starting level suspended).

Deadlock rule (L556): the default minimum level is ``1 + the most input ports of any
operator`` registered so far, capped at ``max_level`` ([OSS] ``min(maxInPorts + 1,
nCPU)``); an explicit ``min_level`` overrides it (the paper's 1-thread runs).

Placement: scheduler threads are pinned to the CPUs of one NUMA node each, in the order
``placement="fill"`` (fill a node's CPUs first, the default) or ``"interleave"``
(round-robin over nodes); ``pin=False`` leaves them unpinned (the paper's setting).

Batched ports (``batch``, default 64; ``batching.py``): what a queue holds, a push
moves, reSchedule executes and ``RESCHED_LIMIT`` counts is a batch of tuples; the elastic
throughput still counts tuples. With batches, ``run_port`` then follows the batch it
pushed down the graph (``follow_pushed``: a deviation from Fig. 3, measured there);
``batch=1`` is the paper's setting, unchanged.

Python adaptations (spec section 5.1): try-locks are ``Lock.acquire(False)``; the free
list and queues are deques; a failed reSchedule retry calls ``os.sched_yield()`` so the
spinning thread lets the GIL go, and after a few such spins sleeps with a growing delay
(``RESCHED_SPINS``: a spinning Python thread costs the GIL, not just a core); sleeps below
~50 us collapse into a yield.

GIL and free-threaded builds (``core/sync.py``): the protocol needs atomic deque
operations, atomic try-locks and atomic flag stores and loads; both builds give all
three. The flags are signals that carry no data (``threads.py``), so a stale read
delays a thread's stop or suspension by one round and nothing else.
"""

from __future__ import annotations

import os
import threading
import time

from bobox_sched.core.errors import BoboxError
from bobox_sched.core.limits import MAX_STREAM_BATCH
from bobox_sched.core.lifecycle import RuntimeThread
from bobox_sched.policies.streams.elastic import CPU_LIMIT, FORMS, SENS, STEPS, CpuGuard, Elasticity
from bobox_sched.policies.streams.ports import EMPTY, find_work_non_blocking, try_take, unlock
from bobox_sched.policies.streams.models import DedicatedPolicy, ManualPolicy
from bobox_sched.policies.streams.options import MODELS, choice, fraction, positive_int
from bobox_sched.policies.streams.runtime import StreamsBase
from bobox_sched.policies.streams.threads import StreamsWorker
from bobox_sched.policies.streams.threads import placement as thread_places

# DELAY_THRESHOLD: the back-off cap of block(delay). The paper's Streams blocks for up to
# 10 ms (L319); [OSS] caps at 100 ms. Lower favours latency, higher idles cheaper.
DELAY_THRESHOLD_S = 0.010
# The first delay: 1 (ns in [OSS]), multiplied by 10 per idle round (L333-342).
DELAY_START_S = 1e-9
# Elasticity period (L465; [OSS] ADAPT_PERIOD = 10 s).
PERIOD_S = 10.0

# reSchedule spins while another thread executes the full port (Fig. 5). In Python a spin
# costs a core *and* takes the GIL from the thread doing the work, so after RESCHED_SPINS
# yields the retry sleeps, from RESCHED_SLEEP_S doubling up to RESCHED_SLEEP_MAX_S. A full
# port's consumer needs at least one tuple's execution (about 10 us of bookkeeping) to make
# room. Mixed graph, 100 operators, 1000 FLOPs/tuple, 2 scheduler threads, 4 s runs on the
# shared 2-core VM: 14.8k sink tuples per CPU-second yielding only, 19.3k with the back-off
# (1 thread: 26k; one run each, so a trend rather than a measurement).
RESCHED_SPINS = 4
RESCHED_SLEEP_S = 20e-6
RESCHED_SLEEP_MAX_S = 1e-3

_yield = os.sched_yield if hasattr(os, "sched_yield") else (lambda: time.sleep(0))


class StreamsPolicy(StreamsBase):
    name = "streams"
    model = "dynamic"

    # -- options -------------------------------------------------------------------------
    @classmethod
    def resolve_options(cls, options: dict):
        """Validate ``Scheduler(policy="streams", **options)`` before anything starts;
        pick the threading model's class (this class is the one registered as
        ``streams``: the other models are reached through ``model=``)."""
        opts = dict(options)
        model = choice("model", opts.pop("model", "dynamic"), MODELS)
        common = {}
        if "queue_capacity" in opts:
            common["queue_capacity"] = positive_int("queue_capacity", opts.pop("queue_capacity"))
        if "batch" in opts:
            common["batch"] = positive_int("batch", opts.pop("batch"))
            if common["batch"] > MAX_STREAM_BATCH:
                raise BoboxError(f"streams option batch must be at most {MAX_STREAM_BATCH}, got {common['batch']}")
        if "batch_latency_s" in opts:
            v = opts.pop("batch_latency_s")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 60:
                raise BoboxError(f"streams option batch_latency_s must be a number of seconds in (0, 60], got {v!r}")
            common["batch_latency_s"] = float(v)
        if model == "dynamic":
            target = cls
            if "resched_limit" in opts:
                v = opts.pop("resched_limit")
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise BoboxError(f"streams option resched_limit must be an integer >= 0, got {v!r}")
                common["resched_limit"] = v
            common.update(cls.check_dynamic_options(opts))
        else:
            target = ManualPolicy if model == "manual" else DedicatedPolicy
        if opts:
            raise BoboxError(f"streams option{'s' if len(opts) > 1 else ''} {', '.join(sorted(opts))} "
                             f"not known for model {model!r}")
        return target, common

    @staticmethod
    def check_dynamic_options(opts: dict) -> dict:
        """Pop and check the dynamic model's options from `opts`."""
        out = {}
        if "threads" in opts:
            out["threads"] = positive_int("threads", opts.pop("threads"))
        elastic = opts.pop("elastic", False)
        if not isinstance(elastic, bool):
            raise BoboxError(f"streams option elastic must be True or False, got {elastic!r}")
        out["elastic"] = elastic
        el_only = ("min_level", "max_level", "period_s", "sens", "cpu_limit", "form", "steps")
        given = [k for k in el_only if k in opts]
        if given and not elastic:
            raise BoboxError(f"streams option {given[0]} needs elastic=True")
        for k in ("min_level", "max_level"):
            if k in opts:
                out[k] = positive_int(k, opts.pop(k))
        if "min_level" in out and "max_level" in out and out["min_level"] > out["max_level"]:
            raise BoboxError(f"streams option min_level ({out['min_level']}) is above max_level ({out['max_level']})")
        if "period_s" in opts:
            v = opts.pop("period_s")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise BoboxError(f"streams option period_s must be a positive number of seconds, got {v!r}")
            out["period_s"] = float(v)
        if "sens" in opts:
            out["sens"] = fraction("sens", opts.pop("sens"), hi_closed=False)
        if "cpu_limit" in opts:
            out["cpu_limit"] = fraction("cpu_limit", opts.pop("cpu_limit"))
        if "form" in opts:
            out["form"] = choice("form", opts.pop("form"), FORMS)
        if "steps" in opts:
            out["steps"] = choice("steps", opts.pop("steps"), STEPS)
        if "placement" in opts:
            out["placement"] = choice("placement", opts.pop("placement"), ("fill", "interleave"))
        return out

    def __init__(self, scheduler, threads_per_node, balance_interval=None, pin=True, queue_capacity=None,
                 resched_limit=None, threads=None, elastic=False, min_level=None, max_level=None,
                 period_s=PERIOD_S, sens=SENS, cpu_limit=CPU_LIMIT, form="oss", steps="pow2", placement="fill",
                 **batching):
        super().__init__(scheduler, threads_per_node, pin=pin, queue_capacity=queue_capacity, **batching)
        # RESCHED_LIMIT: a quarter of the queue (L418; [OSS] 1000/4).
        self.resched_limit = self.capacity // 4 if resched_limit is None else resched_limit
        self.drain_limit = self.capacity  # [OSS]: schedule() drains about one queue's worth
        self.placement = placement
        self.elastic_on = elastic
        self.run_task = self.run_port  # what the worker loop calls with the port next_task gave
        # Batched ports: run_port follows the batches it pushed down the graph
        # (follow_pushed); the paper's one-tuple setting keeps Fig. 3's LRU order.
        self.follow = self.batch > 1
        ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if threads is None and not elastic:
            threads = sum(threads_per_node or len(n.cpus) for n in self.topology.cpu_nodes)
        if elastic:
            self.max_level = max_level if max_level is not None else max(ncpu, min_level or 1)
            self.explicit_min = min_level is not None
            self.min_level = min_level if min_level is not None else min(2, self.max_level)
            if self.min_level > self.max_level:
                raise BoboxError(f"streams: min_level {self.min_level} is above max_level {self.max_level}")
            start = threads if threads is not None else self.min_level
            if not self.min_level <= start <= self.max_level:
                raise BoboxError(f"streams: threads={start} (the starting level) is outside "
                                 f"[{self.min_level}, {self.max_level}]")
            self.pool_size = self.max_level
            self.elastic = Elasticity(self.min_level, self.max_level, start, sens=sens, form=form, steps=steps)
            self.cpu_guard = CpuGuard(cpu_limit)
            self.period_s = period_s
        else:
            self.pool_size = threads
            self.min_level = self.max_level = threads
            self.explicit_min = True
            self.elastic = None
            self.cpu_guard = None
            self.period_s = None
        self.level = self.elastic.level if elastic else threads
        self._ctl_lock = threading.Lock()  # the controller's state: level, suspended list
        self._ctl_cond = threading.Condition(threading.Lock())
        self._ctl_stop = False
        self._ctl_thread = None
        self.suspended_list: list = []  # threads told to suspend, in the order told
        self.unsuspendable = 0
        self.postponed = 0
        self.trace: list = []  # (seconds since start, throughput, level, event) per period
        self._t0 = time.perf_counter()

    # -- threads -------------------------------------------------------------------------
    def create_workers(self) -> list:
        places = thread_places(self.topology, self.pool_size, self.placement)
        workers = []
        for i, node in enumerate(places):
            w = StreamsWorker(self.scheduler, i, node, node.cpus if self.pin else None)
            if i >= self.level:
                w.suspended = True  # above the starting level: parks at once
                self.suspended_list.append(w)
            workers.append(w)
        self.workers = workers
        return workers

    def start(self) -> None:
        if self.elastic is not None:
            self._ctl_thread = RuntimeThread(self._controller_main, "bobox-streams-elastic",
                                             group=getattr(self.scheduler, "_thread_group", None))
            self._ctl_thread.start()

    def stop(self, wait: bool = True) -> None:
        with self._ctl_cond:
            self._ctl_stop = True
            self._ctl_cond.notify_all()
        if wait and self._ctl_thread is not None and self._ctl_thread is not threading.current_thread():
            self._ctl_thread.join()
        for w in self.workers:
            w.notify_shutdown()
        super().stop(wait)

    def wake_all(self) -> None:
        """Every request ended and none can come (the scheduler is closing): portsClosed,
        set in each thread's own copy (L301-307), then the global one."""
        for w in self.workers:
            w.notify_ports_closed()
        super().wake_all()

    # -- registration ------------------------------------------------------------------
    def register(self, request, ports) -> None:
        self.table.register(ports)
        if self.elastic is not None and not self.explicit_min:
            need = min(1 + self.max_in_ports, self.max_level)
            if need > self.min_level:
                self._raise_min(need, "deadlock rule")

    # -- Fig. 5: push and reSchedule -----------------------------------------------------
    def push_item(self, worker, port, item) -> None:
        """push(): `item` (a tuple, a batch of them, or a marker; ``deliver`` stages and
        calls this) goes into `port`'s queue; if that fails, reSchedule. Dropped when the
        receiver finished early."""
        if port.task.finished:
            return
        if port.q.push(item):
            if self.follow and worker.is_scheduler_thread:
                worker.hint = port  # run_port may execute it next (depth first)
        else:
            self.re_schedule(worker, port, item)

    def push_marker(self, port, marker) -> bool:
        return port.q.push(marker)  # never reSchedule on the timer thread: a full queue runs soon anyway

    def re_schedule(self, w, port, item) -> None:
        """Fig. 5's reSchedule, entered after a failed push of `item` into `port`'s queue:
        the figure's ``while (!push)`` with its first test done by the caller (repeating
        it at once only cost a failed push per call), each retry after an attempt at the
        port. The operator's state lock is taken inside the consumer lock's ``try``: a
        RecursionError at that call (a nested execution at the bottom of the stack,
        streams_runtime "Failures and the stack") must not leave the port locked."""
        q = port.q
        cons = q.cons
        m = port.mutex
        req = port.req
        rec = w if w.is_scheduler_thread else None
        limit = self.resched_limit
        execute = self.execute
        spins = 0
        while True:
            if rec is not None:
                if rec.shutdown or rec.ports_closed:
                    return
            elif self.g_shutdown or self.g_ports_closed:
                return
            if req.state is not req.ACTIVE or port.task.finished:
                return  # the request ended, or the receiver finished: drop
            processed = 0
            if cons.acquire(False):
                try:
                    if m is None or m.acquire(False):
                        try:
                            while True:
                                t = q.take()
                                if t is EMPTY:
                                    break
                                execute(w, port, t)
                                processed += 1
                                if processed > limit:
                                    break
                                if rec is not None:
                                    if rec.shutdown or rec.ports_closed or rec.suspended:
                                        break
                                elif self.g_shutdown or self.g_ports_closed:
                                    break
                        finally:
                            if m is not None:
                                m.release()
                finally:
                    cons.release()
            if processed:
                w.reschedules += 1
                spins = 0
            else:
                spins += 1
                if spins <= RESCHED_SPINS:
                    _yield()
                else:
                    time.sleep(min(RESCHED_SLEEP_MAX_S, RESCHED_SLEEP_S * (1 << min(spins - RESCHED_SPINS, 10))))
            if q.push(item):
                return

    # -- Fig. 4: findWorkBlocking ----------------------------------------------------------
    def next_task(self, w):
        delay = DELAY_START_S
        table = self.table
        while not (w.shutdown or w.ports_closed):
            if w.suspended:
                w.suspend()
            w.active = True
            found = find_work_non_blocking(table)
            if found is not None:
                port, w.item = found
                w.last_step = 0
                return port
            w.sleeps += 1
            w.block(delay)
            if delay < DELAY_THRESHOLD_S:
                delay = min(delay * 10, DELAY_THRESHOLD_S)
        return None

    # -- Fig. 3: the rest of schedule() --------------------------------------------------
    def run_port(self, w, port) -> None:
        """``run_task``: execute the tuple findWorkBlocking popped, drain the port, give it
        back; with batched ports, then follow the batches it pushed (``follow_pushed``)."""
        item = w.item
        w.item = None
        w.hint = None
        q = port.q
        execute = self.execute
        n = 1
        try:
            execute(w, port, item)
            limit = self.drain_limit
            while n <= limit:
                t = q.take()
                if t is EMPTY:
                    break
                execute(w, port, t)
                n += 1
                if w.suspended or w.shutdown or w.ports_closed:
                    break
        finally:
            unlock(port)
            self.table.give_back(port)
        if n > 1:
            port.req.wsteps[w.id][0] += n - 1  # the worker loop counted the first
        if self.follow:
            self.follow_pushed(w)

    def follow_pushed(self, w) -> None:
        """Batched ports only (a deviation from Fig. 3, which goes back to the LRU free
        list after every port): execute next the port this thread last pushed a batch
        into, and so on down the graph, at most ``depth`` ports, while nothing tells the
        thread to stop. The batch is then still in this core's caches: going back to the
        free list after each port visits the graph breadth first, and each batch's
        Python objects are cold by the time they are read again. Measured on 2 cores
        (``measurements/2026-11-28-batched-ports/follow_ab.txt``, mixed graph, batch 64,
        2 threads, median of 3): cost 1, 120k sink tuples/s following against 88k in LRU
        order (gathering a batch's rows: 33 us against 65 us a call; manual's direct
        calls 9.5 us); cost 1000, 67k against 60k. As reSchedule does, the port is
        executed under its consumer lock (and state lock) without being checked out of
        the free list: a thread that pops it meanwhile fails its try-lock and puts it
        back."""
        for _ in range(self.depth):
            nxt = w.hint
            w.hint = None
            if nxt is None or nxt.retired or w.suspended or w.shutdown or w.ports_closed:
                return
            item = try_take(nxt)
            if item is EMPTY:
                return
            q = nxt.q
            execute = self.execute
            n = 0
            try:
                while True:
                    execute(w, nxt, item)
                    n += 1
                    if n > self.drain_limit or w.suspended or w.shutdown or w.ports_closed:
                        break
                    item = q.take()
                    if item is EMPTY:
                        break
            finally:
                unlock(nxt)
            nxt.req.wsteps[w.id][0] += n

    # -- elasticity ------------------------------------------------------------------------
    def _controller_main(self) -> None:
        cpu = self.cpu_guard
        cpu.sample()
        last_n = self.total_executed()
        last_t = time.perf_counter()
        first = True
        while True:
            with self._ctl_cond:
                if not self._ctl_stop:
                    self._ctl_cond.wait(self.period_s)
                if self._ctl_stop:
                    return
            now = time.perf_counter()
            n = self.total_executed()
            thput = (n - last_n) / max(now - last_t, 1e-9)
            last_n, last_t = n, now
            cpu.sample()
            if first:
                # The first period counts the queues filling up (several times the steady
                # rate when tuples are cheap); [OSS] ignores it for load changes only, and
                # a level that looks 10x worse than it is stays trusted. Not fed.
                first = False
                with self._ctl_lock:
                    self.trace.append((now - self._t0, thput, self.level, "warm-up"))
                    for w in self.workers:
                        w.active = False
                continue
            try:
                self.adapt(thput)
            except Exception as e:  # noqa: BLE001 - a bug here must not stop the scheduler
                self.scheduler._warn(f"streams elasticity: {type(e).__name__}: {e}")

    def adapt(self, thput: float) -> int:
        """One period of the elastic driver ([OSS] threadElasticity) with throughput
        `thput` (tuples per second across all operators). Returns the level."""
        with self._ctl_lock:
            t = time.perf_counter() - self._t0
            stuck = [w for w in self.suspended_list if not w.in_suspension]
            runnable = False
            for w in self.workers:
                runnable = runnable or w.active or w.in_suspension
                w.active = False
            if stuck:
                # Told to suspend last period, still not parked: stuck in operator code.
                for w in stuck:
                    w.suspendable = False
                    self.suspended_list.remove(w)
                    w.notify_wakeup()  # it runs on; it counts as running
                self.unsuspendable += len(stuck)
                self.postponed += 1
                if self.unsuspendable > self.elastic.min:
                    self._raise_min_locked(min(self.unsuspendable, self.max_level), "unsuspendable threads")
                else:
                    self._apply_locked(self.level)  # suspend others in their place
                self.trace.append((t, thput, self.level, "postponed"))
                return self.level
            if not runnable:
                running = sum(1 for w in self.workers if not w.suspended)
                self._raise_min_locked(min(running + 1, self.max_level), "no runnable thread")
                self.trace.append((t, thput, self.level, "min raised"))
                return self.level
            level = self.elastic.update_thread_level(thput, self.cpu_guard.acceptable)
            self._apply_locked(level)
            self.trace.append((t, thput, level, "adapt"))
            return level

    def _raise_min(self, new_min: int, why: str) -> None:
        with self._ctl_lock:
            self._raise_min_locked(new_min, why)

    def _raise_min_locked(self, new_min: int, why: str) -> None:
        """[OSS] increaseMinThreads: new minimum, level at least that, elastic history
        reset. Lock held."""
        new_min = max(new_min, self.elastic.min)
        self.min_level = new_min
        start = max(self.level, new_min)
        self.elastic.reset(new_min, self.max_level, start)
        self._apply_locked(self.elastic.level)

    def _apply_locked(self, level: int) -> None:
        """Make `level` threads run: suspend the highest-numbered running suspendable
        threads, or wake the lowest-numbered suspended ones. Lock held."""
        running = [w for w in self.workers if not w.suspended]
        if level < len(running):
            k = len(running) - level
            for w in reversed(running):
                if k == 0:
                    break
                if w.suspendable:
                    w.notify_suspended()
                    self.suspended_list.append(w)
                    k -= 1
        elif level > len(running):
            k = level - len(running)
            for w in sorted(self.suspended_list, key=lambda x: x.id)[:k]:
                self.suspended_list.remove(w)
                w.notify_wakeup()
        self.level = level

    def running_threads(self) -> int:
        return sum(1 for w in self.workers if not w.suspended)

    def stats(self) -> dict:
        out = super().stats()
        out.update({
            "threads": len(self.workers),
            "level": self.level,
            "running": self.running_threads(),
            "parked": sum(1 for w in self.workers if w.in_suspension),
            "min_level": self.min_level,
            "max_level": self.max_level,
            "resched_limit": self.resched_limit,
            "reschedules": sum(w.reschedules for w in self.workers),
            "placement": self.placement if self.pin else "unpinned",
            "elastic": None if self.elastic is None else {
                "form": self.elastic.form, "steps": self.elastic.steps, "period_s": self.period_s,
                "cpu_limit": self.cpu_guard.limit, "unsuspendable": self.unsuspendable,
                "postponed": self.postponed, "trace": list(self.trace),
            },
        })
        return out


__all__ = ["DELAY_THRESHOLD_S", "PERIOD_S", "StreamsPolicy"]
