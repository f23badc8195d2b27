"""The GIL-holding twins (``<name>_held``) of the kernels of a batch's steps, for calls
too small to release the GIL (``funs.kernel_for``).
"""

from numba import njit

from bobox_sched.txn.kernels.build import build_conds, build_pool, gather_pool
from bobox_sched.txn.kernels.direct import run_direct
from bobox_sched.txn.kernels.finish import finish_batch
from bobox_sched.txn.kernels.program import run_program
from bobox_sched.txn.kernels.register import cond_only_reads, partition_ops, pool_local
from bobox_sched.txn.kernels.serial import by_txn
from bobox_sched.txn.kernels.walk import process_pool

# ---- fragment: funs.kernels() copies the text below into the kernel module ----


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


@njit(cache=True, _nrt=False)
def run_direct_held(tmp_i, tmp_f, n, span, ts0, cnt, by_ts, cond_off, conds, c_param, verdict, res, S):
    return run_direct(tmp_i, tmp_f, n, span, ts0, cnt, by_ts, cond_off, conds, c_param, verdict, res, S)


@njit(cache=True)
def finish_batch_held(B, npools, nops):
    return finish_batch(B, npools, nops)


@njit(cache=True)
def by_txn_held(ntx, txn_of, n, off, order):
    by_txn(ntx, txn_of, n, off, order)


@njit(cache=True, _nrt=False)
def run_program_held(prog, pc, I, F, Bo, n, ts, ib, fb, n0, cb, cf, nc0, txn0, seq0, slot0, out):
    return run_program(prog, pc, I, F, Bo, n, ts, ib, fb, n0, cb, cf, nc0, txn0, seq0, slot0, out)
