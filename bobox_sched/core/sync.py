"""Synchronisation: the runtime's atomics, and what it assumes of the interpreter.

This is the one module whose correctness argument rests on the interpreter's memory
model. Everything else states, in its module doc, which of the guarantees below it uses;
the inventory at the end lists them, so that a free-threaded build (PEP 703) has one list
of places to re-check.

Primitives here: ``fence`` (with ``FENCED``: whether it does anything), ``AtomicFlag`` (test-and-set on a non-blocking lock), ``AtomicCounter``
(fetch-and-add under a tiny lock), ``Credits`` (tokens in a deque), ``serials`` and
``round_robin`` (``itertools.count``: one C call per number). ``require_gil`` refuses to
start a component whose argument still needs the GIL on an interpreter running without it.

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
  ``AtomicCounter`` and ``round_robin`` below, and no such sequence anywhere else.

What a free-threaded build keeps and loses:

* ``deque``, ``dict``, ``list`` and ``itertools.count`` operations stay atomic (they lock
  per object internally) and ``Lock`` is unchanged, so every primitive of this module
  keeps its meaning as written;
* plain attribute stores and loads used as flags or handshakes are no longer ordered with
  respect to other threads' loads without a barrier. The core's two store-then-load
  handshakes (``Port.no_room``; a run's end in ``task.py``) and the bobox policy's
  sleep/wake pair call ``fence()`` from here;
  the other places that rely on ordering today (inventory) need an acquire/release pair
  from here before the GIL may be dropped; until then the ordered policy checks with
  ``require_gil()`` at scheduler start, and the domains issue's free-threaded path must
  replace the rest first.

Inventory of the handshakes outside this module (each named in its module's doc):

* ``core/port.py``: the one input port under every policy (a deque: ``append``,
  ``popleft``, ``len`` as a pessimistic capacity check, ``closed`` stored by the
  producer, the waiter's append-then-look-again, the SPSC try-locks);
* ``core/task.py``: the token lock, ``_bx_again`` and the ports (store-then-load
  handshakes between a sender and the running thread);
* ``core/packet.py``: per-size-class free deques, ``len`` of a deque as a snapshot;
* ``policies/bobox/node.py``: the sleep/wake pair (``idle`` and the must-not-sleep test;
  each side fences between its two steps);
* ``policies/ordered/reorder.py`` and ``hybrid.py``: ``next`` and the window slots;
* ``policies/streams/threads.py`` and ``dynamic.py``: the thread flags;
* ``txn/coordinator.py``: ``done_batch`` / ``open_batch``.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections import deque

GIL_REQUIRED = True


def require_gil() -> None:
    """Raise on a free-threaded interpreter running without the GIL (see the module doc)."""
    enabled = getattr(sys, "_is_gil_enabled", None)
    if enabled is not None and not enabled():
        from bobox_sched.core.errors import BoboxError

        raise BoboxError("the ordered policy's atomics (bobox_sched.core.sync) assume the GIL; this "
                         "interpreter runs without it (start it with PYTHON_GIL=1)")


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
    ``_bx_again`` again"). Under the GIL it does nothing (module doc). Without it, an
    acquire and a release of a lock nobody else holds long: both are sequentially
    consistent atomic operations on the lock's word in CPython's free-threaded build
    (``PyMutex``), so no load after them is ordered before a store before them."""
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


def round_robin():
    """A cursor for round-robin choices shared between threads: a callable returning
    0, 1, 2, ... (``k % n`` picks the k-th of n). One C call, never two threads the
    same number: the check-then-act ``k = x.rr; x.rr = k + 1`` it replaces gave two
    threads the same k when one was switched out between the load and the store."""
    return itertools.count().__next__


def serials(start: int = 1):
    """A serial-number source (per operator, starting at 1 [L115]): a callable returning
    1, 2, 3, ... ``itertools.count.__next__`` is one C call, atomic under the GIL and
    internally locked in free-threaded builds."""
    return itertools.count(start).__next__


__all__ = ["AtomicCounter", "AtomicFlag", "Credits", "FENCED", "GIL_REQUIRED", "fence", "require_gil", "round_robin",
           "serials"]
