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
"""

from __future__ import annotations

import numpy as np
from numba import njit

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


class Table:
    """int64 key -> ``iwidth`` int64 and ``fwidth`` float64 values (module doc)."""

    __slots__ = ("keys", "ivals", "fvals", "meta")

    def __init__(self, iwidth: int = 1, fwidth: int = 0, capacity: int = 64):
        cap = 1 << max(3, int(capacity - 1).bit_length())
        self.keys = np.full(cap, EMPTY, np.int64)
        self.ivals = np.zeros((cap, iwidth), np.int64)
        self.fvals = np.zeros((cap, fwidth), np.float64)
        self.meta = np.zeros(2, np.int64)

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

    def arrays(self) -> tuple:
        return self.keys, self.ivals, self.fvals, self.meta

    def live_slots(self) -> np.ndarray:
        """Slots of the live keys, in key order."""
        s = np.flatnonzero(self.keys > TOMB)
        return s[np.argsort(self.keys[s], kind="stable")]

    def copy(self) -> "Table":
        t = Table.__new__(Table)
        t.keys, t.ivals, t.fvals, t.meta = self.keys.copy(), self.ivals.copy(), self.fvals.copy(), self.meta.copy()
        return t


__all__ = ["EMPTY", "TOMB", "Table", "delete", "lookup", "upsert"]
