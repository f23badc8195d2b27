"""Real atomics for nogil numba kernels: LLVM ``atomicrmw``, ``cmpxchg`` and atomic
``load``/``store`` emitted through ``numba.extending.intrinsic``, plus ``cpu_relax`` (the
x86 ``pause`` hint on bare metal, nothing in a VM: ``spin_with_pause``) and ``cycles``
(``llvm.readcyclecounter``, the TSC on x86).

Why: the lock-based baselines (LOCK, MVLK, PAT) coordinate executors through counters,
lock words and low-water marks. Done with Python locks, the measured gap between them
and TStream would be the GIL's, not the algorithms'. These helpers compile to single
machine instructions inside ``@njit(nogil=True)`` kernels, so kernels on different
worker threads synchronise exactly as the paper's Java ``AtomicLong`` code does.

Memory order: everything here is ``seq_cst`` (what Java's ``AtomicLong`` gives, and the
simplest to reason about). An atomic store that publishes a chain's progress therefore
also publishes every plain store made before it (release), and an atomic load that sees
it makes those stores visible (acquire): the chain kernels rely on that to read another
chain's versions once its published progress passed a timestamp.

All functions take a 1-D integer array and an index; they operate on that element.
"""

from __future__ import annotations

import functools
import os
import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_ORDER = "seq_cst"
_INTS = (types.int64, types.int32, types.uint64, types.uint32)


def _check(ary):
    if not (isinstance(ary, types.Array) and ary.ndim == 1 and ary.dtype in _INTS):
        raise TypeError(f"atomics need a 1-D int32/int64 array, got {ary}")


def _ptr(context, builder, aryty, ary, idx, idxty):
    a = context.make_array(aryty)(context, builder, ary)
    i = context.cast(builder, idx, idxty, types.intp)
    return cgutils.get_item_pointer(context, builder, aryty, a, [i], wraparound=False)


@intrinsic
def atomic_add(typingctx, ary, idx, val):
    """``old = ary[idx]; ary[idx] += val`` atomically; returns the old value
    (fetch-and-add)."""
    _check(ary)
    sig = ary.dtype(ary, types.intp, ary.dtype)

    def codegen(context, builder, sig, args):
        a, i, v = args
        ptr = _ptr(context, builder, sig.args[0], a, i, sig.args[1])
        return builder.atomic_rmw("add", ptr, v, _ORDER)

    return sig, codegen


@intrinsic
def atomic_cas(typingctx, ary, idx, expected, new):
    """Compare-and-swap: if ``ary[idx] == expected`` store `new`. Returns the value seen
    (equal to `expected` exactly when the swap happened)."""
    _check(ary)
    sig = ary.dtype(ary, types.intp, ary.dtype, ary.dtype)

    def codegen(context, builder, sig, args):
        a, i, e, n = args
        ptr = _ptr(context, builder, sig.args[0], a, i, sig.args[1])
        pair = builder.cmpxchg(ptr, e, n, _ORDER, _ORDER)
        return builder.extract_value(pair, 0)

    return sig, codegen


@intrinsic
def atomic_load(typingctx, ary, idx):
    """An atomic (acquire, seq_cst) read of ``ary[idx]``."""
    _check(ary)
    sig = ary.dtype(ary, types.intp)

    def codegen(context, builder, sig, args):
        a, i = args
        ptr = _ptr(context, builder, sig.args[0], a, i, sig.args[1])
        return builder.load_atomic(ptr, _ORDER, sig.args[0].dtype.bitwidth // 8)

    return sig, codegen


@intrinsic
def atomic_store(typingctx, ary, idx, val):
    """An atomic (release, seq_cst) write ``ary[idx] = val``."""
    _check(ary)
    sig = types.void(ary, types.intp, ary.dtype)

    def codegen(context, builder, sig, args):
        a, i, v = args
        ptr = _ptr(context, builder, sig.args[0], a, i, sig.args[1])
        builder.store_atomic(v, ptr, _ORDER, sig.args[0].dtype.bitwidth // 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def atomic_max(typingctx, ary, idx, val):
    """``ary[idx] = max(ary[idx], val)`` atomically (signed); returns the old value."""
    _check(ary)
    sig = ary.dtype(ary, types.intp, ary.dtype)
    op = "max" if ary.dtype.signed else "umax"

    def codegen(context, builder, sig, args):
        a, i, v = args
        ptr = _ptr(context, builder, sig.args[0], a, i, sig.args[1])
        return builder.atomic_rmw(op, ptr, v, _ORDER)

    return sig, codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def cpu_pause(typingctx):
    """The x86 ``pause`` spin-wait hint (lets the sibling hyper-thread run, avoids the
    memory-order flush when the awaited store lands); nothing on other CPUs."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        if _X86:  # numba's JIT has no inline-asm parser: the LLVM intrinsic instead
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause"), [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def cpu_nop(typingctx):
    """No hint at all (a plain spin)."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        return context.get_dummy_value()

    return sig, codegen


@functools.lru_cache(maxsize=1)
def spin_with_pause() -> bool:
    """Whether spin loops use ``pause`` (x86; the usual polite spin). ``BOBOX_SPIN_PAUSE=0``
    turns it off -- e.g. to try a VM whose hypervisor deschedules vCPUs that spin on
    ``pause`` (pause-loop exiting); on the shared 2-vCPU development VM, interleaved runs
    with and without it measured the same within the host's load noise."""
    env = os.environ.get("BOBOX_SPIN_PAUSE")
    if env is not None:
        return env not in ("0", "", "no", "false")
    return _X86


cpu_relax = cpu_nop if not spin_with_pause() else cpu_pause


@intrinsic
def cycles(typingctx):
    """The CPU's cycle counter (``rdtsc`` on x86), for time breakdowns inside kernels;
    convert with :func:`cycles_per_second`."""
    sig = types.int64()

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


_CPS = None


def cycles_per_second() -> float:
    """Cycle-counter ticks per second, measured once against ``perf_counter`` (20 ms)."""
    global _CPS
    if _CPS is None:
        import time

        from numba import njit

        @njit(nogil=True)
        def _now():
            return cycles()

        _now()
        t0, c0 = time.perf_counter(), _now()
        while time.perf_counter() - t0 < 0.02:
            pass
        t1, c1 = time.perf_counter(), _now()
        _CPS = max(1.0, (c1 - c0) / (t1 - t0))
    return _CPS


# The same atomics called from Python (one nogil kernel call each): words of memory that
# other threads, or other processes through a shared mapping, read and write with the
# intrinsics above (domains/channel.py's control words and bells, domains/loans.py's
# loan table).
@njit(nogil=True, cache=True)
def load_word(words, i):
    return atomic_load(words, i)


@njit(nogil=True, cache=True)
def store_word(words, i, v):
    atomic_store(words, i, v)


@njit(nogil=True, cache=True)
def cas_word(words, i, expected, new):
    """Compare-and-swap word `i` from `expected` to `new`; the value it held."""
    return atomic_cas(words, i, expected, new)


__all__ = ["atomic_add", "atomic_cas", "atomic_load", "atomic_max", "atomic_store", "cas_word", "cpu_nop", "cpu_pause",
           "cpu_relax", "cycles", "cycles_per_second", "load_word", "spin_with_pause", "store_word"]
