"""The store ``S`` (a namedtuple built by ``table.py``): one record's value (``rget``,
``rset``), a table's values gathered and scattered (``gather_values``,
``scatter_values``), and every record's fields copied out and back (``dense_rows``,
``load_rows``).

``S.segs``/``S.segi``: tuples of per-segment record matrices, float64 and an int64 view
of the same memory (field 0 is the record's value, the rest padding or a set table's
bitset words); ``seg_of[g]``, ``row_of[g]``: where global record g lives;
``rec_table[g]``; per table ``t_lo``, ``t_hi`` (its constraint) and ``t_aux`` (a set
table); ``aux_idx[g]``: the record's row in an aux snapshot, -1 if not a set table.
"""

from numba import njit

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


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
