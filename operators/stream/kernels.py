"""numba kernels of the stream operators. Every kernel is ``@njit(nogil=True, cache=True)``:
it releases the GIL, so the operators' per-row work runs in parallel across workers, and
it compiles once per machine (numba's on-disk cache).

Keys follow the convention of ``operators.kernels``: 2-D ``int64`` matrices
``keys[k, n]`` (integers and codes widened, floats reinterpreted bit for bit), hashed and
compared by its ``_hash_row`` / ``_rows_equal``; group tables are its open-addressing
slot tables (``groupby_aggregate``, ``groupby_rehash``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bobox_sched.regions.kernels import gather as take_rows  # out[j] = src[parents[j]]

from operators.kernels import _agg_apply as _fold  # sum / min / max / count into acc[r, g] (AGG_* codes)
from operators.kernels import _hash_row, _mix, _rows_equal

# ------------------------------------------------------------------------------------
# row selection and derivation (filter, flat-map, hidden columns)


@njit(nogil=True, cache=True)
def mask_index(mask):
    """Indices of the true entries of `mask`, ascending."""
    n = mask.shape[0]
    m = 0
    for i in range(n):
        if mask[i]:
            m += 1
    out = np.empty(m, np.int64)
    m = 0
    for i in range(n):
        if mask[i]:
            out[m] = i
            m += 1
    return out


@njit(nogil=True, cache=True)
def expand_parents(counts):
    """A flat-map's derivation: output row t comes from input row ``parents[t]`` and is
    its ``rank[t]``-th output (0-based). Raises ValueError on a negative count."""
    n = counts.shape[0]
    total = 0
    for i in range(n):
        c = counts[i]
        if c < 0:
            raise ValueError("flat-map: a row's output count is negative")
        total += c
    parents = np.empty(total, np.int64)
    rank = np.empty(total, np.int64)
    t = 0
    for i in range(n):
        for r in range(counts[i]):
            parents[t] = i
            rank[t] = r
            t += 1
    return parents, rank


# ------------------------------------------------------------------------------------
# event-time windows


@njit(nogil=True, cache=True)
def window_assign(ts, size, slide, wm, lateness):
    """Assign rows to the windows ``[s, s + size)``, ``s`` a multiple of `slide`, that
    contain their timestamp, in row order, with the running watermark `wm` (the largest
    timestamp seen). A window is closed once ``wm >= s + size + lateness``; a row's
    membership in a closed window is late and dropped.

    Returns (rows, starts, wm, late): the (row, window start) pairs kept, the new
    watermark and how many pairs were late."""
    n = ts.shape[0]
    per = (size + slide - 1) // slide  # windows per row, at most
    rows = np.empty(n * per, np.int64)
    starts = np.empty(n * per, np.int64)
    m = 0
    late = 0
    for i in range(n):
        t = np.int64(ts[i])
        if t > wm:
            wm = t
        first = (t - size) // slide + 1  # floor division: Python semantics in numba
        last = t // slide
        for k in range(first, last + 1):
            s = k * slide
            if s + size + lateness <= wm:
                late += 1
            else:
                rows[m] = i
                starts[m] = s
                m += 1
    return rows[:m], starts[:m], wm, late


LATE = np.iinfo(np.int64).min  # no window starts there (timestamps stay above -2**62)


@njit(nogil=True, cache=True)
def tumbling_assign(ts, size, wm, lateness, starts):
    """``window_assign`` for tumbling windows (one window per row), writing each row's
    window start into `starts` (:data:`LATE` marks a late row). Returns (wm, late)."""
    late = 0
    for i in range(ts.shape[0]):
        t = np.int64(ts[i])
        if t > wm:
            wm = t
        q = t // size  # floor division: Python semantics in numba
        s = q * size
        if s + size + lateness <= wm:
            late += 1
            starts[i] = LATE
        else:
            starts[i] = s
    return wm, late


@njit(nogil=True, cache=True)
def window_rows(km, fv, iv, rows, starts):
    """The group keys ``[window start; key]`` and the values of the (row, window) pairs
    of ``window_assign``: one column per pair."""
    m = rows.shape[0]
    k = km.shape[0]
    keys = np.empty((k + 1, m), np.int64)
    f = np.empty((fv.shape[0], m), np.float64)
    v = np.empty((iv.shape[0], m), np.int64)
    for j in range(m):
        r = rows[j]
        keys[0, j] = starts[j]
        for c in range(k):
            keys[c + 1, j] = km[c, r]
        for c in range(fv.shape[0]):
            f[c, j] = fv[c, r]
        for c in range(iv.shape[0]):
            v[c, j] = iv[c, r]
    return keys, f, v


@njit(nogil=True, cache=True)
def split_closed(wstart, ngroups, limit):
    """Groups ``0..ngroups-1`` whose window start is ``<= limit`` (closed windows),
    ordered by window start then group id (first appearance), and the others in id
    order."""
    nc = 0
    for g in range(ngroups):
        if wstart[g] <= limit:
            nc += 1
    closed = np.empty(nc, np.int64)
    kept = np.empty(ngroups - nc, np.int64)
    a = 0
    b = 0
    for g in range(ngroups):
        if wstart[g] <= limit:
            closed[a] = g
            a += 1
        else:
            kept[b] = g
            b += 1
    if nc > 1:
        order = np.argsort(wstart[closed], kind="mergesort")  # stable: ids stay in order
        closed = closed[order]
    return closed, kept


# ------------------------------------------------------------------------------------
# sessions


@njit(nogil=True, cache=True, inline="always")
def _emit_session(g, gkeys, start, last, facc, iacc, o_keys, o_start, o_end, o_facc, o_iacc, t):
    for c in range(gkeys.shape[0]):
        o_keys[c, t] = gkeys[c, g]
    o_start[t] = start[g]
    o_end[t] = last[g]
    for r in range(facc.shape[0]):
        o_facc[r, t] = facc[r, g]
    for r in range(iacc.shape[0]):
        o_iacc[r, t] = iacc[r, g]


@njit(nogil=True, cache=True)
def session_update(keys, ts, timeout, wm, slots, gkeys, ngroups, active, start, last,
                   fv, fops, facc, finit, iv, iops, iacc, iinit,
                   o_keys, o_start, o_end, o_facc, o_iacc):
    """Fold rows ``keys[k, n]`` / ``ts[n]`` into per-key sessions, in row order.

    A key's open session (``active[g]``, extent ``start[g]..last[g]``, accumulators
    ``facc[:, g]`` / ``iacc[:, g]`` with ops ``fops`` / ``iops`` as in
    ``operators.kernels.groupby_aggregate``) takes a row whose timestamp is at most
    ``last + timeout``; a larger gap closes it (written to the ``o_*`` buffers) and the row
    opens a new one (accumulators reset to ``finit`` / ``iinit``). The caller guarantees
    room: ``ngroups + n <= len(slots) // 2`` rows in the group arrays, ``n`` in the
    outputs. Returns (ngroups, sessions written, watermark)."""
    n = ts.shape[0]
    k = keys.shape[0]
    mask = np.uint64(slots.shape[0] - 1)
    nf = fops.shape[0]
    ni = iops.shape[0]
    t = 0
    for i in range(n):
        s = np.int64(_hash_row(keys, i) & mask)
        while True:
            g = slots[s]
            if g == -1:
                g = ngroups
                slots[s] = g
                for c in range(k):
                    gkeys[c, g] = keys[c, i]
                active[g] = False
                ngroups += 1
                break
            if _rows_equal(keys, i, gkeys, g):
                break
            s = (s + 1) & np.int64(mask)
        x = np.int64(ts[i])
        if active[g] and x - last[g] > timeout:
            _emit_session(g, gkeys, start, last, facc, iacc, o_keys, o_start, o_end, o_facc, o_iacc, t)
            t += 1
            active[g] = False
        if not active[g]:
            active[g] = True
            start[g] = x
            last[g] = x
            for r in range(nf):
                facc[r, g] = finit[r]
            for r in range(ni):
                iacc[r, g] = iinit[r]
        else:
            if x > last[g]:
                last[g] = x
            if x < start[g]:
                start[g] = x
        for r in range(nf):
            _fold(fops[r], facc, r, g, fv[r, i])
        for r in range(ni):
            _fold(iops[r], iacc, r, g, iv[r, i])
        if x > wm:
            wm = x
    return ngroups, t, wm


@njit(nogil=True, cache=True)
def session_expire(gkeys, ngroups, active, start, last, facc, iacc, timeout, wm, everything,
                   o_keys, o_start, o_end, o_facc, o_iacc, t):
    """Close every open session that no later row can extend (``last + timeout < wm``;
    every open one if `everything`), appending to the ``o_*`` buffers from index `t`
    (room for ``ngroups`` more). Returns the new output count."""
    for g in range(ngroups):
        if active[g] and (everything or last[g] + timeout < wm):
            _emit_session(g, gkeys, start, last, facc, iacc, o_keys, o_start, o_end, o_facc, o_iacc, t)
            t += 1
            active[g] = False
    return t


# ------------------------------------------------------------------------------------
# timestamp merge


@njit(nogil=True, cache=True)
def gather2(a, b, from_b, idx, out):
    """``out[t] = b[idx[t]] if from_b[t] else a[idx[t]]`` (one output column of a merge)."""
    for t in range(idx.shape[0]):
        out[t] = b[idx[t]] if from_b[t] else a[idx[t]]


@njit(nogil=True, cache=True)
def merge_ts(ta, tb, na, nb):
    """Merge the first `na` timestamps of sorted `ta` with the first `nb` of sorted `tb`;
    ties take `ta` first. Returns (from_b, idx)."""
    n = na + nb
    from_b = np.empty(n, np.bool_)
    idx = np.empty(n, np.int64)
    i = 0
    j = 0
    for t in range(n):
        if j >= nb or (i < na and ta[i] <= tb[j]):
            from_b[t] = False
            idx[t] = i
            i += 1
        else:
            from_b[t] = True
            idx[t] = j
            j += 1
    return from_b, idx


@njit(nogil=True, cache=True)
def count_sorted(t, n, bound, inclusive):
    """How many of the first `n` values of sorted `t` are ``<= bound`` (``< bound`` when
    not `inclusive`): binary search."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        v = t[mid]
        if v < bound or (inclusive and v == bound):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, cache=True)
def is_sorted(t):
    """True when `t` is non-decreasing."""
    for i in range(1, t.shape[0]):
        if t[i] < t[i - 1]:
            return False
    return True


# ------------------------------------------------------------------------------------
# synthetic streams: counter-based random numbers (row r's values depend on the seed and
# r only, so a stream is the same whatever its packet sizes)


@njit(nogil=True, cache=True, inline="always")
def _uniform(seed, row, j):
    h = _mix(np.uint64(seed), np.uint64(row) * np.uint64(4) + np.uint64(j))
    return np.float64(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # [0, 1), 53 bits


@njit(nogil=True, cache=True)
def gen_events(seed, row0, ts0, mean_gap, cdf, ts_out, key_out, val_out):
    """Rows ``row0 .. row0 + n - 1`` of the event stream of `seed`: timestamps advance by
    exponential gaps of mean `mean_gap` (integers, from `ts0`, the last timestamp
    before), keys drawn from the cumulative distribution `cdf` over ``0..len(cdf)-1``
    (Zipf-like skew), values uniform in [0, 100). Returns the last timestamp."""
    n = ts_out.shape[0]
    t = ts0
    nk = cdf.shape[0]
    for i in range(n):
        r = row0 + i
        u = _uniform(seed, r, 0)
        t += np.int64(np.floor(-np.log(1.0 - u) * mean_gap))
        ts_out[i] = t
        v = _uniform(seed, r, 1)
        lo = 0
        hi = nk - 1
        while lo < hi:  # first key whose cumulative probability exceeds v
            mid = (lo + hi) // 2
            if cdf[mid] > v:
                hi = mid
            else:
                lo = mid + 1
        key_out[i] = lo
        val_out[i] = _uniform(seed, r, 2) * 100.0
    return t
