"""The end of a batch, its garbage collection: the chains and dependency marks
forgotten (``finish_batch``), and the versions a batch holds (``live_versions``).
"""

from numba import njit

from bobox_sched.txn.kernels.build import C_END, C_G, C_START
from bobox_sched.txn.kernels.fields import F_G, F_SRC, F_TXN

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


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
