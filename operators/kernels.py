"""numba kernels of the operator library. Every kernel is ``@njit(nogil=True, cache=True)``:
it releases the GIL, so worker threads run them in parallel.

Keys are passed as 2-D ``int64`` matrices ``keys[k, n]`` (k key columns, n rows): dates,
dictionary codes and integers widen to int64, floats are reinterpreted bit for bit. All
comparisons are on the full keys (hashing only chooses the bucket), so results are exact
for any key values.

Hash tables are open-addressing with linear probing at a load factor of at most 1/2
(capacity a power of two): with a decent hash that keeps probe sequences short (expected
1.5 probes per successful lookup, Knuth's analysis of linear probing) at a memory cost of
2x the keys, the usual trade-off of analytical engines.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1


@njit(nogil=True, cache=True, inline="always")
def _mix(h, x):
    # splitmix64 finalizer over h ^ x: every input bit affects every output bit.
    z = (h ^ x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True, inline="always")
def _hash_row(keys, i):
    h = np.uint64(0x243F6A8885A308D3)
    for c in range(keys.shape[0]):
        h = _mix(h, np.uint64(keys[c, i]))
    return h


@njit(nogil=True, cache=True, inline="always")
def _rows_equal(a, i, b, j):
    for c in range(a.shape[0]):
        if a[c, i] != b[c, j]:
            return False
    return True


def table_capacity(n: int) -> int:
    """Smallest power of two >= max(16, 2n): load factor <= 1/2."""
    cap = 16
    while cap < 2 * n:
        cap *= 2
    return cap


# ------------------------------------------------------------------------------------
# hash join: chained buckets over the build rows (duplicates allowed)


@njit(nogil=True, cache=True)
def join_build(bkeys, cap):
    """Bucket heads (``cap`` entries) and per-row chain links for build keys ``bkeys[k, n]``.
    ``heads[h]`` is the first build row of bucket h (-1: empty), ``nxt[i]`` the next row."""
    n = bkeys.shape[1]
    heads = np.full(cap, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    mask = np.uint64(cap - 1)
    # insert in reverse so that chains list build rows in ascending order
    for i in range(n - 1, -1, -1):
        b = np.int64(_hash_row(bkeys, i) & mask)
        nxt[i] = heads[b]
        heads[b] = i
    return heads, nxt


@njit(nogil=True, cache=True)
def key_bitmap(keys, max_bits):
    """A bitmap of the values of a single int64 key row ``keys[0, :]`` over [lo, hi]:
    ``(lo, nbits, bits)``, bit ``k - lo`` set when key k is present; ``nbits == -1`` (no
    bitmap) when the range needs more than `max_bits` bits, or there are no keys or
    several key columns. Probes test the bit before hashing: most missing keys then cost
    one access to a small array instead of a random access to the bucket array (HyPer
    and DuckDB filter probes likewise, with Bloom filters and min/max ranges)."""
    n = keys.shape[1]
    empty = np.zeros(0, np.uint64)
    if n == 0 or keys.shape[0] != 1:
        return np.int64(0), np.int64(-1), empty
    lo = keys[0, 0]
    hi = keys[0, 0]
    for i in range(n):
        x = keys[0, i]
        if x < lo:
            lo = x
        elif x > hi:
            hi = x
    if hi - lo >= max_bits or hi - lo < 0:  # (< 0: the difference overflowed)
        return np.int64(0), np.int64(-1), empty
    nbits = hi - lo + 1
    bits = np.zeros((nbits + 63) >> 6, np.uint64)
    for i in range(n):
        d = keys[0, i] - lo
        bits[d >> 6] |= np.uint64(1) << np.uint64(d & 63)
    return lo, nbits, bits


@njit(nogil=True, cache=True)
def join_count(pkeys, bkeys, heads, nxt):
    """Number of matching build rows for every probe row."""
    m = pkeys.shape[1]
    mask = np.uint64(heads.shape[0] - 1)
    counts = np.zeros(m, np.int64)
    for i in range(m):
        j = heads[np.int64(_hash_row(pkeys, i) & mask)]
        c = 0
        while j != -1:
            if _rows_equal(pkeys, i, bkeys, j):
                c += 1
            j = nxt[j]
        counts[i] = c
    return counts


@njit(nogil=True, cache=True)
def join_probe(pkeys, bkeys, heads, nxt, counts):
    """Inner-join index pairs (probe row, build row), probe rows ascending, build rows
    ascending within a probe row. `counts` from ``join_count``."""
    total = 0
    for i in range(counts.shape[0]):
        total += counts[i]
    pidx = np.empty(total, np.int64)
    bidx = np.empty(total, np.int64)
    m = pkeys.shape[1]
    mask = np.uint64(heads.shape[0] - 1)
    t = 0
    for i in range(m):
        if counts[i] == 0:
            continue
        j = heads[np.int64(_hash_row(pkeys, i) & mask)]
        while j != -1:
            if _rows_equal(pkeys, i, bkeys, j):
                pidx[t] = i
                bidx[t] = j
                t += 1
            j = nxt[j]
    return pidx, bidx


@njit(nogil=True, cache=True)
def join_exists(pkeys, bkeys, heads, nxt):
    """For semi/anti joins: does each probe row have at least one match?"""
    m = pkeys.shape[1]
    mask = np.uint64(heads.shape[0] - 1)
    out = np.zeros(m, np.bool_)
    for i in range(m):
        j = heads[np.int64(_hash_row(pkeys, i) & mask)]
        while j != -1:
            if _rows_equal(pkeys, i, bkeys, j):
                out[i] = True
                break
            j = nxt[j]
    return out


# ------------------------------------------------------------------------------------
# group by: open addressing, table slots hold group ids; group keys stored per group
# (``groupby_aggregate`` below assigns groups and folds the aggregates in one pass)


@njit(nogil=True, cache=True)
def groupby_rehash(gkeys, ngroups, cap):
    """A fresh slot table of capacity `cap` for the first `ngroups` groups."""
    slots = np.full(cap, -1, np.int64)
    mask = np.uint64(cap - 1)
    for g in range(ngroups):
        s = np.int64(_hash_row(gkeys, g) & mask)
        while slots[s] != -1:
            s = (s + 1) & np.int64(mask)
        slots[s] = g
    return slots


# ------------------------------------------------------------------------------------
# sorting: lexicographic keys as float64 rows (direction already applied by the caller)


@njit(nogil=True, cache=True, inline="always")
def _lex_le(a, i, b, j):
    """a[:, i] <= b[:, j] lexicographically."""
    for c in range(a.shape[0]):
        x = a[c, i]
        y = b[c, j]
        if x < y:
            return True
        if x > y:
            return False
    return True


@njit(nogil=True, cache=True)
def merge_two(a, b, na, nb):
    """Stable merge of the first `na` rows of sorted ``a[k, :]`` and the first `nb` of
    sorted ``b[k, :]``: returns (from_b bool[na+nb], index int64[na+nb]). Ties take `a`
    first, so merging runs in input order is stable."""
    n = na + nb
    from_b = np.empty(n, np.bool_)
    idx = np.empty(n, np.int64)
    i = 0
    j = 0
    t = 0
    while i < na and j < nb:
        if _lex_le(a, i, b, j):
            from_b[t] = False
            idx[t] = i
            i += 1
        else:
            from_b[t] = True
            idx[t] = j
            j += 1
        t += 1
    while i < na:
        from_b[t] = False
        idx[t] = i
        i += 1
        t += 1
    while j < nb:
        from_b[t] = True
        idx[t] = j
        j += 1
        t += 1
    return from_b, idx


@njit(nogil=True, cache=True)
def count_le(a, na, key, kcol):
    """How many of the first `na` rows of sorted ``a[k, :]`` are <= row `kcol` of `key`
    (binary search): the rows a streaming merge may already emit."""
    lo = 0
    hi = na
    while lo < hi:
        mid = (lo + hi) // 2
        if _lex_le(a, mid, key, kcol):
            lo = mid + 1
        else:
            hi = mid
    return lo


# ------------------------------------------------------------------------------------
# partitioning


@njit(nogil=True, cache=True)
def partition_ids(keys, parts):
    """Partition (0..parts-1) of every row by the hash of its key."""
    n = keys.shape[1]
    out = np.empty(n, np.int64)
    p = np.uint64(parts)
    for i in range(n):
        # a different mix than the hash tables', so that a partition's rows still
        # spread over its join/group table's buckets
        out[i] = np.int64(_mix(np.uint64(0x5851F42D4C957F2D), _hash_row(keys, i)) % p)
    return out


# ------------------------------------------------------------------------------------
# fused group-by + aggregation: one call per packet for every aggregate of an operator

AGG_SUM = 0
AGG_MIN = 1
AGG_MAX = 2
AGG_COUNT = 3


@njit(nogil=True, cache=True, inline="always")
def _agg_apply(op, acc, r, g, v):
    if op == 0:
        acc[r, g] += v
    elif op == 1:
        if v < acc[r, g]:
            acc[r, g] = v
    elif op == 2:
        if v > acc[r, g]:
            acc[r, g] = v
    else:
        acc[r, g] += 1


@njit(nogil=True, cache=True)
def groupby_aggregate(keys, slots, gkeys, ngroups, fv, fops, facc, iv, iops, iacc):
    """Group the rows of ``keys[k, m]`` (k may be 0: one global group) and fold value
    rows ``fv[j]`` (float64) / ``iv[j]`` (int64) into accumulators ``facc[j, g]`` /
    ``iacc[j, g]`` with ops ``fops[j]`` / ``iops[j]`` (0 sum, 1 min, 2 max, 3 count).

    ``slots`` (power-of-two length) holds a group id or -1; ``gkeys[k, G]`` holds each
    group's key. The caller guarantees room: ``ngroups + m <= len(slots) // 2`` and
    ``gkeys.shape[1] >= ngroups + m`` (and accumulators that wide). Returns the new
    number of groups."""
    m = keys.shape[1] if keys.shape[0] else (fv.shape[1] if fv.shape[0] else iv.shape[1])
    k = keys.shape[0]
    mask = np.uint64(slots.shape[0] - 1)
    if k == 0 and ngroups == 0:
        ngroups = 1
    nf = fops.shape[0]
    ni = iops.shape[0]
    for i in range(m):
        g = 0
        if k:
            s = np.int64(_hash_row(keys, i) & mask)
            while True:
                g = slots[s]
                if g == -1:
                    g = ngroups
                    slots[s] = g
                    for c in range(k):
                        gkeys[c, g] = keys[c, i]
                    ngroups += 1
                    break
                if _rows_equal(keys, i, gkeys, g):
                    break
                s = (s + 1) & np.int64(mask)
        for j in range(nf):
            _agg_apply(fops[j], facc, j, g, fv[j, i])
        for j in range(ni):
            _agg_apply(iops[j], iacc, j, g, iv[j, i])
    return ngroups


@njit(nogil=True, cache=True)
def join_pairs(pkeys, bkeys, heads, nxt):
    """``join_count`` + ``join_probe`` in one call: inner-join index pairs."""
    counts = join_count(pkeys, bkeys, heads, nxt)
    return join_probe(pkeys, bkeys, heads, nxt, counts)


@njit(nogil=True, cache=True)
def left_pairs(pidx, bidx, n, pad):
    """Left-outer-join pairs from inner-join pairs (`pidx` ascending) over `n` probe rows:
    the same pairs, plus ``(i, pad)`` for every probe row i without one, in probe row
    order (``pad``: the index of the build side's all-zero row)."""
    has = np.zeros(n, np.bool_)
    for t in range(pidx.shape[0]):
        has[pidx[t]] = True
    miss = 0
    for i in range(n):
        if not has[i]:
            miss += 1
    total = pidx.shape[0] + miss
    op = np.empty(total, np.int64)
    ob = np.empty(total, np.int64)
    t = 0
    o = 0
    for i in range(n):
        if has[i]:
            while t < pidx.shape[0] and pidx[t] == i:
                op[o] = i
                ob[o] = bidx[t]
                t += 1
                o += 1
        else:
            op[o] = i
            ob[o] = pad
            o += 1
    return op, ob


@njit(nogil=True, cache=True)
def mark_rows(idx, n):
    """A bool array of `n` rows, True at every row listed in `idx`."""
    out = np.zeros(n, np.bool_)
    for t in range(idx.shape[0]):
        out[idx[t]] = True
    return out
