"""A single-producer single-consumer ring of fixed-width descriptors in shared memory:
how a packet's descriptor (pool, offset, bytes, ...) goes from one domain to another
without pickling and without a system call.

Layout (int64 words of one array, a view of a ``shm.Segment`` or of any buffer):

====================  =========================================================
word 0                ``head``: descriptors popped so far (the consumer's)
word 8                ``tail``: descriptors pushed so far (the producer's)
word 16, 17           capacity (a power of two), width (words per descriptor)
word 24 ...           ``capacity`` slots of ``width`` words; descriptor ``i``
                      lives in slot ``i & (capacity - 1)``
====================  =========================================================

``head`` and ``tail`` sit 64 bytes apart (one cache line each), so the two sides do not
write the same line. Both only grow (2**63 descriptors: no wrap of the counters), and
``tail - head`` is the number queued, 0 .. capacity.

Protocol (who touches what, when):

* only the producer writes ``tail`` and the free slots ``tail .. head + capacity - 1``;
  only the consumer writes ``head``. Each side reads its own counter plainly and the
  other's with an atomic load;
* push: load ``head`` (atomic); full if ``tail - head == capacity``; else write the
  descriptor into slot ``tail``, then store ``tail + 1`` (atomic). The store comes after
  the slot's words in program order and is sequentially consistent (a release), so a
  consumer that loads the new ``tail`` (an acquire) sees the whole descriptor;
* pop: load ``tail`` (atomic); empty if it equals ``head``; else copy slot ``head``
  out, then store ``head + 1`` (atomic): the copy is complete before the producer can
  see the slot free and overwrite it;
* ``push_many``/``pop_many`` do the same for up to n descriptors with one store of the
  counter: a batch is published at once.

The atomics are LLVM's (``core/atomics.py``), compiled into ``nogil`` numba kernels:
the same instructions whether the other side is a thread of this process or another
process, so nothing here relies on the GIL. Waiting is not the ring's business: a side
that finds the ring full or empty returns False / 0 and decides itself whether to spin,
do other work or sleep.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bobox_sched.core.atomics import atomic_load, atomic_store

HEAD, TAIL, CAP, WIDTH = 0, 8, 16, 17
SLOTS = 24  # first slot word
MAX_CAPACITY = 1 << 24  # descriptors per ring: 16 Mi x width words, far above any queue bound here
MAX_WIDTH = 64


def ring_words(capacity: int, width: int) -> int:
    """Int64 words a ring of `capacity` descriptors of `width` words takes."""
    return SLOTS + capacity * width


def ring_bytes(capacity: int, width: int) -> int:
    return 8 * ring_words(capacity, width)


@njit(nogil=True, cache=True)
def ring_init(r, capacity, width):
    r[HEAD] = 0
    r[CAP] = capacity
    r[WIDTH] = width
    atomic_store(r, TAIL, 0)


@njit(nogil=True, cache=True)
def ring_push_many(r, ds, n):
    """Push the first `n` rows of `ds` (n x width), as many as fit; returns how many."""
    cap = r[CAP]
    w = r[WIDTH]
    t = r[TAIL]
    room = cap - (t - atomic_load(r, HEAD))
    m = min(n, room)
    mask = cap - 1
    for i in range(m):
        base = SLOTS + ((t + i) & mask) * w
        for k in range(w):
            r[base + k] = ds[i, k]
    if m > 0:
        atomic_store(r, TAIL, t + m)
    return m


@njit(nogil=True, cache=True)
def ring_pop_many(r, out):
    """Pop up to ``out.shape[0]`` descriptors into the rows of `out`; returns how many."""
    cap = r[CAP]
    w = r[WIDTH]
    h = r[HEAD]
    m = min(atomic_load(r, TAIL) - h, out.shape[0])
    mask = cap - 1
    for i in range(m):
        base = SLOTS + ((h + i) & mask) * w
        for k in range(w):
            out[i, k] = r[base + k]
    if m > 0:
        atomic_store(r, HEAD, h + m)
    return m


@njit(nogil=True, cache=True)
def ring_push(r, d):
    """Push descriptor `d` (`width` int64 words, contiguous); False if the ring is full."""
    return ring_push_many(r, d.reshape(1, d.shape[0]), 1) == 1


@njit(nogil=True, cache=True)
def ring_pop(r, out):
    """Pop the oldest descriptor into `out` (contiguous); False if the ring is empty."""
    return ring_pop_many(r, out.reshape(1, out.shape[0])) == 1


@njit(nogil=True, cache=True)
def ring_peek(r, out):
    """Copy the oldest descriptor into `out` without popping it; False if the ring is
    empty. The consumer reads what the descriptor points at, then ``ring_advance``:
    until then the producer cannot reuse what it points at (a slot of a channel)."""
    h = r[HEAD]
    if atomic_load(r, TAIL) == h:
        return False
    base = SLOTS + (h & (r[CAP] - 1)) * r[WIDTH]
    for k in range(r[WIDTH]):
        out[k] = r[base + k]
    return True


@njit(nogil=True, cache=True)
def ring_advance(r):
    """Pop the oldest descriptor, already read with ``ring_peek`` (consumer only)."""
    atomic_store(r, HEAD, r[HEAD] + 1)


@njit(nogil=True, cache=True)
def ring_len(r):
    """Descriptors queued (a snapshot: exact for either side about its own moves). Head
    first: both only grow, so tail read after it is never behind it."""
    h = atomic_load(r, HEAD)
    n = atomic_load(r, TAIL) - h
    return min(max(n, 0), r[CAP])


class Ring:
    """A ring over the int64 array `words` (``ring_words(capacity, width)`` long):
    ``Ring.create`` lays one out, ``Ring(words)`` uses one another process laid out. One
    process (thread) pushes, one pops: the module doc's protocol."""

    __slots__ = ("r", "capacity", "width", "_one")

    def __init__(self, words: np.ndarray):
        if words.dtype != np.int64 or words.ndim != 1 or words.size < SLOTS:
            raise ValueError("a ring lives in a 1-D int64 array")
        if words.ctypes.data % 8 or not words.flags.c_contiguous:  # atomics need aligned words
            raise ValueError("a ring's array must be contiguous and 8-byte aligned")
        cap, w = int(words[CAP]), int(words[WIDTH])
        if cap < 1 or cap & (cap - 1) or not 1 <= w <= MAX_WIDTH or words.size < ring_words(cap, w):
            raise ValueError(f"no ring laid out here (capacity {cap}, width {w}, {words.size} words)")
        self.r = words
        self.capacity = cap
        self.width = w
        self._one = np.empty(w, np.int64)

    @classmethod
    def create(cls, words: np.ndarray, capacity: int, width: int) -> "Ring":
        check_shape(capacity, width)
        if words.dtype != np.int64 or words.ndim != 1 or words.size < ring_words(capacity, width):
            raise ValueError(f"a ring of {capacity} x {width} words needs a 1-D int64 array of "
                             f"{ring_words(capacity, width)} words")
        ring_init(words, capacity, width)
        return cls(words)

    # The kernels trust their arguments' shapes (nogil, no bounds checks): these check them.
    def push(self, d) -> bool:
        d = np.ascontiguousarray(d, np.int64)
        if d.shape != (self.width,):
            raise ValueError(f"a descriptor of this ring is {self.width} int64 words, got shape {d.shape}")
        return bool(ring_push(self.r, d))

    def push_many(self, ds: np.ndarray, n: int | None = None) -> int:
        self._rows(ds, "push_many")
        n = ds.shape[0] if n is None else n
        if not 0 <= n <= ds.shape[0]:
            raise ValueError(f"push_many: n must be 0 to {ds.shape[0]}, got {n}")
        return int(ring_push_many(self.r, ds, n))

    def pop(self) -> np.ndarray | None:
        """The oldest descriptor (a new array), or None."""
        out = np.empty(self.width, np.int64)
        return out if ring_pop(self.r, out) else None

    def pop_many(self, out: np.ndarray) -> int:
        self._rows(out, "pop_many")
        return int(ring_pop_many(self.r, out))

    def peek(self) -> np.ndarray | None:
        """The oldest descriptor, left in the ring (a reused array), or None."""
        return self._one if ring_peek(self.r, self._one) else None

    def advance(self) -> None:
        """Pop the descriptor ``peek`` gave (the ring must not be empty)."""
        if not ring_len(self.r):
            raise ValueError("advance() on an empty ring")
        ring_advance(self.r)

    def _rows(self, a: np.ndarray, what: str) -> None:
        if not (isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 2 and a.shape[1] == self.width
                and a.flags.c_contiguous):
            raise ValueError(f"{what} takes a C-contiguous int64 array of {self.width} columns, got "
                             f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")

    def __len__(self) -> int:
        return int(ring_len(self.r))


def check_shape(capacity, width) -> None:
    """One-line errors for a ring's shape (before any memory is made)."""
    if not isinstance(capacity, int) or not 1 <= capacity <= MAX_CAPACITY or capacity & (capacity - 1):
        raise ValueError(f"ring capacity must be a power of two from 1 to {MAX_CAPACITY}, got {capacity!r}")
    if not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"ring width must be 1 to {MAX_WIDTH} words, got {width!r}")


__all__ = ["MAX_CAPACITY", "MAX_WIDTH", "Ring", "check_shape", "ring_advance", "ring_bytes", "ring_len", "ring_peek",
           "ring_pop", "ring_pop_many", "ring_push", "ring_push_many", "ring_words"]
