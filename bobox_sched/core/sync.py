"""Synchronisation: the runtime's atomics, and what it assumes of the interpreter.

This is the one module whose correctness argument rests on the interpreter's memory
model. Everything else states, in its module doc, which of the guarantees below it uses;
the inventory at the end lists them, so that a free-threaded build (PEP 703) has one list
of places to re-check.

Primitives here: ``fence`` (with ``FENCED``: whether it does anything), ``AtomicFlag``
(test-and-set on a non-blocking lock), ``AtomicCounter`` (fetch-and-add under a tiny
lock), ``Credits`` (tokens in a deque), ``serials`` and ``round_robin`` (counters: one
C call per number).

What the GIL provides (CPython 3.11-3.13 with the GIL):

* one bytecode runs at a time, and a thread switch happens only between bytecodes; so a
  single load or store of an attribute, a list slot or a local, and every single call
  into C that does not release the GIL (``deque.append``, ``deque.popleft``,
  ``dict.pop``, ``Lock.acquire(blocking=False)``, ``next(itertools.count())``), is
  atomic and *sequentially consistent*: all threads see one total order of them, the
  program order of each thread included. That is the memory model the proofs of the
  reorder buffer (Thm 3.1, R7) and of the hybrid queue (Thm 4.1) assume;
* a read-modify-write written in Python (``x += 1``, ``k = x.rr; x.rr = k + 1``) is
  several bytecodes: another thread may run between the read and the write. Hence
  ``AtomicCounter`` and ``round_robin`` below, and no such sequence anywhere else
  (statistics counters excepted: a lost increment there is a miscount, never a fault).

What a free-threaded build (PEP 703, running without the GIL) keeps and loses:

* ``deque``, ``dict`` and ``list`` operations stay atomic: each locks its object
  (a per-object critical section, a mutex: acquire and release), so two operations on
  one object are ordered and the later sees the earlier's stores. ``Lock`` is
  unchanged. Attribute loads and stores stay atomic (no torn reference);
* what it loses: a plain store followed by a plain load of *another* location is not
  ordered against another thread's store-then-load (the store-buffering pattern), and
  a plain flag store does not publish the data written before it to a thread that reads
  the flag without a lock. Every such place calls ``fence()`` from here: on each side,
  between the store and the load (a handshake), or between the data and the flag (the
  writer) and between the flag and the data (the reader). ``fence()`` acquires and
  releases one lock that every fence shares, so any two fences are ordered, and
  whatever a thread stored before the earlier is visible to a thread after the later.
  That restores, at exactly these places, the order the GIL gives everywhere;
* ``itertools.count`` is safe to share only from 3.14 (gh-123471); ``serials`` and
  ``round_robin`` use a counter under a lock on older free-threaded interpreters.

Under the GIL ``FENCED`` is False and callers skip the call (``if FENCED: fence()``: a
global load and a branch), so the GIL build pays nothing for the free-threaded
argument. No free-threaded interpreter runs in CI (none can be installed there); the
arguments above are what it would rely on.

Inventory of the places outside this module that need order between threads, and how
each gets it (each module's doc gives its protocol):

* ``core/port.py``: the one input port under every policy (deque ``append`` /
  ``popleft``; ``len`` as a pessimistic capacity check; a sender's "append to waiters,
  then look at the buffer again" against a consumer's "pop, then take the waiters":
  fenced on both sides; the SPSC try-locks);
* ``core/task.py``: the token lock (a real lock), ``Task.again`` against the run's end
  ("release the token, then look again": fenced);
* ``core/packet.py``: per-size-class free deques; ``len`` of a deque as a snapshot;
* ``policies/bobox/node.py``: the sleep/wake pair (``idle`` and the must-not-sleep
  test; each side fences between its two steps);
* ``policies/ordered/policy.py`` and ``stage.py``: the sleep/wake pair (the sleeper's
  ``idle.append`` then its look for work, against a maker's publish then its look at
  ``idle``: fenced on both sides); credits are deques;
* ``policies/ordered/reorder.py``: a slot store then the flag, against the flag's
  release then the slot (fenced on both sides); ``next`` is written by the flag's
  holder only; ``hybrid.py``: deques and ``AtomicCounter`` only (F7:L4 before L5 is
  ordered by the master deque's lock);
* ``policies/streams/threads.py`` and ``dynamic.py``: the thread flags are *signals*
  that carry no data (stop, suspend: the reader acts on nothing the writer stored
  before), so an atomic store and load is all they need; the lost-wake-up argument
  runs under the record's condition lock;
* ``trace/recorder.py``: a worker's trace buffer has one writer (its thread) and is
  read only after that thread was joined (a join orders all of it); the events of other
  threads go through the tracer's lock; ``core/port.py``'s ``CountingPort.rows`` and ``.bytes`` have one
  writer, the consumer, which is also its one reader;
* ``core/precompile.py``: no worker may call a numba dispatcher while it compiles (numba
  does not order the two without the GIL): every cached signature is loaded before the
  workers start; a compile on a worker is reported;
* ``domains/loans.py``, ``channel.py``, ``ring.py``: between processes, so only the
  LLVM atomics of ``core/atomics.py`` (each module's doc); a loan's give-back is one
  atomic store from a ``__del__``;
* ``txn/coordinator.py``: ``done_batch`` / ``open_batch``, read without the group's
  lock: fenced between the results and the store, and between the load and the
  results.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections import deque

def _gil_enabled() -> bool:
    enabled = getattr(sys, "_is_gil_enabled", None)
    return True if enabled is None else bool(enabled())


# Whether a store-then-load handshake needs an explicit full barrier here: False while the
# GIL runs (its one total order of bytecodes is the barrier), True on a free-threaded
# interpreter running without it. Callers on a hot path test the constant before calling
# ``fence()`` (``if FENCED: fence()``: a global load and a branch under the GIL).
FENCED = not _gil_enabled()
_fence_lock = threading.Lock()


def fence() -> None:
    """A full barrier between the caller's earlier stores and later loads (a sender's
    "append, then look at the buffer again", a run's "release the token, then look at
    ``Task.again`` again"). Under the GIL it does nothing (module doc). Without it, an
    acquire and a release of the one lock every fence shares (held for no other work):
    any two fences are then ordered by that lock, and a thread past the later one sees
    every store made before the earlier one (module doc: the handshake argument)."""
    if FENCED:
        _fence_lock.acquire()
        _fence_lock.release()


class AtomicFlag:
    """The paper's ``atomic_flag`` (F4:L4): ``test_and_set()`` returns the previous value
    and leaves the flag set; ``clear()`` resets it. Built on a non-blocking
    ``Lock.acquire`` (opposite sense: acquiring succeeds when the flag was clear), so it
    never blocks, with or without the GIL."""

    __slots__ = ("_lock",)

    def __init__(self):
        self._lock = threading.Lock()

    def test_and_set(self) -> bool:
        return not self._lock.acquire(False)

    def try_set(self) -> bool:
        """True if this call set the flag (it was clear): ``not test_and_set()``."""
        return self._lock.acquire(False)

    def clear(self) -> None:
        self._lock.release()

    def is_set(self) -> bool:
        return self._lock.locked()

    def raw(self):
        """The underlying lock, for a hot loop that calls ``acquire(False)`` (= ``try_set``)
        and ``release()`` (= ``clear``) without a Python frame per call. Same protocol."""
        return self._lock


class AtomicCounter:
    """An integer with ``fetch_add``/``fetch_sub`` (the hybrid queue's ``count[p]``, F7).
    Python has no fetch-and-add on an int, so the read-modify-write is done under a tiny
    lock of its own, held for two bytecodes, never while calling anything else (spec
    A3: "a tiny per-bucket lock around the read-modify-write"). ``load`` is a plain read."""

    __slots__ = ("value", "_lock")

    def __init__(self, value: int = 0):
        self.value = value
        self._lock = threading.Lock()

    def fetch_add(self, k: int = 1) -> int:
        with self._lock:
            v = self.value
            self.value = v + k
        return v

    def fetch_sub(self, k: int = 1) -> int:
        with self._lock:
            v = self.value
            self.value = v - k
        return v

    def load(self) -> int:
        return self.value


class Credits:
    """Credits of the credit-gated dequeue (spec A4): a worker takes one before it
    dequeues a unit, the drainer gives one back after ``next`` moved past a unit. The
    credits are tokens in a deque: ``take`` is one ``pop`` (atomic), ``give`` one
    ``append``; no lock, never blocks. ``len`` is a snapshot."""

    __slots__ = ("_tokens", "capacity")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._tokens = deque([None] * capacity)

    def take(self) -> bool:
        try:
            self._tokens.pop()
        except IndexError:
            return False
        return True

    def give(self) -> None:
        self._tokens.append(None)

    def available(self) -> int:
        return len(self._tokens)


def _locked_counter(start: int):
    """``itertools.count(start).__next__`` for a free-threaded interpreter older than
    3.14, whose ``count`` is not safe to share (module doc)."""
    c = AtomicCounter(start)
    return c.fetch_add


# Whether itertools.count may be shared between threads here (module doc).
_SHARED_COUNT_OK = not FENCED or sys.version_info >= (3, 14)


def round_robin():
    """A cursor for round-robin choices shared between threads: a callable returning
    0, 1, 2, ... (``k % n`` picks the k-th of n). Never two threads the same number:
    the check-then-act ``k = x.rr; x.rr = k + 1`` it replaces gave two threads the same
    k when one was switched out between the load and the store. One C call
    (``itertools.count``) where that is safe to share, a locked counter elsewhere."""
    return itertools.count().__next__ if _SHARED_COUNT_OK else _locked_counter(0)


def serials(start: int = 1):
    """A serial-number source (per operator, starting at 1 [L115]): a callable returning
    1, 2, 3, ..., each number to one caller (as ``round_robin``)."""
    return itertools.count(start).__next__ if _SHARED_COUNT_OK else _locked_counter(start)


__all__ = ["AtomicCounter", "AtomicFlag", "Credits", "FENCED", "fence", "round_robin", "serials"]
