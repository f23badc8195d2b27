"""Kernel template of bobox_sched.txn (NOT imported as is).

``funs.kernels()`` inserts the dispatch functions of the registered Funs and CFuns at the
``# ---- kernels ----`` marker, writes the result to the kernel cache folder and imports
it. Every kernel here runs with the GIL released (``nogil=True``), except the two that
register one ``txn`` call's operations (``append_ops``, ``append_conds``): they copy one
row per event, ~1-2 us for a 500-row packet, less than a GIL hand-off costs when another
worker is waiting for the GIL (releasing it let the other worker in, then this one waited
for it to give the GIL back; keeping it: GS +5 %, OB +8 % at 2 workers, mean of five
alternating pairs, 2026-11-26). The kernels of a batch's steps also have a GIL-holding
twin (``<name>_held``, at the end) for calls too small to release it
(``funs.kernel_for``). The kernels that wait for other threads (the baselines' lock and
version spins in ``run_baseline``) have none: holding the GIL there could block the
thread they wait for.

Data layouts (built in Python by ``table.py``, ``ops.py`` and ``chains.py``):

* the store ``S`` (a namedtuple): ``segs``/``segi`` -- tuples of per-segment record
  matrices, float64 and an int64 view of the same memory (field 0 is the record's value,
  the rest padding or a set table's bitset words); ``seg_of[g]``, ``row_of[g]`` -- where
  global record g lives; ``rec_table[g]``; per table ``t_lo``, ``t_hi`` (constraint),
  ``t_aux`` (a set table); ``aux_idx[g]`` (row in an aux snapshot, -1 if not a set table).
* an instance's operation buffer: int64 rows of ``NF`` fields (``F_*`` below) plus a
  float64 parameter per row; its condition buffer: int64 rows ``(txn, g, code, g2)``
  plus a float64 constant per row.
* a batch ``B`` (namedtuple, ``chains.py``): the batch's operations sorted per pool, the
  chains, their progress, snapshots, versions, the transaction table and result slots.
"""

import numpy as np
from numba import njit

from bobox_sched.txn.llvm_atomics import (atomic_add, atomic_cas, atomic_load, atomic_store, cpu_nop,  # noqa: F401
                                     cpu_pause, cycles)

# ---- kernels ----

# Operation fields of an instance buffer row.
F_TS = 0
F_SEQ = 1
F_G = 2
F_KIND = 3
F_FUN = 4
F_SRC = 5
F_OUT = 6
F_TXN = 7
NF = 8

READ = 0
WRITE = 1
RMW = 2

INF_TS = np.int64(2**62)
# a stealer's claim stamp in ch_own: (round << CLAIM_BITS) | (stealer + 1) (process_pool)
CLAIM_BITS = 20


# ======================================================================================
# compute mode: registering operations


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
            ib[k, F_TS] = ts[r]
            ib[k, F_SEQ] = seq + j
            ib[k, F_G] = tbase + key
            ib[k, F_KIND] = kind
            ib[k, F_FUN] = fun
            if sbase >= 0:
                sk = srckeys[r, j if sj else 0]
                if sk < 0 or sk >= snkeys:
                    return -1 - r
                ib[k, F_SRC] = sbase + sk
            else:
                ib[k, F_SRC] = -1
            ib[k, F_OUT] = out0 + r * L + j if out0 >= 0 else -1
            ib[k, F_TXN] = txn0 + r
            fb[k] = params[r, j if pj else 0]
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
        cb[k, 0] = txn0 + r
        cb[k, 1] = tbase + key
        cb[k, 2] = code
        if rbase >= 0:
            rk = rkeys[r]
            if rk < 0 or rk >= rnkeys:
                return -1 - r
            cb[k, 3] = rbase + rk
            cf[k] = 0.0
        else:
            cb[k, 3] = -1
            cf[k] = rhs[r]
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
        ib[k, F_TS] = tts[x]
        ib[k, F_SEQ] = 0
        ib[k, F_G] = cb[c, 1]
        ib[k, F_KIND] = READ
        ib[k, F_FUN] = 0
        ib[k, F_SRC] = -1
        ib[k, F_OUT] = -1
        ib[k, F_TXN] = x
        fb[k] = 0.0
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


# ======================================================================================
# the store


@njit(nogil=True, cache=True)
def rget(S, g):
    return S.segs[S.seg_of[g]][S.row_of[g], 0]


@njit(nogil=True, cache=True)
def rset(S, g, v):
    S.segs[S.seg_of[g]][S.row_of[g], 0] = v


@njit(nogil=True, cache=True)
def gather_values(S, g0, n, out):
    segs = S.segs
    seg_of = S.seg_of
    row_of = S.row_of
    for i in range(n):
        out[i] = segs[seg_of[g0 + i]][row_of[g0 + i], 0]


@njit(nogil=True, cache=True)
def scatter_values(S, g0, n, vals):
    segs = S.segs
    seg_of = S.seg_of
    row_of = S.row_of
    for i in range(n):
        segs[seg_of[g0 + i]][row_of[g0 + i], 0] = vals[i]


@njit(nogil=True, cache=True)
def dense_rows(S, out):
    """Copy every record (all fields) into ``out[g, :]``."""
    for g in range(out.shape[0]):
        src = S.segs[S.seg_of[g]][S.row_of[g]]
        for f in range(out.shape[1]):
            out[g, f] = src[f]


@njit(nogil=True, cache=True)
def load_rows(S, rows):
    for g in range(rows.shape[0]):
        dst = S.segs[S.seg_of[g]][S.row_of[g]]
        for f in range(rows.shape[1]):
            dst[f] = rows[g, f]


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
    for q in range(n):
        i = by_ts[q]
        c = rec_chain[tmp_i[i, F_G]] - base
        j = base + clen[c]
        clen[c] += 1
        for f in range(NF):
            oi[j, f] = tmp_i[i, f]
        of[j, P_PARAM] = tmp_f[i]
        B.o_viol[j] = 0
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
    # Dependencies: the records other chains read (sources, condition operands). Several
    # pools may mark one record at once: an atomic store of the same value.
    rec_ver = B.rec_ver
    cond_off = B.cond_off
    conds = B.conds
    for j in range(base, base + n):
        g = oi[j, F_G]
        s = oi[j, F_SRC]
        if s >= 0 and s != g:
            atomic_store(rec_ver, s, 1)
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


# ======================================================================================
# state-access mode: walking chains in rounds


@njit(nogil=True, cache=True, inline="always")
def _next_ts(oi, ch, ch_next, cid):
    n = atomic_load(ch_next, cid)
    if n < ch[cid, C_END]:
        return oi[n, F_TS]
    return INF_TS


# _read_at results: the value is ready, or the record's chain must first progress past
# the ts -- a chain this task walks (NEED: walk it now) or not (WAIT: next round).
READY = 0
NEED = 1
WAIT = 2


@njit(nogil=True, cache=True, inline="always")
def _claim(cown, cid, me):
    """Does stealer `me` own chain `cid` this round? It claims the chain (compare-and-swap
    of its stamp) if no stealer has this round; False if another one has."""
    o = atomic_load(cown, cid)
    if o <= (me >> CLAIM_BITS) << CLAIM_BITS:  # a stamp of an earlier round, or 0
        seen = atomic_cas(cown, cid, o, me)
        o = me if seen == o else seen
    return o == me


@njit(nogil=True, cache=True, inline="always")
def _read_at(g2, ts, own_lo, own_hi, me, cown, rd, oi, of, ch, ch_next, ch_sval, rec_chain, segs, seg_of, row_of):
    """(status, value, chain): the value of record g2 as of transaction start at ts (the
    newest version with a smaller ts), READY once every operation of g2's chain below ts
    was done -- in the snapshot `rd` of the previous round for chains of other pools,
    live for the task's own pool ([own_lo, own_hi)); otherwise NEED (a chain this task
    walks: walk it now) or WAIT (next round). Without stealers (``me`` 0) the task walks
    its whole pool. A stealer (stamp ``me``) walks the chains it claimed (``cown``):
    one of its pool that is not yet past ts and that no stealer claimed yet this round
    it claims now (NEED); one that is past ts, or that another stealer claimed, it
    reads live (a walker publishes its progress with atomic stores after the values:
    process_pool)."""
    cid = rec_chain[g2]
    if cid < 0:  # not touched in this batch: the table holds it
        return READY, segs[seg_of[g2]][row_of[g2], 0], cid
    own = own_lo <= cid and cid < own_hi
    if own:
        nts = _next_ts(oi, ch, ch_next, cid)
        # A stealer claims a chain only when it needs it walked further: one already
        # past ts it reads (unclaimed: nobody walks it; claimed: its walker publishes
        # progress after the values), and leaves to the pool's cursor.
        if me != 0 and nts < ts:
            own = _claim(cown, cid, me)
            if not own:  # another stealer walks it: it may be far enough by now
                nts = _next_ts(oi, ch, ch_next, cid)
    else:
        nts = rd[cid]
    if nts < ts:
        return (NEED if own else WAIT), 0.0, cid
    lo = ch[cid, C_START]
    hi = ch[cid, C_END]
    while lo < hi:
        mid = (lo + hi) >> 1
        if oi[mid, F_TS] < ts:
            lo = mid + 1
        else:
            hi = mid
    j = lo - 1
    if j < ch[cid, C_START]:
        return READY, ch_sval[cid], cid
    return READY, of[j, P_POST], cid


@njit(nogil=True, cache=True, inline="always")
def _pre_own(oi, of, start, sval, i, ts, cur):
    """Value of the chain's own record before transaction `ts` (op i is of that txn)."""
    j = i - 1
    while j >= start and oi[j, F_TS] == ts:
        j -= 1
    if j == i - 1:
        return cur
    if j < start:
        return sval
    return of[j, P_POST]


@njit(nogil=True, cache=True, inline="always")
def _operand(h, g, i, start, sval, ts, cur, own_lo, own_hi, me, cown, rd, oi, of, ch, ch_next, ch_sval, rec_chain,
             segs, seg_of, row_of):
    """(status, value, chain) of a condition's operand, record `h`, for op i (transaction
    ts) of the chain of record `g`: the chain's own record before ts (``_pre_own``), any
    other as ``_read_at`` reads it."""
    if h == g:
        return READY, _pre_own(oi, of, start, sval, i, ts, cur), rec_chain[g]
    return _read_at(h, ts, own_lo, own_hi, me, cown, rd, oi, of, ch, ch_next, ch_sval, rec_chain, segs, seg_of,
                    row_of)


@njit(nogil=True, cache=True, inline="always")
def _step(cid, lim, own_lo, own_hi, me, cown, rd, out, oi, of, o_viol, ch, ch_next, ch_sval, rec_chain, cond_off, conds,
          c_param, aborted, verdict, res, segs, segi, seg_of, row_of, rec_table, t_lo, t_hi):
    """Run chain `cid` from its progress point through its operations below ts `lim`, as
    far as their dependencies allow. ``out[0]`` = operations done; returns READY (reached
    `lim` or the chain's end), NEED (``out[1]`` = the own chain that must first get past
    ts ``out[2]``) or WAIT (a chain of another task: next round)."""
    i = ch_next[cid]
    end = ch[cid, C_END]
    out[0] = 0
    if i >= end or oi[i, F_TS] >= lim:
        return READY
    start = ch[cid, C_START]
    sval = ch_sval[cid]
    g = ch[cid, C_G]
    seg = seg_of[g]
    r = row_of[g]
    row = segs[seg][r]
    bits = segi[seg][r, 1:]
    cur = row[0]
    tb = rec_table[g]
    lo = t_lo[tb]
    hi = t_hi[tb]
    done = 0
    status = READY
    while i < end:
        ts = oi[i, F_TS]
        if ts >= lim:
            break
        x = oi[i, F_TXN]
        if aborted[x]:
            of[i, P_POST] = cur
            i += 1
            done += 1
            continue
        s = oi[i, F_SRC]
        srcv = 0.0
        if s >= 0:
            if s == g:
                srcv = cur
            else:
                st, srcv, dep = _read_at(s, ts, own_lo, own_hi, me, cown, rd, oi, of, ch, ch_next, ch_sval,
                                         rec_chain, segs, seg_of, row_of)
                if st != READY:
                    status = st
                    out[1] = dep
                    out[2] = ts
                    break
        ok = True
        for c in range(cond_off[x], cond_off[x + 1]):
            st, a, dep = _operand(conds[c, 0], g, i, start, sval, ts, cur, own_lo, own_hi, me, cown, rd, oi, of, ch,
                                  ch_next, ch_sval, rec_chain, segs, seg_of, row_of)
            b = c_param[c]  # the constant, unless the condition's second operand is a record
            if st == READY and conds[c, 2] >= 0:
                st, b, dep = _operand(conds[c, 2], g, i, start, sval, ts, cur, own_lo, own_hi, me, cown, rd, oi, of,
                                      ch, ch_next, ch_sval, rec_chain, segs, seg_of, row_of)
            if st != READY:
                status = st
                out[1] = dep
                out[2] = ts
                break
            if not eval_cfun(conds[c, 1], a, b):
                ok = False
                break
        if status != READY:
            break
        verdict[x] = 1 if ok else 0
        kind = oi[i, F_KIND]
        if kind != READ and ok:
            if kind == WRITE:
                nv = of[i, P_PARAM]
            else:
                nv = apply_fun(oi[i, F_FUN], cur, srcv, of[i, P_PARAM], bits)
            if nv < lo or nv > hi or nv != nv:
                o_viol[i] = 1  # consistency violation: skip the update (spec 3.4)
            else:
                cur = nv
        o = oi[i, F_OUT]
        if o >= 0:
            res[o] = cur
        of[i, P_POST] = cur
        i += 1
        done += 1
    row[0] = cur
    # Publishes the post values and the record (seq_cst store: release).
    atomic_store(ch_next, cid, i)
    out[0] = done
    return status


@njit(nogil=True, cache=True, inline="always")
def _walk(cid, me, sc, sl, lo_own, hi_own, cown, rd, out, oi, of, o_viol, ch, ch_next, ch_sval, rec_chain, cond_off,
          conds, c_param, aborted, verdict, res, segs, segi, seg_of, row_of, rec_table, t_lo, t_hi):
    """Walk chain `cid` as far as it goes this round: when it needs a chain of its own
    pool to get past some ts first, that one first (a stack: dependencies strictly
    decrease ts, so this ends; a cycle A -> B -> A is two steps, not a deadlock).
    Returns the operations done."""
    done = 0
    top = 0
    sc[0] = cid
    sl[0] = INF_TS
    while top >= 0:
        st = _step(sc[top], sl[top], lo_own, hi_own, me, cown, rd, out, oi, of, o_viol, ch, ch_next, ch_sval,
                   rec_chain, cond_off, conds, c_param, aborted, verdict, res, segs, segi, seg_of, row_of, rec_table,
                   t_lo, t_hi)
        done += out[0]
        if st == READY:
            top -= 1
        elif st == NEED and top + 1 < sc.shape[0]:
            top += 1
            sc[top] = out[1]
            sl[top] = out[2]
        else:
            break  # waits on another task's chain: so does everything under it
    return done


@njit(nogil=True, cache=True, _nrt=False)
def process_pool(p, parity, me, B, S, sc, sl, out):
    """One round of pool `p` (spec 3.2, at operation level). Reads the previous round's
    snapshot ``ch_snap[1 - parity]`` for chains of other pools, its own pool's chains'
    progress live, and publishes ``ch_snap[parity]`` for the chains it walked.

    Without stealers (``me`` 0) the task walks every chain of the pool once, each with
    the chains it needs first (``_walk``). With `p` < 0 one task walks every chain of
    every pool, all of them its own (a small batch in one task: coordinator step 3).

    With stealers each has a stamp ``me`` = (round << CLAIM_BITS) | (stealer + 1) and
    walks the chains it claims in ``ch_own`` by compare-and-swap: those the pool's
    atomic cursor hands it, and any chain of the pool that one of its chains needs and
    no stealer has claimed yet this round (``_read_at``); a chain another stealer
    claimed it reads live, and waits for the next round only if that one is not far
    enough yet. Then it finishes the chains it claimed on demand, which it walked only
    as far as needed. Reading other stealers' chains from the snapshot instead made
    every dependency inside a pool cost a round: SL at 16 threads on 2 nodes ran 309
    rounds in 8 batches against 34 without stealing, 4.8x slower (2026-11-26).

    ``sc``/``sl`` are the walk's stack (chains, and the ts each must get past), ``out``
    a 3-slot scratch. Returns (operations done, operations still pending in the chains
    it walked).

    Compiled without reference counting (``_nrt=False``: the kernel only borrows its
    arrays and allocates nothing): numba's incref/decref of the array views made per
    chain and per operation cost 4x the work itself (250 vs 60 ns per operation on the
    transfer workload, measured)."""
    oi = B.oi
    of = B.of
    o_viol = B.o_viol
    ch = B.ch
    ch_next = B.ch_next
    ch_sval = B.ch_sval
    cown = B.ch_own
    rec_chain = B.rec_chain
    cond_off = B.cond_off
    conds = B.conds
    c_param = B.c_param
    aborted = B.aborted
    verdict = B.verdict
    res = B.res
    segs = S.segs
    segi = S.segi
    seg_of = S.seg_of
    row_of = S.row_of
    rec_table = S.rec_table
    t_lo = S.t_lo
    t_hi = S.t_hi
    rd = B.ch_snap[1 - parity]
    wr = B.ch_snap[parity]
    done = 0
    pending = 0
    if me == 0:  # the pool's only task; p < 0: every pool's, all their chains its own
        q0 = 0 if p < 0 else p
        q1 = B.pool_nch.shape[0] if p < 0 else p + 1
        lo_own = 0 if p < 0 else B.pool_off[p]
        hi_own = INF_TS if p < 0 else B.pool_off[p] + B.pool_nch[p]
        for q in range(q0, q1):
            base = B.pool_off[q]
            for c in range(B.pool_nch[q]):
                done += _walk(base + c, me, sc, sl, lo_own, hi_own, cown, rd, out, oi, of, o_viol, ch, ch_next,
                              ch_sval, rec_chain, cond_off, conds, c_param, aborted, verdict, res, segs, segi, seg_of,
                              row_of, rec_table, t_lo, t_hi)
        for q in range(q0, q1):
            base = B.pool_off[q]
            for c in range(B.pool_nch[q]):
                cid = base + c
                wr[cid] = _next_ts(oi, ch, ch_next, cid)
                pending += ch[cid, C_END] - ch_next[cid]
        return done, pending
    base = B.pool_off[p]
    nch = B.pool_nch[p]
    lo_own = base
    hi_own = base + nch
    while True:
        c = atomic_add(B.pool_cur, p, 1)
        if c >= nch:
            break
        cid = base + c
        if _claim(cown, cid, me):
            done += _walk(cid, me, sc, sl, lo_own, hi_own, cown, rd, out, oi, of, o_viol, ch, ch_next, ch_sval,
                          rec_chain, cond_off, conds, c_param, aborted, verdict, res, segs, segi, seg_of, row_of,
                          rec_table, t_lo, t_hi)
    # the chains claimed on demand, walked only as far as a needer needed: to their end
    # (which may claim more); again while a pass makes progress
    while True:
        d0 = done
        for c in range(nch):
            cid = base + c
            if cown[cid] == me and ch_next[cid] < ch[cid, C_END]:
                done += _walk(cid, me, sc, sl, lo_own, hi_own, cown, rd, out, oi, of, o_viol, ch, ch_next, ch_sval,
                              rec_chain, cond_off, conds, c_param, aborted, verdict, res, segs, segi, seg_of, row_of,
                              rec_table, t_lo, t_hi)
        if done == d0:
            break
    for c in range(nch):
        cid = base + c
        if cown[cid] == me:
            wr[cid] = _next_ts(oi, ch, ch_next, cid)
            pending += ch[cid, C_END] - ch_next[cid]
    return done, pending


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


# ======================================================================================
# end of batch: garbage collection


@njit(nogil=True, cache=True)
def finish_batch(B, npools, nops):
    """Forget the batch's chains and dependency marks (the records keep their newest
    value: every other version dies with the batch's arrays). Returns the number of
    versions the batch kept: operations on chains that other chains read."""
    oi = B.oi
    ch = B.ch
    rec_ver = B.rec_ver
    conds = B.conds
    cond_off = B.cond_off
    versions = 0
    for p in range(npools):
        base = B.pool_off[p]
        for c in range(B.pool_nch[p]):
            cid = base + c
            if rec_ver[ch[cid, C_G]]:
                versions += ch[cid, C_END] - ch[cid, C_START]
    for i in range(nops):
        B.rec_chain[oi[i, F_G]] = -1
        s = oi[i, F_SRC]
        if s >= 0:
            rec_ver[s] = 0
        x = oi[i, F_TXN]
        for c in range(cond_off[x], cond_off[x + 1]):
            rec_ver[conds[c, 0]] = 0
            if conds[c, 2] >= 0:
                rec_ver[conds[c, 2]] = 0
    return versions


@njit(nogil=True, cache=True)
def live_versions(B, npools):
    """Versions the batch holds right now (for tests: zero once it finished)."""
    n = 0
    for p in range(npools):
        base = B.pool_off[p]
        for c in range(B.pool_nch[p]):
            cid = base + c
            if B.rec_ver[B.ch[cid, C_G]]:
                n += B.ch[cid, C_END] - B.ch[cid, C_START]
    return n


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


# ======================================================================================
# the baselines (spec section 4): coarse-grained, one transaction at a time per executor
#
# Shared sync state ``Y`` (a namedtuple, baselines.py), all int64 and touched only
# through atomics where another executor may touch them at the same time:
#   ctr[0]            LOCK/MVLK lock-ahead counter: the ts whose turn it is
#   pctr[p]           PAT: per-partition counters; pseq[ts, p] = ts's number in p
#   part_of[g]        PAT: partition of record g
#   issued[g], w_issued[g]   lock requests / write requests issued on g (written only by
#                            the lock-ahead holder, so plain stores; read by nobody else)
#   done[g], w_done[g]       released requests / released writes (atomic)
#   w_reg[g], w_com[g]       MVLK: registered / committed writes; wq[g, q % Q] = ts of the
#                            q-th registered write; lwm(g) = wq[g, w_com % Q] if any pending
#   inflight[e]              MVLK: ts of executor e's current transaction (INF if none)
# Version rings (MVLK) ``V`` = (vts, vval, vcnt): record g's k-th version is
# (vts[g, k % R], vval[g, k % R]); vcnt[g] versions so far (atomic).
# Executor scratch ``X`` (one instance's): st[0] phase (0 = before lock-ahead, 1 = locks
# inserted, 2 = executed, committing), st[1] next record to acquire/commit, st[2] number
# of records, st[3] committed (not aborted); recs[q] = (g, written, ticket, writes-before).

LOCK = 1
MVLK = 2
PAT = 3
NOLOCK = 4


@njit(nogil=True, cache=True, inline="always")
def _mv_install(vts, vval, vcnt, inflight, g, ts, value, spin):
    """Add version (ts, value) to g's ring unless that would drop a version some running
    transaction may still need (the oldest kept one is needed while the next one is not
    below every running transaction's ts). False if still unsafe after `spin` ticks."""
    R = vts.shape[1]
    n = vcnt[g]  # only the record's current writer changes it
    if n >= R:
        k = 0
        t0 = cycles()
        while True:
            low = INF_TS
            for e in range(inflight.shape[0]):
                v = atomic_load(inflight, e)
                if v < low:
                    low = v
            if vts[g, (n - R + 1) % R] < low:
                break
            k += 1
            if (k & 15) == 0 and cycles() - t0 > spin:
                return False
            cpu_relax()
    vts[g, n % R] = ts
    vval[g, n % R] = value
    atomic_store(vcnt, g, n + 1)
    return True


@njit(nogil=True, cache=True, inline="always")
def _part_seen(part_of, recs, q):
    p = part_of[recs[q, 0]]
    for q2 in range(q):
        if part_of[recs[q2, 0]] == p:
            return True
    return False


@njit(nogil=True, cache=True, _nrt=False)
def run_baseline(scheme, ex, x0, ntx, txn_ts, ib, fb, oo, ooff, cb, cf, coo, coff, S, Y, V, X, res, verdict, spin,
                 stats):
    """Run transactions x0, x0+1, ... (this executor's, in ts order) under `scheme` until
    done or until a wait lasts more than `spin` cycle-counter ticks: then return the
    transaction to resume at (its phase is kept in ``X.st``). ``stats``: [useful, sync,
    lock] cycles, blocked returns, aborts. No reference counting (``_nrt=False``), as
    ``process_pool``: the same per-operation costs, so the comparison stays fair."""
    recs = X.recs
    rtmp = X.rtmp
    st = X.st
    pre = X.pre
    save = X.save
    segs = S.segs
    segi = S.segi
    seg_of = S.seg_of
    row_of = S.row_of
    rec_table = S.rec_table
    t_lo = S.t_lo
    t_hi = S.t_hi
    vts, vval, vcnt = V
    ctr = Y.ctr
    pctr = Y.pctr
    pseq = Y.pseq
    part_of = Y.part_of
    issued = Y.issued
    w_issued = Y.w_issued
    done = Y.done
    w_done = Y.w_done
    w_reg = Y.w_reg
    w_com = Y.w_com
    wq = Y.wq
    Q = wq.shape[1]
    inflight = Y.inflight
    x = x0
    while x < ntx:
        ts = txn_ts[x]
        if st[0] == 0:
            t_a = cycles()
            m = _txn_records(x, ib, oo, ooff, cb, coo, coff, rtmp)
            if m < 0:
                return -2 - x
            for q in range(m):
                recs[q, 0] = rtmp[q, 0]
                recs[q, 1] = rtmp[q, 1]
            st[2] = m
            if scheme == MVLK:
                atomic_store(inflight, ex, ts)
            # -- lock-ahead: wait for our turn
            if scheme == LOCK or scheme == MVLK:
                k = 0
                while atomic_load(ctr, 0) != ts:
                    k += 1
                    if (k & 15) == 0 and cycles() - t_a > spin:
                        stats[1] += cycles() - t_a
                        stats[3] += 1
                        return x
                    cpu_relax()
            elif scheme == PAT:
                for q in range(m):
                    if _part_seen(part_of, recs, q):
                        continue
                    p = part_of[recs[q, 0]]
                    want = pseq[ts, p]
                    k = 0
                    while atomic_load(pctr, p) != want:
                        k += 1
                        if (k & 15) == 0 and cycles() - t_a > spin:
                            stats[1] += cycles() - t_a
                            stats[3] += 1
                            return x
                        cpu_relax()
            t_b = cycles()
            stats[1] += t_b - t_a
            # -- insert the lock requests (we hold the turn: plain stores)
            if scheme == LOCK or scheme == PAT:
                for q in range(m):
                    g = recs[q, 0]
                    recs[q, 2] = issued[g]
                    issued[g] += 1
                    recs[q, 3] = w_issued[g]
                    if recs[q, 1]:
                        w_issued[g] += 1
            elif scheme == MVLK:
                for q in range(m):
                    if recs[q, 1]:
                        g = recs[q, 0]
                        n = w_reg[g]
                        wq[g, n % Q] = ts
                        atomic_store(w_reg, g, n + 1)
            # -- pass the turn on
            if scheme == LOCK or scheme == MVLK:
                atomic_store(ctr, 0, ts + 1)
            elif scheme == PAT:
                for q in range(m):
                    if not _part_seen(part_of, recs, q):
                        p = part_of[recs[q, 0]]
                        atomic_store(pctr, p, pseq[ts, p] + 1)
            stats[2] += cycles() - t_b
            st[0] = 1
            st[1] = 0
        m = st[2]
        if st[0] == 1:
            # -- wait for the grants, in record order
            t_a = cycles()
            q = st[1]
            while q < m:
                g = recs[q, 0]
                k = 0
                while True:
                    if scheme == LOCK or scheme == PAT:
                        if recs[q, 1]:
                            if atomic_load(done, g) == recs[q, 2]:
                                break
                        elif atomic_load(w_done, g) == recs[q, 3]:
                            break
                    elif scheme == MVLK:
                        c = atomic_load(w_com, g)
                        lwm = INF_TS
                        if c < atomic_load(w_reg, g):
                            lwm = wq[g, c % Q]
                        if recs[q, 1]:
                            if lwm == ts:
                                break
                        elif lwm >= ts:
                            break
                    else:
                        break
                    k += 1
                    if (k & 15) == 0 and cycles() - t_a > spin:
                        st[1] = q
                        stats[1] += cycles() - t_a
                        stats[3] += 1
                        return x
                    cpu_relax()
                q += 1
            t_b = cycles()
            stats[1] += t_b - t_a
            r = _exec_txn(x, ts, ib, fb, oo, ooff, cb, cf, coo, coff, segs, segi, seg_of, row_of, rec_table, t_lo,
                          t_hi, recs, m, pre, save, res, verdict, scheme == MVLK, vts, vval, vcnt)
            if r < 0:
                stats[4] += 1
            stats[0] += cycles() - t_b
            st[0] = 2
            st[1] = 0
            st[3] = 1 if r >= 0 else 0
        # -- commit: release the locks / install versions and raise the lwm
        t_a = cycles()
        if scheme == LOCK or scheme == PAT:
            for q in range(m):
                g = recs[q, 0]
                if recs[q, 1]:
                    atomic_add(w_done, g, 1)
                atomic_add(done, g, 1)
        elif scheme == MVLK:
            q = st[1]
            while q < m:
                if recs[q, 1]:
                    g = recs[q, 0]
                    if st[3]:
                        row = segs[seg_of[g]][row_of[g]]
                        if not _mv_install(vts, vval, vcnt, inflight, g, ts, row[0], spin):
                            st[1] = q
                            stats[1] += cycles() - t_a
                            stats[3] += 1
                            return x
                    atomic_add(w_com, g, 1)
                q += 1
            atomic_store(inflight, ex, INF_TS)
        stats[2] += cycles() - t_a
        st[0] = 0
        x += 1
    return x


@njit(nogil=True, cache=True)
def mv_init(vts, vval, vcnt, S, G):
    for g in range(G):
        vts[g, 0] = -1
        vval[g, 0] = S.segs[S.seg_of[g]][S.row_of[g], 0]
        vcnt[g] = 1


@njit(nogil=True, cache=True)
def pat_seq_kernel(ntx, txn_ts, ib, nops, cb, ncond, part_of, nparts, out):
    """PAT's per-partition sequence numbers (S-Store's bid array): ``out[ts, p]`` = how
    many transactions with a smaller ts touch partition p (for the partitions ts touches;
    -1 elsewhere)."""
    ooff = np.empty(ntx + 1, np.int64)
    oo = np.empty(max(nops, 1), np.int64)
    by_txn(ntx, ib[:, F_TXN], nops, ooff, oo)
    coff = np.empty(ntx + 1, np.int64)
    coo = np.empty(max(ncond, 1), np.int64)
    by_txn(ntx, cb[:, 0], ncond, coff, coo)
    torder = np.argsort(txn_ts[:ntx], kind="mergesort")
    cnt = np.zeros(nparts, np.int64)
    hit = np.zeros(nparts, np.int8)
    for k in range(ntx):
        x = torder[k]
        ts = txn_ts[x]
        for q in range(nparts):
            hit[q] = 0
        for j in range(ooff[x], ooff[x + 1]):
            i = oo[j]
            hit[part_of[ib[i, F_G]]] = 1
            if ib[i, F_SRC] >= 0:
                hit[part_of[ib[i, F_SRC]]] = 1
        for j in range(coff[x], coff[x + 1]):
            c = coo[j]
            hit[part_of[cb[c, 1]]] = 1
            if cb[c, 3] >= 0:
                hit[part_of[cb[c, 3]]] = 1
        for q in range(nparts):
            if hit[q]:
                out[ts, q] = cnt[q]
                cnt[q] += 1


# ======================================================================================
# GIL-holding entry points (funs.kernel_for): the same kernels for calls too small to
# release the GIL. Distinct functions, not njit() of the same ones: numba's cache keys an
# entry by function and signature, not by the nogil flag.


@njit(cache=True)
def cond_only_reads_held(ib, fb, n, cb, nc, tts, ntx):
    return cond_only_reads(ib, fb, n, cb, nc, tts, ntx)


@njit(cache=True)
def pool_local_held(ib, n, cb, nc, ntx, pool_of):
    return pool_local(ib, n, cb, nc, ntx, pool_of)


@njit(cache=True)
def partition_ops_held(ib, fb, n, pool_of, npools, ob, of, poff):
    partition_ops(ib, fb, n, pool_of, npools, ob, of, poff)


@njit(cache=True)
def build_conds_held(cb, cf, inst_off, txn_base, ntx, cond_off, conds, c_param):
    build_conds(cb, cf, inst_off, txn_base, ntx, cond_off, conds, c_param)


@njit(cache=True)
def gather_pool_held(p, ib, fb, poff, sb, tb, ts0, tmp_i, tmp_f, k, span):
    return gather_pool(p, ib, fb, poff, sb, tb, ts0, tmp_i, tmp_f, k, span)


@njit(cache=True)
def build_pool_held(p, tmp_i, tmp_f, span, ts0, B, S, log_all):
    return build_pool(p, tmp_i, tmp_f, span, ts0, B, S, log_all)


@njit(cache=True, _nrt=False)
def process_pool_held(p, parity, me, B, S, sc, sl, out):
    return process_pool(p, parity, me, B, S, sc, sl, out)


@njit(cache=True)
def finish_batch_held(B, npools, nops):
    return finish_batch(B, npools, nops)


@njit(cache=True)
def by_txn_held(ntx, txn_of, n, off, order):
    by_txn(ntx, txn_of, n, off, order)
