"""State-access mode: walking a batch's chains in rounds. ``process_pool`` runs one
round of one pool (or of every pool in one task), with stealers claiming chains; the
inlined helpers read a record as of a ts (``_read_at``, ``_operand``), run one chain as
far as its dependencies allow (``_step``) and walk the chains a chain needs first
(``_walk``).
"""

from typing import TYPE_CHECKING

from numba import njit

from bobox_sched.txn.kernels.build import C_END, C_G, C_START, P_PARAM, P_POST
from bobox_sched.txn.kernels.fields import CLAIM_BITS, F_FUN, F_KIND, F_OUT, F_SRC, F_TS, F_TXN, INF_TS, READ, WRITE
from bobox_sched.core.atomics import atomic_add, atomic_cas, atomic_load, atomic_store

if TYPE_CHECKING:  # generated ahead of the fragments (generated.py)
    from bobox_sched.txn.kernels.generated import apply_fun, eval_cfun

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


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
