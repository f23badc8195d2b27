"""How long worker threads run with the GIL released: the serial fraction, measured.

Every heavy call of the operator library releases the GIL: the numba ``nogil`` kernels
(``kernels.py``, ``codegen.py``, ``pipeline.py``) and a few numpy calls on large arrays
(copies, concatenations, sorts). While the timing is on (:func:`enable`), each such call
goes through a wrapper that adds its wall time to ``released_ns`` of the worker whose
thread made the call (``bobox_sched.core.worker.current_worker``). The scheduler sums
``busy_s`` (time in tasks) and ``released_s`` over its workers, and

    serial_fraction = 1 - released / busy

is the share of task time spent holding the GIL: Amdahl's serial part, since only one
thread at a time can be in it. ``predicted_speedup(s, n) = 1 / (s + (1 - s) / n)``.

What the figure includes, so it is read right:

* the numba dispatcher's own work (typing and unboxing the arguments, a few microseconds
  per call, under the GIL) is inside the wrapper, so it counts as released: a small
  underestimate of the serial part, bounded by calls x dispatch cost (the transactional
  kernels that ``bobox_sched.txn.funs.EntryCache`` calls skip the typing: it re-wraps
  their compiled entry points, ``rewrap``, and only the unboxing stays inside);
* the wait to take the GIL back when a kernel returns is inside the wrapper too (counted
  as released), but a thread that lost the GIL to the interpreter's switch interval
  while in Python code waits outside any wrapper (counted as serial). With one worker
  there are no waits, so the figure is exact up to the dispatch cost; with more it is a
  little pessimistic. ``bench queries`` reports both.

Protocol: the switch ``_on`` is a module global written only by :func:`enable` (called
between runs, not while tasks run); a wrapper reads it once per call. ``released_ns``
of a worker is written only by that worker's own thread (the wrapper runs on it), so
it needs no lock, with or without the GIL. Calls made outside worker threads (plan
building, tests calling kernels directly) are timed but counted nowhere.
"""

from __future__ import annotations

import threading
import time
import types
from functools import wraps

from bobox_sched.core.worker import current_worker

_on = False
_cpu_on = False
_clock = time.perf_counter_ns


def enable(on: bool = True, cpu: bool = False) -> bool:
    """Switch the timing on (or off); returns the previous setting. Off by default: an
    untimed call costs one extra Python call and a global read (~0.1 us); a timed one
    ~0.2 us more. `cpu`: also count CPU time in released calls (see below), which costs
    two reads of the thread's CPU clock per call: 3.3 us on our VMs, where each is a
    system call, i.e. ~1 % of the mix's CPU time: opt-in."""
    global _on, _cpu_on
    was = _on
    _on = bool(on)
    _cpu_on = bool(on and cpu)
    return was


def enabled() -> bool:
    return _on


def timed(fn):
    """`fn` (a nogil kernel, or a function that releases the GIL for its whole run)
    wrapped so that its wall time counts as released time of the calling worker."""

    @wraps(fn)
    def call(*args):
        if not _on:
            return fn(*args)
        if _cpu_on:
            c0 = _cpu()
            t0 = _clock()
            out = fn(*args)
            _count(t0, c0)
            return out
        t0 = _clock()
        out = fn(*args)
        w = current_worker()
        if w is not None:
            w.released_ns += _clock() - t0
        return out

    call.__wrapped__ = fn
    call.rewrap = timed  # how to time another function the same way (bobox_sched.txn.funs.entry_point)
    return call


def call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, counted as released time: for one-off numpy calls on
    large arrays that release the GIL (``np.concatenate``, ``np.lexsort``, ...)."""
    if not _on:
        return fn(*args, **kwargs)
    c0 = _cpu() if _cpu_on else 0
    t0 = _clock()
    out = fn(*args, **kwargs)
    _count(t0, c0)
    return out


def _count(t0: int, c0: int) -> None:
    t1 = _clock()
    w = current_worker()
    if w is not None:
        w.released_ns += t1 - t0
        if _cpu_on:
            slot = getattr(_tls, "cpu", None)
            if slot is None:
                slot = _register()
            slot[0] += _cpu() - c0


# CPU time in released calls, per thread (only with enable(cpu=True)). Wall time (the
# worker's released_ns) also counts time a thread was runnable while another process
# had its CPU; on a shared, oversubscribed machine that time lands wherever the thread
# happened to be, so the serial fraction can also be computed from CPU time (thread CPU
# - released CPU), which only the thread's own work makes. Each thread writes only its
# own slot; the registry (native thread id -> slot) takes a lock once per thread, at its
# first timed call.
_cpu = time.thread_time_ns
_tls = threading.local()
_slots: dict[int, list] = {}
_slots_lock = threading.Lock()


def _register() -> list:
    slot = _tls.cpu = [0]
    with _slots_lock:
        _slots[threading.get_native_id()] = slot
    return slot


def released_cpu_ns(native_id: int) -> int:
    """CPU nanoseconds the thread `native_id` spent in timed calls (0 if none)."""
    slot = _slots.get(native_id)
    return slot[0] if slot is not None else 0


def timed_namespace(module) -> types.SimpleNamespace:
    """`module`'s public names, every numba dispatcher that releases the GIL
    (``nogil=True``) replaced by its timed wrapper: ``K = timed_namespace(kernels)``,
    then ``K.join_build(...)``. Dispatchers that keep the GIL (a kernel's ``_held``
    twin, the registration copies) stay unwrapped: their time is serial. The module's
    own functions stay unwrapped, so kernels still call each other in nopython mode."""
    from numba.core.registry import CPUDispatcher

    out = {}
    for name in dir(module):
        if name.startswith("_"):
            continue
        obj = getattr(module, name)
        releases = isinstance(obj, CPUDispatcher) and obj.targetoptions.get("nogil", False)
        out[name] = timed(obj) if releases else obj
    return types.SimpleNamespace(**out)


def serial_fraction(busy_s: float, released_s: float) -> float | None:
    """1 - released/busy, or None when nothing ran or nothing was counted."""
    if busy_s <= 0 or released_s <= 0:
        return None
    return max(0.0, 1.0 - released_s / busy_s)


def predicted_speedup(serial: float | None, workers: int) -> float | None:
    """Amdahl's law: the speedup on `workers` threads of work whose `serial` share runs
    one thread at a time."""
    if serial is None:
        return None
    return 1.0 / (serial + (1.0 - serial) / workers)
