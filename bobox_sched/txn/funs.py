"""``Fun`` and ``CFun``: the user functions of READ_MODIFY and of conditions (TStream
Table II), as integer codes that the nogil kernels dispatch on.

* A **Fun** computes the new value of the target record:
  ``f(cur, src, param, bits) -> float64`` where ``cur`` is the record's current value,
  ``src`` the value of the operation's source record read as of transaction start (0.0
  without a source), ``param`` the operation's per-row parameter, and ``bits`` the
  record's extra words as an int64 array (a set table's bitset; empty otherwise), which a
  Fun may update in place.
* A **CFun** is a condition ``c(a, b) -> bool`` on a record's pre-transaction value
  ``a`` and a right-hand side ``b`` (a per-row constant, or another record's
  pre-transaction value).

Built-ins: Funs ``SET`` (param), ``INC`` (cur + param), ``DEC`` (cur - param), ``AVG2``
(param if cur == 0 else (cur + param) / 2: TP's road speed), ``SET_INSERT`` (insert
int(param) into the record's bitset; the value is the set's size), ``COPY`` (src) and
``ADD_SRC`` (cur + src); CFuns ``GE GT LE LT EQ NE``.

Users add codes with :func:`register_fun` / :func:`register_cfun`, giving a plain
module-level ``def`` that numba can compile (it may use ``np`` and ``math``). The kernels
are *generated*: the bodies of the fragments of the ``kernels`` package, in its
``FRAGMENTS`` order, are appended to a dispatch function over every registered code, the
result written to the kernel cache folder under its hash and imported from there, so
numba's ``cache=True`` keeps the machine code across processes. Registering a function
makes the next :func:`kernels` call compile a new module once.

Protocol: registration and :func:`kernels` may be called from any thread; ``_LOCK`` guards
the registry, the module table and the file writes. A kernel module, once loaded, is
immutable; a batch keeps the module it started with.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import re
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np

from bobox_sched.txn import kernels as fragments

_LOCK = threading.Lock()


class Fun:
    """A registered READ_MODIFY function (see the module doc)."""

    __slots__ = ("name", "code", "source")

    def __init__(self, name: str, code: int, source: str):
        self.name, self.code, self.source = name, code, source

    def __repr__(self) -> str:
        return f"Fun.{self.name}"


class CFun:
    """A registered condition. Calling it makes a :class:`Cond` for a transaction:
    ``GT(table, keys, rhs)`` where `rhs` is a scalar or per-row array, or a
    ``(table, keys)`` pair naming another record (read at its pre-transaction value)."""

    __slots__ = ("name", "code", "source")

    def __init__(self, name: str, code: int, source: str):
        self.name, self.code, self.source = name, code, source

    def __call__(self, table, keys, rhs) -> "Cond":
        return Cond(self, table, keys, rhs)

    def __repr__(self) -> str:
        return f"CFun.{self.name}"


class Cond:
    """``cfun(table[keys], rhs)``: one condition per row, ANDed into the row's
    transaction verdict (spec 1.8a)."""

    __slots__ = ("cfun", "table", "keys", "rhs")

    def __init__(self, cfun: CFun, table, keys, rhs):
        self.cfun, self.table, self.keys, self.rhs = cfun, table, keys, rhs

    def __repr__(self) -> str:
        return f"{self.cfun.name}({getattr(self.table, 'name', self.table)}, ...)"


# -- built-ins ------------------------------------------------------------------------
# Sources are kept as text: they become part of the generated kernel module.

_BUILTIN_FUNS = {
    "SET": "def f(cur, src, param, bits):\n    return param\n",
    "INC": "def f(cur, src, param, bits):\n    return cur + param\n",
    "DEC": "def f(cur, src, param, bits):\n    return cur - param\n",
    "AVG2": "def f(cur, src, param, bits):\n    if cur == 0.0:\n        return param\n    return (cur + param) / 2.0\n",
    "SET_INSERT": (
        "def f(cur, src, param, bits):\n"
        "    v = np.int64(param)\n"
        "    w = v >> 6\n"
        "    if v < 0 or w >= bits.shape[0]:\n"
        "        return cur\n"
        "    m = np.int64(1) << (v & 63)\n"
        "    if bits[w] & m:\n"
        "        return cur\n"
        "    bits[w] |= m\n"
        "    return cur + 1.0\n"
    ),
    "COPY": "def f(cur, src, param, bits):\n    return src\n",
    "ADD_SRC": "def f(cur, src, param, bits):\n    return cur + src\n",
}
_BUILTIN_CFUNS = {
    "GE": "def c(a, b):\n    return a >= b\n",
    "GT": "def c(a, b):\n    return a > b\n",
    "LE": "def c(a, b):\n    return a <= b\n",
    "LT": "def c(a, b):\n    return a < b\n",
    "EQ": "def c(a, b):\n    return a == b\n",
    "NE": "def c(a, b):\n    return a != b\n",
}

_funs: list[Fun] = []
_cfuns: list[CFun] = []
_modules: dict[str, object] = {}


def _user_source(fn, nargs: int) -> str:
    if not callable(fn):
        raise TypeError(f"register a function, not {type(fn).__name__}")
    py = getattr(fn, "py_func", fn)  # a numba dispatcher: its Python function
    try:
        src = textwrap.dedent(inspect.getsource(py))
    except (OSError, TypeError):
        raise ValueError(f"cannot read the source of {fn!r}: register a module-level def") from None
    if py.__code__.co_freevars:
        raise ValueError(f"{py.__name__} is a closure: register a module-level def without free variables")
    if py.__code__.co_argcount != nargs:
        raise ValueError(f"{py.__name__} takes {py.__code__.co_argcount} arguments, a {'Fun' if nargs == 4 else 'CFun'} "
                         f"takes {nargs}")
    lines = src.splitlines()
    while lines and lines[0].lstrip().startswith("@"):
        lines.pop(0)  # decorators (e.g. @njit): the kernel module compiles it itself
    if not lines or not lines[0].startswith("def "):
        raise ValueError(f"{py.__name__}: a plain 'def' is needed (no lambda)")
    return "\n".join(lines) + "\n"


def register_fun(name: str, fn) -> Fun:
    """Register `fn(cur, src, param, bits) -> float` as a READ_MODIFY function; returns
    its :class:`Fun` (registering the same name and source again returns the same)."""
    src = _user_source(fn, 4)
    with _LOCK:
        for f in _funs:
            if f.name == name:
                if f.source != src:
                    raise ValueError(f"a Fun named {name!r} is already registered with another body")
                return f
        f = Fun(name, len(_funs), src)
        _funs.append(f)
        return f


def register_cfun(name: str, fn) -> CFun:
    """Register `fn(a, b) -> bool` as a condition; returns its :class:`CFun`."""
    src = _user_source(fn, 2)
    with _LOCK:
        for c in _cfuns:
            if c.name == name:
                if c.source != src:
                    raise ValueError(f"a CFun named {name!r} is already registered with another body")
                return c
        c = CFun(name, len(_cfuns), src)
        _cfuns.append(c)
        return c


for _n, _s in _BUILTIN_FUNS.items():
    _funs.append(Fun(_n, len(_funs), _s))
for _n, _s in _BUILTIN_CFUNS.items():
    _cfuns.append(CFun(_n, len(_cfuns), _s))

SET, INC, DEC, AVG2, SET_INSERT, COPY, ADD_SRC = _funs[:7]
GE, GT, LE, LT, EQ, NE = _cfuns[:6]


def fun_by_name(name: str) -> Fun:
    for f in _funs:
        if f.name == name:
            return f
    raise KeyError(name)


# -- the generated kernel module --------------------------------------------------------

def cache_dir() -> Path:
    d = os.environ.get("BOBOX_KERNEL_CACHE")
    return (Path(d) if d else Path.home() / ".cache" / "bobox-sched" / "kernels") / "txn"


def _rename(src: str, new: str) -> str:
    return re.sub(r"^def\s+\w+\s*\(", f"def {new}(", src, count=1, flags=re.M)


def _dispatch_source(funs: list[Fun], cfuns: list[CFun]) -> str:
    out = ["# Generated by bobox_sched.txn.funs: the registered Funs and CFuns and their dispatch.\n"]
    for f in funs:
        out.append("@njit(nogil=True, cache=True)\n" + _rename(f.source, f"_fun_{f.code}") + "\n")
    for c in cfuns:
        out.append("@njit(nogil=True, cache=True)\n" + _rename(c.source, f"_cfun_{c.code}") + "\n")
    body = ["@njit(nogil=True, cache=True)", "def apply_fun(code, cur, src, param, bits):"]
    for f in funs:
        body.append(f"    if code == {f.code}:\n        return np.float64(_fun_{f.code}(cur, src, param, bits))")
    body.append("    return cur\n")
    body += ["@njit(nogil=True, cache=True)", "def eval_cfun(code, a, b):"]
    for c in cfuns:
        body.append(f"    if code == {c.code}:\n        return bool(_cfun_{c.code}(a, b))")
    body.append("    return False\n")
    out.append("\n".join(body) + "\n")
    return "\n".join(out)


_current = [None, None]  # (number of registered functions, module) of the last call


# A kernel call releases the GIL only with enough work: at least HOLD_BELOW[name] items
# (operations; conditions for build_conds), about 20 us at the per-item costs measured
# on the 2-core VM (GS, 1 worker, ns per operation: build_pool 32, process_pool 18,
# partition_ops 8, gather_pool 5, finish_batch 4; by_txn and cond_only_reads < 2).
# Below that the release costs more than the parallelism it buys: while another worker
# waits for the GIL, each release hands it over, and getting it back waits for that
# worker (a wake-up of a thread on another core each way). Same crossover as the streams
# experiment's kernels (experiments/streams_ops.RELEASE_FLOPS: 16-25 us). At 2 workers
# (interval 500, 200k events, median of 3, two rounds alternating: every kernel
# releasing it / these thresholds / every kernel keeping it), events/s: GS 617k, 630k /
# 629k, 657k / 592k, 610k; SL 904k, 909k / 933k, 1008k / 960k, 956k; OB 617k, 587k /
# 591k, 631k / 587k, 623k; TP 1930k, 1958k / 1921k, 1919k / 2326k, 2372k. Keeping it
# everywhere loses GS's parallel per-pool builds and walks (and would serialize every
# pool's walk on many cores); TP's gain comes from its batches being walked by one task,
# which coordinator.ONE_TASK_HELD acts on.
# With at most FEW_WORKERS workers, partition_ops and gather_pool keep it below 8 000 /
# 12 000 operations instead (HOLD_BELOW_FEW; about 65 us of their work). There a release
# hands the GIL to the one other worker, and the return waits for it to come back: a
# thread wake-up, ~35-42 us on this VM (experiments/handoff.py), more than these two
# kernels run at interval 500 (25-40 us). Measured 2026-11-26 on 2 workers (200k events,
# median of 4, the settings alternating in one process; .scratch driver over
# operators.txn.run_once), 2 500 / 4 000 -> 8 000 / 12 000, events/s (voluntary context
# switches per batch): interval 500: GS 593k (11.7) -> 658k (7.8), OB 525k (7.6) -> 598k
# (5.7); interval 1000: GS 780k -> 798k, OB 680k -> 686k; interval 2000: GS 966k ->
# 973k; 1 worker (GS, OB): 625k / 615k -> 630k / 612k. Keeping both up to 20 000 lost at
# interval 1000 (GS 761k, OB 671k: 80-us calls held), and scaling every threshold by 3.5
# also kept OB's build_pool and process_pool calls (OB 589k vs 642k: its per-pool walks
# lost their overlap): the long kernels keep releasing at their 20-us thresholds. A/B
# against the previous commit (separate processes alternating, both orders; 2 workers,
# interval 500, median of 3): TStream GS 590k / 578k -> 685k / 654k, OB 581k / 568k ->
# 636k / 616k; LOCK, whose code this does not touch, 695k-756k on GS and 588k-615k on OB
# meanwhile. With more workers the GIL itself is the bottleneck (TStream's serial
# fraction is ~0.6 at 1 worker: `bobox experiment tstream`'s "why" paragraph), so a kernel
# that keeps it serializes everyone's Python behind it: there the 20-us rule stays, until
# a run on many cores says otherwise (sweep both tables there).
# run_program (an access program registering a packet, txn/program.py): ~5 ns per
# operation (24 us for a GS packet of 500 events, 5000 operations, 2026-12-02, the
# 2-core VM, median of 5000 calls; append_ops took the same per operation), so 4000
# operations are the 20-us crossover: GS and OB packets of 500 events release it, SL's
# (~1500 operations) and TP's (1000) keep it.
HOLD_BELOW = {"run_program": 4000, "build_pool": 600, "process_pool": 1000, "run_direct": 2000, "partition_ops": 2500,
              "gather_pool": 4000, "finish_batch": 4000, "build_conds": 2000, "pool_local": 4000, "by_txn": 10000,
              "cond_only_reads": 10000}
HOLD_BELOW_FEW = {"partition_ops": 8_000, "gather_pool": 12_000}
FEW_WORKERS = 2


def kernel_for(K, name: str, n: int, workers: int = 0):
    """Kernel `name` of module `K` for a call on `n` items by a group running on
    `workers` worker threads (0: unknown): the GIL-releasing one from ``HOLD_BELOW[name]``
    items on (``HOLD_BELOW_FEW[name]`` with 1 to FEW_WORKERS workers), its ``_held`` twin
    below."""
    lim = HOLD_BELOW_FEW.get(name) if 0 < workers <= FEW_WORKERS else None
    return getattr(K, name) if n >= (lim or HOLD_BELOW[name]) else getattr(K, name + "_held")


# numba's dispatcher types every argument of every call before it finds the compiled
# code: for a kernel that takes a batch's arrays (``chains.BatchArrays``, 20 arrays) and
# the store view, that typing runs in Python, with the GIL held: 2-3 us a call here
# (build_pool 4.60 us through the dispatcher against 1.39 us through the compiled entry
# point; finish_batch 2.76 against 0.78; measured 2026-11-26 on the 2-core VM, nothing
# else running, a captured GS batch, medians of 200 x 25 calls, alternating; a first
# measurement beside another experiment gave 10.5 / 2.2 and 6.0 / 1.0).
# ``EntryCache`` pays it once per call site.
# Kernels that take only arrays and numbers gain almost nothing (numba types arrays in
# C): gather_pool 13.09 vs 12.97 us, partition_ops 36.9 vs 36.3, against run_baseline
# (which takes the store view) 1011 vs 1003 us (captured GS calls, dispatcher vs entry
# point, medians of 400 alternating). So only the kernels that take the named tuples use
# it: the coordinator's five and run_baseline.
# End to end (GS, 200k events, settings alternating in one process): with every kernel
# through its entry point, median of 12, TStream went 877k -> 906k events/s on 1 worker
# and 1000k -> 1036k on 2, LOCK 1087k -> 1105k and 1308k -> 1328k; later that day, on a
# noisier host, the same comparisons ranged 0.97-1.16x (TStream) and 0.88-1.06x (LOCK)
# run to run: the gain (~3 us a call, ~10-15 us per batch of 1000 events on 2 workers,
# about 1 %) is below this host's noise; what is measured firmly is the per-call time.


def entry_point(d, args):
    """The compiled entry point that numba dispatcher `d` runs for `args` (after a call
    with those arguments, so that it is compiled), or `d` itself when `d` is not a
    dispatcher or has no such overload. A wrapper of a dispatcher (``TxnConfig.kernel_wrap``,
    e.g. ``operators.released.timed``) that says how to wrap another function (its
    ``rewrap``) gets the same wrapper around the entry point, so that a timed run runs
    the calls an untimed one does."""
    from numba.core.dispatcher import Dispatcher

    if not isinstance(d, Dispatcher):
        inner, rewrap = getattr(d, "__wrapped__", None), getattr(d, "rewrap", None)
        if isinstance(inner, Dispatcher) and rewrap is not None:
            e = entry_point(inner, args)
            return rewrap(e) if e is not inner else d
        return d
    cres = d.overloads.get(tuple(d.typeof_pyval(a) for a in args))
    return cres.entry_point if cres is not None else d


class EntryCache:
    """Kernel calls that skip the dispatcher's typing after the first call (comment
    above): ``cache.call(kernel, *args)``.

    Contract: use one cache only for call sites whose arguments have the same numba
    types at every call -- arrays of one dtype, dimension count and layout, the same
    named tuple types, integers as integers. The entry point converts its arguments to
    the types of the first call and checks nothing more, so a call with other types
    would read memory wrongly. The coordinator's batch arrays (``chains.new_batch``),
    its store view and the baselines' arrays are built that way; tests check it
    (``tests/test_txn_unit.py``, every call's types against the first call's).

    Protocol: any thread may call; ``_ep`` maps a dispatcher to its entry point. A dict
    lookup and a store are atomic under the GIL (internally locked in a free-threaded
    build), and two threads that race on a first call store the same entry point."""

    __slots__ = ("_ep",)

    def __init__(self):
        self._ep: dict = {}

    def call(self, d, *args):
        e = self._ep.get(d)
        if e is not None:
            return e(*args)
        r = d(*args)
        self._ep[d] = entry_point(d, args)
        return r


# A group's first call of each kernel paid the dispatcher and ``entry_point``'s typing of
# its named tuples: build_pool 1.0-1.3 ms, process_pool 0.9-1.0, finish_batch 0.28 on the
# first batch of every request against 0.35-0.5 / 0.2-0.25 / 0.09 on the next (GS,
# interval 500, 2 workers, warm process; measurements/2026-11-28-stream-shapes-baseline/,
# first_batch_trace.py): a request's first batch took 3.5-4.5 ms against 1.1-1.5, and with
# `bobox experiment tstream --quick`'s 20 batches a run that first batch *was* its p99.
# So groups whose call sites pass the same types share one cache for the process.
_SHARED: dict = {}


def value_type_key(x):
    """A key that differs whenever numba would type `x` differently, cheap to compute
    (numba's ``typeof`` of a store view takes about 1 ms): arrays by dtype, dimensions,
    layout, writability and alignment; tuples (named ones by class) element-wise; anything
    else by its class."""
    if isinstance(x, np.ndarray):
        f = x.flags
        layout = "C" if f.c_contiguous else "F" if f.f_contiguous else "A"
        return (x.dtype.str, x.ndim, layout, f.writeable, f.aligned)
    if isinstance(x, tuple):
        return (type(x), tuple(value_type_key(v) for v in x))
    return type(x)


def shared_entry_cache(key) -> "EntryCache":
    """The process's EntryCache for call sites whose argument types `key` decides (the
    caller's promise, as EntryCache's contract asks). Any thread may call: a dict read
    and ``setdefault`` are atomic under the GIL (internally locked in a free-threaded
    build); two threads that race make two caches and keep the one stored first."""
    c = _SHARED.get(key)
    if c is None:
        c = _SHARED.setdefault(key, EntryCache())
    return c


def kernels():
    """The kernel module for the Funs and CFuns registered now (compiled once per set of
    functions per machine; see the module doc)."""
    with _LOCK:
        funs, cfuns = list(_funs), list(_cfuns)
        if _current[0] == (len(funs), len(cfuns)):
            return _current[1]
    from bobox_sched.core.atomics import spin_with_pause

    # The spin hint is decided per machine (atomics.spin_with_pause) and written into the
    # source, so that kernels compiled with and without it never share a cache entry.
    relax = "cpu_relax = cpu_pause\n" if spin_with_pause() else "cpu_relax = cpu_nop\n"
    source = fragments.HEADER + relax + "\n" + _dispatch_source(funs, cfuns) + "\n" + fragments.body()
    key = hashlib.sha1(source.encode()).hexdigest()[:20]
    with _LOCK:
        mod = _modules.get(key)
        if mod is not None:
            _current[:] = [(len(funs), len(cfuns)), mod]
            return mod
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"txnk_{key}.py"
        if not path.exists() or path.read_text() != source:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        name = f"bobox_txn_kernels_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[key] = mod
        _current[:] = [(len(funs), len(cfuns)), mod]
        return mod


__all__ = ["ADD_SRC", "AVG2", "CFun", "COPY", "Cond", "DEC", "EQ", "EntryCache", "FEW_WORKERS", "Fun", "GE", "GT",
           "HOLD_BELOW", "HOLD_BELOW_FEW", "INC", "LE", "LT", "NE", "SET", "SET_INSERT", "entry_point", "fun_by_name",
           "kernel_for", "kernels", "register_cfun", "register_fun"]
