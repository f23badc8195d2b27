"""The serial oracle (``serial_run``: every transaction in ts order, one at a time) and
the one-transaction executor the baselines share: a transaction's operations and
conditions by transaction (``by_txn``), its records (``_txn_records``), MVLK's version
read (``_mv_read``) and its execution (``_exec_txn``).
"""

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from bobox_sched.txn.kernels.fields import F_FUN, F_G, F_KIND, F_OUT, F_SRC, F_TXN, READ, WRITE
from bobox_sched.core.atomics import atomic_load

if TYPE_CHECKING:  # generated ahead of the fragments (generated.py)
    from bobox_sched.txn.kernels.generated import apply_fun, eval_cfun

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


# ======================================================================================
# the serial oracle (and the one-transaction executor the baselines share)


@njit(nogil=True, cache=True)
def by_txn(ntx, txn_of, n, off, order):
    """CSR of `n` items by transaction (stable counting sort): items of transaction x are
    ``order[off[x]:off[x+1]]``."""
    cnt = np.zeros(ntx + 1, np.int64)
    for i in range(n):
        cnt[txn_of[i] + 1] += 1
    for x in range(ntx):
        cnt[x + 1] += cnt[x]
    for x in range(ntx + 1):
        off[x] = cnt[x]
    for i in range(n):
        x = txn_of[i]
        k = cnt[x]
        cnt[x] = k + 1
        order[k] = i


@njit(nogil=True, cache=True, inline="always")
def _txn_records(x, ib, oo, ooff, cb, coo, coff, recs):
    """Distinct records of transaction x into ``recs[:, 0]`` with mode in ``recs[:, 1]``
    (1 = written), sorted by record. Returns their number, or -1 if more than ``recs``
    holds."""
    m = 0
    cap = recs.shape[0]
    for k in range(ooff[x], ooff[x + 1]):
        i = oo[k]
        for which in range(2):
            g = ib[i, F_G] if which == 0 else ib[i, F_SRC]
            if g < 0:
                continue
            w = 1 if (which == 0 and ib[i, F_KIND] != READ) else 0
            found = False
            for q in range(m):
                if recs[q, 0] == g:
                    if w:
                        recs[q, 1] = 1
                    found = True
                    break
            if not found:
                if m == cap:
                    return -1
                recs[m, 0] = g
                recs[m, 1] = w
                m += 1
    for k in range(coff[x], coff[x + 1]):
        c = coo[k]
        for which in range(2):
            g = cb[c, 1] if which == 0 else cb[c, 3]
            if g < 0:
                continue
            found = False
            for q in range(m):
                if recs[q, 0] == g:
                    found = True
                    break
            if not found:
                if m == cap:
                    return -1
                recs[m, 0] = g
                recs[m, 1] = 0
                m += 1
    # sorted by record: every scheme takes its locks in one global order
    for a in range(1, m):
        g0 = recs[a, 0]
        w0 = recs[a, 1]
        b = a - 1
        while b >= 0 and recs[b, 0] > g0:
            recs[b + 1, 0] = recs[b, 0]
            recs[b + 1, 1] = recs[b, 1]
            b -= 1
        recs[b + 1, 0] = g0
        recs[b + 1, 1] = w0
    return m


@njit(nogil=True, cache=True, inline="always")
def _rec_index(recs, m, g):
    for q in range(m):
        if recs[q, 0] == g:
            return q
    return -1


@njit(nogil=True, cache=True, inline="always")
def _mv_read(vts, vval, vcnt, g, ts):
    """Newest version of record g with a smaller ts (MVLK's version ring)."""
    R = vts.shape[1]
    n = atomic_load(vcnt, g)
    k = n - 1
    lowest = n - R if n > R else 0
    while k >= lowest:
        if vts[g, k % R] < ts:
            return vval[g, k % R]
        k -= 1
    return np.nan  # unreachable while the ring guard holds (see _mv_install)


@njit(nogil=True, cache=True, inline="always")
def _exec_txn(x, ts, ib, fb, oo, ooff, cb, cf, coo, coff, segs, segi, seg_of, row_of, rec_table, t_lo, t_hi, recs, m,
              pre, save, res, verdict, ver_mode, vts, vval, vcnt):
    """Execute transaction x on the store, its records already held (`recs`, `m`): read
    the pre-transaction values of its records, evaluate the AND of its conditions, run
    its operations in issue order; on a constraint violation restore every record it
    wrote and report an abort. ``ver_mode`` (MVLK): records x does not write are read
    from the version rings at the newest version below ts. Returns 1 (committed), 0
    (rejected by a condition), -1 (aborted)."""
    for q in range(m):
        g = recs[q, 0]
        row = segs[seg_of[g]][row_of[g]]
        if ver_mode and recs[q, 1] == 0:
            pre[q] = _mv_read(vts, vval, vcnt, g, ts)
        else:
            pre[q] = row[0]
        if recs[q, 1]:
            for f in range(row.shape[0]):
                save[q, f] = row[f]
    ok = True
    for k in range(coff[x], coff[x + 1]):
        c = coo[k]
        a = pre[_rec_index(recs, m, cb[c, 1])]
        g2 = cb[c, 3]
        b = cf[c] if g2 < 0 else pre[_rec_index(recs, m, g2)]
        if not eval_cfun(cb[c, 2], a, b):
            ok = False
            break
    verdict[x] = 1 if ok else 0
    aborted = False
    for k in range(ooff[x], ooff[x + 1]):
        i = oo[k]
        g = ib[i, F_G]
        q = _rec_index(recs, m, g)
        seg = seg_of[g]
        r = row_of[g]
        row = segs[seg][r]
        cur = row[0] if recs[q, 1] else pre[q]
        kind = ib[i, F_KIND]
        if kind != READ and ok:
            s = ib[i, F_SRC]
            srcv = 0.0
            if s >= 0:
                srcv = cur if s == g else pre[_rec_index(recs, m, s)]
            if kind == WRITE:
                nv = fb[i]
            else:
                nv = apply_fun(ib[i, F_FUN], cur, srcv, fb[i], segi[seg][r, 1:])
            tb = rec_table[g]
            if nv < t_lo[tb] or nv > t_hi[tb] or nv != nv:
                aborted = True
                break
            cur = nv
            row[0] = cur
        o = ib[i, F_OUT]
        if o >= 0:
            res[o] = cur
    if aborted:
        for q in range(m):
            if recs[q, 1]:
                g = recs[q, 0]
                row = segs[seg_of[g]][row_of[g]]
                for f in range(row.shape[0]):
                    row[f] = save[q, f]
        for k in range(ooff[x], ooff[x + 1]):
            o = ib[oo[k], F_OUT]
            if o >= 0:
                res[o] = np.nan
        verdict[x] = 0
        return -1
    return 1 if ok else 0


@njit(nogil=True, cache=True)
def serial_run(ntx, txn_ts, ib, fb, nops, cb, cf, ncond, S, res, verdict, width):
    """The oracle: every transaction in timestamp order, one at a time. Returns the
    number of aborted transactions (verdict 0 and results NaN for those)."""
    ooff = np.empty(ntx + 1, np.int64)
    oo = np.empty(max(nops, 1), np.int64)
    by_txn(ntx, ib[:, F_TXN], nops, ooff, oo)
    coff = np.empty(ntx + 1, np.int64)
    coo = np.empty(max(ncond, 1), np.int64)
    by_txn(ntx, cb[:, 0], ncond, coff, coo)
    torder = np.argsort(txn_ts[:ntx], kind="mergesort")
    recs = np.empty((256, 2), np.int64)
    pre = np.empty(256, np.float64)
    save = np.empty((256, width), np.float64)
    vts = np.zeros((1, 1), np.int64)
    vval = np.zeros((1, 1), np.float64)
    vcnt = np.zeros(1, np.int64)
    segs = S.segs
    segi = S.segi
    seg_of = S.seg_of
    row_of = S.row_of
    rec_table = S.rec_table
    t_lo = S.t_lo
    t_hi = S.t_hi
    aborts = 0
    for k in range(ntx):
        x = torder[k]
        m = _txn_records(x, ib, oo, ooff, cb, coo, coff, recs)
        if m < 0:
            return -1
        if _exec_txn(x, txn_ts[x], ib, fb, oo, ooff, cb, cf, coo, coff, segs, segi, seg_of, row_of, rec_table, t_lo,
                     t_hi, recs, m, pre, save, res, verdict, False, vts, vval, vcnt) < 0:
            aborts += 1
    return aborts
