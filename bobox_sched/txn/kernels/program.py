"""Compute mode in one call per packet: an access program (``txn/program.py``) registers
every operation and condition of a packet's events, step after step, exactly as the
same ``txn.read`` / ``write`` / ``read_modify`` / ``require`` calls would one by one
(``register.append_ops``, ``append_conds``): the same rows, sequence numbers, result
slots and order in the buffers, so that both forms give the same batches.

A program is an int64 table, one row of ``PW`` fields per step (``P_*`` below), and a
float64 table of two constants per step (``C_VAL``: the parameter, or a condition's
right-hand side; ``C_WHERE``: the operand of the step's row filter). A step reads the
packet's columns from three tuples of 2-D C-contiguous arrays, one per element type:
``I`` (int64), ``F`` (float64) and ``Bo`` (bool); a reference is (group, index, column):
group ``G_CONST`` (the step's constant), ``G_I``, ``G_F`` or ``G_B``, the array's index
in its tuple, and a fixed column of it (>= 0), or -1: the operation's own column when
the array has one per operation (width > 1), else column 0 (shared by the row's
operations), as with 2-D keys in the ``txn`` calls.

A row filter (``where``) compares one value of the row with ``C_WHERE`` (``W_*``
operators; ``W_TRUE``: the value is not zero) and may be negated. Values are compared as
float64 (integers exact up to 2**53).
"""

import numpy as np
from numba import njit

from bobox_sched.txn.kernels.register import put_cond, put_op

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


# ======================================================================================
# compute mode: a packet's access program in one call

COND = 3  # a step kind beside READ, WRITE, RMW: a condition of the rows' transactions

P_KIND = 0
P_TBASE = 1
P_NKEYS = 2
P_CODE = 3  # the Fun's code (RMW) or the CFun's (COND)
P_KI = 4  # keys: the I array's index, its fixed column (-1: every column, one op each)
P_KJ = 5
P_L = 6  # operations per selected row (1 for a condition)
P_VG = 7  # the parameter or value (ops), the right-hand side (conditions): group,
P_VI = 8  # index, column
P_VJ = 9
P_SBASE = 10  # the source record's table (-1: none; a condition's rhs record: its table)
P_SNK = 11
P_SI = 12  # the source keys (an I array), fixed column
P_SJ = 13
P_INTO = 14  # 1: the operations' new values go to result slots
P_WG = 15  # the row filter: group (-1: every row), index, column, operator, negated
P_WI = 16
P_WJ = 17
P_WOP = 18
P_WNEG = 19
PW = 20

C_VAL = 0
C_WHERE = 1

G_CONST = -1
G_I = 0
G_F = 1
G_B = 2

W_TRUE = 0
W_EQ = 1
W_NE = 2
W_LT = 3
W_LE = 4
W_GT = 5
W_GE = 6


@njit(nogil=True, cache=True, _nrt=False)
def _prog_bad(out, p, r):
    """``run_program``'s answer for a key out of range: (step, row) in ``out[3:5]``, -1."""
    out[3] = p
    out[4] = r
    return -1


@njit(nogil=True, cache=True, _nrt=False)
def _prog_at(a, jfix, r, j):
    """Row `r`'s value of array `a` for the row's `j`-th operation (module doc)."""
    if jfix >= 0:
        return a[r, jfix]
    if a.shape[1] > 1:
        return a[r, j]
    return a[r, 0]


@njit(nogil=True, cache=True, _nrt=False)
def _prog_num(g, c, aI, aF, aB, jf, r, j):
    """A reference's value as float64: group `g`'s array (one of `aI`, `aF`, `aB`), or
    the constant `c` (module doc)."""
    if g == G_F:
        return _prog_at(aF, jf, r, j)
    if g == G_I:
        return np.float64(_prog_at(aI, jf, r, j))
    if g == G_B:
        return 1.0 if _prog_at(aB, jf, r, j) else 0.0
    return c


@njit(nogil=True, cache=True, _nrt=False)
def _prog_sel(g, op, neg, x, aI, aF, aB, jf, r):
    """Does a step's row filter select row `r`? (`g` < 0: it has none)"""
    if g < 0:
        return True
    v = _prog_num(g, 0.0, aI, aF, aB, jf, r, 0)
    if op == W_TRUE:
        t = v != 0.0
    elif op == W_EQ:
        t = v == x
    elif op == W_NE:
        t = v != x
    elif op == W_LT:
        t = v < x
    elif op == W_LE:
        t = v <= x
    elif op == W_GT:
        t = v > x
    else:
        t = v >= x
    return t != neg


@njit(nogil=True, cache=True, _nrt=False)
def run_program(prog, pc, I, F, Bo, n, ts, ib, fb, n0, cb, cf, nc0, txn0, seq0, slot0, out):
    """Register the `n` events' operations (from row `n0` of ``ib``/``fb``) and
    conditions (from row `nc0` of ``cb``/``cf``), transactions ``txn0 + r``, sequence
    numbers from `seq0`, result slots from `slot0`. The buffers must have room for every
    selected row of every step. Writes ``out[0:3]`` = the new operation count, condition
    count and slot count and returns 0; or, for the first key out of range, writes
    ``out[3:5]`` = (step, row) and returns -1."""
    k = n0
    c = nc0
    seq = seq0
    s = slot0
    for p in range(prog.shape[0]):
        kind = prog[p, P_KIND]
        tbase = prog[p, P_TBASE]
        nk = prog[p, P_NKEYS]
        code = prog[p, P_CODE]
        # each reference's array, taken from its tuple once per step (an index into a
        # tuple of arrays per element cost ~100 ns); unused ones get the tuple's first
        ka = I[prog[p, P_KI]]
        kj = prog[p, P_KJ]
        sbase = prog[p, P_SBASE]
        snk = prog[p, P_SNK]
        sa = I[prog[p, P_SI]] if sbase >= 0 else I[0]
        sj = prog[p, P_SJ]
        vg, vj, vc = prog[p, P_VG], prog[p, P_VJ], pc[p, C_VAL]
        vI = I[prog[p, P_VI]] if vg == G_I else I[0]
        vF = F[prog[p, P_VI]] if vg == G_F else F[0]
        vB = Bo[prog[p, P_VI]] if vg == G_B else Bo[0]
        wg, wj, wop, wx = prog[p, P_WG], prog[p, P_WJ], prog[p, P_WOP], pc[p, C_WHERE]
        wneg = prog[p, P_WNEG] != 0
        wI = I[prog[p, P_WI]] if wg == G_I else I[0]
        wF = F[prog[p, P_WI]] if wg == G_F else F[0]
        wB = Bo[prog[p, P_WI]] if wg == G_B else Bo[0]
        if kind == COND:
            for r in range(n):
                if not _prog_sel(wg, wop, wneg, wx, wI, wF, wB, wj, r):
                    continue
                key = _prog_at(ka, kj, r, 0)
                if key < 0 or key >= nk:
                    return _prog_bad(out, p, r)
                if sbase >= 0:
                    rk = _prog_at(sa, sj, r, 0)
                    if rk < 0 or rk >= snk:
                        return _prog_bad(out, p, r)
                    put_cond(cb, cf, c, txn0 + r, tbase + key, code, sbase + rk, 0.0)
                else:
                    put_cond(cb, cf, c, txn0 + r, tbase + key, code, -1,
                             _prog_num(vg, vc, vI, vF, vB, vj, r, 0))
                c += 1
            continue
        L = prog[p, P_L]
        into = prog[p, P_INTO] != 0
        for r in range(n):
            if not _prog_sel(wg, wop, wneg, wx, wI, wF, wB, wj, r):
                continue
            for j in range(L):
                key = _prog_at(ka, kj, r, j)
                if key < 0 or key >= nk:
                    return _prog_bad(out, p, r)
                src = -1
                if sbase >= 0:
                    sk = _prog_at(sa, sj, r, j)
                    if sk < 0 or sk >= snk:
                        return _prog_bad(out, p, r)
                    src = sbase + sk
                put_op(ib, fb, k, ts[r], seq + j, tbase + key, kind, code, src, s + r * L + j if into else -1,
                       txn0 + r, _prog_num(vg, vc, vI, vF, vB, vj, r, j))
                k += 1
        seq += L
        if into:
            s += n * L
    out[0] = k
    out[1] = c
    out[2] = s
    return 0
