"""Parametric operators and plumbing for the ordered-processing experiments (Prasaad et
al. section 7: "a matrix computation per tuple, with knobs for per-tuple cost, tuple
size, state size (PS) and selectivity" [L403]).

* :func:`burn` / :func:`iterations_for`: a numba ``nogil`` per-row computation of a
  given cost: a small matrix-vector product repeated `iters` times, calibrated once per
  process (``ns_per_iteration``), so a cost in microseconds becomes iterations;
* :class:`ParamStateless`: cost per row, selectivity (a fraction keeps rows by a hash,
  a multiple repeats them), tuple size (`width` float64 columns carried along);
* :class:`ParamPartitioned`: keyed by ``k``; per-key state of `state_size` float64s,
  updated by the same matrix computation; cost per row and selectivity as above;
* :class:`Replay`: a source replaying prepared columns as packets of `rows` rows (views,
  no copies), with a latency marker every `marker_every` packets;
* :class:`DigestSink`: the egress: counts rows and keeps a SHA-256 per column over the
  column's bytes in order, so two runs' egress can be compared byte for byte whatever
  their packet boundaries.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
from numba import njit

from bobox_sched import Sink, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.policies.ordered.partitioned import PartitionedOperator, span_total
from bobox_sched.control.punct import Marker

from operators.stream.ordered_table import Table, upsert

DIM = 4  # the vector has DIM entries; one iteration is 4 rotations (16 multiply-adds)


@njit(nogil=True, cache=True, inline="always")
def _iterate(x, iters):
    # v <- A v for a fixed orthogonal 4x4 matrix A (four Givens rotations): a dependent
    # chain the compiler cannot fold, whose values neither grow nor decay into
    # denormals (which would make the cost depend on the data)
    a, b, c, d = x, x * 0.5 + 1.0, 1.0 - x, x * 0.25
    cs, sn = 0.8, 0.6
    for _ in range(iters):
        a, b = cs * a - sn * b, sn * a + cs * b
        c, d = cs * c - sn * d, sn * c + cs * d
        a, c = cs * a - sn * c, sn * a + cs * c
        b, d = cs * b - sn * d, sn * b + cs * d
    return a + b + c + d


@njit(nogil=True, cache=True)
def burn(x, iters):
    """The per-row computation for every row of `x` (float64): one value per row."""
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = _iterate(x[i], iters)
    return out


@njit(nogil=True, cache=True)
def burn_spans(x, spans, iters):
    """``burn`` for the rows of every span (bucket, start, end) of `x` (any numeric dtype)."""
    out = np.empty(span_total(spans))
    m = 0
    for j in range(spans.shape[0]):
        for i in range(spans[j, 1], spans[j, 2]):
            out[m] = _iterate(np.float64(x[i]), iters)
            m += 1
    return out


_NS_PER_ITER = None


def ns_per_iteration() -> float:
    """Measured cost of one iteration (ns), once per process: the fastest of 7 runs of
    2000 rows x 200 iterations (the minimum, because other processes on the machine only
    ever make a run slower)."""
    global _NS_PER_ITER
    if _NS_PER_ITER is None:
        x = np.linspace(0.0, 1.0, 2000)
        burn(x, 10)
        runs = []
        for _ in range(7):
            t = time.perf_counter_ns()
            burn(x, 200)
            runs.append((time.perf_counter_ns() - t) / (2000 * 200))
        _NS_PER_ITER = float(min(runs))
    return _NS_PER_ITER


COST_MODES = ("compute", "sleep")


class Cost:
    """`us` microseconds of work per row: ``"compute"`` runs the calibrated computation
    (a nogil kernel: needs a free core per worker to run in parallel); ``"sleep"``
    sleeps that long instead (releases the GIL and needs no core: it emulates a machine
    with a core per worker, so scheduling effects show on a small or busy machine; the
    values computed are then those of one iteration)."""

    __slots__ = ("us", "mode", "iters")

    def __init__(self, us: float, mode: str = "compute"):
        if mode not in COST_MODES:
            raise ValueError(f"cost mode must be one of {', '.join(COST_MODES)}, got {mode!r}")
        self.us = float(us)
        self.mode = mode
        self.iters = 1 if mode == "sleep" else iterations_for(self.us)

    def spend(self, rows: int) -> None:
        """The sleep of `rows` rows (compute mode: nothing, the kernel does the work)."""
        if self.mode == "sleep" and rows and self.us > 0:
            time.sleep(rows * self.us * 1e-6)


def iterations_for(cost_us: float) -> int:
    """Iterations that cost about `cost_us` microseconds per row."""
    if cost_us <= 0:
        return 0
    return max(1, int(round(cost_us * 1000.0 / ns_per_iteration())))


@njit(nogil=True, cache=True)
def _select(n, sel, salt):
    """Parent row of every output row for selectivity `sel`: a fraction keeps a row when
    its hash falls under it; a multiple k + f repeats every row k times (+1 by hash)."""
    k = int(sel)
    f = sel - k
    cnt = np.empty(n, np.int64)
    tot = 0
    for i in range(n):
        h = np.uint64(i) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(salt)  # splitmix64
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = h ^ (h >> np.uint64(31))
        extra = 1 if (h >> np.uint64(44)) < np.uint64(f * (1 << 20)) else 0
        cnt[i] = k + extra
        tot += k + extra
    out = np.empty(tot, np.int64)
    j = 0
    for i in range(n):
        for _ in range(cnt[i]):
            out[j] = i
            j += 1
    return out


class ParamStateless(StreamOperator):
    """A stateless operator with a per-row cost (us), a selectivity and `width` extra
    columns; output columns: ``k``, ``v`` (the computation's value) and the extra ones."""

    state = M.STATELESS
    max_parallelism = 1 << 20

    def __init__(self, cost_us: float = 10.0, selectivity: float = 1.0, width: int = 0, salt: int = 1,
                 cost_mode: str = "compute"):
        self.cost = Cost(cost_us, cost_mode)
        self.iters = self.cost.iters
        self.sel = float(selectivity)
        self.width = width
        self.salt = salt

    def on_packet(self, ctx, port, pkt):
        self.cost.spend(pkt.nrows)
        v = burn(np.asarray(pkt["v"], dtype=np.float64), self.iters)
        if self.sel == 1.0:
            cols = {"k": pkt["k"], "v": v}
            for j in range(self.width):
                cols[f"w{j}"] = pkt[f"w{j}"] if f"w{j}" in pkt else v
            ctx.send("out", Packet(cols, pkt.nrows))
            return
        parent = _select(pkt.nrows, self.sel, self.salt + pkt.nrows)
        cols = {"k": np.take(pkt["k"], parent), "v": np.take(v, parent)}
        for j in range(self.width):
            cols[f"w{j}"] = cols["v"]
        ctx.send("out", Packet(cols, len(parent)))


@njit(nogil=True, cache=True)
def _ps_rows(keys, vals, tk, ti, tf, meta, iters, size):
    """Update each row's key state (a row of the bucket's table) with the computation;
    the value per row."""
    n = keys.shape[0]
    out = np.empty(n)
    for i in range(n):
        r, _ = upsert(tk, ti, tf, meta, keys[i])
        x = _iterate(vals[i] + tf[r, 0], iters)
        for j in range(size):
            tf[r, j] = 0.5 * tf[r, j] + 0.5 * x
        out[i] = x
    return out


class ParamPartitioned(PartitionedOperator):
    """Partitioned by ``k``: per key a state of `state_size` float64s, updated per row by
    the computation of cost `cost_us`; selectivity as ``ParamStateless``."""

    state = M.Partitioned("k")

    def __init__(self, cost_us: float = 10.0, state_size: int = 4, selectivity: float = 1.0, partitions: int = 100,
                 partitioner: str = "hash", key_range=None, salt: int = 2, cost_mode: str = "compute"):
        self.cost = Cost(cost_us, cost_mode)
        self.iters = self.cost.iters
        self.state_size = max(1, int(state_size))
        self.sel = float(selectivity)
        self.partitions = partitions
        self.partitioner = partitioner
        self.key_range = key_range
        self.salt = salt

    def new_state(self):
        return Table(iwidth=1, fwidth=self.state_size)

    def on_slice(self, ctx, rows, table, emit):
        keys = np.asarray(rows["k"], dtype=np.int64)
        self.cost.spend(len(keys))
        table.reserve(len(keys))
        v = _ps_rows(keys, np.asarray(rows["v"], dtype=np.float64), *table.arrays(), self.iters, self.state_size)
        if self.sel == 1.0:
            emit(Packet({"k": keys, "v": v}, len(keys)))
            return
        parent = _select(len(keys), self.sel, self.salt + len(keys))
        emit(Packet({"k": np.take(keys, parent), "v": np.take(v, parent)}, len(parent)), parent)

    def relocate_state(self, table):
        return table.copy()


class Replay(Source):
    """Replays `columns` (equal-length arrays) as packets of `rows` rows, views of the
    arrays; a latency marker after every `marker_every`-th packet."""

    def __init__(self, columns: dict, rows: int = 4096, marker_every: int = 0):
        self.columns = columns
        self.rows = int(rows)
        self.n = len(next(iter(columns.values()))) if columns else 0
        self.marker_every = marker_every
        self.i = 0
        self.k = 0

    def process(self, ctx):
        if self.i >= self.n:
            ctx.close()
            ctx.finish()
            return
        j = min(self.n, self.i + self.rows)
        ctx.send("out", Packet({c: a[self.i:j] for c, a in self.columns.items()}, j - self.i))
        self.i = j
        self.k += 1
        if self.marker_every and self.k % self.marker_every == 0:
            ctx.punctuate(Marker())
        ctx.reschedule()


class DigestSink(Sink):
    """Egress: row count and a SHA-256 per column (module doc); result
    ``{"rows": n, "digest": hex}``."""

    def __init__(self):
        super().__init__()
        self.rows = 0
        self.h = {}

    def on_packet(self, ctx, port, packet):
        self.rows += packet.nrows
        for name in sorted(packet.names):
            h = self.h.get(name)
            if h is None:
                h = self.h[name] = hashlib.sha256()
            h.update(np.ascontiguousarray(packet[name]).view(np.uint8))

    def on_end(self, ctx):
        d = hashlib.sha256()
        for name in sorted(self.h):
            d.update(name.encode())
            d.update(self.h[name].digest())
        ctx.set_result({"rows": self.rows, "digest": d.hexdigest()})


__all__ = ["COST_MODES", "Cost", "DigestSink", "ParamPartitioned", "ParamStateless", "Replay", "burn", "burn_spans",
           "iterations_for",
           "ns_per_iteration"]
