"""Input ports of the ``streams`` policy: one SPSC queue per operator input port with its
producer and consumer try-locks (Schneider & Wu Fig. 2's ``SPSCEnforcer``: the runtime's
one ``core.port.Port``, whose ``push``/``take`` are Fig. 2's), the port records, the table
of registered ports (``queues_table``) and ``freePorts``, the LRU free list, plus
``find_work_non_blocking`` (Fig. 4), the one algorithm that walks that list.

Protocol (who may touch what, when):

* A record's queue ``q`` is a ``Port`` (``core/port.py`` states its protocol): a deque
  *without* ``maxlen`` (``maxlen`` would silently drop the oldest tuple). Only the holder
  of ``prod`` appends, and only after checking ``len(q) < capacity`` under ``prod``; only
  the holder of ``cons`` pops. The consumer can only shrink the queue, so the producer's
  check can only be pessimistic: ``len(q) <= capacity`` always (the paper's "size
  field" variant, L428).
* ``prod`` and ``cons`` are ``threading.Lock`` objects used as the paper's atomic flags:
  ``acquire(False)`` is one C-level test-and-set (``prodTryLock``/``consTryLock``),
  ``release()`` the unlock. A plain ``if not flag: flag = True`` would not be atomic (the
  GIL may switch threads between the two bytecodes). ``Port.push`` releases ``prod`` on
  both paths: erratum E1 (Fig. 2 returns true without ``prodUnlock()``).
* ``cons`` is what makes a port exclusive: the one thread holding it is the only one that
  may pop from the queue and execute the port, so tuples of a stream are executed in
  the order they were pushed (requirement R2). An operator with several input ports and
  no declared parallelism also has a *state lock* (``PortRecord.mutex``, shared by its
  ports): a thread must hold it as well to execute any of those ports, so one thread at a
  time runs inside the operator (SPL's automatic state lock, L592).
* ``freePorts`` is a ``deque``: ``popleft`` takes the head, ``append`` puts at the tail
  (E2: the L426 wording "pop from the back, push to the front" contradicts L313 and the
  Boost FIFO it uses). Each is one atomic step under the GIL and internally locked in the
  free-threaded build, so the list needs no lock; a pop on an empty list raises
  ``IndexError``, the paper's failed pop. A port is always either on the list exactly
  once or *checked out* by exactly one thread (popped, and not pushed back yet).
* ``PortTable.ports`` (``queues_table``) is written only by ``register``/``retire``
  under ``PortTable.lock``, before a request's sources start and after it ended; the
  hot path never reads it: a port record carries its queue (OSS keeps an index on the
  port) and an operator's outputs carry the receiving port records.
* Retirement is lazy (ports come and go with requests, unlike the paper's PE whose table
  is fixed at start-up): ``retire`` sets ``retired`` and empties the queue; whoever pops
  a retired port from ``freePorts``, or would push a checked-out retired port back,
  drops it instead.

GIL: nothing here relies on the GIL beyond the atomicity of deque and lock operations,
which the free-threaded build also provides; ``len(queue)`` read under ``prod`` needs
no more than a non-torn read of the deque length (the sync module's inventory).
"""

from __future__ import annotations

import itertools
import threading
from collections import deque

from bobox_sched.core.port import EMPTY, Port
from bobox_sched.policies.streams.batching import FLUSH

# A queue item that runs the port's operator without input (its ctx.reschedule()).
RERUN = object()


class _RetiredOperator:
    """What a retired port's ``task`` becomes: the task of a finished operator with no
    ports. Threads that still hold the port (popped from the free list before it was
    retired, or a sender's reSchedule) read ``task.finished`` first and drop what they
    carry; the real operator, and through it its state and its packets, is released with
    the request (a port of the LRU free list is dropped only when popped: until then it must
    not pin the operator)."""

    finished = True
    finishing = True
    name = "(retired)"
    inputs = ()
    inidx: dict = {}


RETIRED_OP = _RetiredOperator()


class PortRecord:
    """One input port of one operator of one request: what a tuple's ``port()`` names.

    ``task`` (the operator's ``core.task.Task``) and ``index`` say what to execute,
    ``rec`` is the operator's record (``runtime.OpRecord``); ``q`` is the port's queue, a ``core.port.Port`` used as the
    paper's SPSCEnforcer (``push``, ``take``, ``prod``, ``cons``);
    ``mutex`` the operator's state lock (None for a single-input operator, or one that
    declared ``max_parallelism > 1``: it synchronises itself, its ports run
    concurrently); ``req`` the request (read by the worker loop like a task's).
    ``pid`` is the registration number (for tables and tests only)."""

    __slots__ = ("task", "rec", "index", "q", "mutex", "req", "pid", "retired", "concurrent", "dq")

    def __init__(self, task, rec, index: int, capacity: int, mutex, concurrent: bool):
        self.task = task
        self.rec = rec
        self.index = index
        self.q = Port(capacity)
        self.mutex = mutex
        self.concurrent = concurrent
        self.req = task.req
        self.pid = -1
        self.retired = False
        self.dq = None  # the dedicated model's lock and conditions around q (models._Blocking)

    @property
    def name(self) -> str:
        task = self.task
        return f"{task.name}.{task.inputs[self.index]}" if task is not RETIRED_OP else f"(retired).{self.index}"

    def __repr__(self) -> str:
        return f"<Port {self.pid} {self.name}{' retired' if self.retired else ''}>"


class PortTable:
    """``queues_table`` and ``freePorts`` of the process: every registered port, and the
    LRU free list of those not checked out by a thread."""

    def __init__(self):
        self.lock = threading.Lock()  # registration and retirement only
        self.ports: dict[int, PortRecord] = {}  # queues_table: pid -> record (live ports)
        self.free: deque = deque()  # freePorts: head = least recently used
        self._ids = itertools.count()

    def register(self, records) -> None:
        """Add a request's ports (before its sources start): into the table and at the
        tail of the free list."""
        with self.lock:
            for r in records:
                r.pid = next(self._ids)
                self.ports[r.pid] = r
                self.free.append(r)

    def retire(self, records) -> int:
        """The request ended: its ports leave the table now and the free list lazily
        (dropped by whoever pops them or would push them back). Queued tuples are
        dropped; returns how many (a batch's items each), RERUN and FLUSH markers not counted (0 for a request that
        completed: every tuple ran)."""
        dropped = 0
        with self.lock:
            for r in records:
                r.retired = True
                self.ports.pop(r.pid, None)
                for t in list(r.q):
                    if t.__class__ is list:  # a batch (batching.py): each of its items
                        dropped += len(t)
                    elif t is not RERUN and t is not FLUSH:
                        dropped += 1
                r.q.clear()
                r.task = RETIRED_OP  # see _RetiredOperator
        return dropped

    def __len__(self) -> int:
        return len(self.ports)

    def give_back(self, port: PortRecord) -> None:
        """Push a checked-out port at the tail (it was used most recently), or drop it if
        its request ended meanwhile."""
        if not port.retired:
            self.free.append(port)


def try_lock(port: PortRecord) -> bool:
    """Take `port`'s consumer lock and its operator's state lock without waiting: True
    with both held (release with ``unlock``), False with neither."""
    cons = port.q.cons
    if not cons.acquire(False):
        return False
    m = port.mutex
    if m is not None and not m.acquire(False):
        cons.release()
        return False
    return True


def try_take(port: PortRecord):
    """The test of Fig. 4 for one port: its consumer lock (and its operator's state lock)
    taken and a tuple popped, or EMPTY with both locks released. (``try_lock`` inlined:
    the free-list walk calls this for every port it passes.)"""
    q = port.q
    cons = q.cons
    if not cons.acquire(False):
        return EMPTY
    m = port.mutex
    if m is not None and not m.acquire(False):
        cons.release()
        return EMPTY
    item = q.take()
    if item is EMPTY:
        if m is not None:
            m.release()
        cons.release()
    return item


def unlock(port: PortRecord) -> None:
    """Release what ``try_take`` took: the operator's state lock, then the port's
    consumer lock."""
    m = port.mutex
    if m is not None:
        m.release()
    port.q.cons.release()


def find_work_non_blocking(table: PortTable):
    """Fig. 4's findWorkNonBlocking: a port that is on the free list, not taken by
    another thread, and has a tuple. Returns ``(port, tuple)`` with the port checked out
    and its consumer lock (and state lock) held, or None.

    Priming read of the head, then a walk that pushes every port it could not use to the
    tail and stops on the first failed pop or when it meets the first port again. Any
    failure caused by contention abandons the search: another thread succeeded, so some
    thread finds the work (L381). Two additions, both for ports that come and go with
    requests: retired ports popped are dropped (and a retired first port is replaced by
    the next one), and the walk gives up after one circuit of the registered ports (+1)
    even if it never meets the first port again, which another thread may be holding
    checked out (the paper's fixed table makes that rare; here its request may end)."""
    free = table.free
    while True:
        try:
            first = free.popleft()
        except IndexError:
            return None
        if not first.retired:
            break
    item = try_take(first)
    if item is not EMPTY:
        return first, item
    free.append(first)
    budget = len(table.ports) + 1
    while budget > 0:
        budget -= 1
        try:
            port = free.popleft()
        except IndexError:
            return None
        if port.retired:
            continue  # lazily retired: dropped
        item = try_take(port)
        if item is not EMPTY:
            return port, item
        free.append(port)
        if port is first:
            break  # once round the list
    return None


__all__ = ["EMPTY", "RERUN", "PortRecord", "PortTable", "find_work_non_blocking", "try_lock", "try_take",
           "unlock"]
