"""State access without chains, for a pool whose operations read nothing but their own
record (``run_direct``): the pool's operations are run in (ts, seq) order, one after the
other, straight on the store.

When it applies (the coordinator decides per batch, ``Group._start_batch``): no
operation reads another record (no ``src=``); every condition of a transaction reads
records of the pool its operations are in (``pool_local``: so a transaction with
conditions lies in one pool); the store has no consistency constraints (no aborts); no
stealers share the pool. Then the serial timestamp-order run restricted to the pool's
records *is* the pool's part of the serial run: a record's operations come in ts order,
and a transaction's conditions, evaluated before its first operation, see every earlier
transaction's writes to the pool and none of its own -- their pre-transaction values. The
chains (``build.build_pool``, ``walk.process_pool``) compute the same thing, with the
record directory, versions and rounds that cross-record reads and stealers need; for
GS-, TP- and OB-like batches they cost 5-6x more (measured: the constant's comment in
``coordinator.py``).
"""

import numpy as np
from numba import njit

from typing import TYPE_CHECKING

from bobox_sched.txn.kernels.fields import F_FUN, F_G, F_KIND, F_OUT, F_TS, F_TXN, READ, WRITE

if TYPE_CHECKING:  # generated ahead of the fragments (generated.py)
    from bobox_sched.txn.kernels.generated import apply_fun, eval_cfun

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


# ======================================================================================
# state access without chains (a pool whose operations read only their own record)


@njit(nogil=True, cache=True, _nrt=False)
def run_direct(tmp_i, tmp_f, n, span, ts0, cnt, by_ts, cond_off, conds, c_param, verdict, res, S):
    """Run the pool's `n` operations gathered in ``tmp_i``/``tmp_f`` (``build.gather_pool``:
    global transactions and result slots; ts in ``[ts0, ts0 + span)``) in (ts, seq) order
    on the store `S`: a stable counting sort by ts (a transaction's operations keep their
    issue order) into ``by_ts`` (n rows) with ``cnt`` (span + 1 zeros) as its scratch,
    then one pass. A transaction's conditions are evaluated before its first operation;
    a false one rejects it (``verdict`` 0: its writes are skipped, its reads still read).
    A new value that is NaN is not stored (``walk._step``'s rule without constraints).
    Returns the operations run. Compiled without reference counting: the kernel borrows
    its arrays and allocates nothing (``walk.process_pool``'s note)."""
    for i in range(n):
        cnt[tmp_i[i, F_TS] - ts0 + 1] += 1
    for j in range(span):
        cnt[j + 1] += cnt[j]
    for i in range(n):
        d = tmp_i[i, F_TS] - ts0
        by_ts[cnt[d]] = i
        cnt[d] += 1
    segs = S.segs
    segi = S.segi
    seg_of = S.seg_of
    row_of = S.row_of
    last_x = -1
    ok = True
    for q in range(n):
        i = by_ts[q]
        x = tmp_i[i, F_TXN]
        if x != last_x:  # the transaction's first operation here: its conditions, once
            last_x = x
            ok = True
            for c in range(cond_off[x], cond_off[x + 1]):
                h = conds[c, 0]
                a = segs[seg_of[h]][row_of[h], 0]
                b = c_param[c]
                h2 = conds[c, 2]
                if h2 >= 0:
                    b = segs[seg_of[h2]][row_of[h2], 0]
                if not eval_cfun(conds[c, 1], a, b):
                    ok = False
                    break
            verdict[x] = 1 if ok else 0
        g = tmp_i[i, F_G]
        seg = seg_of[g]
        r = row_of[g]
        row = segs[seg][r]
        cur = row[0]
        kind = tmp_i[i, F_KIND]
        if kind != READ and ok:
            if kind == WRITE:
                nv = tmp_f[i]
            else:
                nv = apply_fun(tmp_i[i, F_FUN], cur, 0.0, tmp_f[i], segi[seg][r, 1:])
            if nv == nv:
                cur = nv
                row[0] = cur
        o = tmp_i[i, F_OUT]
        if o >= 0:
            res[o] = cur
    return n
