"""Round 0 of a batch (append, then sort): the columns of a batch's chain and value
rows (``C_*``, ``P_*``), every instance's conditions gathered by transaction
(``build_conds``), one instance's operations of a pool appended (``gather_pool``) and a
pool's chains built from them (``build_pool``). The batch ``B`` is a namedtuple of
arrays (``chains.BatchArrays``).
"""

import numpy as np
from numba import njit

from bobox_sched.txn.kernels.fields import F_G, F_OUT, F_SRC, F_TS, F_TXN, NF
from bobox_sched.core.atomics import atomic_store

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


# ======================================================================================
# building a batch (round 0: append, then sort)
#
# Batch layout (``B``, chains.py): ``oi[i]`` = an operation's int64 fields (F_* as in an
# instance buffer, transaction and slot made global), ``of[i]`` = (param, post value),
# ``o_viol[i]``; ``ch[c]`` = (first op, end op, record), ``ch_next[c]`` (atomic),
# ``ch_snap[2, c]``, ``ch_sval[c]``; ``conds[k]`` = (record, code, record2 or -1) with
# ``c_param[k]``, by transaction through ``cond_off``.
#
# Helpers called per operation or per chain take arrays, never the namedtuples, and are
# inlined (``inline="always"``): a call that is not inlined increfs and decrefs every
# array argument (atomically), about 1.3 us for ``_step`` and as much for the batch
# tuple, measured -- more than the operation itself.

C_START = 0
C_END = 1
C_G = 2
P_PARAM = 0
P_POST = 1


@njit(nogil=True, cache=True)
def build_conds(cb, cf, inst_off, txn_base, ntx, cond_off, conds, c_param):
    """Gather every instance's conditions (instance t's are rows ``inst_off[t]:
    inst_off[t+1]`` of ``cb``/``cf``) into one table sorted by global transaction
    (counting sort; stable, so a transaction keeps its conditions in issue order)."""
    ninst = inst_off.shape[0] - 1
    cnt = np.zeros(ntx + 1, np.int64)
    for t in range(ninst):
        for i in range(inst_off[t], inst_off[t + 1]):
            cnt[cb[i, 0] + txn_base[t] + 1] += 1
    for x in range(ntx):
        cnt[x + 1] += cnt[x]
    for x in range(ntx + 1):
        cond_off[x] = cnt[x]
    for t in range(ninst):
        for i in range(inst_off[t], inst_off[t + 1]):
            x = cb[i, 0] + txn_base[t]
            k = cnt[x]
            cnt[x] = k + 1
            conds[k, 0] = cb[i, 1]
            conds[k, 1] = cb[i, 2]
            conds[k, 2] = cb[i, 3]
            c_param[k] = cf[i]


@njit(nogil=True, cache=True)
def gather_pool(p, ib, fb, poff, sb, tb, ts0, tmp_i, tmp_f, k, span):
    """Round 0, step 1, per instance: append one instance's operations of pool `p`
    (rows ``poff[p]:poff[p+1]`` of its ``ib``/``fb``, partitioned by pool at its
    arrival) to ``tmp_i``/``tmp_f`` from row `k`, with result slots and transactions
    shifted by the instance's bases `sb`, `tb`. Within an instance a transaction's
    operations come in issue order (seq). Returns (rows appended so far, ts span)."""
    for r in range(poff[p], poff[p + 1]):
        for f in range(NF):
            tmp_i[k, f] = ib[r, f]
        o = ib[r, F_OUT]
        tmp_i[k, F_OUT] = o + sb if o >= 0 else -1
        tmp_i[k, F_TXN] = ib[r, F_TXN] + tb
        tmp_f[k] = fb[r]
        d = ib[r, F_TS] - ts0 + 1
        if d > span:
            span = d
        k += 1
    return k, span


@njit(nogil=True, cache=True)
def build_pool(p, tmp_i, tmp_f, span, ts0, B, S, log_all):
    """Round 0, step 2, for pool `p`: the pool's operations, gathered from every
    instance into ``tmp_i``/``tmp_f`` (``gather_pool``), ordered by record, then (ts,
    seq) -- each record's run is its operation chain, in timestamp order -- published
    as chains in the record directory; every record that another record's operation
    reads is marked (its chain must keep versions). Returns the number of chains."""
    oi = B.oi
    of = B.of
    base = B.pool_off[p]
    n = B.pool_off[p + 1] - base
    if n == 0:
        B.pool_nch[p] = 0
        return 0
    # Append, then sort -- by two stable counting sorts instead of comparisons: by ts
    # (a transaction's operations keep their issue order), then grouped by record, the
    # records in order of first appearance (a chain only needs its record's operations
    # together and in (ts, seq) order; the order of the chains is free).
    if span <= 4 * n + 4096:
        cnt = np.zeros(span + 1, np.int64)
        for i in range(n):
            cnt[tmp_i[i, F_TS] - ts0 + 1] += 1
        for j in range(span):
            cnt[j + 1] += cnt[j]
        by_ts = np.empty(n, np.int64)
        for i in range(n):
            d = tmp_i[i, F_TS] - ts0
            by_ts[cnt[d]] = i
            cnt[d] += 1
    else:  # sparse timestamps (not the progress controller's): a stable comparison sort
        by_ts = np.argsort(tmp_i[:, F_TS], kind="mergesort")
    rec_chain = B.rec_chain
    clen = np.zeros(n + 1, np.int64)
    nch = 0
    for q in range(n):
        g = tmp_i[by_ts[q], F_G]
        c = rec_chain[g]
        if c < 0:
            c = base + nch
            rec_chain[g] = c
            B.ch[c, C_G] = g
            nch += 1
        clen[c - base + 1] += 1
    for c in range(nch):
        clen[c + 1] += clen[c]
    for c in range(nch):
        cid = base + c
        j = base + clen[c]
        B.ch[cid, C_START] = j
        B.ch[cid, C_END] = base + clen[c + 1]
        B.ch_next[cid] = j
    # Dependencies: the records other chains read (sources here, condition operands
    # below). Several pools may mark one record at once: an atomic store of the same value.
    rec_ver = B.rec_ver
    for q in range(n):
        i = by_ts[q]
        g = tmp_i[i, F_G]
        c = rec_chain[g] - base
        j = base + clen[c]
        clen[c] += 1
        for f in range(NF):
            oi[j, f] = tmp_i[i, f]
        of[j, P_PARAM] = tmp_f[i]
        B.o_viol[j] = 0
        s = tmp_i[i, F_SRC]
        if s >= 0 and s != g:
            atomic_store(rec_ver, s, 1)
    for c in range(nch):
        cid = base + c
        j = B.ch[cid, C_START]
        g = B.ch[cid, C_G]
        B.ch_snap[0, cid] = oi[j, F_TS]
        B.ch_snap[1, cid] = oi[j, F_TS]
        B.ch_own[cid] = 0  # claimed by no stealer (process_pool)
        row = S.segs[S.seg_of[g]][S.row_of[g]]
        B.ch_sval[cid] = row[0]
        if log_all:
            a = S.aux_idx[g]
            if a >= 0:
                for f in range(row.shape[0]):
                    B.aux_snap[a, f] = row[f]
    # A pass over the operations for their conditions' records only where the batch has
    # conditions (GS, TP: none; the pass cost a fifth of this kernel on GS, measured
    # 2026-12-02 on a captured 5000-operation pool: 122 -> 97 us without it).
    cond_off = B.cond_off
    conds = B.conds
    if cond_off[cond_off.shape[0] - 1] == 0:
        B.pool_nch[p] = nch
        return nch
    for j in range(base, base + n):
        g = oi[j, F_G]
        x = oi[j, F_TXN]
        for c in range(cond_off[x], cond_off[x + 1]):
            cg = conds[c, 0]
            if cg != g:
                atomic_store(rec_ver, cg, 1)
            cg2 = conds[c, 2]
            if cg2 >= 0 and cg2 != g:
                atomic_store(rec_ver, cg2, 1)
    B.pool_nch[p] = nch
    return nch
