"""The baselines (spec section 4): LOCK, MVLK, PAT and No-Lock, coarse-grained -- an
executor runs PRE, STATE_ACCESS and POST of its events one transaction at a time, each
transaction as soon as it is issued (Alg. 1 with ``dualmode`` false).

Their counters, lock words and low-water marks are int64 arrays touched with real
atomics inside the nogil kernel ``run_baseline`` (``kernels/baselines.py``; the protocol
of every field is stated there). Waits are bounded: after ``TxnConfig.spin`` tries the
kernel returns the transaction to resume at, and the operator asks to run again later
(``ctx.reschedule``), so a worker never spins on an executor that is not running -- no
deadlock with more executors than worker threads.

* LOCK: S2PL with lock-ahead. A transaction waits until the global counter equals its
  ts, inserts its lock requests (a ticket per record; ordered read/write locks: a write
  is granted when every earlier request on the record was released, a read when every
  earlier write was), advances the counter, then waits for its grants, executes, and
  releases at commit.
* MVLK: lock-ahead on the same counter registers the transaction's writes per record;
  lwm(record) = the smallest registered, uncommitted write ts (the authors' rule, spec
  4 note). A write runs when its ts is the lwm, a read once the lwm is not below its ts,
  reading the newest version below its ts from the record's version ring; commit
  installs the new versions and raises the lwm.
* PAT: the lock-ahead is per partition (key mod P): a transaction waits until every
  partition it touches reached its sequence number there (``pat_sequence``), inserts its
  record locks, advances those partitions' counters. Disjoint transactions never wait for
  each other; multi-partition ones serialise like LOCK.
* No-Lock: LOCK without any lock or counter. Not correct; an upper bound.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from bobox_sched.txn.config import partition_of_key
from bobox_sched.txn.funs import kernels
from bobox_sched.txn.kernels.fields import INF_TS

SCHEME_CODES = {"lock": 1, "mvlk": 2, "pat": 3, "nolock": 4}
MAX_RECORDS_PER_TXN = 64
# Pending writes kept per record in MVLK's FIFO (wq): at most one per running
# transaction, so the number of executors is enough; 64 leaves room.
WRITE_QUEUE = 64
# Versions per record in MVLK's ring: the newest version below the oldest running
# transaction's ts, plus at most one per running transaction, must fit (the install
# waits otherwise); 2 x executors + 2, at least 8.
def ring_size(executors: int) -> int:
    return max(8, 2 * executors + 2)


SyncState = namedtuple("SyncState", "ctr pctr pseq part_of issued w_issued done w_done w_reg w_com wq inflight")
Scratch = namedtuple("Scratch", "st recs rtmp pre save")


class BaselineState:
    """The shared sync state of one group's executors, and each executor's scratch."""

    def __init__(self, cfg, store, K):
        G = store.nrecords
        self.scheme = SCHEME_CODES[cfg.cc]
        self.cfg = cfg
        P = cfg.pat_partitions
        pseq = cfg.pat_seq if cfg.cc == "pat" else np.zeros((1, 1), np.int64)
        mv = cfg.cc == "mvlk"
        self.Y = SyncState(
            ctr=np.zeros(1, np.int64), pctr=np.zeros(P, np.int64),
            pseq=np.ascontiguousarray(pseq, np.int64),
            part_of=partition_of_key(store.key_of, P).astype(np.int64),
            issued=np.zeros(G, np.int64), w_issued=np.zeros(G, np.int64),
            done=np.zeros(G, np.int64), w_done=np.zeros(G, np.int64),
            w_reg=np.zeros(G if mv else 1, np.int64), w_com=np.zeros(G if mv else 1, np.int64),
            wq=np.zeros((G if mv else 1, WRITE_QUEUE), np.int64),
            inflight=np.full(cfg.executors, INF_TS, np.int64),
        )
        if mv:
            R = ring_size(cfg.executors)
            self.V = (np.zeros((G, R), np.int64), np.zeros((G, R), np.float64), np.zeros(G, np.int64))
            K.mv_init(*self.V, store.view(), G)
        else:
            self.V = (np.zeros((1, 1), np.int64), np.zeros((1, 1), np.float64), np.zeros(1, np.int64))
        W = store.width
        self.X = [Scratch(np.zeros(4, np.int64), np.zeros((MAX_RECORDS_PER_TXN, 4), np.int64),
                          np.zeros((MAX_RECORDS_PER_TXN, 2), np.int64), np.zeros(MAX_RECORDS_PER_TXN),
                          np.zeros((MAX_RECORDS_PER_TXN, W))) for _ in range(cfg.executors)]
        # [useful, sync, lock] cycles, blocked returns, aborts; one row per executor
        self.stats = np.zeros((cfg.executors, 5), np.int64)

    def summary(self) -> dict:
        from bobox_sched.core.atomics import cycles_per_second

        s = self.stats.sum(axis=0)
        cps = cycles_per_second()
        return {"useful_s": s[0] / cps, "sync_s": s[1] / cps, "lock_s": s[2] / cps, "blocked_returns": int(s[3]),
                "baseline_aborts": int(s[4])}


def pat_sequence(recording, store, nparts: int) -> np.ndarray:
    """``seq[ts, p]`` for every transaction of `recording` (``oracle.record``): its number
    among the transactions touching partition p, in ts order (S-Store's bid array; the
    authors' generator precomputes it the same way). -1 where ts does not touch p."""
    K = kernels()
    buf = recording.buf
    ntx = buf.ntx
    top = int(buf.tts[:ntx].max()) + 1 if ntx else 1
    out = np.full((top, nparts), -1, np.int64)
    part_of = partition_of_key(store.key_of, nparts).astype(np.int64)
    K.pat_seq_kernel(ntx, buf.tts, buf.ib, buf.n, buf.cb, buf.nc, part_of, nparts, out)
    return out


__all__ = ["BaselineState", "SCHEME_CODES", "pat_sequence"]
