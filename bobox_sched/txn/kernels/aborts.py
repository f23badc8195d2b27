"""Aborts (spec 3.4): the smallest-ts constraint violation of a batch
(``min_violation``) and the abort of its transaction, with every chain it touched or
that reads one of them restored to its value below that ts (``abort_restore``).
"""

import numpy as np
from numba import njit

from bobox_sched.txn.kernels.build import C_END, C_G, C_START, P_POST
from bobox_sched.txn.kernels.fields import F_G, F_OUT, F_SRC, F_TS, F_TXN, INF_TS

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


# ======================================================================================
# aborts (spec 3.4)


@njit(nogil=True, cache=True)
def min_violation(B, nops):
    """(ts, txn) of the smallest-ts operation that violated a constraint and whose
    transaction is not aborted yet; (-1, -1) if none."""
    best = INF_TS
    bx = -1
    oi = B.oi
    for i in range(nops):
        if B.o_viol[i] and not B.aborted[oi[i, F_TXN]] and oi[i, F_TS] < best:
            best = oi[i, F_TS]
            bx = oi[i, F_TXN]
    if bx < 0:
        return -1, -1
    return best, bx


@njit(nogil=True, cache=True)
def abort_restore(t0, x0, B, S, npools, nops):
    """Abort transaction `x0` (ts `t0`): drop its operations, restore the chains it
    touched and every chain that (transitively) reads one of them to their values just
    below t0 (the post-operation log; set tables from the batch-start snapshot, re-run
    from their first operation), and reset their progress there so that the next rounds
    re-run them. Returns the number of restored chains."""
    oi = B.oi
    of = B.of
    ch = B.ch
    rec_chain = B.rec_chain
    conds = B.conds
    cond_off = B.cond_off
    B.aborted[x0] = 1
    B.verdict[x0] = 0
    mark = np.zeros(nops, np.int8)  # by chain id (chain ids are indexes < nops)
    for i in range(nops):
        if oi[i, F_TXN] == x0:
            mark[rec_chain[oi[i, F_G]]] = 1
            o = oi[i, F_OUT]
            if o >= 0:
                B.res[o] = np.nan
    changed = True
    while changed:
        changed = False
        for i in range(nops):
            a = rec_chain[oi[i, F_G]]
            if mark[a]:
                continue
            hit = False
            s = oi[i, F_SRC]
            if s >= 0:
                cs = rec_chain[s]
                if cs >= 0 and mark[cs]:
                    hit = True
            if not hit:
                x = oi[i, F_TXN]
                for c in range(cond_off[x], cond_off[x + 1]):
                    cs = rec_chain[conds[c, 0]]
                    if cs >= 0 and mark[cs]:
                        hit = True
                        break
                    g2 = conds[c, 2]
                    if g2 >= 0:
                        cs = rec_chain[g2]
                        if cs >= 0 and mark[cs]:
                            hit = True
                            break
            if hit:
                mark[a] = 1
                changed = True
    restored = 0
    for p in range(npools):
        base = B.pool_off[p]
        for c in range(B.pool_nch[p]):
            cid = base + c
            if not mark[cid]:
                continue
            restored += 1
            g = ch[cid, C_G]
            start = ch[cid, C_START]
            end = ch[cid, C_END]
            row = S.segs[S.seg_of[g]][S.row_of[g]]
            a = S.aux_idx[g]
            if a >= 0:
                r = start
                for f in range(row.shape[0]):
                    row[f] = B.aux_snap[a, f]
            else:
                lo = start
                hi = end
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if oi[mid, F_TS] < t0:
                        lo = mid + 1
                    else:
                        hi = mid
                r = lo
                row[0] = of[r - 1, P_POST] if r > start else B.ch_sval[cid]
            for i in range(r, end):
                B.o_viol[i] = 0
            B.ch_next[cid] = r
            nts = oi[r, F_TS] if r < end else INF_TS
            B.ch_snap[0, cid] = nts
            B.ch_snap[1, cid] = nts
    return restored
