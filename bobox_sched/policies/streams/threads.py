"""Threads of the ``streams`` policy: scheduler threads with their per-thread record
(Schneider & Wu L301-305, L451; [OSS] ``ScheduleThread``), operator threads (a source's
own thread, a dedicated port thread: threads the scheduler does not own, L168), the NUMA
order scheduler threads are pinned in, and the stack/recursion set-up that lets
reSchedule nest through a deep pipeline.

Protocol of a scheduler thread's record (who touches what, when):

* ``suspended``, ``shutdown``, ``ports_closed``: written by the controller (the elastic
  driver, the scheduler's shutdown), read by the owner once per tuple and once per
  ``findWorkBlocking`` round. They are per-thread *copies* of process-wide conditions,
  so the owner's loop never reads a cache line that every thread reads (L301-307). A
  wake-up (``notify_*``) writes the flag under ``cond``'s lock and notifies ``cond``;
  ``suspend()`` re-checks the flags under that lock before each wait, so a wake-up is
  never lost. Setting ``suspended`` needs no lock: the owner sees it at its next check
  (the scheduler is non-preemptive: the thread finishes its tuple first).
* ``in_suspension`` (owner writes: true while parked in ``suspend()``), ``active``
  (owner sets it every ``findWorkBlocking`` round: "not stuck in operator code"; the
  controller clears it every period) and ``suspendable`` (controller) are read by the
  controller to tell a thread that did not suspend from one that did.
* ``executed`` is the owner's count of tuples executed; the controller sums the counts
  of all threads once per period (plain int reads: a stale value moves a tuple into the
  next period, nothing more).
* ``block(delay)`` and ``suspend()`` are real blocking waits on the record's condition
  variable (L317: not ``nanosleep``).

Process-wide settings (who may change them, and how they come back):

* ``threading.stack_size`` is swapped only by ``start_deep``, under ``_stack_lock``: set,
  start the thread, put the old size back at once (``Thread.start`` returns once the new
  thread runs), so two of our starts never restore each other's value. A thread that
  *other* code starts inside that window (a few microseconds to a millisecond per deep
  start) still gets the large stack: Python has no per-thread stack size, so this race
  cannot be closed from here. It costs that thread address space only (a stack is
  committed as it is touched).
* ``sys.setrecursionlimit``: a scheduler whose plans nest deeper than the limit allows
  raises it and *holds* the raise (``ensure_recursion(depth, holder)``, one holder per
  policy) until every thread of that scheduler ended (``release_recursion``, from its
  thread group's ``when_quiet``: a thread still deep in a nested execution never sees
  the limit drop under it). Each hold records the limit its plans need, so releasing one
  keeps the others' needs; the last release puts back the limit from before the first
  hold. ``_rec_needs``, ``_rec_base`` and ``_rec_set`` are guarded by ``_rec_lock``. A
  limit that someone else set while holds existed is theirs: it is left alone, then and
  at the last release.

GIL and free-threaded builds (``core/sync.py``): the flags are plain attribute stores
and loads, atomic with or without the GIL. They are *signals* that carry no data: an
owner that sees ``suspended``, ``shutdown`` or ``ports_closed`` stops, parks or leaves,
and reads nothing the controller stored before setting it; a stale read only delays
that by one tuple or one ``findWorkBlocking`` round. So they need no fence. Where a
wake-up must not be lost (``suspend``, ``block``, ``notify_*``) the flag is written and
re-read under ``cond``'s lock, which orders it in both builds.
"""

from __future__ import annotations

import sys
import threading

from bobox_sched.core.lifecycle import RuntimeThread
from bobox_sched.core.operator import Context
from bobox_sched.core.packet import Packet
from bobox_sched.core.worker import Worker

# Stack of every thread that may execute operators through reSchedule: an execution nests
# execute -> process -> send -> push -> reSchedule -> execute ... once per operator of a
# pipeline whose queues are full, so a 1,000-operator pipeline with queue capacity 1 nests
# 1,000 deep. Pure-Python calls need no C stack since 3.11 (measured: a 5,000-deep chain of
# such calls ran in a 1 MiB thread stack on 3.11-3.13); operators that call back through C
# (numba dispatch, properties, __call__) do. 256 MiB is the spec's figure (section 5.1): it
# is address space, committed only as it is touched.
DEEP_STACK_BYTES = 256 * 1024 * 1024
# Python frames per operator of nesting (deliver, reSchedule, execute, process, on_packet,
# send, with room for the operator's own helpers), for sys.setrecursionlimit.
FRAMES_PER_OPERATOR = 16

_stack_lock = threading.Lock()

_rec_lock = threading.Lock()
_rec_needs: dict = {}  # holder -> the recursion limit its plans need
_rec_base: int | None = None  # the limit before the first hold (None: no hold)
_rec_set: int | None = None  # the limit we set last, while holds exist


def start_deep(thread: threading.Thread, stack_bytes: int = DEEP_STACK_BYTES) -> None:
    """Start `thread` with a stack of at least `stack_bytes` (module doc: the process-wide
    size is swapped and put back at once, under ``_stack_lock``). The old size is read by
    the call that sets the new one: ``threading.stack_size()`` without an argument sets
    the size to 0 as it reads it."""
    with _stack_lock:
        try:
            old = threading.stack_size(stack_bytes)
        except (ValueError, RuntimeError):  # platform refuses: keep the default
            thread.start()
            return
        try:
            if old > stack_bytes:
                threading.stack_size(old)  # larger already: keep it
            thread.start()
        finally:
            threading.stack_size(old)


def ensure_recursion(depth_ops: int, holder) -> bool:
    """Let reSchedule nest through `depth_ops` operators: raise the recursion limit if it
    is below what that needs, held by `holder` until ``release_recursion(holder)``
    (module doc). Returns True when `holder` took its first hold: the caller arranges
    the release."""
    global _rec_base, _rec_set
    want = 1000 + FRAMES_PER_OPERATOR * depth_ops
    with _rec_lock:
        cur = sys.getrecursionlimit()
        if not _rec_needs:
            if cur >= want:
                return False  # enough without us: nothing to hold, nothing to give back
            _rec_base = cur
        first = holder not in _rec_needs
        _rec_needs[holder] = max(_rec_needs.get(holder, 0), want)
        if cur < want:
            sys.setrecursionlimit(want)
            _rec_set = want
        return first


def release_recursion(holder) -> None:
    """`holder`'s threads all ended: drop its hold; lower the limit to what the other
    holds need, or to the limit before the first hold once none is left, unless someone
    else set the limit meanwhile (module doc)."""
    global _rec_base, _rec_set
    with _rec_lock:
        if _rec_needs.pop(holder, None) is None:
            return
        cur = sys.getrecursionlimit()
        target = max([_rec_base, *_rec_needs.values()])
        if cur == _rec_set and target < cur:
            try:
                sys.setrecursionlimit(target)
                _rec_set = target
            except RecursionError:  # called deeper than `target` frames: leave it raised
                pass
        if not _rec_needs:
            _rec_base = _rec_set = None


class StreamsContext(Context):
    """The context of a thread of policy ``streams``: also says which input port is being
    executed, ``ctx.port`` (its name, as the README documents and as ``on_packet``'s
    `port` is under every policy; None when the operator runs without a tuple: a source,
    a ``reschedule()``). An operator with many inputs may read only that port instead of
    polling all of them (the other ports' buffers are empty: each execution hands the
    operator one tuple). ``port_index`` is its index in ``task.inputs`` (-1: none), the one
    store per tuple the runtime makes; the name is looked up only when asked for. Other
    policies' ``ctx.port`` is None (``Context.port``)."""

    __slots__ = ("port_index",)

    def __init__(self, worker, scheduler):
        super().__init__(worker, scheduler)
        self.port_index = -1

    @property
    def port(self) -> str | None:
        j = self.port_index
        return self.task.inputs[j] if j >= 0 and self.task is not None else None

    def send_many(self, port: str, packets) -> bool:
        """``Context.send_many`` in one step: the packets join the output's batch at once
        (``StreamsBase.deliver_many``); a send here never waits in an outbox."""
        t = self.task
        try:
            i = t.openidx[port]
        except KeyError:
            return super().send_many(port, packets)  # the errors send raises (closed, unknown)
        packets = list(packets)
        if not packets:
            return True
        if len(set(map(type, packets))) != 1 or packets[0].__class__ is not Packet:
            if not all(isinstance(p, Packet) for p in packets):
                return super().send_many(port, packets)  # raises send's error at the first non-packet
        t.idle = 0
        t.req.policy.deliver_many(self.worker, t, i, packets)
        return True


class PortContext(StreamsContext):
    """The context of an operator whose input ports run concurrently (declared
    ``max_parallelism > 1``): ``recv`` and ``has_input`` see only the port this thread is
    executing (``port_index``), so two threads in one operator never take each other's
    tuples. Operators without that declaration get a :class:`StreamsContext`."""

    __slots__ = ()

    def recv(self, port: str):
        task = self.task
        if task.inidx.get(port, -2) != self.port_index:
            if port not in task.inidx:
                return super().recv(port)  # raises the unknown-port error
            return None
        return super().recv(port)

    def has_input(self, port: str) -> bool:
        task = self.task
        if task.inidx.get(port, -2) != self.port_index and port in task.inidx:
            return False
        return super().has_input(port)

    def recv_many(self, port: str, limit: int | None = None) -> list:
        task = self.task
        if task.inidx.get(port, -2) != self.port_index and port in task.inidx:
            return []
        return super().recv_many(port, limit)


class StreamsWorker(Worker):
    """A scheduler thread (runs Fig. 3's ``schedule()`` through the worker loop: the
    policy's ``next_task`` is ``findWorkBlocking``, its ``run_task`` executes and drains
    the port) with its thread record."""

    is_scheduler_thread = True

    def __init__(self, scheduler, wid: int, node=None, cpus=None, stack_bytes: int = DEEP_STACK_BYTES):
        super().__init__(scheduler, wid, node, cpus)
        self.ctx = StreamsContext(self, scheduler)
        self.cctx = PortContext(self, scheduler)
        self.stack_bytes = stack_bytes
        self.suspended = False
        self.shutdown = False
        self.ports_closed = False
        self.active = False
        self.suspendable = True
        self.in_suspension = False
        self.cond = threading.Condition(threading.Lock())
        self.executed = 0  # tuples executed by this thread
        self.suspensions = 0
        self.reschedules = 0  # reSchedule lock holds that executed tuples
        self.item = None  # the tuple findWorkBlocking popped, for run_task
        self.hint = None  # the port this thread last pushed a batch into (dynamic.follow_pushed)

    def start(self) -> None:
        start_deep(self.thread, self.stack_bytes)

    # -- owner side --------------------------------------------------------------------
    def finished(self) -> bool:
        return self.shutdown or self.ports_closed

    def suspend(self) -> None:
        """Park until woken (or shut down)."""
        self.in_suspension = True
        self.suspensions += 1
        with self.cond:
            while self.suspended and not self.shutdown and not self.ports_closed:
                self.cond.wait()
        self.in_suspension = False

    def block(self, delay_s: float) -> None:
        """A timed wait on the record's condition variable (woken early by notify_*)."""
        with self.cond:
            if not (self.shutdown or self.ports_closed):
                self.cond.wait(delay_s)

    # -- controller side ---------------------------------------------------------------
    def notify_suspended(self) -> None:
        self.suspended = True

    def notify_wakeup(self) -> None:
        with self.cond:
            self.suspended = False
            self.cond.notify()

    def notify_ports_closed(self) -> None:
        with self.cond:
            self.ports_closed = True
            self.cond.notify()

    def notify_shutdown(self) -> None:
        with self.cond:
            self.shutdown = True
            self.cond.notify()


class OpThread:
    """A thread the scheduler does not own: a source operator's own thread, or a port's
    dedicated thread. It may execute operators (through reSchedule), so it looks like a
    worker to the runtime (a context, a node for packet memory, counters) but has no
    thread record: ``isFinished``/``isSuspended`` read the global values (L422)."""

    is_scheduler_thread = False

    def __init__(self, scheduler, name: str, target, args=(), deep: bool = True):
        self.id = -1
        self.scheduler = scheduler
        self.node = None
        self.node_id = None
        self.cpus = None
        self.ctx = StreamsContext(self, scheduler)
        self.cctx = PortContext(self, scheduler)
        self.locality_sampler = scheduler._locality_sampler
        self.last_req = None
        self.executed = 0
        self.reschedules = 0
        self.loc_seen = self.loc_samples = self.loc_pages = self.loc_local = 0
        self.deep = deep
        self.thread = RuntimeThread(target, name, (self, *args), group=getattr(scheduler, "_thread_group", None))

    def start(self) -> None:
        if self.deep:
            start_deep(self.thread)
        else:
            self.thread.start()


def placement(topology, n: int, order: str = "fill") -> list:
    """The NUMA node of each of `n` scheduler threads, in thread order: ``"fill"`` fills
    one node's CPUs before the next, ``"interleave"`` deals threads round-robin over the
    nodes. Threads beyond the CPU count wrap around. Since the elastic level suspends the
    highest-numbered threads first, a level of k uses the first k places."""
    nodes = list(topology.cpu_nodes)
    if order == "interleave":
        return [nodes[i % len(nodes)] for i in range(n)]
    slots = [node for node in nodes for _ in node.cpus]
    return [slots[i % len(slots)] for i in range(n)]


__all__ = ["DEEP_STACK_BYTES", "OpThread", "PortContext", "StreamsContext", "StreamsWorker", "ensure_recursion", "placement",
           "release_recursion", "start_deep"]
