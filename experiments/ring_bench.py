"""``bobox bench ring``: what a descriptor hop between two processes costs through the
shared-memory ring (``bobox_sched/domains/ring.py``), the hand-off domains will use.

Two figures, measured in one run with a second process (``python -c``, the same
interpreter) attached to the same segment:

* ``hop_us``: one-way latency, the median of ``rounds`` round trips over two; this
  process pushes a descriptor on ring A and spins until the echo comes back on ring B,
  the other pops A and pushes B. Both sides spin in nogil kernels (``cpu_relax``
  between polls), timed with the cycle counter: the cost of the ring and of the cache
  line moving between cores, no system call. A consumer that sleeps when its rings are
  empty adds a wake-up on top (``handoff_us``, ``experiments/handoff.py``: a futex wake
  and a context switch), reported beside it for that reason;
* ``stream_ns_per_descriptor``: the other process pushes ``count`` descriptors in
  batches of 64 (``push_many``) while this one pops them in batches: the ring's
  throughput when both sides are busy.

The descriptors are 4 int64 words (pool, offset, bytes, tag): what a packet hop will
carry; no column data moves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
from numba import njit

from bobox_sched.core.atomics import cpu_relax, cycles, cycles_per_second
from bobox_sched.domains.ring import Ring, ring_pop, ring_pop_many, ring_push, ring_push_many, ring_words
from bobox_sched.domains.shm import Segment

WIDTH = 4
CAPACITY = 1024
# A side that sees no progress for this many cycles gives up (the other process died):
# ~10 s at 3 GHz.
GIVE_UP_CYCLES = 30_000_000_000


@njit(nogil=True, cache=True)
def _ping(a, b, rounds, out):
    """Push on `a`, wait for the echo on `b`; cycles per round trip into `out`."""
    d = np.zeros(4, np.int64)
    e = np.zeros(4, np.int64)
    for i in range(rounds):
        d[0] = i
        t0 = cycles()
        while not ring_push(a, d):
            cpu_relax()
        while not ring_pop(b, e):
            cpu_relax()
            if cycles() - t0 > GIVE_UP_CYCLES:
                return i
        out[i] = cycles() - t0
        if e[0] != i:
            return -1 - i
    return rounds


@njit(nogil=True, cache=True)
def _echo(a, b, rounds):
    d = np.zeros(4, np.int64)
    for i in range(rounds):
        t0 = cycles()
        while not ring_pop(a, d):
            cpu_relax()
            if cycles() - t0 > GIVE_UP_CYCLES:
                return i
        while not ring_push(b, d):
            cpu_relax()
    return rounds


@njit(nogil=True, cache=True)
def _produce(a, count):
    ds = np.zeros((64, 4), np.int64)
    i = 0
    t0 = cycles()
    while i < count:
        k = min(64, count - i)
        for j in range(k):
            ds[j, 0] = i + j
        m = ring_push_many(a, ds, k)
        if m == 0:
            cpu_relax()
            if cycles() - t0 > GIVE_UP_CYCLES:
                return i
        else:
            t0 = cycles()
        i += m
    return i


@njit(nogil=True, cache=True)
def _consume(a, count):
    out = np.zeros((64, 4), np.int64)
    i = 0
    bad = 0
    t0 = cycles()
    while i < count:
        m = ring_pop_many(a, out)
        if m == 0:
            cpu_relax()
            if cycles() - t0 > GIVE_UP_CYCLES:
                return i, bad
            continue
        t0 = cycles()
        for j in range(m):
            if out[j, 0] != i + j:
                bad += 1
        i += m
    return i, bad


_PEER = textwrap.dedent("""
    import sys
    import numpy as np
    from bobox_sched.domains.shm import Segment
    from bobox_sched.domains.ring import Ring, ring_words
    from experiments.ring_bench import _echo, _produce, CAPACITY, WIDTH
    seg = Segment.attach(sys.argv[1])
    w = ring_words(CAPACITY, WIDTH)
    arr = seg.array(np.int64)
    a, b = arr[:w], arr[w:2 * w]
    n = int(sys.argv[3])
    _echo(a, b, 0), _produce(a, 0)  # compiled or loaded before the clock starts
    print("ready", flush=True)
    done = _echo(a, b, n) if sys.argv[2] == "echo" else _produce(a, n)
    sys.exit(0 if done == n else 3)
""")


def _peer(seg: Segment, what: str, n: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.Popen([sys.executable, "-c", _PEER, seg.name, what, str(n)], env=env, stdout=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline().strip()  # its kernels are loaded
    if line != "ready":
        p.kill()
        raise RuntimeError(f"ring bench: the peer process did not start (exit {p.wait()})")
    return p


def bench_ring(rounds: int = 20_000, count: int = 2_000_000) -> dict:
    """The module doc's figures (one run)."""
    from experiments.handoff import wake_us

    w = ring_words(CAPACITY, WIDTH)
    seg = Segment.create(8 * 2 * w, "ring-bench")
    try:
        arr = seg.array(np.int64)
        a, b = Ring.create(arr[:w], CAPACITY, WIDTH), Ring.create(arr[w:2 * w], CAPACITY, WIDTH)
        _ping(a.r, b.r, 0, np.zeros(1, np.int64))  # compile / load before the peer waits on us
        _consume(a.r, 0)
        cps = cycles_per_second()
        p = _peer(seg, "echo", rounds)
        out = np.zeros(rounds, np.int64)
        done = _ping(a.r, b.r, rounds, out)
        if p.wait(60) != 0 or done != rounds:
            raise RuntimeError(f"ring bench: ping-pong stopped after {done} of {rounds} rounds")
        one_way = out[rounds // 10:] / cps / 2 * 1e6  # the first tenth warms caches and branch predictors
        a, b = Ring.create(arr[:w], CAPACITY, WIDTH), Ring.create(arr[w:2 * w], CAPACITY, WIDTH)
        p = _peer(seg, "produce", count)
        t0 = time.perf_counter()
        got, bad = _consume(a.r, count)
        dt = time.perf_counter() - t0
        if p.wait(60) != 0 or got != count or bad:
            raise RuntimeError(f"ring bench: streamed {got} of {count} descriptors, {bad} out of order")
        del a, b, arr
    finally:
        seg.unlink()
        seg.close()
    hand = wake_us()
    return {
        "hop_us": round(float(np.median(one_way)), 3),
        "hop_p10_us": round(float(np.percentile(one_way, 10)), 3),
        "hop_p90_us": round(float(np.percentile(one_way, 90)), 3),
        "rounds": rounds,
        "stream_ns_per_descriptor": round(dt / count * 1e9, 2),
        "stream_descriptors": count,
        "descriptor_words": WIDTH,
        "capacity": CAPACITY,
        "handoff_us": hand.get("median_us"),
        "cpus": len(os.sched_getaffinity(0)),
    }


__all__ = ["bench_ring"]
