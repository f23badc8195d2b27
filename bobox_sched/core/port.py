"""The one input port: where a packet changes hands between two operators, under every
policy.

A :class:`Port` is one input of one operator of one request: a bounded FIFO of packets
and punctuations (a ``deque`` subclass, so that the hand-off itself, ``append`` and
``popleft``, stays one C call), its end-of-stream flag, the senders waiting for room,
and the producer and consumer try-locks of Schneider & Wu's ``SPSCEnforcer``. Every
policy queues an operator's input in Ports:

* the core policies (``bobox``, ``simple``): ``task.inq[j]`` is input j's Port (``task``
  a ``core.task.Task``); ``task._deliver`` offers into it (:meth:`offer`, its common case inlined; registering
  the sender in ``waiters`` when full), ``take_input``/``Context.recv`` pop it and wake
  the waiters (:meth:`take_waiters`), the end of stream is :meth:`close`, the request's
  end :meth:`drop`;
* ``ordered``: a stateless, stateful or sink stage's worklist is a Port of units (one
  producer, the upstream's drainer; its consumers, the stage's allotted workers, may be
  several: each ``popleft`` is atomic and they only shrink it, so the producer's check
  holds), whose waiters are the upstream stage waiting for room (``stage.py``);
* ``streams``: each port record's queue (``PortRecord.q``) is a Port whose ``prod`` and
  ``cons`` try-locks are the paper's flags (:meth:`push`, :meth:`take`), and ``execute``
  hands the one tuple it runs to the operator through ``task.inq[j]``, as above;
  ``dedicated`` blocks a producer on a full one under its own condition.

The *outbox* (what a sender could not deliver yet, kept in per-edge order across its
outputs) belongs to the sending operator, not to a port: ``task.outbox``.

Protocol (who may touch what, when):

* Items: one producer at a time appends (the core: the upstream operator's token holder;
  ``streams``: the holder of ``prod``), one consumer at a time pops (the running
  operator's thread; ``streams``: the holder of ``cons``). Only the producer grows the
  buffer, so its check ``len(port) >= capacity`` can only be pessimistic:
  ``len(port) <= capacity`` always. ``capacity`` is fixed at construction.
* ``closed``: set once, by the producer, after its last item; the consumer reads it
  after finding the buffer empty (:meth:`ended`). An end of stream is never queued.
* ``waiters``: any producer appends itself after a rejected offer and then looks at the
  buffer again (:meth:`offer`); the consumer drains it after a pop
  (:meth:`take_waiters`). Either the drain sees the waiter or the waiter's second look
  sees the room: no sender waits for room that exists. A sender may be woken twice.
* ``prod``/``cons``: ``threading.Lock`` used as atomic flags, ``acquire(False)`` only
  (one C-level test-and-set); whoever holds ``cons`` is the one thread that may pop
  and execute the port, so items are executed in the order they were pushed.
* :meth:`drop` (the request ended): any thread empties the buffer and the waiters; a
  producer that raced past the check appends to a buffer nobody reads, which is dropped
  with the request.

The atomicity each step needs (a deque ``append``/``popleft``/``len``/``clear``, an
attribute store, a lock's test-and-set) and the one fence a free-threaded build needs
(between a waiter's append and its second look: ``sync.fence``) are the sync module's:
``bobox_sched/core/sync.py`` lists them.
"""

from __future__ import annotations

import threading
from collections import deque

from bobox_sched.core.sync import FENCED, fence

# What take() returns when there is nothing to pop.
EMPTY = object()


def register_waiter(waiters: deque, sender) -> None:
    """Append `sender` to a port's `waiters` unless it is registered last already
    (``Port.no_room``; also a partitioned ordered stage's queues, whose waiters follow
    the Port's protocol)."""
    try:
        fresh = waiters[-1] is not sender
    except IndexError:  # empty, or a consumer took the last one meanwhile
        fresh = True
    if fresh:
        waiters.append(sender)


def take_waiters(waiters: deque) -> list:
    """Consumer: pop every registration of a port's `waiters`, each once (several
    consumers may drain at the same time: each ``popleft`` goes to one of them)."""
    out = []
    while waiters:
        try:
            out.append(waiters.popleft())
        except IndexError:  # another drainer took the last one
            break
    return out


class Port(deque):
    """One operator input's bounded buffer (module doc). ``len(port)`` and ``bool(port)``
    are the buffer's; the hand-off is ``append`` and ``popleft``."""

    __slots__ = ("capacity", "closed", "waiters", "prod", "cons")

    def __init__(self, capacity: int):
        if capacity.__class__ is not int or capacity < 1:
            raise ValueError(f"port capacity must be a positive integer, got {capacity!r}")
        super().__init__()
        self.capacity = capacity
        self.closed = False
        self.waiters: deque = deque()
        self.prod = threading.Lock()
        self.cons = threading.Lock()

    # -- the core's hand-off ---------------------------------------------------------------
    def offer(self, item, sender) -> bool:
        """Producer: append `item` unless the buffer is full; when full, register `sender`
        as a waiter (woken by the consumer's next pop) and look again. False: not taken,
        `sender` waits."""
        if len(self) >= self.capacity and self.no_room(sender):
            return False
        self.append(item)
        return True

    def no_room(self, sender) -> bool:
        """Producer, having found the buffer full: register `sender` as a waiter, then look
        again. True: still full (`sender` is woken by the consumer's next pop); False:
        room appeared meanwhile, go on (the registration stays: a spurious wake-up).
        A sender already registered last is not registered again (a port has one
        producer: a drainer that retries does not pile up wake-ups); if a consumer takes
        that registration meanwhile, it wakes the sender anyway."""
        register_waiter(self.waiters, sender)
        if FENCED:  # the registration above before the length read below (sync module)
            fence()
        return len(self) >= self.capacity

    def take_waiters(self) -> list:
        """Consumer, after a pop (or a drop): the senders that waited for room, each
        once; the caller schedules them."""
        return take_waiters(self.waiters)

    def close(self) -> None:
        """Producer: the end of stream, after its last item."""
        self.closed = True

    def ended(self) -> bool:
        """Consumer: the end of stream came and every item before it was taken."""
        return self.closed and not self

    def drop(self) -> None:
        """Empty the buffer and the waiters (the request ended): one atomic step each."""
        self.clear()
        self.waiters.clear()

    # -- streams' SPSCEnforcer (Schneider & Wu Fig. 2) ----------------------------------------
    def push(self, item) -> bool:
        """Append `item` if the producer lock is free and the buffer not full; False
        otherwise (full, or another producer holds the lock), without retrying. The
        producer lock is released on both paths (erratum E1)."""
        prod = self.prod
        if not prod.acquire(False):
            return False
        if len(self) < self.capacity:
            self.append(item)
            prod.release()
            return True
        prod.release()
        return False

    def take(self):
        """The oldest item, or EMPTY. Only the holder of ``cons`` calls this (a request
        that ends may empty the buffer concurrently: that is a failed pop too)."""
        if not self:
            return EMPTY
        try:
            return self.popleft()
        except IndexError:
            return EMPTY

    def __repr__(self) -> str:
        return f"<Port {len(self)}/{self.capacity}{' closed' if self.closed else ''}>"

    # deque's own equality and hashing would compare contents: a port is an identity.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


class CountingPort(Port):
    """A Port that also counts the rows and the bytes of the packets popped from it
    (``rows``, ``bytes``: ``Packet.nbytes``, its columns' bytes): the core policies'
    ports while a run is traced (``bobox_sched/trace``), so that a task's trace slice
    says how many rows and bytes it took. Only the consumer pops, so only it writes
    ``rows`` and ``bytes`` (one writer each; the traced worker loop reads them on the
    same thread). A run without a tracer makes plain Ports: their ``popleft`` stays
    deque's C call."""

    __slots__ = ("rows", "bytes")

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.rows = 0
        self.bytes = 0

    def popleft(self):
        item = deque.popleft(self)
        self.rows += getattr(item, "nrows", 0)  # a punctuation has no rows
        self.bytes += getattr(item, "nbytes", 0)  # nor bytes
        return item


__all__ = ["EMPTY", "CountingPort", "Port", "register_waiter", "take_waiters"]
