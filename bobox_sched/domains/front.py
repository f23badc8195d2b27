"""The front of a Scheduler with domains: the user's process keeps ``submit``, handles,
results and stats; each request runs whole inside one domain process (``process.py``),
the least loaded of its node.

Layout (``layout``): ``domains="auto"`` on a GIL build gives one domain per NUMA node,
each split into contiguous CPU ranges of at most ``domain_workers`` CPUs
(``DEFAULT_DOMAIN_WORKERS``; whole cores: a core's hardware threads stay together); a
machine with at most that many CPUs, or a free-threaded
build (``sys._is_gil_enabled()`` false), keeps one in-process runtime. ``domains=N``
gives N domains spread over the nodes (a node's CPUs are cut into N / nodes ranges; with
fewer domains than nodes a domain spans several nodes and binds no memory).
``domains="off"`` is the in-process runtime.

Placement and balancing (the Bobox balancer one level up): a new request goes to the
least loaded domain (of its node, if it names one), load being the requests it runs or
holds, per worker. A domain is sent at most ``INFLIGHT_PER_WORKER`` requests per worker;
the rest wait in its list in the front, not started. When a domain ends a request it
takes the next from its own list or, if that is empty, the oldest waiting request of
another domain, of its own node first: a request that has not started *migrates* to the
domain that is free (``stats()["requests_migrated"]``). A request whose domain dies
before it started moves to another domain instead of failing. ``submit_to`` places a
request on its domain at once, past the limit, and it never migrates.

Protocol (who touches what, when):

* ``_lock`` guards ``_slots`` (the live ``_Domain`` of each slot), every domain's
  ``running`` dict (request id -> handle, the requests sent to it), ``waiting`` list
  (the not started ones), ``sending`` count, and ``_closing``. ``submit`` and a
  reader's refill take it to pick a domain and register the handle in ``running``
  (and count the send in ``sending``), then send *outside* it under the domain's own
  ``send_lock`` (a Connection is not safe for concurrent writers), then uncount it.
  ``shutdown`` waits (``_changed``) until no send is under way before it asks a domain
  to end, so that no request reaches a domain after its ``shutdown`` message;
* each domain has one reader thread, the only reader of its pipe. It blocks in
  ``recv_bytes`` holding no lock; on ``done`` it takes ``_lock`` to pop the handle,
  then completes the handle's future outside it (callbacks run on that thread);
* a domain that dies (its pipe ends before ``shutdown``) fails the requests it was
  running with :class:`DomainDied` (naming the domain and the signal or exit status),
  and its slot gets a fresh domain on the same CPUs: later requests run normally. A
  request submitted between the death and the restart goes to another domain, or
  waits for the restart if there is none (``_pick`` waits on ``_changed``);
* ``shutdown`` marks ``_closing`` (no new request), optionally cancels, and asks every
  domain to end: a domain lets its running requests finish and reports them before it
  exits (as the in-process runtime's shutdown does); with ``wait`` the front joins the
  processes. A domain whose front is gone (its pipe ended) cancels what it runs and
  exits;
* a plan's large arrays go to the domains once, through shared memory
  (``shared_arrays.py``); the front unlinks those segments once every domain process
  has exited (``_join``: at ``shutdown(wait=True)``, else on a closer thread). At start
  it removes segments left by processes that no longer exist (``shm.sweep_stale``):
  what a crashed Scheduler held.
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from collections import OrderedDict, deque
import pickle
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from bobox_sched.core import lifecycle as _lifecycle
from bobox_sched.core.errors import RequestCancelled, SchedulerShutdown
from bobox_sched.domains.process import PLAN_CACHE, boot_command
from topology.partition import DEFAULT_DOMAIN_WORKERS, domain_layout

# Requests sent to a domain per worker; the rest wait in the front, where they can still
# migrate. 2: one running and one ready per worker, so that a worker never idles while
# the front sends the next (a done message, the reader's wake-up and the send: ~0.1 ms
# here, against TPC-H requests of 10-500 ms).
INFLIGHT_PER_WORKER = 2
START_TIMEOUT_S = 120.0  # a domain imports numpy, numba and the runtime, and compiles nothing


class DomainDied(RuntimeError):
    """The domain process running a request ended without finishing it."""


def gil_enabled() -> bool:
    f = getattr(sys, "_is_gil_enabled", None)
    return True if f is None else bool(f())


def layout(topo, domains, domain_workers: int | None = None) -> list[tuple[list[int], int | None]] | None:
    """(CPUs, node or None) per domain, or None for the in-process runtime (module doc;
    ``topology.partition.domain_layout`` on this interpreter: a free-threaded build keeps
    one runtime). One-line ValueErrors for bad values."""
    return domain_layout(topo, domains, domain_workers, gil=gil_enabled())


class DomainHandle:
    """What ``submit`` returns under domains: ``RequestHandle``'s methods across a
    process boundary (``result``, ``exception``, ``done``, ``cancel``,
    ``add_done_callback``, ``state``, ``stats``, ``failed_operator``; ``domain``: the slot
    it runs on)."""

    def __init__(self, front, rid: int, name: str):
        self._front = front
        self.id = rid
        self.name = name
        self.domain: int | None = None  # the slot it runs on
        self.future: Future = Future()
        self.future.set_running_or_notify_cancel()
        self._stats: dict | None = None  # the final ones, set before the future completes
        self._failed: str | None = None
        self._t_submit = time.perf_counter()
        self._waited: float | None = None  # seconds it waited in the front before its domain got it
        self._children: list | None = None  # a request spanning domains: its parts' handles (span.py)
        self._left = 0  # parts not ended yet (front's _lock)
        self._failing = False  # a part failed: the others were cancelled (front's _lock)
        self._cancel_req = False  # cancel() was called (a send under way follows its submit with a cancel)

    def result(self, timeout: float | None = None):
        try:
            return self.future.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"request {self.id} ({self.name}) not done after {timeout} s") from None

    def exception(self, timeout: float | None = None):
        try:
            return self.future.exception(timeout)
        except FutureTimeout:
            raise TimeoutError(f"request {self.id} ({self.name}) not done after {timeout} s") from None

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> bool:
        if self.future.done():
            return False
        self._front._cancel(self)
        return True

    def add_done_callback(self, fn) -> None:
        self.future.add_done_callback(lambda _f: fn(self))

    @property
    def stats(self) -> dict:
        """The request's metrics as its domain's ``RequestHandle.stats`` gives them (the
        final ones once it ended; asked of the domain while it runs; {} if unknown), with
        ``waiting_s``: the time it waited in the front for a domain, which its
        ``elapsed_s`` includes (submit to end, as in-process)."""
        if self.future.done():
            return self._stats or {}
        return self._front._request_stats(self) or {}

    @property
    def failed_operator(self) -> str | None:
        """The operator whose exception failed the request (None if none did)."""
        return self._failed if self.future.done() else None

    @property
    def state(self) -> str:
        if not self.future.done():
            return "active"  # Request.ACTIVE's name
        exc = self.future.exception()
        return "done" if exc is None else ("cancelled" if isinstance(exc, RequestCancelled) else "failed")

    def __repr__(self) -> str:
        return f"<DomainHandle {self.id} {self.name} {self.state} domain={self.domain}>"


class _Domain:
    """One domain process and its pipe (module doc)."""

    def __init__(self, slot: int, cpus: list[int], node: int | None):
        self.slot, self.cpus, self.node = slot, cpus, node
        self.running: dict = {}
        self.waiting: deque = deque()  # _Job: not sent yet (module doc)
        self.sending = 0  # sends under way (registered in running, not yet written)
        self.send_lock = threading.Lock()
        self.pid = None
        self.workers = 0
        self.stats_waiting: dict = {}
        self.cached: OrderedDict = OrderedDict()  # plan ids the domain holds unpickled (send_lock)
        self.reader: threading.Thread | None = None
        ours, theirs = socket.socketpair()
        from multiprocessing.connection import Connection

        self.conn = Connection(ours.detach())
        fd = theirs.fileno()
        self.proc = subprocess.Popen(boot_command(fd, cpus, node), pass_fds=(fd,), close_fds=True)
        theirs.close()

    def load(self) -> float:
        """Requests it runs or holds, per worker (front's ``_lock``)."""
        return (len(self.running) + len(self.waiting)) / max(self.workers, 1)

    def full(self) -> bool:
        """Whether it has its ``INFLIGHT_PER_WORKER`` requests per worker (front's ``_lock``)."""
        return len(self.running) >= INFLIGHT_PER_WORKER * max(self.workers, 1)

    def send(self, msg) -> None:
        data = pickle.dumps(msg, protocol=5)
        with self.send_lock:
            self.conn.send_bytes(data)

    def submit(self, rid: int, pid: int, blob: bytes) -> None:
        """Send a request; its plan's bytes only if the domain's plan cache lacks them.
        ``cached`` mirrors that cache: the same LRU rule (``process.PlanCache``) applied
        to the same sequence of plan ids, in pipe order (both under ``send_lock``)."""
        with self.send_lock:
            hit = pid in self.cached
            data = pickle.dumps(("submit", rid, pid, None if hit else blob), protocol=5)
            self.conn.send_bytes(data)  # the mirror changes only once the message is out
            if hit:
                self.cached.move_to_end(pid)
            else:
                self.cached[pid] = True
                if len(self.cached) > PLAN_CACHE:
                    self.cached.popitem(last=False)

    def start(self, kwargs: dict, init: bytes | None) -> None:
        self.send(("init", kwargs, list(sys.path), init))
        if not self.conn.poll(START_TIMEOUT_S):
            self.proc.kill()
            self.proc.wait()
            self.conn.close()
            raise RuntimeError(f"domain {self.slot} (CPUs {cpu_ranges(self.cpus)}) did not start in {START_TIMEOUT_S:g} s")
        try:
            msg = pickle.loads(self.conn.recv_bytes())
        except EOFError:
            raise RuntimeError(f"domain {self.slot} (CPUs {cpu_ranges(self.cpus)}) ended while starting: "
                               f"{_ended(self.proc.wait())}") from None
        if msg[0] == "failed":  # its Scheduler(...) or domain_init raised: the same exception here
            self.proc.wait()
            raise pickle.loads(msg[1])
        _, self.pid, _, self.workers = msg


def _cancelled(h: DomainHandle) -> RequestCancelled:
    """The error of a request cancelled in the front (as ``Request``'s own)."""
    return RequestCancelled(f"request {h.id} ({h.name}) was cancelled")


def job_node_ok(job, d) -> bool:
    """Whether `job` may run on domain `d`: it names no node, or `d`'s."""
    return job.node is None or job.node == d.node


class _Job:
    """A request the front holds until a domain takes it."""

    __slots__ = ("h", "plan", "pid", "blobs", "node")

    def __init__(self, h, plan, pid, blobs, node):
        self.h, self.plan, self.pid, self.blobs, self.node = h, plan, pid, blobs, node


_FIRST = ("policy", "packet_bytes")


def _summed(stats: list[dict]) -> dict:
    """Numbers added, dicts merged key by key, lists joined, anything else the first's."""
    if not stats:
        return {}
    out: dict = {}
    for st in stats:
        for k, v in st.items():
            if k not in out:
                out[k] = _copy(v)
            elif k in _FIRST:
                continue
            else:
                out[k] = _add(out[k], v)
    return out


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    return list(v) if isinstance(v, list) else v


def _add(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        for k, v in b.items():
            a[k] = _copy(v) if k not in a else _add(a[k], v)
        return a
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    return a


def _fingerprint(plan) -> tuple:
    """What identifies a plan's content cheaply: its name, each operator's spec tuple
    (replaced whenever the operator is), its edges and placements. A plan resubmitted
    unchanged is pickled once and sent once per domain; an argument object changed in
    place after a submit is not seen (module doc of ``shared_arrays``: the same contract)."""
    return (plan.name, tuple((k, id(v)) for k, v in plan._specs.items()), tuple(plan._edges),
            tuple(sorted(plan._places.items())))


def cpu_ranges(cpus: list[int]) -> str:
    """CPU ids as text: "4-7" for a contiguous run, else "0,2,5"."""
    return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 2 and cpus == list(range(cpus[0], cpus[-1] + 1)) else \
        ",".join(map(str, cpus))


def _ended(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


class DomainFront:
    """A Scheduler's runtime split over domain processes (module doc). ``Scheduler(...,
    domains=...)`` makes one when the layout has domains."""

    def __init__(self, places: list[tuple[list[int], int | None]], kwargs: dict, topology=None, domain_init=None,
                 tracer=None):
        import cloudpickle

        self._kwargs = {k: v for k, v in kwargs.items() if k != "topology"}
        self.topology = topology  # the machine the layout was made for (each domain probes its own part)
        self._init = None if domain_init is None else cloudpickle.dumps(domain_init)
        self._places = places
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closing = False
        self._ids = itertools.count(1)
        self.restarts = 0
        self.completed = 0
        self.migrated = 0  # requests that started on another domain than the one they waited on
        self._slots: list = [None] * len(places)
        from bobox_sched.domains.shared_arrays import ArrayShare
        from bobox_sched.domains.shm import sweep_stale

        sweep_stale()
        self._share = ArrayShare(places[0][1])  # large plan arrays, sent once per node through shared memory
        self._plans: dict = {}  # id(plan) -> (weakref to it, fingerprint, plan id, {node: blob}): pickled once per node
        self._dead: dict = {}  # slot -> why: a domain that died and could not be restarted
        self._dead_pids: list = []  # pids of domains that died: their arenas go at shutdown (_unlink_made)
        self._plan_ids = itertools.count(1)
        self._bells: dict = {}  # slot -> bell segment name (channel.py), made on the first spanning request
        self._bell_segs: list = []
        self._channels: set = set()  # channel segment names of spanning requests not ended yet
        self._span_policy = self._kwargs.get("policy", "bobox") in ("bobox", "simple")
        # A traced run (trace=): each domain traces itself into a part file of a private
        # folder, written by its own Scheduler's shutdown; _join merges the parts into the
        # front's tracer once every domain has exited (chrome.merge), and writes it there
        # if it has a path. begin_window goes to every domain (a "window" message).
        self.tracer = tracer
        self._trace_dir = None
        if tracer is not None:
            import tempfile

            self._trace_dir = tempfile.mkdtemp(prefix="bobox-trace-")
            tracer.meta = {"policy": self._kwargs.get("policy", "bobox"), "pid": os.getpid(), "domains": len(places)}
            tracer.window_hooks.append(self._trace_window)
        _lifecycle.adopt(self)
        doms: list[_Domain] = []
        try:
            for i, (cpus, node) in enumerate(places):
                doms.append(_Domain(i, cpus, node))
            for d in doms:  # every process imports at the same time; then each answers
                d.start(self._domain_kwargs(d.slot), self._init)
        except BaseException:
            for d in doms:
                if d.proc.poll() is None:
                    d.proc.kill()
                d.proc.wait()
            raise
        for d in doms:
            self._slots[d.slot] = d
            self._reader(d)
        from bobox_sched.domains.shared_arrays import set_home

        set_home(self._share)  # read-only data loaded from now on goes into shared memory
        self.policy_name = self._kwargs.get("policy", "bobox")

    # -- tracing ----------------------------------------------------------------------------
    def _domain_kwargs(self, slot: int) -> dict:
        if self._trace_dir is None:
            return self._kwargs
        return dict(self._kwargs, trace=os.path.join(self._trace_dir, f"domain-{slot}.json"))

    def _trace_window(self, ns: int) -> None:
        for d in self._live():
            self._ask(d, ("window", None, ns))

    def _collect_trace(self) -> None:
        """Every domain has exited: its part is complete (written at its shutdown). Merge
        them into the front's tracer, write it where it has a path, remove the parts."""
        import shutil

        from bobox_sched.trace import chrome

        folder, self._trace_dir = self._trace_dir, None
        if folder is None:
            return
        try:
            parts = []
            for slot in range(len(self._places)):
                f = os.path.join(folder, f"domain-{slot}.json")
                if os.path.exists(f):
                    parts.append((slot, chrome.load(f)))
            self.tracer.parts = parts
            if self.tracer.path is not None:
                self.tracer.write()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # -- the reader of each domain --------------------------------------------------------
    def _reader(self, d: _Domain) -> None:
        t = d.reader = threading.Thread(target=self._read, args=(d,), name=f"bobox-domain-{d.slot}", daemon=True)
        t.start()

    def _read(self, d: _Domain) -> None:
        try:
            while True:
                try:
                    msg = pickle.loads(d.conn.recv_bytes())
                except (EOFError, OSError):
                    break
                try:
                    self._handle(d, msg)
                except Exception:  # noqa: BLE001 - one bad message (or a user callback's error) must not end the reader
                    import traceback

                    print(f"bobox: domain {d.slot}: error handling a {msg[0]!r} message:", file=sys.stderr)
                    traceback.print_exc()
        finally:
            self._lost(d)

    def _handle(self, d: _Domain, msg: tuple) -> None:
        from bobox_sched.domains.results import decode as decode_result, discard

        if msg[0] == "done":
            _, rid, ok, payload, stats = msg
            with self._lock:
                h = d.running.pop(rid, None)
                self.completed += 1
            self._refill(d)  # its freed place first: a done callback may take its time
            if h is None:
                discard(payload)
                return
            st, h._failed = stats
            if isinstance(st, dict):
                st = dict(st, waiting_s=h._waited or 0.0)
                if isinstance(st.get("elapsed_s"), (int, float)):
                    st["elapsed_s"] += h._waited or 0.0
            h._stats = st
            try:
                value = decode_result(payload)
            except Exception as e:  # noqa: BLE001 - e.g. a result class this process cannot import
                ok, value = False, RuntimeError(f"request {rid}: its result could not be read here: "
                                                f"{type(e).__name__}: {e}")
            if ok:
                h.future.set_result(value)
            else:
                h.future.set_exception(value)
        elif msg[0] == "stats":
            f = d.stats_waiting.pop(msg[1], None)
            if f is not None:
                f.set_result(msg[2])

    def _lost(self, d: _Domain) -> None:
        """`d`'s pipe ended: after shutdown, normal; else it died (module doc)."""
        from bobox_sched.domains.shm import unlink_of

        rc = d.proc.wait()
        kept: list = []  # its requests that had not started and that no other domain may run
        with self._lock:
            lost = list(d.running.values())
            d.running.clear()
            closing = self._closing
            if not closing and self._slots[d.slot] is d:
                self._slots[d.slot] = None
            orphans = list(d.waiting)
            d.waiting.clear()
            if not closing:  # it died: its arena goes at shutdown (_unlink_made)
                self._dead_pids.append(d.pid)
            if closing:
                lost += [j.h for j in orphans]
            else:  # not started: they move to another domain (module doc)
                for j in orphans:
                    ok = [o for o in self._slots if o is not None and job_node_ok(j, o)]
                    if ok:
                        min(ok, key=lambda o: (o.load(), o.slot)).waiting.append(j)
                    else:
                        kept.append(j)
            others = [o for o in self._slots if o is not None]
        if not closing:  # it died: its results nobody will read go now; its packet arena at shutdown
            unlink_of(d.pid, "-result")  # (a loan of it may be queued for a live domain; _unlink_made)
        err = None if closing else DomainDied(
            f"domain {d.slot} (pid {d.pid}, CPUs {cpu_ranges(d.cpus)}) died: {_ended(rc)}; its requests failed")
        for h in lost:
            if not h.future.done():
                h.future.set_exception(err or SchedulerShutdown("the scheduler shut down before the request ended"))
        if not closing:
            for o in others:
                self._refill(o)
        for f in list(d.stats_waiting.values()):  # a copy: an _ask that times out pops its own entry
            if not f.done():
                f.set_result(None)
        if closing:
            return
        try:  # a fresh domain on the same CPUs
            nd = _Domain(d.slot, d.cpus, d.node)
            nd.start(self._domain_kwargs(d.slot), self._init)
        except Exception as e:  # noqa: BLE001 - the slot stays empty: _pick raises for it from now on
            with self._lock:
                self._dead[d.slot] = f"domain {d.slot} (CPUs {cpu_ranges(d.cpus)}) died and could not be restarted: {e}"
                self._changed.notify_all()
            print(f"bobox: {self._dead[d.slot]}", file=sys.stderr)
            for j in kept:
                if not j.h.future.done():
                    j.h.future.set_exception(DomainDied(self._dead[d.slot]))
            return
        with self._lock:
            closed = self._closing
            if not closed:
                self._slots[d.slot] = nd
                self.restarts += 1
                nd.waiting.extend(j for j in kept if not j.h._cancel_req)
                self._changed.notify_all()
        for j in kept:
            if j.h._cancel_req and not closed and not j.h.future.done():
                j.h.future.set_exception(_cancelled(j.h))
        if closed:  # outside the lock: the new process's exit takes its time
            try:
                nd.send(("shutdown",))
            except OSError:
                pass
            nd.proc.wait()
            nd.conn.close()
            for j in kept:
                if not j.h.future.done():
                    j.h.future.set_exception(SchedulerShutdown("the scheduler shut down before the request started"))
            return
        self._reader(nd)
        self._refill(nd)

    # -- the Scheduler's methods -----------------------------------------------------------
    def _pick(self, node: int | None, slot: int | None = None) -> _Domain:
        """The least loaded live domain (of `node` if given; slot `slot` if given);
        caller holds ``_lock``."""
        while True:
            if self._closing:
                raise SchedulerShutdown("the scheduler is shut down: no new requests")
            live = [d for d in self._slots if d is not None and (node is None or d.node == node)
                    and (slot is None or d.slot == slot)]
            if live:
                return min(live, key=lambda d: (d.load(), d.slot))
            if node is not None and not any(n == node for _, n in self._places):
                raise ValueError(f"no domain on node {node}")
            wanted = [i for i, (_, n) in enumerate(self._places) if (node is None or n == node)
                      and (slot is None or i == slot)]
            if all(i in self._dead for i in wanted):
                raise DomainDied(self._dead[wanted[0]])
            self._changed.wait(1.0)  # every domain of it is restarting

    def submit_to(self, domain: int, plan, parallelism=None, ordering=None) -> DomainHandle:
        """``submit`` to domain slot `domain` (0 .. len(domains) - 1), whatever its load:
        e.g. to warm every domain up (kernels loaded, pools filled) before timing."""
        if not isinstance(domain, int) or not 0 <= domain < len(self._places):
            raise ValueError(f"domain must be 0 to {len(self._places) - 1}, got {domain!r}")
        return self.submit(plan, None, parallelism, ordering, _slot=domain)

    def submit(self, plan, node: int | None = None, parallelism=None, ordering=None, _slot=None) -> DomainHandle:
        from bobox_sched.core.plan import Plan

        if not isinstance(plan, Plan):
            raise TypeError(f"submit() takes a Plan, not {type(plan).__name__}")
        if self._closing:  # before anything is pickled or shared
            raise SchedulerShutdown("cannot submit: the scheduler is shut down")
        if parallelism is not None:  # the rewrite runs here, as in-process: its errors come from submit()
            from bobox_sched.core import extensions
            from bobox_sched.core.limits import check_degree_cap

            check_degree_cap(parallelism, "parallelism")
            plan = extensions.plan_rewrite("parallelize")(plan, degree=parallelism, ordering=ordering)
        elif ordering is not None:
            raise ValueError("ordering= needs parallelism=")
        plan.validate()
        if _slot is None and plan._lanes and self._span_policy and len(self._places) > 1:
            slots = self._span_slots(plan, node)
            if len(slots) > 1:
                return self._submit_span(plan, slots)
        fp = _fingerprint(plan)
        with self._lock:
            hit = self._plans.get(id(plan))
            if hit is None or hit[0]() is not plan or hit[1] != fp:
                if len(self._plans) >= 4 * PLAN_CACHE:  # forget the collected plans' entries
                    self._plans = {k: v for k, v in self._plans.items() if v[0]() is not None}
                hit = self._plans[id(plan)] = (weakref.ref(plan), fp, next(self._plan_ids), {})
            pid, blobs = hit[2], hit[3]
            d = self._pick(node, _slot)
        self._blob(plan, blobs, d.node)  # pickling errors come from submit(), before anything is placed
        job = _Job(DomainHandle(self, next(self._ids), plan.name), plan, pid, blobs, node)
        with self._lock:
            if d is not self._slots[d.slot] or self._closing:  # it died meanwhile, or we shut down
                d = self._pick(node, _slot)
            job.h.domain = d.slot
            if _slot is None and d.full():
                d.waiting.append(job)
                return job.h
            self._take(d, job)
        self._send(d, job)
        return job.h

    # -- requests spanning domains (span.py) ---------------------------------------------
    def _span_slots(self, plan, node) -> list[int]:
        """The domains a decomposed plan runs on: its home (the least loaded), and as
        many more as its lanes need beyond the home's workers (same node first, least
        loaded first); one slot: it runs whole in its home."""
        k = len(set(plan._lanes.values()))
        with self._lock:
            home = self._pick(node)
            need = -(-k // max(home.workers, 1))
            if need <= 1:
                return [home.slot]
            others = sorted((d for d in self._slots if d is not None and d is not home
                             and (node is None or d.node == node)),
                            key=lambda d: (d.node != home.node, d.load(), d.slot))
            return [home.slot] + [d.slot for d in others[:need - 1]]

    def _submit_span(self, plan, slots: list[int]) -> DomainHandle:
        from bobox_sched.domains.channel import create_bell
        from bobox_sched.domains.span import split

        with self._lock:
            for s in slots:
                if s not in self._bells:
                    seg = create_bell()
                    seg.close()
                    self._bell_segs.append(seg)
                    self._bells[s] = seg.name
            bells = dict(self._bells)
        parts, segs = split(plan, slots, bells)
        names = [g.name for g in segs]
        with self._lock:
            self._channels.update(names)
        parent = DomainHandle(self, next(self._ids), plan.name)
        parent.domain = slots[0]
        children = []
        try:
            for s, part in parts.items():  # at once, past the in-flight limit: the parts feed each other
                children.append(self.submit(part, None, None, None, _slot=s))
        except BaseException:
            for c in children:
                c.cancel()
            self._unlink_channels(names)
            raise
        parent._children = children
        parent._left = len(children)
        for c in children:
            c.future.add_done_callback(lambda _f, c=c: self._part_done(parent, c, names))
        return parent

    def _part_done(self, parent: DomainHandle, c: DomainHandle, names: list) -> None:
        """A part ended: the first failure fails the request and cancels the other parts;
        the last one completes it (its result: the part that set one, the home's first)."""
        exc = c.future.exception()
        with self._lock:
            parent._left -= 1
            last = parent._left == 0
            first_failure = exc is not None and not parent._failing
            if first_failure:
                parent._failing = True
        if first_failure:
            for o in parent._children:
                if o is not c and not o.done():
                    o.cancel()
        if not last:
            return
        self._unlink_channels(names)
        kids = parent._children
        st = _summed([k._stats for k in kids if isinstance(k._stats, dict)])
        if st:
            st["elapsed_s"] = max((k._stats or {}).get("elapsed_s", 0.0) for k in kids)
        st["parts"] = [{"domain": k.domain, "operators": (k._stats or {}).get("operators")} for k in kids]
        parent._stats = st
        errs = [(k, k.future.exception()) for k in kids if k.future.exception() is not None]
        if parent._cancel_req and errs:
            parent.future.set_exception(_cancelled(parent))
            return
        if errs:  # the cause, not what it caused: the other parts end cancelled or find their channel gone
            from bobox_sched.domains.channel import ChannelBroken, ChannelGone

            rank = sorted(errs, key=lambda ke: (isinstance(ke[1], (RequestCancelled, ChannelGone, ChannelBroken)),
                                                isinstance(ke[1], RequestCancelled)))
            k, e = rank[0]
            parent._failed = k._failed
            parent.future.set_exception(e)
            return
        vals = [k.future.result() for k in kids]
        parent.future.set_result(next((v for v in vals if v is not None), None))

    def _unlink_channels(self, names: list) -> None:
        from bobox_sched.domains.channel import close_reader
        from bobox_sched.domains.shm import unlink

        with self._lock:
            self._channels.difference_update(names)
        for n in names:
            try:
                close_reader(n)  # a part that never started reading never will: its producer's loans go
            except OSError:  # (its loans then stay out until that domain ends: memory, never a wrong answer)
                pass
            unlink(n)

    def _blob(self, plan, blobs: dict, node) -> bytes:
        """The plan's bytes for a domain of `node`, pickled once per node."""
        from bobox_sched.domains.shared_arrays import dumps

        blob = blobs.get(node)
        if blob is None:  # its large arrays on that node (shared_arrays)
            try:
                blob = blobs[node] = dumps(plan, self._share, node)
            except Exception as e:  # noqa: BLE001 - whatever cannot be pickled: one clear error
                raise ValueError(f"plan {plan.name!r} cannot run in a domain process: {type(e).__name__}: {e} (an "
                                 "operator holds something of this process, e.g. a StreamChannel fed from here)") from None
        return blob

    def _take(self, d: _Domain, job: _Job) -> None:
        """Register `job` as sent to `d`; caller holds ``_lock`` and then calls _send."""
        job.h.domain = d.slot
        d.running[job.h.id] = job.h
        d.sending += 1

    def _send(self, d: _Domain, job: _Job) -> None:
        """Write `job` to `d` (outside ``_lock``; after ``_take``). A pickling error
        fails the request; a dead pipe leaves it to the reader (DomainDied)."""
        h = job.h
        h._waited = time.perf_counter() - h._t_submit
        failed = False
        try:
            d.submit(h.id, job.pid, self._blob(job.plan, job.blobs, d.node))
            if h._cancel_req:  # cancelled while this was under way: its cancel may have gone first
                d.send(("cancel", h.id))
        except OSError:
            pass  # it died just now: its reader fails the handle with DomainDied
        except BaseException as e:
            failed = True
            with self._lock:
                d.running.pop(h.id, None)
            if not h.future.done():
                h.future.set_exception(e)
        finally:
            with self._lock:
                d.sending -= 1
                if d.sending == 0:
                    self._changed.notify_all()
        if failed:
            self._refill(d)  # its place is free again

    def _refill(self, d: _Domain) -> None:
        """`d` has room: send it waiting requests, its own first, then the oldest of
        another domain (same node first): migration (module doc)."""
        while True:
            with self._lock:
                if self._closing or self._slots[d.slot] is not d or d.full():
                    return
                job = d.waiting.popleft() if d.waiting else None
                if job is None:
                    others = [o for o in self._slots if o is not None and o is not d and o.waiting
                              and (job_node_ok(o.waiting[0], d))]
                    if not others:
                        return
                    src = min(others, key=lambda o: (o.node != d.node, o.waiting[0].h._t_submit))
                    job = src.waiting.popleft()
                    self.migrated += 1
                self._take(d, job)
            self._send(d, job)

    def map(self, plans, timeout: float | None = None) -> list:
        hs = [self.submit(p) for p in plans]
        return [h.result(timeout) for h in hs]

    def _cancel(self, h: DomainHandle) -> None:
        if h._children is not None:  # spanning: each part
            h._cancel_req = True
            for c in h._children:
                c.cancel()
            return
        with self._lock:
            h._cancel_req = True
            # not started: it leaves the front's list, cancelled here
            lists = [o.waiting for o in self._slots if o is not None]
            where = next(((w, j) for w in lists for j in w if j.h is h), None)
            if where is not None:
                where[0].remove(where[1])
            d = self._slots[h.domain] if h.domain is not None else None
        if where is not None:
            if not h.future.done():
                h.future.set_exception(_cancelled(h))
            return
        if d is not None and h.id in d.running:
            try:
                d.send(("cancel", h.id))
            except OSError:
                pass

    def _ask(self, d: _Domain, msg: tuple):
        """Send `msg` (its second item is replaced by a fresh token) and wait for the
        domain's ``("stats", token, value)``; None if it cannot answer."""
        f: Future = Future()
        tok = next(self._ids)
        d.stats_waiting[tok] = f
        try:
            d.send((msg[0], tok) + msg[2:])
            return f.result(30)
        except (OSError, FutureTimeout):
            return None
        finally:
            d.stats_waiting.pop(tok, None)

    def _request_stats(self, h: DomainHandle):
        with self._lock:
            d = self._slots[h.domain] if h.domain is not None else None
        return None if d is None else self._ask(d, ("rstats", None, h.id))

    def _live(self) -> list:
        with self._lock:
            return [d for d in self._slots if d is not None]

    def stats(self) -> dict:
        """The in-process Scheduler's metrics summed over the domains (``policy``,
        ``packet_bytes``: the first's; ``nodes``: their union; ``peak_bytes_held``: the
        sum of each domain's peak, an upper bound of the peak of the sum), plus
        ``domains`` (each one's own), ``restarts`` and ``completed``."""
        doms = self._live()
        per = []
        for d in doms:
            s = self._ask(d, ("stats", None))
            per.append({"domain": d.slot, "pid": d.pid, "cpus": d.cpus, "node": d.node, "workers": d.workers,
                        "running": len(d.running), "waiting": len(d.waiting), "stats": s})
        out = _summed([p["stats"] for p in per if p["stats"]])
        if "locality" in out:
            loc = out["locality"]
            loc["local_fraction"] = (loc["local_pages"] / loc["pages"]) if loc.get("pages") else None
        if "nodes" in out:
            out["nodes"] = sorted(set(out["nodes"]))
        with self._lock:
            waiting = sum(len(d.waiting) for d in doms)
        out.update({"domains": per, "restarts": self.restarts, "completed": self.completed,
                    "requests_migrated": self.migrated, "requests_waiting": waiting,
                    "workers": sum(d.workers for d in doms)})
        return out

    def reset_peak(self) -> None:
        for d in self._live():
            try:
                d.send(("reset_peak",))
            except OSError:
                pass

    def peak_rss_bytes(self) -> int:
        """The domain processes' peak resident memory, summed (each one's own peak: an
        upper bound of their simultaneous peak)."""
        return sum(r for r in (self._ask(d, ("rss", None)) for d in self._live()) if r)

    def worker_cpu(self) -> tuple[float, float]:
        """(seconds on a CPU, seconds waiting for one) of every domain's workers."""
        cpu = wait = 0.0
        for d in self._live():
            r = self._ask(d, ("cpu", None))
            if r is not None:
                cpu += r[0]
                wait += r[1]
        return cpu, wait

    @property
    def workers(self) -> list:
        """One entry per worker of every domain (``len()`` is what callers use)."""
        return [None] * sum(d.workers for d in self._slots if d is not None)

    @property
    def domains(self) -> list[dict]:
        return [{"domain": d.slot, "pid": d.pid, "cpus": d.cpus, "node": d.node, "workers": d.workers}
                for d in self._slots if d is not None]

    def shutdown(self, wait: bool = True, cancel: bool = False) -> None:
        with self._lock:
            again = self._closing
            self._closing = True
            doms = [d for d in self._slots if d is not None]
            jobs = [(d, j) for d in doms for j in d.waiting]  # not started: sent now, or cancelled
            for d in doms:
                d.waiting.clear()
            if not cancel:
                for d, j in jobs:
                    self._take(d, j)
            self._changed.notify_all()
        for d, j in jobs:
            if cancel:
                if not j.h.future.done():
                    j.h.future.set_exception(_cancelled(j.h))
            else:
                self._send(d, j)
        with self._lock:  # no request may follow a domain's "shutdown" (module doc)
            while any(d.sending for d in doms):
                self._changed.wait()
        from bobox_sched.domains.shared_arrays import set_home

        set_home(None, self._share)  # data loaded from now on stays in this process
        if again:  # a second shutdown: only the waiting (outside the lock: the readers need it)
            if wait:
                self._join(doms)
            return
        for d in doms:
            if cancel:
                for rid in list(d.running):
                    try:
                        d.send(("cancel", rid))
                    except OSError:
                        pass
            try:
                d.send(("shutdown",))  # it finishes its running requests, reports them, then exits
            except OSError:
                pass
        if wait:
            self._join(doms)
        else:  # the shared arrays go once the domains that map them are gone
            threading.Thread(target=self._join, args=(doms,), name="bobox-domains-closer").start()

    def _join(self, doms: list) -> None:
        """Wait for the domain processes and their readers (so every handle is complete),
        then unlink the shared arrays. A done callback that shuts down runs on a reader:
        that reader cannot wait for itself, nor for its domain (whose last messages only it
        reads), so that one domain is left to end on its own."""
        me = threading.current_thread()
        for d in doms:
            if d.reader is me:
                continue
            d.proc.wait()
            if d.reader is not None:
                d.reader.join()
        own = [d for d in doms if d.reader is me]
        if not own:
            self._collect_trace()
        self._unlink_channels(list(self._channels))
        for seg in self._bell_segs:
            seg.unlink()
        if not own:
            self._unlink_made(doms)
        else:  # what the domains made and the shared arrays go once that domain has ended too
            threading.Thread(target=lambda: (own[0].proc.wait(), self._collect_trace(), self._unlink_made(doms)),
                             name="bobox-domains-closer").start()

    def _unlink_made(self, doms: list) -> None:
        """Every domain has ended: what they made (results never read, packet arenas,
        also of domains that died before: a loan of theirs could still be queued for a
        live domain until now) and the shared arrays go."""
        from bobox_sched.domains.shm import unlink_of

        with self._lock:
            dead = list(self._dead_pids)
        for pid in [d.pid for d in doms] + dead:
            unlink_of(pid)
        self._share.close()

    def __repr__(self) -> str:
        return f"<DomainFront policy={self.policy_name!r} domains={len(self._places)} workers={len(self.workers)}>"

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # as in-process: on an exception in the with-block, don't wait for requests nobody will read
        self.shutdown(wait=True, cancel=exc_type is not None)


def make_front(args: tuple, kwargs: dict, domains, domain_workers):
    """What ``Scheduler(..., domains=, domain_workers=)`` runs on: a DomainFront, or None
    for the in-process runtime (the layout has no domains)."""
    if args:
        raise TypeError("Scheduler(domains=...) takes keyword arguments only")
    init = kwargs.pop("domain_init", None)
    if init is not None and not callable(init):
        raise TypeError(f"domain_init must be a callable, got {type(init).__name__}")
    topo = kwargs.get("topology")
    if topo is None:
        import topology

        topo = topology.probe()
    places = layout(topo, domains, domain_workers)
    if places is None:
        return None
    if kwargs.get("topology") is not None:
        raise ValueError("Scheduler(domains=...) probes each domain's machine itself: pass no topology")
    from bobox_sched.core.scheduler import _make_tracer

    tracer = _make_tracer(kwargs.pop("trace", None))  # the path checked before any domain starts
    return DomainFront(places, kwargs, topo, init, tracer)


__all__ = ["DEFAULT_DOMAIN_WORKERS", "DomainDied", "DomainFront", "DomainHandle", "cpu_ranges", "gil_enabled", "layout",
           "make_front"]
