"""What 2 CPUs of this machine give over 1 with no interpreter in the way: the same
nogil numba kernel on 1 thread and on 2 threads at once (each thread its own data),
compute-bound (integer hash rounds over an L1-sized array) and memory-bound (a sum over
256 MiB per thread, the TPC-H scans' access pattern). Per core = (2 x work / time on 2
threads) / (work / time on 1 thread) / 2. Prints one JSON line.

    .venv/bin/python measurements/2026-11-28-domains-loans/ceiling.py
"""

import json
import statistics
import threading
import time

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def compute(a, rounds):
    h = np.uint64(1469598103934665603)
    for _ in range(rounds):
        for i in range(a.size):
            h = (h ^ np.uint64(a[i])) * np.uint64(1099511628211)
    return h


@njit(nogil=True, cache=True)
def scan(a):
    s = 0.0
    for i in range(a.size):
        s += a[i]
    return s


def timed(fn, args_per_thread):
    ts = [threading.Thread(target=fn, args=a) for a in args_per_thread]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def per_core(fn, make, repeat=5):
    a1, a2 = make(), make()
    fn(*a1)  # compile, touch
    fn(*a2)
    one = statistics.median(timed(fn, [a1]) for _ in range(repeat))
    two = statistics.median(timed(fn, [a1, a2]) for _ in range(repeat))
    return round(one / two, 3), round(one, 4), round(two, 4)


small = lambda: (np.arange(4096, dtype=np.int64), 20_000)  # noqa: E731
big = lambda: (np.ones(32 << 20, np.float64),)  # noqa: E731
c = per_core(compute, small)
m = per_core(scan, big)
print(json.dumps({"compute_per_core": c[0], "compute_1_s": c[1], "compute_2_s": c[2],
                  "memory_per_core": m[0], "memory_1_s": m[1], "memory_2_s": m[2]}))
