"""Kernels compiled before the workers start: what a free-threaded build needs of numba.

Numba's dispatcher (the object a ``@njit`` function is) compiles a signature the first
time it is called with new argument types, and adds the machine code to its table of
overloads. Under the GIL that is safe. Without it (CPython 3.14t; numba calls its
support experimental) a thread that calls the dispatcher while another adds an overload
reads the table as it changes: numba does not make that safe. So on a free-threaded
build every signature the workers will call must be in the tables before they start,
and nothing may compile while they run.

Where the signatures come from: every kernel here is ``cache=True``, and numba's on-disk
cache keeps, per kernel and interpreter, an index of the signatures it compiled before
(``<module>.<kernel>-<line>.<python tag>.nbi``). ``precompile`` loads every signature of
that index for every dispatcher of the given modules (default: every module imported
so far): machine code from the cache, milliseconds per signature, no compiling (an
index entry the cache cannot serve here, compiled for another CPU, is skipped). The
Scheduler calls it before it starts its workers when the GIL is off
(``Scheduler(precompile=None)``: ``sync.FENCED``; ``True`` forces it on any build). A
plan's kernels therefore come precompiled when its modules are imported before the
Scheduler is made (``bobox run`` and the experiments do) and they ran once on this
machine and interpreter before. A first run with one worker (``bobox run
--threads-per-node 1``, or ``Scheduler(threads_per_node=1)`` on a one-node machine)
compiles them safely, one thread calling, and fills the index (it is per interpreter:
run it with the free-threaded one).

What remains: a signature never compiled on this machine compiles at its first call, on
a worker. ``watch()`` (installed with the first precompile on a free-threaded build)
warns once per kernel when that happens on a worker thread (``SchedulerWarning``), naming
the kernel and saying how to have it precompiled; the compile itself runs under numba's
own compiler lock, as on any build.

Who touches what: ``precompile`` runs in the thread that makes the Scheduler, before any
of its workers exists. Loading signatures into a dispatcher that another thread calls
is the very race this avoids: on a free-threaded build make the Schedulers of a process
one after another (or the first after importing every kernel module), never one while
another's workers run. A dispatcher's ``_bobox_warned`` flag is set by the first worker
that warns about it (an attribute store: at worst two workers warn once each).
"""

from __future__ import annotations

import sys
import time
import warnings

_watching = False


def kernels_of(modules) -> list:
    """``(name, dispatcher)`` of every numba CPU dispatcher (``@njit``) found in the
    globals of `modules` (module objects), each once. ``type(obj)``, not ``isinstance``:
    a proxy object's ``__class__`` may run code; a module that cannot be read is
    skipped."""
    from numba.core.registry import CPUDispatcher

    seen, out = set(), []
    for mod in modules:
        try:
            items = list(vars(mod).items())
        except Exception:  # noqa: BLE001 - no __dict__, or one changing under us: not ours to precompile
            continue
        for name, obj in items:
            if issubclass(type(obj), CPUDispatcher) and id(obj) not in seen:
                seen.add(id(obj))
                out.append((f"{getattr(mod, '__name__', '?')}.{name}", obj))
    return out


def cached_signatures(dispatcher) -> list:
    """The signatures numba's on-disk cache holds for `dispatcher` under this
    interpreter ([] without a cache, or an index that cannot be read)."""
    cache = getattr(dispatcher, "_cache", None)
    index_file = getattr(cache, "_cache_file", None)
    if index_file is None:
        return []
    try:
        index = index_file._load_index()
    except Exception:  # noqa: BLE001 - an unreadable index is an empty one (numba does the same)
        return []
    return [key[0] for key in index]


def precompile(modules=None) -> dict:
    """Load every cached signature of every dispatcher in `modules` (default: all of
    ``sys.modules``) into the dispatcher: ``{"kernels", "signatures", "failed",
    "seconds"}``. A signature that fails to load (a stale index entry) is counted in
    ``failed`` and left to compile lazily (nothing is compiled here: cache loads only)."""
    t0 = time.perf_counter()
    mods = list(sys.modules.values()) if modules is None else list(modules)
    kernels = kernels_of(mods)
    loaded = failed = 0
    for _, d in kernels:
        for sig in cached_signatures(d):
            got = _load(d, tuple(sig))
            if got is not None:  # (None: it had it)
                loaded += got
                failed += not got
    return {"kernels": len(kernels), "signatures": loaded, "failed": failed,
            "seconds": round(time.perf_counter() - t0, 4)}


def _load(d, sig: tuple) -> bool | None:
    """Load `sig` of dispatcher `d` from numba's cache, as ``Dispatcher.compile`` does
    on a cache hit (numba 0.6x), and never compile: False if the cache cannot serve it
    here (an entry for another CPU, a stale one); None if `d` had it already."""
    from numba.core.compiler_lock import global_compiler_lock

    try:
        with global_compiler_lock:
            if sig in d.overloads:
                return None
            cres = d._cache.load_overload(sig, d.targetctx)
            if cres is None:
                return False
            if not cres.objectmode:
                d.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            d.add_overload(cres)
            return True
    except Exception:  # noqa: BLE001 - numba internals that moved, a foreign entry: left to compile lazily
        return False


def watch() -> None:
    """Warn (once per kernel) when a kernel compiles on a worker thread (module doc).
    Idempotent; installed by the Scheduler on free-threaded builds."""
    global _watching
    if _watching:
        return
    from numba.core.dispatcher import Dispatcher

    original = Dispatcher._compile_for_args

    def _compile_for_args(self, *args, **kws):
        from bobox_sched.core.worker import current_worker

        if current_worker() is not None and not getattr(self, "_bobox_warned", False):
            self._bobox_warned = True  # (two workers at once may both warn: a duplicate, never a miss)
            from bobox_sched.core.errors import SchedulerWarning

            warnings.warn(f"kernel {getattr(self, '__qualname__', self)} compiles a new signature while the "
                          "workers run: without the GIL numba does not make that safe. Run the workload once "
                          "on this interpreter with one worker (bobox run --threads-per-node 1), and make the "
                          "Scheduler after importing its modules: it is then loaded before the workers start",
                          SchedulerWarning, 2)
        return original(self, *args, **kws)

    Dispatcher._compile_for_args = _compile_for_args
    _watching = True


__all__ = ["cached_signatures", "kernels_of", "precompile", "watch"]
