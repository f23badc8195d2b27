"""The arrays of one batch in state-access mode (``B``): operations sorted per pool into
operation chains, chain progress and snapshots, versions, the transaction table and the
result slots. The kernels that build and walk them are fragments of ``kernels/``
(``build.build_pool``, ``walk.process_pool``, ``aborts.abort_restore``,
``finish.finish_batch``).

Layout: pool p's operations occupy rows ``[pool_off[p], pool_off[p+1])`` of ``oi``
(int64 fields: ts, seq, record, kind, fun, source, result slot, transaction) and ``of``
(param, post value); after round 0 they are sorted by (record, ts, seq), and pool p's
c-th chain has the global id ``pool_off[p] + c``: ``ch[c]`` = (first operation, end,
record), ``ch_next[c]`` its progress (the next operation to run; published with atomic
stores), ``ch_snap[r & 1, c]`` its next ts as published when round r ended, ``ch_own[c]``
the claim stamp of the stealer walking it this round (0 after round 0; process_pool),
``ch_sval[c]`` its record's value at batch start. The post value of operation i is the record's value
after it: for chains that others read (``rec_ver``) these are the chain's *versions*
(spec 3.2.6); a reader at ts binary-searches the last one below ts. ``rec_chain[g]``
maps a record to its chain in this batch (-1: untouched). Conditions: ``conds[k]`` =
(record, CFun code, second record or -1), ``c_param[k]``, transaction x's are
``cond_off[x]:cond_off[x+1]``. Everything but ``rec_chain``/``rec_ver`` (reset by
``finish_batch``) is dropped or overwritten with the next batch: garbage collection of
versions is the end of the batch.

Column arrays are kept between batches and grown when a batch needs more (`res` and
`verdict`, which blotters expose to users, are fresh for every batch).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from bobox_sched.txn.kernels.fields import NF

BatchArrays = namedtuple(
    "BatchArrays",
    "oi of o_viol ch ch_next ch_snap ch_sval ch_own pool_off pool_nch pool_cur rec_chain rec_ver "
    "cond_off conds c_param aborted verdict res aux_snap",
)


def new_batch(group, nops: int, ntx: int, npools: int, pool_off: np.ndarray, res: np.ndarray,
              verdict: np.ndarray, cond_off: np.ndarray, conds: np.ndarray, c_param: np.ndarray) -> BatchArrays:
    """Arrays for a batch of `nops` operations and `ntx` transactions (reusing the
    group's columns when they are large enough)."""
    cols = getattr(group, "_cols", None)
    if cols is None or group._cap < nops:
        cap = max(nops, 2 * getattr(group, "_cap", 0), 1024)
        cols = {
            "oi": np.empty((cap, NF), np.int64), "of": np.empty((cap, 2), np.float64),
            "o_viol": np.zeros(cap, np.int8), "ch": np.empty((cap, 3), np.int64),
            "ch_next": np.empty(cap, np.int64), "ch_snap": np.empty((2, cap), np.int64),
            "ch_sval": np.empty(cap, np.float64), "ch_own": np.zeros(cap, np.int64),
        }
        group._cols, group._cap = cols, cap
    st = group.store
    aux = getattr(group, "_aux_snap", None)
    if aux is None:
        aux = group._aux_snap = np.zeros((max(st.naux, 1) if st.has_constraints else 1, st.width), np.float64)
    return BatchArrays(
        **cols,
        pool_off=pool_off, pool_nch=np.zeros(npools, np.int64), pool_cur=np.zeros(npools, np.int64),
        rec_chain=group.rec_chain, rec_ver=group.rec_ver,
        cond_off=cond_off, conds=conds, c_param=c_param,
        aborted=np.zeros(max(ntx, 1), np.int8), verdict=verdict if ntx else np.ones(1, np.int8),
        res=res if res.size else np.zeros(1), aux_snap=aux,
    )


__all__ = ["BatchArrays", "new_batch"]
