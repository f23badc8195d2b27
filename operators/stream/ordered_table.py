"""A hash table from int64 keys to fixed-width rows of int64 and float64 values, on plain
numpy arrays, for the state of partitioned operators (one table per bucket).

Why not ``numba.typed.Dict``: each typed container passed from Python into a numba
function costs ~10-20 us of dispatch (measured: a partitioned operator's slice of 20
rows took 23 us in its kernel with one typed dict argument, and ``len()`` of one from
Python 10 us), which is paid once per bucket slice and runs under the GIL. Arrays cross
in well under a microsecond.

Layout: ``keys`` (power-of-two capacity, linear probing; ``EMPTY`` and ``TOMB`` mark free
and deleted slots), ``ivals[slot, :]``, ``fvals[slot, :]``, ``meta = [used slots (live +
tombstones), live keys]``. The kernels take the arrays; ``Table.reserve(m)`` (Python,
before a kernel that may insert m keys) keeps the load at most 1/2 by rebuilding into a
larger table. Only the bucket's active worker touches its table (H1): no locking.

A kernel that handles many buckets' slices in one call (``on_slices``) finds their
tables in a :class:`Directory`: one int64 row per bucket holding the addresses, shapes
and widths of that bucket's four arrays (``table_at`` makes the arrays again inside the
kernel; passing 4 x k arrays, or typed lists of them, would cost the dispatch per slice
that the one call saves: a typed list argument took 2.2 us a call here, an int64 array
0.4 us, measured 2026-12-01 with 100 buckets). Who touches what: the directory is made
before any worker runs (``PartitionedOperator.states_reset``, at submit); row b is
written (``Directory.bind``, and by ``Table.reserve`` of a bound table when it rebuilds)
only by bucket b's active worker, before that worker's kernels read it, and only rows
of tables just checked bound are read. A row stays valid as long as its table's arrays
live: the table holds them until its next rebuild, which rewrites the row before any
kernel reads it (the rebuild runs on the row's one reader, in Python), and the
operator's bucket states keep the tables alive. A copied or pickled table comes
back unbound (its arrays moved), so it is bound again before its first use.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

EMPTY = np.iinfo(np.int64).min
TOMB = EMPTY + 1


@njit(nogil=True, cache=True, inline="always")
def _hash(key):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return h ^ (h >> np.uint64(29))


@njit(nogil=True, cache=True)
def lookup(keys, key):
    """(slot, found): the slot holding `key`, or where to insert it."""
    mask = keys.shape[0] - 1
    i = np.int64(_hash(key) & np.uint64(mask))
    free = -1
    while True:
        k = keys[i]
        if k == key:
            return i, True
        if k == EMPTY:
            return (free if free >= 0 else i), False
        if k == TOMB and free < 0:
            free = i
        i = (i + 1) & mask


@njit(nogil=True, cache=True)
def upsert(keys, ivals, fvals, meta, key):
    """The slot of `key`, inserted (values zeroed) if absent; (slot, new)."""
    s, found = lookup(keys, key)
    if found:
        return s, False
    if keys[s] == EMPTY:
        meta[0] += 1
    keys[s] = key
    meta[1] += 1
    ivals[s, :] = 0
    fvals[s, :] = 0.0
    return s, True


@njit(nogil=True, cache=True)
def delete(keys, meta, slot):
    keys[slot] = TOMB
    meta[1] -= 1


@njit(nogil=True, cache=True)
def _rebuild(keys, ivals, fvals, nkeys, nivals, nfvals):
    live = 0
    for s in range(keys.shape[0]):
        k = keys[s]
        if k > TOMB:
            t, _ = lookup(nkeys, k)
            nkeys[t] = k
            nivals[t, :] = ivals[s, :]
            nfvals[t, :] = fvals[s, :]
            live += 1
    return live


@intrinsic
def _as_pointer(typingctx, addr):
    """An int64 address as a void pointer (for ``carray``)."""
    sig = types.voidptr(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


# A directory row: the four arrays' addresses, the capacity and the two widths.
_KEYS, _IVALS, _FVALS, _META, _CAP, _IW, _FW = range(7)


@njit(nogil=True, cache=True, inline="always")
def table_at(d, b):
    """(keys, ivals, fvals, meta) of bucket `b`'s table, from directory rows `d`."""
    cap = d[b, _CAP]
    keys = carray(_as_pointer(d[b, _KEYS]), (cap,), np.int64)
    ivals = carray(_as_pointer(d[b, _IVALS]), (cap, d[b, _IW]), np.int64)
    fvals = carray(_as_pointer(d[b, _FVALS]), (cap, d[b, _FW]), np.float64)
    meta = carray(_as_pointer(d[b, _META]), (2,), np.int64)
    return keys, ivals, fvals, meta


@njit(nogil=True, cache=True)
def short_of_room(d, spans):
    """Indices j of the spans (bucket, start, end) whose table has no room for
    end - start more keys at load <= 1/2 (``Table.reserve``'s test)."""
    out = np.empty(spans.shape[0], np.int64)
    k = 0
    for j in range(spans.shape[0]):
        b = spans[j, 0]
        meta = carray(_as_pointer(d[b, _META]), (2,), np.int64)
        if (meta[0] + spans[j, 2] - spans[j, 1]) * 2 > d[b, _CAP]:
            out[k] = j
            k += 1
    return out[:k]


class Directory:
    """Where every bucket's :class:`Table` lives, for kernels over many buckets (module
    doc): ``rows`` is int64 [p, 7]."""

    __slots__ = ("rows", "tables")

    def __init__(self, p: int):
        self.rows = np.zeros((p, 7), np.int64)
        self.tables = [None] * p  # slot b: written with row b, by b's active worker

    def bind(self, b: int, table: "Table") -> None:
        """Bucket `b`'s table is `table` (called by b's active worker)."""
        self.tables[b] = table
        table.bound = (self.rows, b)
        table._publish()

    def reserve(self, spans: np.ndarray) -> None:
        """``reserve`` room for the spans' rows in the tables of their buckets that are short of it."""
        for j in short_of_room(self.rows, spans).tolist():
            self.tables[int(spans[j, 0])].reserve(int(spans[j, 2] - spans[j, 1]))


class Table:
    """int64 key -> ``iwidth`` int64 and ``fwidth`` float64 values (module doc)."""

    __slots__ = ("keys", "ivals", "fvals", "meta", "bound")

    def __init__(self, iwidth: int = 1, fwidth: int = 0, capacity: int = 64):
        cap = 1 << max(3, int(capacity - 1).bit_length())
        self.keys = np.full(cap, EMPTY, np.int64)
        self.ivals = np.zeros((cap, iwidth), np.int64)
        self.fvals = np.zeros((cap, fwidth), np.float64)
        self.meta = np.zeros(2, np.int64)
        self.bound = None  # (directory rows, bucket) once bound (Directory.bind)

    def __getstate__(self):
        return self.keys, self.ivals, self.fvals, self.meta

    def __setstate__(self, state):
        self.keys, self.ivals, self.fvals, self.meta = state
        self.bound = None  # its arrays are new: bound again before use (module doc)

    def _publish(self) -> None:
        """Write this table's arrays into its directory row (module doc: its owner only)."""
        rows, b = self.bound
        rows[b] = (self.keys.ctypes.data, self.ivals.ctypes.data, self.fvals.ctypes.data, self.meta.ctypes.data,
                   self.keys.shape[0], self.ivals.shape[1], self.fvals.shape[1])

    def __len__(self) -> int:
        return int(self.meta[1])

    def reserve(self, m: int) -> None:
        """Room for `m` more keys at load <= 1/2 (rebuilds, dropping tombstones)."""
        cap = self.keys.shape[0]
        if (int(self.meta[0]) + m) * 2 <= cap:
            return
        need = 2 * (int(self.meta[1]) + m)
        new = cap
        while new < 2 * need:
            new *= 2
        nkeys = np.full(new, EMPTY, np.int64)
        nivals = np.zeros((new, self.ivals.shape[1]), np.int64)
        nfvals = np.zeros((new, self.fvals.shape[1]), np.float64)
        live = _rebuild(self.keys, self.ivals, self.fvals, nkeys, nivals, nfvals)
        self.keys, self.ivals, self.fvals = nkeys, nivals, nfvals
        self.meta[0] = live
        self.meta[1] = live
        if self.bound is not None:
            self._publish()  # before the old arrays can go (module doc)

    def arrays(self) -> tuple:
        return self.keys, self.ivals, self.fvals, self.meta

    def live_slots(self) -> np.ndarray:
        """Slots of the live keys, in key order."""
        s = np.flatnonzero(self.keys > TOMB)
        return s[np.argsort(self.keys[s], kind="stable")]

    def copy(self) -> "Table":
        t = Table.__new__(Table)
        t.keys, t.ivals, t.fvals, t.meta = self.keys.copy(), self.ivals.copy(), self.fvals.copy(), self.meta.copy()
        t.bound = None  # a copy is bound by whoever makes it the bucket's state
        return t


__all__ = ["Directory", "EMPTY", "TOMB", "Table", "delete", "lookup", "short_of_room", "table_at", "upsert"]
