"""The baselines' kernels (spec section 4; ``txn/baselines.py`` drives them): the
scheme codes, ``run_baseline`` (one executor's transactions under LOCK, MVLK, PAT or
No-Lock, with bounded waits) and its phases as inline helpers (the turn, the lock
requests, the grants, the commit), MVLK's version install (``_mv_install``) and rings
(``mv_init``), and PAT's per-partition sequence numbers (``pat_seq_kernel``).
"""

import numpy as np
from numba import njit

from bobox_sched.txn.kernels.fields import F_G, F_SRC, F_TXN, INF_TS
from bobox_sched.txn.kernels.serial import _exec_txn, _txn_records, by_txn
from bobox_sched.core.atomics import atomic_add, atomic_load, atomic_store, cpu_relax, cycles

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


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


@njit(nogil=True, cache=True, inline="always")
def _blocked(stats, t_a):
    """A wait that began at `t_a` gives up: its cycles count as sync time, and one
    blocked return."""
    stats[1] += cycles() - t_a
    stats[3] += 1


@njit(nogil=True, cache=True, inline="always")
def _await_turn(scheme, ts, m, recs, ctr, pctr, pseq, part_of, t_a, spin):
    """Lock-ahead: wait until it is transaction ts's turn -- on the global counter (LOCK,
    MVLK), on the counter of every partition its `m` records touch (PAT), not at all
    (No-Lock). False if a wait lasted more than `spin` ticks since `t_a`."""
    if scheme == LOCK or scheme == MVLK:
        k = 0
        while atomic_load(ctr, 0) != ts:
            k += 1
            if (k & 15) == 0 and cycles() - t_a > spin:
                return False
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
                    return False
                cpu_relax()
    return True


@njit(nogil=True, cache=True, inline="always")
def _insert_requests(scheme, ts, m, recs, issued, w_issued, w_reg, wq):
    """Insert transaction ts's lock requests while it holds the turn (plain stores: only
    the holder writes these): per record a ticket and the number of writes before it
    (LOCK, PAT), or its writes registered in the records' write queues (MVLK)."""
    if scheme == LOCK or scheme == PAT:
        for q in range(m):
            g = recs[q, 0]
            recs[q, 2] = issued[g]
            issued[g] += 1
            recs[q, 3] = w_issued[g]
            if recs[q, 1]:
                w_issued[g] += 1
    elif scheme == MVLK:
        Q = wq.shape[1]
        for q in range(m):
            if recs[q, 1]:
                g = recs[q, 0]
                n = w_reg[g]
                wq[g, n % Q] = ts
                atomic_store(w_reg, g, n + 1)


@njit(nogil=True, cache=True, inline="always")
def _pass_turn(scheme, ts, m, recs, ctr, pctr, pseq, part_of):
    """Pass the turn on: the global counter to ts + 1 (LOCK, MVLK), or each partition's
    counter past ts's number there (PAT)."""
    if scheme == LOCK or scheme == MVLK:
        atomic_store(ctr, 0, ts + 1)
    elif scheme == PAT:
        for q in range(m):
            if not _part_seen(part_of, recs, q):
                p = part_of[recs[q, 0]]
                atomic_store(pctr, p, pseq[ts, p] + 1)


@njit(nogil=True, cache=True, inline="always")
def _granted(scheme, ts, recs, q, g, done, w_done, w_com, w_reg, wq):
    """Is the request on record `g` (``recs[q]``) of transaction ts granted? LOCK, PAT: a
    write once every earlier request on g was released, a read once every earlier write
    was; MVLK: a write when its ts is g's lwm, a read once the lwm is not below its ts;
    No-Lock: always."""
    if scheme == LOCK or scheme == PAT:
        if recs[q, 1]:
            return atomic_load(done, g) == recs[q, 2]
        return atomic_load(w_done, g) == recs[q, 3]
    if scheme == MVLK:
        c = atomic_load(w_com, g)
        lwm = INF_TS
        if c < atomic_load(w_reg, g):
            lwm = wq[g, c % wq.shape[1]]
        if recs[q, 1]:
            return lwm == ts
        return lwm >= ts
    return True


@njit(nogil=True, cache=True, inline="always")
def _await_grants(scheme, ts, q, m, recs, done, w_done, w_com, w_reg, wq, t_a, spin):
    """Wait for the grants of the requests ``recs[q:m]``, in record order. Returns `m`,
    or the request whose wait lasted more than `spin` ticks since `t_a` (resume there)."""
    while q < m:
        g = recs[q, 0]
        k = 0
        while not _granted(scheme, ts, recs, q, g, done, w_done, w_com, w_reg, wq):
            k += 1
            if (k & 15) == 0 and cycles() - t_a > spin:
                return q
            cpu_relax()
        q += 1
    return m


@njit(nogil=True, cache=True, inline="always")
def _release(m, recs, done, w_done):
    """LOCK, PAT commit: release the lock on every record (a write's counts as a released
    write too)."""
    for q in range(m):
        g = recs[q, 0]
        if recs[q, 1]:
            atomic_add(w_done, g, 1)
        atomic_add(done, g, 1)


@njit(nogil=True, cache=True, inline="always")
def _commit_versions(q, m, recs, committed, ts, segs, seg_of, row_of, vts, vval, vcnt, inflight, w_com, spin):
    """MVLK commit of the records ``recs[q:m]``: for each one written, install its new
    version (if the transaction `committed`) and raise its lwm. Returns `m`, or the record
    whose install stayed unsafe for `spin` ticks (resume there)."""
    while q < m:
        if recs[q, 1]:
            g = recs[q, 0]
            if committed:
                row = segs[seg_of[g]][row_of[g]]
                if not _mv_install(vts, vval, vcnt, inflight, g, ts, row[0], spin):
                    return q
            atomic_add(w_com, g, 1)
        q += 1
    return m


@njit(nogil=True, cache=True, _nrt=False)
def run_baseline(scheme, ex, x0, ntx, txn_ts, ib, fb, oo, ooff, cb, cf, coo, coff, S, Y, V, X, res, verdict, spin,
                 stats):
    """Run transactions x0, x0+1, ... (this executor's, in ts order) under `scheme` until
    done or until a wait lasts more than `spin` cycle-counter ticks: then return the
    transaction to resume at (its phase is kept in ``X.st``). ``stats``: [useful, sync,
    lock] cycles, blocked returns, aborts. No reference counting (``_nrt=False``), as
    ``process_pool``: the same per-operation costs, so the comparison stays fair. The
    phases are inlined helpers (``inline="always"``, like ``_step``): no call, no
    reference counting of their array arguments."""
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
            if not _await_turn(scheme, ts, m, recs, ctr, pctr, pseq, part_of, t_a, spin):
                _blocked(stats, t_a)
                return x
            t_b = cycles()
            stats[1] += t_b - t_a
            _insert_requests(scheme, ts, m, recs, issued, w_issued, w_reg, wq)
            _pass_turn(scheme, ts, m, recs, ctr, pctr, pseq, part_of)
            stats[2] += cycles() - t_b
            st[0] = 1
            st[1] = 0
        m = st[2]
        if st[0] == 1:
            t_a = cycles()
            q = _await_grants(scheme, ts, st[1], m, recs, done, w_done, w_com, w_reg, wq, t_a, spin)
            if q < m:
                st[1] = q
                _blocked(stats, t_a)
                return x
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
            _release(m, recs, done, w_done)
        elif scheme == MVLK:
            q = _commit_versions(st[1], m, recs, st[3], ts, segs, seg_of, row_of, vts, vval, vcnt, inflight, w_com,
                                 spin)
            if q < m:
                st[1] = q
                _blocked(stats, t_a)
                return x
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
