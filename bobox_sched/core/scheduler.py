"""The Scheduler: what users create, submit plans to, and shut down.

    with Scheduler() as s:                      # bobox policy, workers pinned per node
        handles = [s.submit(plan) for _ in range(16)]
        results = [h.result() for h in handles]
        print(s.stats())

Shutdown protocol:

1. ``shutdown()`` sets ``_closing`` under ``_lock``: ``submit`` refuses from then on.
   With ``cancel=True`` every active request is cancelled.
2. When the last active request ends (or at once if none is active) ``_stopping`` is
   set under ``_lock``, and whoever set it (``shutdown``'s caller, or the thread that
   ended the last request) calls ``_stop_threads``: every sleeping worker is woken, every
   background thread (the policy's, the timer thread) is told to end, and ``_ended`` is
   set. A worker that finds no task and sees ``_stopping`` exits (tasks of ended
   requests are dropped, never run). Background threads are told only then, with or
   without ``wait``: the running requests need them until they end (a timer's
   ``ctx.reschedule(delay)``, a source's own thread).
3. ``shutdown(wait=True)`` waits for ``_ended``, then joins the workers and the
   background threads. Called on one of the scheduler's own threads (a request's done
   callback) it cannot wait for requests that thread may have to run, so it returns
   like ``wait=False``: the threads end when the last request does.

``_active`` (the running requests) is guarded by ``_lock``; workers read its size
without the lock only to decide that the balancer may idle. ``_stop_threads`` may run
more than once (shutdown and the last request's end can race); every step of it is
idempotent.
"""

from __future__ import annotations

import inspect
import threading
import warnings

import topology as _topology
from topology import current_node, page_nodes
from topology.memory import live_nodes

from bobox_sched.core import extensions
from bobox_sched.core import lifecycle as _lifecycle
from bobox_sched.core import limits
from bobox_sched.core.errors import BoboxError, SchedulerShutdown, SchedulerWarning
from bobox_sched.core.limits import check_count, check_degree_cap, check_real
from bobox_sched.core.packet import ByteTotals, NodePool
from bobox_sched.core.plan import Plan
from bobox_sched.core.sync import FENCED
from bobox_sched.core.request import Request, RequestHandle
from bobox_sched.core.timers import Timers

# Input buffer capacity in packets. Small, so that back-pressure keeps at most a few
# packets per edge in flight (bounded memory) and the packet that wakes a consumer is
# still in cache; large enough that a producer rarely blocks on a consumer that is
# merely running a task on another thread. 4 measured best-or-equal of {1,2,4,8,16} on
# the TPC-H mix (bobox bench queries, 2 cores).
DEFAULT_BUFFER_PACKETS = 4


class OversubscriptionWarning(UserWarning):
    """More worker threads per node than the node has CPUs (allowed, but they share)."""


class Scheduler:
    """A NUMA-aware task scheduler for dataflow requests.

    Parameters
    ----------
    topology : topology.Topology, optional
        Machine to schedule on; probed from the live machine by default.
    policy : "bobox" | "simple" | "ordered" | "streams"
        Scheduling policy (``bobox_sched.policies``).
    threads_per_node : int, optional
        Worker threads per NUMA node (default: one per CPU of the node).
    packet_bytes : int, optional
        Target packet size (default: the policy's; half the L2 for ``bobox``).
    balance_interval : float or None
        Seconds between load-balancer rounds (``bobox``); None/0 disables it.
    buffer_packets : int
        Capacity of each operator input buffer, in packets.
    pin : bool
        Pin ``bobox`` workers to their node's CPUs (and prefer its memory).
    memory : "local" | "remote"
        Where packets are allocated: the worker's node, or the next node (the NUMA
        placement experiment; same as local on a one-node machine).
    locality_sample : int
        Check every N-th consumed packet's page placement with ``move_pages`` (0: off).
    task_stats : bool
        Time every task and count it per locality step (``busy_s``, ``tasks_by_step``,
        the serial fraction). False: the worker loop reads no clock per task.
    domains : "auto" | "off" | int, optional
        Run the runtime in several processes ("domains", each pinned to a part of the
        machine; ``bobox_sched/domains``): a request runs whole in one of them. "auto":
        one per NUMA node, split so that none has more than ``domain_workers`` CPUs (an
        in-process runtime where the machine is that small, or the GIL is off). Not
        given: the in-process runtime.
    domain_workers : int, optional
        The most CPUs of one domain under "auto" (default
        ``topology.partition.DEFAULT_DOMAIN_WORKERS``).
    trace : str, path or bobox_sched.trace.Tracer, optional
        Record a timeline of the run (``bobox_sched/trace``): a slice per task on its
        worker's track, steals, balancer actions, requests and packet memory. A path:
        the Chrome trace JSON is written there (atomically) by ``shutdown(wait=True)``,
        once the workers have ended; a Tracer: call its ``write(path)`` after shutdown.
        The path's folder is checked here, before anything starts. Not given: the workers
        run the untraced loop (nothing is recorded, nothing is paid per task). A task's
        GIL-released time counts only while ``operators.released`` timing is on
        (``bobox run`` turns it on).
    domain_init : callable, optional
        Called with no arguments in each domain process before its runtime starts (sent
        by cloudpickle), e.g. to turn on instrumentation there.
    **policy_options
        Options of the policy, checked by it before anything starts (``ordered``:
        ``heuristic``, ``reorder``, ``scheme``, ``row_order``, ``capacity``, ...;
        ``streams``: ``threads=8`` or ``elastic=True, min_level=1``; see their modules);
        a policy without options refuses them.

    Lifecycle, as a ``concurrent.futures`` executor's: ``shutdown()`` (or leaving a
    ``with`` block) ends it. A Scheduler dropped without ``shutdown()`` is shut down when
    it is collected: new requests are refused, the running ones finish (their handles
    still answer), then its threads end. At interpreter exit every scheduler is shut
    down the same way, and the interpreter waits for the requests still running
    (``bobox_sched/core/lifecycle.py``).

    The object is a handle on a :class:`SchedulerCore`, the runtime its threads use;
    every other attribute (``policy``, ``workers``, ``topology``, ...) is the core's.
    """

    __slots__ = ("_core", "_finalizer", "__weakref__")

    def __init__(self, *args, **kwargs):
        core = None
        if "domains" in kwargs or "domain_workers" in kwargs or "domain_init" in kwargs:
            from bobox_sched.core.extensions import front

            core = front("domains")(args, kwargs, kwargs.pop("domains", "auto"), kwargs.pop("domain_workers", None))
        if core is None:
            core = SchedulerCore(*args, **kwargs)
        object.__setattr__(self, "_core", core)
        object.__setattr__(self, "_finalizer", _lifecycle.shut_down_when_collected(self, core))

    def __getattr__(self, name):
        if name in Scheduler.__slots__:  # not set: __init__ raised
            raise AttributeError(name)
        return getattr(self._core, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._core, name, value)

    def __delattr__(self, name) -> None:
        delattr(self._core, name)

    def submit(self, plan: Plan, node: int | None = None, parallelism=None, ordering=None) -> RequestHandle:
        return self._core.submit(plan, node, parallelism, ordering)

    def map(self, plans, timeout: float | None = None) -> list:
        return self._core.map(plans, timeout)

    def shutdown(self, wait: bool = True, cancel: bool = False) -> None:
        self._core.shutdown(wait, cancel)
        # Shut down by its user: nothing is left for the finalizer to do when the handle
        # is collected. Detached, it cannot run at all -- a finalizer that the cyclic GC
        # runs deep in some thread's stack fails there with a RecursionError that cannot
        # even be reported.
        self._finalizer.detach()

    def stats(self) -> dict:
        return self._core.stats()

    def reset_peak(self) -> None:
        self._core.reset_peak()

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._core.__exit__(exc_type, exc, tb)
        self._finalizer.detach()  # as in shutdown()

    def __repr__(self) -> str:
        core = self._core
        if not isinstance(core, SchedulerCore):
            return f"<Scheduler {core!r}>"
        return f"<Scheduler policy={core.policy.name!r} workers={len(core.workers)}>"


class SchedulerCore:
    """The runtime behind a :class:`Scheduler` (same parameters and methods): what its
    threads, its policy, its requests and the operators' ``ctx.scheduler`` hold, so that
    the Scheduler the user holds can be collected, and shut the core down
    (``bobox_sched/core/lifecycle.py``). ``Scheduler(...)`` makes one; nothing else should."""

    def __init__(
        self,
        topology=None,
        policy: str = "bobox",
        threads_per_node: int | None = None,
        packet_bytes: int | None = None,
        balance_interval: float | None = 0.1,
        buffer_packets: int = DEFAULT_BUFFER_PACKETS,
        pin: bool = True,
        memory: str = "local",
        locality_sample: int = 0,
        task_stats: bool = True,
        precompile: bool | None = None,
        trace=None,
        **policy_options,
    ):
        # Bounds: bobox_sched/core/limits.py (the CLI applies the same ones).
        if threads_per_node is not None:
            threads_per_node = check_count("threads_per_node", threads_per_node, limits.MAX_THREADS_PER_NODE)
        if packet_bytes is not None:
            packet_bytes = check_count("packet_bytes", packet_bytes, limits.MAX_PACKET_BYTES, limits.MIN_PACKET_BYTES)
        if balance_interval is not None and balance_interval != 0:
            balance_interval = check_real("balance_interval", balance_interval, limits.MAX_BALANCE_INTERVAL)
        buffer_packets = check_count("buffer_packets", buffer_packets, limits.MAX_BUFFER_PACKETS)
        self.task_stats = bool(task_stats)
        self.tracer = _make_tracer(trace)
        if memory not in ("local", "remote"):
            raise BoboxError(f"memory must be 'local' or 'remote', got {memory!r}")
        locality_sample = check_count("locality_sample", locality_sample or 0, 2**31, minimum=0)
        try:
            policy_cls = extensions.policy_class(policy)
        except ValueError as e:
            raise BoboxError(str(e)) from None
        policy_cls, policy_options = policy_cls.resolve_options(policy_options)
        self.topology = topology if topology is not None else _topology.probe()
        if not self.topology.cpu_nodes:
            raise BoboxError("the topology has no node with a usable CPU")
        if threads_per_node is not None:
            cpus = max(len(n.cpus) for n in self.topology.cpu_nodes)
            if threads_per_node > cpus:
                warnings.warn(f"{threads_per_node} worker threads per node exceed the {cpus} CPUs of the largest "
                              "node: workers will share CPUs", OversubscriptionWarning, 3)
        self.packet_bytes = packet_bytes or policy_cls.default_packet_bytes(self.topology)
        self.buffer_packets = buffer_packets
        self.memory = memory
        self.locality_sample = int(locality_sample or 0)
        self._locality_sampler = _LocalitySampler(self.locality_sample) if self.locality_sample else None
        self.bytes = ByteTotals()  # sums of the requests' accounts (packet.py: request-level accounting)
        node_ids = [n.os_index for n in self.topology.nodes]
        # Node-local pools only for nodes this machine really has (a captured topology
        # may name others: its packets then use plain memory).
        live = set(live_nodes())
        self.pools = {n: NodePool(n, node_local=n in live) for n in node_ids}
        cpu_node_ids = [n.os_index for n in self.topology.cpu_nodes]
        self._remote_of = {n: cpu_node_ids[(i + 1) % len(cpu_node_ids)] for i, n in enumerate(cpu_node_ids)}
        self._lock = threading.Lock()
        self._active: dict[int, Request] = {}
        self._next_id = 0
        self._closing = False
        self._stopping = False
        self._ended = threading.Event()  # set by _stop_threads: every request ended, none can start
        self._warnings: list[str] = []
        self._trace_written = False
        self._warnings_lock = threading.Lock()  # _warn's check-then-append (never taken from __del__)
        self.requests_done = 0
        self._thread_group = _lifecycle.ThreadGroup()  # every thread this scheduler starts (lifecycle.py)
        self.timers = Timers(group=self._thread_group)  # ctx.reschedule(delay)
        self.policy = policy_cls(self, threads_per_node, balance_interval=balance_interval, pin=pin, **policy_options)
        self.workers = self.policy.create_workers()
        if self.tracer is not None:
            from bobox_sched.core.worker import Worker

            own = [w for w in self.workers if type(w)._main is not Worker._main]
            if own or not self.workers:
                raise BoboxError(f"tracing is not available under the {self.policy.name} policy with these options: "
                                 "its tasks run outside the core's worker loop")
            self.tracer.attach(self.workers, self.policy.name,
                               {"nodes": [n.os_index for n in self.topology.cpu_nodes],
                                "packet_bytes": self.packet_bytes})
        # Every cached kernel signature loaded before a worker exists: what a free-threaded
        # build needs (core/precompile.py); None: only there.
        self.precompiled = None
        if precompile or (precompile is None and FENCED):
            from bobox_sched.core import precompile as _pre

            self.precompiled = _pre.precompile()
            if FENCED:
                _pre.watch()
        self._start_threads()

    def _start_threads(self) -> None:
        """Start the workers, the policy's threads and the timer thread. (The simulator's
        core, ``bobox_sched/sim``, starts none: its virtual workers are driven on a
        virtual clock by the unchanged policy code.)"""
        _lifecycle.adopt(self)  # shut down at interpreter exit (SchedulerShutdown once exiting)
        for w in self.workers:
            w.start()
        self.policy.start()
        self.timers.start()  # now, not at the first reschedule: see Timers.start

    # -- submitting ----------------------------------------------------------------------
    def submit(self, plan: Plan, node: int | None = None, parallelism=None, ordering=None) -> RequestHandle:
        """Validate, place and start a request for `plan`. Thread-safe.

        `node` forces the first node of the request (experiments: requests arriving on
        one node); by default the policy places it. `parallelism` (an int, or a dict by
        region) runs the plan's parallel regions as that many channels, `ordering`
        overrides their mergers' strategies upward (``bobox_sched.regions.fission``).
        Raises ValueError for an invalid plan (naming the operator), BoboxError for a
        `parallelism` above ``limits.MAX_CHANNELS`` and SchedulerShutdown after
        ``shutdown()``."""
        if not isinstance(plan, Plan):
            raise TypeError(f"submit() takes a Plan, not {type(plan).__name__}")
        if self._closing:
            raise SchedulerShutdown("cannot submit: the scheduler is shut down")
        if parallelism is not None:
            check_degree_cap(parallelism, "parallelism")  # named as the caller wrote it
            plan = extensions.plan_rewrite("parallelize")(plan, degree=parallelism, ordering=ordering)
        elif ordering is not None:
            raise ValueError("ordering= needs parallelism=")
        ops, edges = plan.instantiate()  # ValueError for invalid plans
        buckets = None
        for op in ops.values():
            if op.resolves_partitions:  # a PartitionedOperator: partitions="auto" and bad partitions, now
                if buckets is None:
                    buckets = self.policy.bucket_parallelism()
                op.resolve_partitions(buckets)
        self.policy.validate_plan(ops, edges)  # what this policy cannot run (ValueError), before the request exists
        if node is not None and node not in [n.os_index for n in self.topology.cpu_nodes]:
            raise BoboxError(f"unknown NUMA node {node} for placement")
        with self._lock:
            if self._closing:
                raise SchedulerShutdown("cannot submit: the scheduler is shut down")
            rid = self._next_id
            self._next_id += 1
            req = Request(self, plan, rid, ops, edges, self.buffer_packets)
            self._active[rid] = req
        if self.tracer is not None:
            self.tracer.request_submitted(rid, req.name or "")
        handle = RequestHandle(req)
        self.policy.place(req, node)
        notify = getattr(self.policy, "request_added", None)
        if notify:
            notify()
        req.start()
        return handle

    def map(self, plans, timeout: float | None = None) -> list:
        """Submit every plan, then return their results in order."""
        handles = [self.submit(p) for p in plans]
        return [h.result(timeout) for h in handles]

    # -- ending --------------------------------------------------------------------------
    def _request_ended(self, req: Request) -> None:
        req.bytes.ended = True  # its account retires from the totals once nothing of it is held
        if self.tracer is not None:
            self.tracer.request_ended(req.id, req.state)
        with self._lock:
            self._active.pop(req.id, None)
            self.requests_done += 1
            stop = self._closing and not self._active
            if stop:
                self._stopping = True
        if stop:
            self._stop_threads()

    def _stop_threads(self) -> None:
        """Every request ended and none can start (``_stopping``): wake the workers so
        that they exit and tell every background thread to end, joining none (module
        doc, step 2). Idempotent."""
        self.policy.wake_all()
        self.policy.stop(wait=False)
        self.timers.stop(wait=False)
        self._thread_group.stopping()  # no thread starts from now on (lifecycle.py)
        self._ended.set()

    def shutdown(self, wait: bool = True, cancel: bool = False) -> None:
        """Refuse new requests; let running ones finish (or cancel them); then every
        thread of the scheduler ends. With `wait`, return once the requests ended and
        the threads exited; without, return at once (the threads end by themselves).
        On one of the scheduler's own threads (a done callback) `wait` is ignored: it
        could wait for itself."""
        with self._lock:
            self._closing = True
            active = list(self._active.values())
            if not active:
                self._stopping = True
        if cancel:
            for r in active:
                r.cancel()
        if self._stopping:
            self._stop_threads()
        if wait and not self._thread_group.owns_current_thread():
            # A model without workers (streams' manual, dedicated) has none to join that
            # would wait for the requests.
            self._ended.wait()
            for w in self.workers:
                w.thread.join()
            self.policy.stop()
            self.timers.stop()
            if self.tracer is not None and self.tracer.path is not None and not self._trace_written:
                self._trace_written = True
                self.tracer.write()  # every worker joined: their buffers are complete (recorder.py)

    def __enter__(self) -> "SchedulerCore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # On an exception in the with-block, don't wait for requests nobody will read.
        self.shutdown(wait=True, cancel=exc_type is not None)

    # -- memory --------------------------------------------------------------------------
    def _pool_for(self, worker) -> NodePool:
        node = worker.node_id
        if node is None:
            node = current_node()
            if node not in self.pools:
                node = next(iter(self.pools))
        if self.memory == "remote":
            node = self._remote_of.get(node, node)
        return self.pools[node]

    # -- metrics -------------------------------------------------------------------------
    def _warn(self, message: str, category=SchedulerWarning) -> None:
        """Warn once per distinct message (listed in ``stats()["warnings"]``): a
        :class:`SchedulerWarning` by default, ``topology.PinningWarning`` for pinning."""
        with self._warnings_lock:  # two threads with one message: one warning
            new = message not in self._warnings
            if new:
                self._warnings.append(message)
        if new:
            warnings.warn(message, category, 2)

    def _collect_request_stats(self, req: Request) -> dict:
        steps = [sum(row[k] for row in req.wsteps) for k in range(5)]
        return {
            "id": req.id,
            "name": req.name,
            "state": req.state,
            "elapsed_s": req.elapsed,
            "operators": req.n_operators,
            "tasks": sum(steps),
            "steps": {str(k): steps[k] for k in range(1, 5)},
            "packets": req.bytes.packets,
            "bytes_allocated": req.bytes.allocated,
            "peak_bytes_held": req.bytes.peak,
            "migrations": req.migrations,
            "shares": req.shares,
            "nodes": req.final_nodes if req.final_nodes is not None else [n.os_index for n in req.nodes],
            "failed_operator": req.failed_operator,
            "latency": _latency_summary(req.latencies_ns),
        }

    def stats(self) -> dict:
        """Scheduler-wide metrics (a snapshot)."""
        steps = [0] * 6
        per_node: dict = {}
        totals = {"tasks": 0, "steals": 0, "sleeps": 0, "wakeups": 0}
        loc = {"samples": 0, "pages": 0, "local_pages": 0}
        for w in self.workers:
            for k in range(1, 6):
                steps[k] += w.steps[k]
            totals["tasks"] += w.tasks
            totals["steals"] += w.steals
            totals["sleeps"] += w.sleeps
            totals["wakeups"] += w.wakeups
            loc["samples"] += w.loc_samples
            loc["pages"] += w.loc_pages
            loc["local_pages"] += w.loc_local
            key = w.node_id if w.node_id is not None else "any"
            d = per_node.setdefault(key, {"node": key, "threads": 0, "busy_s": 0.0, "released_s": 0.0, "tasks": 0})
            d["threads"] += 1
            d["busy_s"] += w.busy_ns / 1e9
            d["released_s"] += w.released_ns / 1e9
            d["tasks"] += w.tasks
        pstats = self.policy.stats()
        out = {
            "policy": self.policy.name,
            "packet_bytes": self.packet_bytes,
            "workers": len(self.workers),
            "nodes": [n.os_index for n in self.topology.cpu_nodes],
            "requests_active": len(self._active),
            "requests_done": self.requests_done,
            "steps": {str(k): steps[k] for k in range(1, 6)},
            **totals,
            "migrations": pstats.get("migrations", 0),
            "shares": pstats.get("shares", 0),
            **dict(zip(("packets", "bytes_allocated", "bytes_held"), self.bytes._collect())),
            # sampled (packet.py): at each request's new peak and at every read
            "peak_bytes_held": self.bytes._peak,
            "busy_per_node": list(per_node.values()),
            # Time in tasks, and the part of it with the GIL released (counted only while
            # the operators' timing is on: operators.released); 1 - released/busy is the
            # serial fraction of Amdahl's law (None when nothing was counted).
            "busy_s": sum(w.busy_ns for w in self.workers) / 1e9,
            "released_s": sum(w.released_ns for w in self.workers) / 1e9,
            "locality": {**loc, "local_fraction": (loc["local_pages"] / loc["pages"]) if loc["pages"] else None},
            "pool": {
                str(n): {"mapped": p.blocks_mapped, "reused": p.blocks_reused, "free_bytes": p.free_bytes}
                for n, p in self.pools.items()
            },
            "policy_detail": pstats,
            "warnings": list(self._warnings),
        }
        return out

    def reset_peak(self) -> None:
        """Restart peak-bytes tracking from the bytes held now (between experiments)."""
        self.bytes.reset_peak()


def _make_tracer(trace):
    """``trace=``: None, a Tracer, or a path whose folder is checked now (one line)."""
    if trace is None:
        return None
    from bobox_sched.trace import Tracer, check_trace_path

    if isinstance(trace, Tracer):
        return trace
    try:
        return Tracer(check_trace_path(trace))
    except (TypeError, ValueError) as e:
        raise BoboxError(str(e)) from None


def _latency_summary(samples_ns: list) -> dict | None:
    """Processing latency of the latency markers that reached a sink (ms): count, mean,
    p50, p99, max. None when no marker was measured."""
    if not samples_ns:
        return None
    import numpy as np

    a = np.asarray(list(samples_ns), dtype=np.float64) / 1e6
    return {"markers": int(a.size), "mean_ms": round(float(a.mean()), 4),
            "p50_ms": round(float(np.percentile(a, 50)), 4), "p99_ms": round(float(np.percentile(a, 99)), 4),
            "max_ms": round(float(a.max()), 4)}


class _LocalitySampler:
    """Every `every`-th packet a worker takes, ask the kernel which node the pages of
    its first column are on and count those on the worker's node (``move_pages``)."""

    def __init__(self, every: int):
        self.every = every

    def __call__(self, worker, pkt) -> None:
        worker.loc_seen += 1
        if worker.loc_seen % self.every:
            return
        worker.loc_samples += 1
        cols = getattr(pkt, "columns", None)
        if not cols:
            return
        arr = next(iter(cols.values()))
        if arr.nbytes == 0:
            return
        here = worker.node_id if worker.node_id is not None else current_node()
        pages = page_nodes(arr)
        pages = pages[pages >= 0]
        worker.loc_pages += int(pages.size)
        worker.loc_local += int((pages == here).sum())


for _name in ("submit", "map", "shutdown", "stats", "reset_peak"):
    getattr(Scheduler, _name).__doc__ = getattr(SchedulerCore, _name).__doc__
Scheduler.__init__.__signature__ = inspect.signature(SchedulerCore.__init__)
del _name

__all__ = ["OversubscriptionWarning", "Scheduler", "SchedulerCore"]
