"""Packets lent across domains: a packet whose memory is in its domain's shared arena
(``arena.py``) crosses a channel (``channel.py``) as the places of its columns; the
consumer reads them where they are, and the producer keeps the packet until the
consumer's last view of it died. No column byte is copied.

The loan table: ``LOANS`` int64 words in the channel's segment, one per loan the
channel can have out. Word ``i`` is 1 while loan ``i`` is out, 0 when it is free or was
given back.

Protocol (who touches what, when):

* **Lending** (the producer: the channel's ``ChannelWriter``, run by one worker at a time
  while its operator lives). For a packet of at least ``LEND_MIN_BYTES`` whose every
  column is a contiguous piece of a pool block in an arena, it takes a free loan
  number ``i`` from its ``LoanBook``
  (``free``, its own list), keeps the packet's column arrays in ``held[i]`` (so the
  pool cannot recycle the block: the block goes back only when its lease dies, and
  ``held`` is a reference to it), stores 1 into word ``i`` (an atomic store), and only
  then pushes the descriptor ``(LOAN, rows, metadata bytes, i)`` whose slot holds the
  columns' (segment, offset) pairs. With no free loan number (``LOANS`` out at once: a
  consumer that keeps many packets, as a hash join keeps its build side), the packet is
  copied through the slot instead: lending never waits, so it adds no wait to the
  channel's protocol (whose argument against deadlock stays as it was).
* **Borrowing** (the consumer: the receiving domain's receiver thread, the one reader of
  the channel). It maps the producer's arena segments (``arena.Mapped``, once per
  segment), and makes the packet's columns as read-only numpy views of them whose
  base is a ``_Borrowed`` region; every region of a packet holds the packet's one
  ``_Ack``. When the last view of the packet dies (in any thread of the consumer, at
  any moment, from the cyclic collector too), the ``_Ack`` dies and its ``__del__``
  stores 0 into word ``i`` (an atomic store, sequentially consistent: every read of
  the columns came before it). It takes no lock and calls nothing that does.
* **Reaping** (whoever owns the book): an atomic load of each out loan's word; a 0
  frees the loan number and drops ``held[i]`` (the packet's memory then goes back to
  its pool when the producer's own references are gone too). The writer reaps before
  each packet it sends. Once the writer will send no more (its operator's ``on_end``,
  or the operator died: a failed or cancelled request never calls ``on_end``), it is
  *adopted*: appended to ``_adopted`` (a deque: lock-free, so a finalizer may do it),
  and the process's keeper thread owns it from then on, reaping it every ``KEEP_S``
  (doubling up to ``IDLE_S`` while nothing comes back) until no loan is out. Only one thread owns a book at a time: the writer's
  worker before adoption, the keeper after (the deque's append/pop order the two).
* **Loans nobody will give back.** (a) The consumer stopped reading (its request
  ended before the end of stream): its receiver sets the channel's ``gone`` word and
  never pops that channel again, so the descriptors still in the ring were never
  borrowed: the keeper frees their loans (``at`` says which loan each pushed
  descriptor carries). Those it did pop were borrowed, and come back as their views
  die. (b) The consumer's process ended (it wrote its pid into the channel when it
  started reading): nothing of it can read any more, and the keeper frees every loan.
  (c) A consumer that never started reading (its part never reached its domain): when
  every part of the request ended, the front swaps the reader word from 0 to -1
  (``channel.close_reader``), and a reader that comes later swaps 0 to its pid first or
  reads nothing; -1 frees every loan.

A producer's process may end while its loans are out: the consumer's mappings keep the
pages (tmpfs), so its views stay valid.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np
from numba import njit

from bobox_sched.core.atomics import atomic_add, atomic_load, store_word
from bobox_sched.core.packet import block_of

LOANS = 1024  # loans a channel can have out at once: 1 GiB of 1 MiB packets
# Packets smaller than this are copied, not lent: a loan costs ~22 us a packet whatever
# its size (finding its place, the loan table, the consumer's views; writer and reader
# in one thread), a copy ~17 us plus the bytes twice: the two are even at 32 KiB, and a
# copy is 1.5x cheaper at 8 B (tests' Pair, 2 columns, this 2-core machine, 2026-11-28; 22.1 vs 21.0 us at
# 32 KiB, 22.9 vs 24.2 at 64 KiB, 24.0 vs 86.1 at 512 KiB).
LEND_MIN_BYTES = 32 << 10
KEEP_S = 0.005  # the keeper's period while loans come back (doubling, up to IDLE_S, while none do)
IDLE_S = 0.2  # ... and while it owns no loans
# Counts of this process's channels (an int64 array, atomic adds): what crossed, and how.
DATA_BYTES, COPIED_BYTES, LENT_PACKETS, COPIED_PACKETS = 0, 1, 2, 3
counts = np.zeros(4, np.int64)


@njit(nogil=True, cache=True)
def _tally(c, data_bytes, copied_bytes, lent, copied):
    atomic_add(c, DATA_BYTES, data_bytes)
    atomic_add(c, COPIED_BYTES, copied_bytes)
    atomic_add(c, LENT_PACKETS, lent)
    atomic_add(c, COPIED_PACKETS, copied)


@njit(nogil=True, cache=True)
def _reap(words, out, n, freed):
    """Split the `n` out loans in `out` into those still out (kept at the front of `out`)
    and those given back (into `freed`): (still out, given back)."""
    m = 0
    f = 0
    for j in range(n):
        i = out[j]
        if atomic_load(words, i) == 0:
            freed[f] = i
            f += 1
        else:
            out[m] = i
            m += 1
    return m, f


_scratch = np.zeros(1, np.int64)


def warm() -> None:
    """Compile (or load from numba's cache) the kernel an ``_Ack`` calls, in a normal
    context: its ``__del__`` may run inside a lock, where compiling (numba's compiler
    lock, file I/O) must not happen. A loan word is a writable C-contiguous int64
    array, as `_scratch` is: the same signature."""
    store_word(_scratch, 0, 0)


def tally(data_bytes: int, copied_bytes: int, lent: int, copied: int) -> None:
    _tally(counts, data_bytes, copied_bytes, lent, copied)


def totals() -> dict:
    """This process's channel figures so far (``stats()["channels"]`` of a domain)."""
    c = counts
    return {"data_bytes": int(c[DATA_BYTES]), "copied_bytes": int(c[COPIED_BYTES]),
            "lent_packets": int(c[LENT_PACKETS]), "copied_packets": int(c[COPIED_PACKETS])}


def place_of(columns: list) -> tuple[str, np.ndarray] | None:
    """Where `columns` (arrays) live, if every one is a contiguous piece of a pool block
    of an arena, all of one arena: (its key, int64 words ``[k0, off0, k1, off1, ...]``).
    None: they must be copied."""
    if not columns:
        return None  # nothing to lend: a packet of no columns travels as a copy (its rows with it)
    key = None
    meta = np.empty(2 * len(columns), np.int64)
    for j, c in enumerate(columns):
        if not c.flags.c_contiguous:
            return None
        block = block_of(c)
        if block is None or block.origin is None:
            return None
        b_key, k, off = block.origin
        if key is None:
            key = b_key
        elif key != b_key:
            return None
        meta[2 * j] = k
        meta[2 * j + 1] = off + (c.ctypes.data - block.address)
    return key, meta


class LoanBook:
    """The producer's record of one channel's loans (module doc). `words`: the channel's
    loan table (its mapping here)."""

    def __init__(self, words: np.ndarray):
        self.words = words
        self.held: list = [None] * LOANS
        self.free = list(range(LOANS - 1, -1, -1))
        self.out = np.empty(LOANS, np.int64)
        self.n_out = 0
        self._freed = np.empty(LOANS, np.int64)

    def lend(self, columns) -> int | None:
        """A loan number for `columns` (kept until given back), or None: none free."""
        if not self.free and not self.reap():
            return None
        i = self.free.pop()
        self.held[i] = columns
        store_word(self.words, i, 1)
        self.out[self.n_out] = i
        self.n_out += 1
        return i

    def reap(self) -> int:
        """Take back the loans given back; how many."""
        if not self.n_out:
            return 0
        m, f = _reap(self.words, self.out, self.n_out, self._freed)
        self.n_out = int(m)
        for i in self._freed[:f].tolist():
            self.held[i] = None
            self.free.append(i)
        return int(f)

    def forget(self, loans) -> None:
        """Loans nobody will give back (module doc, "Loans nobody will give back"): free."""
        for i in loans:
            store_word(self.words, int(i), 0)
        self.reap()


class _Ack:
    """A borrowed packet's one token: when it dies, the loan is given back."""

    __slots__ = ("words", "i")

    def __init__(self, words: np.ndarray, i: int):
        self.words = words
        self.i = i

    def __del__(self, _store=store_word):  # any thread, any moment (module doc): one atomic store, no lock
        _store(self.words, self.i, 0)


class _Borrowed:
    """A region of a mapped arena segment, as numpy sees it (``__array_interface__``),
    that holds the mapping and the packet's ``_Ack``: the base of the columns' views."""

    __slots__ = ("__array_interface__", "seg", "ack")

    def __init__(self, address: int, nbytes: int, seg, ack: _Ack):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, True), "version": 3}
        self.seg = seg
        self.ack = ack


def borrow(mapped, key: str, meta: np.ndarray, schema: list, rows: int, words: np.ndarray, i: int) -> dict:
    """The consumer's columns of loan `i` (module doc, "Borrowing"): read-only views of
    the producer's arena, given back when the last of them dies."""
    ack = _Ack(words, i)
    regions: dict = {}  # segment k -> (first offset, end)
    spans = []
    for j, (_, dt) in enumerate(schema):
        k, off = int(meta[2 * j]), int(meta[2 * j + 1])
        n = rows * np.dtype(dt).itemsize
        spans.append((k, off, n))
        a, b = regions.get(k, (off, off + n))
        regions[k] = (min(a, off), max(b, off + n))
    views = {}
    for k, (a, b) in regions.items():
        seg, base = mapped.get(key, k)
        views[k] = (np.asarray(_Borrowed(base + a, max(b - a, 1), seg, ack)), a)
    cols = {}
    for (name, dt), (k, off, n) in zip(schema, spans):
        region, a = views[k]
        cols[name] = region[off - a:off - a + n].view(dt)
    return cols


_adopted: deque = deque()  # writers handed to the keeper (append: any thread, a finalizer too)
_keeper: threading.Thread | None = None
_keeper_lock = threading.Lock()  # starting the keeper (normal contexts only)


def adopt(writer) -> None:
    """`writer` sends no more: the keeper owns its loans from now on (module doc). Safe
    from a finalizer: one deque append."""
    _adopted.append(writer)


def start_keeper() -> None:
    """Start this process's keeper thread if it is not running (before the first loan)."""
    global _keeper
    if _keeper is not None:
        return
    with _keeper_lock:
        if _keeper is None:
            _keeper = threading.Thread(target=_keep, name="bobox-loan-keeper", daemon=True)
            _keeper.start()


def _keep() -> None:
    owned: list = []  # the writers this thread owns (module doc), each once
    broken: list = []  # writers it could not settle: kept (their loans stay out), no longer polled
    quiet = 0  # rounds in a row that took nothing back: the period backs off
    while True:
        try:
            while _adopted:
                w = _adopted.popleft()
                w.alive = None  # (its request's last reference from here)
                if not any(o is w for o in owned):
                    owned.append(w)
            before = sum(w.book.n_out for w in owned)
            for w in owned:
                try:
                    w.settle()
                except Exception as e:  # noqa: BLE001 - its loans stay out (memory kept, never reused too soon)
                    import sys

                    w.broken = True
                    broken.append(w)
                    print(f"bobox: the loans of a channel cannot be settled: {type(e).__name__}: {e}", file=sys.stderr)
            owned = [w for w in owned if w.book.n_out and not w.broken]
            quiet = 0 if sum(w.book.n_out for w in owned) < before else quiet + 1
        except Exception:  # noqa: BLE001 - the keeper must outlive anything a round meets
            quiet += 1
        time.sleep(min(KEEP_S * (1 << min(quiet, 6)), IDLE_S) if owned else IDLE_S)


__all__ = ["LEND_MIN_BYTES", "LOANS", "LoanBook", "adopt", "borrow", "counts", "place_of", "start_keeper", "tally", "totals", "warm"]
