"""Compute mode: registering one ``txn`` call's operations and conditions in an
instance's buffers (``append_ops``, ``append_conds``: the two kernels that keep the GIL,
see the package doc), a READ for each transaction that has conditions but no operation
(``cond_only_reads``), whether a batch's operations read only their own pool
(``pool_local``), and an instance's operations sorted by pool (``partition_ops``).

Condition buffer: int64 rows ``(txn, g, code, g2)`` plus a float64 constant per row.
"""

import numpy as np
from numba import njit

from bobox_sched.txn.kernels.fields import F_FUN, F_G, F_KIND, F_OUT, F_SEQ, F_SRC, F_TS, F_TXN, NF, READ

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


# ======================================================================================
# compute mode: registering operations


@njit(nogil=True, cache=True, _nrt=False)
def put_op(ib, fb, k, ts, seq, g, kind, fun, src, out, txn, param):
    """Row `k` of an operation buffer (``fields.py``): the one place its layout is
    written (``append_ops``, ``cond_only_reads``, ``program.run_program``)."""
    ib[k, F_TS] = ts
    ib[k, F_SEQ] = seq
    ib[k, F_G] = g
    ib[k, F_KIND] = kind
    ib[k, F_FUN] = fun
    ib[k, F_SRC] = src
    ib[k, F_OUT] = out
    ib[k, F_TXN] = txn
    fb[k] = param


@njit(nogil=True, cache=True, _nrt=False)
def put_cond(cb, cf, c, txn, g, code, g2, rhs):
    """Row `c` of a condition buffer (module doc): ``(txn, g, code, g2)`` and the
    constant `rhs` (``append_conds``, ``program.run_program``)."""
    cb[c, 0] = txn
    cb[c, 1] = g
    cb[c, 2] = code
    cb[c, 3] = g2
    cf[c] = rhs


@njit(nogil=False, cache=True)
def append_ops(ib, fb, n0, ts, seq, keys, tbase, nkeys, kind, fun, params, srckeys, sbase, snkeys, out0, txn0,
               mask, use_mask):
    """Append ``keys.shape[1]`` operations per selected row (``mask``) to the buffer at
    row `n0`, the j-th with sequence number ``seq + j``: record ``tbase + keys[r, j]``,
    source ``sbase + srckeys[r, j or 0]`` (``sbase`` < 0: none), parameter
    ``params[r, j or 0]`` (a second dimension of 1 is shared by the row's operations),
    result slot ``out0 + r * L + j`` (``out0`` < 0: none), transaction ``txn0 + r``.
    Returns the new row count, or ``-1 - r`` for the first row with a key out of
    range."""
    n = keys.shape[0]
    L = keys.shape[1]
    pj = params.shape[1] > 1
    sj = srckeys.shape[1] > 1
    k = n0
    for r in range(n):
        if use_mask and not mask[r]:
            continue
        for j in range(L):
            key = keys[r, j]
            if key < 0 or key >= nkeys:
                return -1 - r
            src = -1
            if sbase >= 0:
                sk = srckeys[r, j if sj else 0]
                if sk < 0 or sk >= snkeys:
                    return -1 - r
                src = sbase + sk
            put_op(ib, fb, k, ts[r], seq + j, tbase + key, kind, fun, src, out0 + r * L + j if out0 >= 0 else -1,
                   txn0 + r, params[r, j if pj else 0])
            k += 1
    return k


@njit(nogil=False, cache=True)
def append_conds(cb, cf, n0, txn0, keys, tbase, nkeys, code, rhs, rkeys, rbase, rnkeys, mask, use_mask):
    """Append one condition per selected row: ``code(record tbase+keys[r], rhs)`` where
    rhs is record ``rbase + rkeys[r]`` (``rbase`` >= 0) or the constant ``rhs[r]``."""
    n = keys.shape[0]
    k = n0
    for r in range(n):
        if use_mask and not mask[r]:
            continue
        key = keys[r]
        if key < 0 or key >= nkeys:
            return -1 - r
        if rbase >= 0:
            rk = rkeys[r]
            if rk < 0 or rk >= rnkeys:
                return -1 - r
            put_cond(cb, cf, k, txn0 + r, tbase + key, code, rbase + rk, 0.0)
        else:
            put_cond(cb, cf, k, txn0 + r, tbase + key, code, -1, rhs[r])
        k += 1
    return k


@njit(nogil=True, cache=True)
def cond_only_reads(ib, fb, n, cb, nc, tts, ntx):
    """Transactions with conditions but no operation get one READ (no result) of their
    first condition's record, so that a chain evaluates their verdict. Returns the new
    operation count (the buffer must have room for `nc` more)."""
    has = np.zeros(ntx, np.int8)
    for i in range(n):
        has[ib[i, F_TXN]] = 1
    k = n
    for c in range(nc):
        x = cb[c, 0]
        if has[x]:
            continue
        has[x] = 1
        put_op(ib, fb, k, tts[x], 0, cb[c, 1], READ, 0, -1, -1, x, 0.0)
        k += 1
    return k


@njit(nogil=True, cache=True)
def pool_local(ib, n, cb, nc, ntx, pool_of):
    """1 if no operation reads a record of another pool than its own: its source, and
    the records of its transaction's conditions (every operation of a transaction
    evaluates all of them); else 0. A transaction may write in several pools."""
    cp = np.full(ntx, -1, np.int64)  # the pool of a transaction's condition records
    for c in range(nc):
        x = cb[c, 0]
        p = pool_of[cb[c, 1]]
        g2 = cb[c, 3]
        if g2 >= 0 and pool_of[g2] != p:
            return 0
        if cp[x] < 0:
            cp[x] = p
        elif cp[x] != p:
            return 0
    for i in range(n):
        p = pool_of[ib[i, F_G]]
        s = ib[i, F_SRC]
        if s >= 0 and pool_of[s] != p:
            return 0
        q = cp[ib[i, F_TXN]]
        if q >= 0 and q != p:
            return 0
    return 1


@njit(nogil=True, cache=True)
def partition_ops(ib, fb, n, pool_of, npools, ob, of, poff):
    """Stable counting sort of the first `n` operations by the pool of their record
    (``pool_of[g]``) into ``ob``/``of``; ``poff[p]:poff[p+1]`` is pool p's range."""
    cnt = np.zeros(npools + 1, np.int64)
    for i in range(n):
        cnt[pool_of[ib[i, F_G]] + 1] += 1
    for p in range(npools):
        cnt[p + 1] += cnt[p]
    for p in range(npools + 1):
        poff[p] = cnt[p]
    for i in range(n):
        p = pool_of[ib[i, F_G]]
        k = cnt[p]
        cnt[p] = k + 1
        for f in range(NF):
            ob[k, f] = ib[i, f]
        of[k] = fb[i]
