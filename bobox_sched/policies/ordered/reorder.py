"""Reorder buffers: the outputs of one operator leave in the order of its inputs' serial
numbers, whatever order concurrent workers produced them in (Prasaad et al. section 3;
spec 000 section 2).

A *unit* is everything one input produced (spec A1: one input packet, or one bucket
slice of a packet, or one punctuation), carried by one object ``o`` with the input's
serial ``t`` (1, 2, 3, ... per operator). Workers call ``send(t, o)``; the buffer calls
``emit(o)`` (the paper's ``send_downstream``) for o_1, o_2, ... in that order, from one
thread at a time.

Two implementations behind one interface (``make_reorder(mode, ...)``):

``ReorderBuffer`` (``"nonblocking"``, Figure 4)
    a circular window of ``capacity`` slots and a flag. Protocol, line by line as in
    F4 (the comments ``F4:Lk`` name the paper's lines):

    * ``buffer[t % capacity]`` is written by the one worker holding unit t, only while
      ``next`` is in (t - capacity, t] (entry condition, F4:L16): the slot is then
      EMPTY and nobody else may write it (R3). EMPTY is ``None``; a unit with no
      output (a filter that dropped every row) is a real, non-EMPTY object and must
      still be sent (R8), or ``next`` would stop there for ever.
    * ``next`` and the slot reads/clears of the exit section (F4:L27-36) belong to the
      holder of ``flag`` (R1). It clears the slot *before* moving ``next`` (F4:L33
      then L34, R5): the other order would let the adder of unit t + capacity write the
      slot before it is cleared (a lost unit).
    * after clearing the flag the drainer looks at the slot of ``next`` again
      (F4:L40-42; the recursion is a loop here): a unit added after the drainer's last
      look, by a worker whose ``test_and_set`` failed because the flag was still held,
      would otherwise stay behind with nobody in ``send``.
    * ``try_add`` fails only when t >= next + capacity. The ordered policy never lets
      that happen (credit-gated dequeue, spec A4): a worker takes a unit only while
      fewer than ``capacity`` units are in flight, so its serial is < next + capacity.
      ``send`` still returns the paper's success bit and the caller may retry.

``LockReorderBuffer`` (``"lock"``, Figure 2)
    a lock around "if t == next send it and everything buffered after it, else put it
    in an unbounded map". The baseline of the paper's Figures 3, 12-14: adders wait
    while one worker sends.

Back-pressure inside the exit section (spec A5). ``emit(o)`` returns False when the
receiver's worklist is full; it has then registered this operator as the receiver's
waiter (the receiver's next dequeue schedules a drain) and re-checked for room. The
drainer never waits while it holds the exit section: it leaves ``o`` in its slot (``o``
remembers how much of it was sent), does not move ``next``, clears the flag (or
releases the lock) and skips the F4:L40 re-check; then, *after* clearing, it asks
``ready()`` and starts over if room appeared meanwhile. Why that last step: the
receiver's dequeue may have happened, and its drain task may have run and found the
flag still held, between our registration and our clear; without the look after the
clear, that wake-up would be lost. (If the receiver is still full after the clear, no
dequeue happened since our registration's re-check, so the next one will see the
registration and schedule a drain.)

Contention counters (statistics only, racy plain increments like ``full_window``):
``contended`` counts the sends that found the exit section taken (NON-BLOCKING: the flag
was held, the sender returned at once; LOCK-BASED: the lock was held, the sender
waited), ``wait_ns`` the time LOCK-BASED's senders waited for the lock (0 for
NON-BLOCKING, which never waits). They measure what the non-blocking scheme can save:
under the GIL only one worker runs Python at a time, so a sender finds the exit section
taken only when the interpreter switched threads inside it.

``advanced()`` is called by the drainer right after ``next`` moved past a unit (the
policy gives a dequeue credit back there, so that a credit never admits a serial
beyond ``next + capacity``).

Atomicity and ordering (``core/sync.py``). The proof (and the step machines of
``tests/test_ordered_steps.py``, which check every interleaving) takes each slot
store/load, ``next`` store/load and the flag's try-acquire as one sequentially
consistent step. Two places are store-then-load handshakes across threads, and each
side puts ``sync.fence()`` between its store and its load:

* an adder stores its slot, then tries the flag; a drainer releases the flag, then
  looks at the slot of ``next`` again (F4:L40). One of the two sees the other: the
  adder drains, or the drainer finds the unit;
* A5: a receiver's consumer dequeues, then (through the drain task) tries the flag; the
  blocked drainer releases the flag, then asks ``ready()``.

Under the GIL the fences do nothing (``FENCED`` is False: one order of bytecodes is the
barrier). Without it, ``fence()`` is an acquire and release of one lock shared by every
fence, so any two fences are ordered and the later one sees everything stored before
the earlier one. ``next`` is written only by the flag's holder (the flag's
acquire/release orders it for the next holder). An adder reads ``next`` without the
flag: a stale value can only be low, which ``try_add`` would answer with "window full"
(never a wrong slot), and with credits it is not stale: the credit the adder took before
its unit was appended by the drainer after it moved ``next`` (a deque append, then the
adder's pop: the deque's own lock orders them in a free-threaded build).
Statistics (``contended``, ``blocked``, ``full_window``) are racy counters.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

from bobox_sched.core.sync import FENCED, AtomicFlag, fence

EMPTY = None  # an empty slot (a unit with no output is a non-EMPTY object, R8)

MODES = ("nonblocking", "lock")


class ReorderBuffer:
    """The NON-BLOCKING reordering scheme (Figure 4). See the module doc."""

    mode = "nonblocking"
    __slots__ = ("capacity", "next", "buffer", "flag", "_emit", "_ready", "_advanced", "full_window", "blocked",
                 "contended", "wait_ns")

    def __init__(self, capacity: int, emit, ready=None, advanced=None):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"reorder capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self.next = 1  # serial of the next unit to send; serials start at 1 [L115]
        self.buffer = [EMPTY] * capacity
        self.flag = AtomicFlag()
        self._emit = emit
        self._ready = ready
        self._advanced = advanced
        self.full_window = 0  # try_add refusals (t >= next + capacity); statistics only
        self.blocked = 0  # drains stopped by a full receiver (A5); statistics only
        self.contended = 0  # sends that found another drainer in the exit section (module doc)
        self.wait_ns = 0  # always 0: nobody waits here

    def send(self, t: int, o) -> bool:
        """Unit `o` with serial `t` is ready (F4:L7-11). False: the window was full, call
        again with the same unit (the ordered policy's credits make that impossible)."""
        ok = self.try_add(t, o)  # F4:L8
        self.send_pending()  # F4:L9, whether or not the add succeeded
        return ok  # F4:L10

    def try_add(self, t: int, o) -> bool:
        n = self.next  # F4:L15
        if t < n:
            raise RuntimeError(f"reorder buffer: unit {t} sent twice (next is {n})")
        if t < n + self.capacity:  # F4:L16 (t >= n checked above)
            self.buffer[t % self.capacity] = o  # F4:L17-18
            return True
        self.full_window += 1
        return False  # F4:L21

    def send_pending(self) -> None:
        """Drain: send every consecutive ready unit (F4:L24-43). Never blocks."""
        buf = self.buffer
        cap = self.capacity
        flag = self.flag.raw()  # acquire(False) = try_set, release = clear (core.sync.AtomicFlag)
        emit = self._emit
        advanced = self._advanced
        while True:
            if FENCED:
                fence()  # our slot store (or a receiver's dequeue) before our look at the flag
            if not flag.acquire(False):  # F4:L25: another worker is draining
                self.contended += 1
                return
            blocked = False
            while True:  # F4:L27: the exit section
                n = self.next  # F4:L28
                i = n % cap  # F4:L29
                o = buf[i]  # F4:L30
                if o is EMPTY:  # F4:L31
                    flag.release()  # F4:L36
                    break  # F4:L37
                if not emit(o):  # F4:L32 stopped by a full receiver (A5): o stays in its slot
                    self.blocked += 1
                    flag.release()
                    blocked = True
                    break
                buf[i] = EMPTY  # F4:L33 (before L34: R5)
                self.next = n + 1  # F4:L34
                if advanced is not None:
                    advanced()
            if FENCED:
                fence()  # the flag's release before our look at the slot (or the receiver)
            if blocked:
                if self._ready is not None and self._ready():
                    continue  # room appeared after our registration: start over (A5)
                return  # the receiver's next dequeue schedules a drain
            if buf[i] is EMPTY:  # F4:L40: re-check the slot of next
                return
            # F4:L41-42: o_n arrived after our look: drain again

    def pending(self) -> int:
        """Units waiting in the window (a snapshot; statistics and tests)."""
        return sum(1 for o in self.buffer if o is not EMPTY)


class LockReorderBuffer:
    """The LOCK-BASED reordering scheme (Figure 2): one lock around sending. Adders of
    later units wait while the holder sends (Figure 3). Unbounded buffer."""

    mode = "lock"
    __slots__ = ("capacity", "next", "buffer", "lock", "_emit", "_ready", "_advanced", "full_window", "blocked",
                 "contended", "wait_ns")

    def __init__(self, capacity: int, emit, ready=None, advanced=None):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"reorder capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity  # not a bound here; kept for the credits of the caller
        self.next = 1
        self.buffer: dict = {}
        self.lock = threading.Lock()
        self._emit = emit
        self._ready = ready
        self._advanced = advanced
        self.full_window = 0
        self.blocked = 0
        self.contended = 0  # sends that had to wait for the lock (module doc)
        self.wait_ns = 0  # their waiting time

    def send(self, t: int, o) -> bool:
        lock = self.lock
        if not lock.acquire(False):  # F2:L2, counted when it has to wait
            self.contended += 1
            t0 = perf_counter_ns()
            lock.acquire()
            self.wait_ns += perf_counter_ns() - t0
        try:
            if t < self.next or t in self.buffer:
                raise RuntimeError(f"reorder buffer: unit {t} sent twice (next is {self.next})")
            if t == self.next:  # F2:L3
                if self._emit_locked(o):  # F2:L4-5
                    stuck = not self._drain_locked()  # F2:L6-8
                else:  # the receiver is full (A5): o waits in the buffer
                    self.buffer[t] = o
                    stuck = True
            else:
                self.buffer[t] = o  # F2:L10
                # o_next may wait here from a drain a full receiver stopped (A5)
                stuck = self.next in self.buffer and not self._drain_locked()
        finally:
            lock.release()  # F2:L12
        if stuck and self._ready is not None and self._ready():
            self.send_pending()
        return True

    def _emit_locked(self, o) -> bool:
        if not self._emit(o):
            self.blocked += 1
            return False
        self.next += 1
        if self._advanced is not None:
            self._advanced()
        return True

    def _drain_locked(self) -> bool:
        """While the buffer has o_next, send it (F2:L6-9). False if stopped by a full
        receiver with o_next still buffered."""
        buf = self.buffer
        while True:
            o = buf.pop(self.next, None)
            if o is None:
                return True
            if not self._emit_locked(o):
                buf[self.next] = o
                return False

    def send_pending(self) -> None:
        """A drain task (the receiver made room): send what is ready, under the lock."""
        while True:
            with self.lock:
                done = self._drain_locked()
            if done or self._ready is None or not self._ready():
                return

    def pending(self) -> int:
        return len(self.buffer)


def make_reorder(mode: str, capacity: int, emit, ready=None, advanced=None):
    """A reorder buffer of `mode` ``"nonblocking"`` or ``"lock"``."""
    if mode == "nonblocking":
        return ReorderBuffer(capacity, emit, ready, advanced)
    if mode == "lock":
        return LockReorderBuffer(capacity, emit, ready, advanced)
    raise ValueError(f"reorder must be one of {', '.join(MODES)}, got {mode!r}")


__all__ = ["EMPTY", "MODES", "LockReorderBuffer", "ReorderBuffer", "make_reorder"]
