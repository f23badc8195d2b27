"""NUMA-factor measurement: table 1 of the Bobox paper (seed 003, section 4.2).

For every (CPU node, memory node) pair a thread pinned to the CPU node reverses a large
integer array allocated on the memory node; each row is divided by its diagonal (local)
time, so the result reads "how many times slower is memory of node m for CPUs of node c".
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from topology.errors import TopologyError
from topology.memory import alloc_on_node
from topology.pinning import pin_to_node
from topology.probe import Topology

# The array must be much larger than the last-level cache, or we time the cache instead
# of the memory: four times the largest L3 seen, and at least 64 MiB.
MIN_BYTES = 64 * 1024 * 1024


@njit(nogil=True, cache=True)
def reverse_inplace(a):
    """Reverse `a` in place (the paper's synthetic NUMA test). Releases the GIL."""
    n = a.shape[0]
    for i in range(n // 2):
        j = n - 1 - i
        t = a[i]
        a[i] = a[j]
        a[j] = t


@dataclass
class NumaFactor:
    cpu_nodes: list[int]  # rows
    mem_nodes: list[int]  # columns
    seconds: list[list[float]]  # best time per pair
    factors: list[list[float]]  # row divided by its diagonal
    nbytes: int
    repeat: int

    def to_json(self) -> dict:
        return {
            "cpu_nodes": self.cpu_nodes,
            "mem_nodes": self.mem_nodes,
            "seconds": self.seconds,
            "factors": self.factors,
            "bytes": self.nbytes,
            "repeat": self.repeat,
        }

    def table(self) -> str:
        head = "cpu\\mem" + "".join(f"{m:>8}" for m in self.mem_nodes)
        rows = [head]
        for c, row in zip(self.cpu_nodes, self.factors):
            rows.append(f"{c:>7}" + "".join(f"{x:>8.2f}" for x in row))
        return "\n".join(rows)


def default_bytes(topo: Topology) -> int:
    l3 = max((k.size_bytes or 0 for k in topo.caches if k.level >= 3), default=0)
    return max(MIN_BYTES, 4 * l3)


def measure(topo: Topology, nbytes: int | None = None, repeat: int = 3, progress=None) -> NumaFactor:
    """Measure the matrix. `progress(done, total, cpu_node, mem_node)` is called per pair."""
    if repeat < 1:
        raise TopologyError(f"repeat must be at least 1, got {repeat}")
    nbytes = int(nbytes or default_bytes(topo))
    if nbytes < 4096:
        raise TopologyError(f"array size must be at least 4096 bytes, got {nbytes}")
    rows = [n.os_index for n in topo.cpu_nodes]
    cols = [n.os_index for n in topo.nodes if n.memory_bytes is None or n.memory_bytes > 0]
    secs = [[0.0] * len(cols) for _ in rows]
    total = len(rows) * len(cols)
    done = 0
    for i, c in enumerate(rows):
        for j, m in enumerate(cols):
            result: dict = {}

            def work():
                try:
                    pin_to_node(topo, c)
                    a = alloc_on_node(nbytes, m, np.int64)
                    a[:] = np.arange(a.shape[0])
                    reverse_inplace(a)  # warm-up: compiles (first time), faults TLBs
                    best = float("inf")
                    for _ in range(repeat):
                        t0 = time.perf_counter()
                        reverse_inplace(a)
                        best = min(best, time.perf_counter() - t0)
                    result["t"] = best
                except BaseException as e:  # re-raised in the caller's thread
                    result["e"] = e

            th = threading.Thread(target=work, name=f"numa-factor-{c}-{m}")
            th.start()
            th.join()
            if "e" in result:
                raise result["e"]
            secs[i][j] = result["t"]
            done += 1
            if progress:
                progress(done, total, c, m)
    factors = []
    for i, c in enumerate(rows):
        base = secs[i][cols.index(c)] if c in cols else min(secs[i])
        factors.append([round(t / base, 3) for t in secs[i]])
    return NumaFactor(rows, cols, secs, factors, nbytes, repeat)
