"""Operators and graph shapes of the IBM Streams experiments (Schneider & Wu section 5,
spec 004 section 4): a source producing tuples as fast as downstream accepts them,
workers burning a fixed number of floating-point operations per row in a numba kernel
(GIL released from ``RELEASE_FLOPS`` per tuple on), a round-robin split, and a sink that
counts rows and checks per-edge order.

A tuple is one packet of ``rows`` rows (spec 5.2: "rows_per_packet defaulting to 1 for
the cost-1 regime"): 1 by default, the paper's tuples. With more rows per tuple each
hand-off between operators carries that many rows' work, which is how a Python runtime
amortizes its per-tuple bookkeeping (``bobox experiment streams --tuple-rows``).

Shapes with ``n`` worker operators (plus Src, Snk and, for the parallel shapes, Split):

* ``pipeline``: Src -> W1 -> ... -> Wn -> Snk;
* ``dp`` (pure data parallel): Src -> Split(n) -> W1..Wn -> Snk (n input ports: the
  paper's single Snk port fed by 1,000 streams, with its lock-protected count, L592);
* ``mixed``: Src -> Split(10) -> 10 pipelines of n/10 workers -> Snk.
"""

from __future__ import annotations

import operator
import threading

import numpy as np
from numba import njit

from bobox_sched import Operator, Plan, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M

SHAPES = ("pipeline", "dp", "mixed")
# Costs per row (FLOPs; per tuple with the paper's one-row tuples) per shape: Figs. 8
# (top: 1, 100, 1,000; bottom: 1, 10k, 100k) and 9 (not in the text; Fig. 10 uses 1,000 for the mixed graph).
COSTS = {"pipeline": (1, 100, 1000), "dp": (1, 10_000, 100_000), "mixed": (1, 100, 1000)}
MIXED_WIDTH = 10


# A tuple's kernel releases the GIL only from this many FLOPs on (about 16 us here).
# Releasing it for less costs more than the parallelism it buys: while another thread
# waits for the GIL, each release hands the GIL over, and each hand-off wakes a thread
# on another core (a futex wake and a context switch each way). Measured on the 2-core
# VM, 5 s runs, sink tuples/s, GIL released for every kernel vs held (``burn_held``),
# manual / dynamic at 1, 2 threads: mixed graph (100 operators) cost 1: 40.5k / 21.3k,
# 16.9k released vs 40.2k / 30.6k, 30.4k held (context switches 212k vs 3k in 5 s);
# cost 1000: 30.1k / 15.3k, 12.2k vs 31.7k / 25.3k, 25.4k; cost 10 000: 10.1k / 6.9k,
# 5.6k vs 9.8k / 8.9k, 8.7k; data parallel (100 operators) cost 10 000: 65.5k / 36.8k,
# 35.2k vs 64.6k / 52.4k, 50.4k; cost 30 000: 32.8k / 29.5k, 32.5k vs 32.3k / 27.9k,
# 28.3k (the crossover); cost 100 000: 11.8k / 18.9k, 20.5k vs 12.1k / 10.9k, 11.1k
# (the source runs beside the kernels only when they release it).
RELEASE_FLOPS = 20_000


@njit(cache=True, inline="always")
def _steps(seed, flops):
    """`flops` floating-point operations (multiply-adds count two); the result depends
    on every step, so the caller's use of it keeps the loop alive."""
    acc = seed * 1e-9 + 1.0
    for _ in range(max(1, flops // 2)):
        acc = acc * 0.9999999 + 1e-7
    return acc


@njit(nogil=True, cache=True)
def burn(seed, flops):
    """`_steps` with the GIL released: a one-row tuple."""
    return _steps(seed, flops)


@njit(cache=True)
def burn_held(seed, flops):
    """`_steps` with the GIL held: one-row tuples below ``RELEASE_FLOPS``."""
    return _steps(seed, flops)


@njit(cache=True, inline="always")
def _rows(x, flops):
    """`flops` FLOPs per row of `x`, each row's seeded by its value."""
    acc = 0.0
    for i in range(x.shape[0]):
        acc += _steps(float(x[i]), flops)
    return acc


@njit(nogil=True, cache=True)
def burn_rows(x, flops):
    """`flops` FLOPs per row of the int64 array `x`, with the GIL released."""
    return _rows(x, flops)


@njit(cache=True)
def burn_rows_held(x, flops):
    """``burn_rows`` with the GIL held: tuples below ``RELEASE_FLOPS`` in all."""
    return _rows(x, flops)


@njit(cache=True)
def row_ids(start, n):
    """The int64 rows start .. start+n-1, made with the GIL held. ``np.arange`` releases
    the GIL around its fill even for a few elements, and a thread that releases it for
    microseconds thousands of times a second starves every other Python thread: a
    waiter woken by the release finds the GIL taken again before it runs, and its 5 ms
    switch timer starts over, so it never asks for a forced switch (CPython's GIL,
    ``take_gil``). Under the manual model the source's thread runs the whole graph, and
    the experiment's sampling thread went up to 1.7 s without the GIL (gdb on
    ``PyEval_SaveThread``: 834 of 1,000 releases in ``array_arange``)."""
    return np.arange(start, start + n, dtype=np.int64)


def burn_for(flops: int):
    """The kernel a one-row tuple of `flops` FLOPs runs (called with the row's value, a
    float): ``burn`` (GIL released) from ``RELEASE_FLOPS`` on, ``burn_held`` below."""
    return burn if flops >= RELEASE_FLOPS else burn_held


def burn_rows_for(flops: int, rows: int):
    """The kernel a tuple of `rows` rows at `flops` FLOPs each runs (called with the
    rows): ``burn_rows`` (GIL released) from ``RELEASE_FLOPS`` per tuple on,
    ``burn_rows_held`` below. One-row tuples keep ``burn_for``'s scalar kernels (class
    ``Work``), so the paper's configuration runs the code it ran before tuples could
    have several rows."""
    return burn_rows if flops * rows >= RELEASE_FLOPS else burn_rows_held


class Cost:
    """The cost per row, shared by a plan's workers; an experiment may change it while
    the graph runs (a change of load)."""

    def __init__(self, flops: int):
        self.flops = int(flops)


class Meter:
    """What the sink saw: rows (read by the sampling thread), order violations."""

    def __init__(self):
        self.count = 0
        self.violations = 0


class Src(Source):
    """Tuples of `rows` rows numbered 0, 1, 2, ... (the first tuple holds rows 0 ..
    rows-1) as fast as downstream takes them, until `stop` is set."""

    def __init__(self, stop: threading.Event, rows: int = 1, batched: bool = False):
        self.stop = stop
        self.rows = int(rows)
        self.i = 0
        self.batched = batched

    def process(self, ctx):
        if self.stop.is_set():
            ctx.close()
            ctx.finish()
            return
        # Plain packets (not pooled: a pool block is a page, and a deep pipeline with
        # 1,000-tuple queues holds up to a million tuples).
        r = self.rows
        if self.batched:  # the same 64 tuples, handed to the runtime in one call
            i = self.i
            ctx.send_many("out", [Packet({"x": x}) for x in row_ids(i, 64 * r).reshape(64, r)])
            self.i = i + 64 * r
        else:
            for _ in range(64):
                ctx.send("out", Packet({"x": row_ids(self.i, r)}))
                self.i += r
        ctx.reschedule()


class Work(StreamOperator):
    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, cost: Cost):
        self.cost = cost
        self.acc = 0.0

    def on_packet(self, ctx, port, pkt):
        flops = self.cost.flops  # read once: an experiment may change it while the graph runs
        self.acc += burn_for(flops)(float(pkt.columns["x"][0]), flops)
        ctx.send("out", pkt)  # forwarded unchanged: a packet is immutable once sent


class WorkRows(Work):
    """``Work`` for tuples of several rows (``Work`` itself keeps the one-row tuple's
    path as short as it was: ``burn_for``, ``burn_rows_for``)."""

    def on_packet(self, ctx, port, pkt):
        flops = self.cost.flops
        x = pkt.columns["x"]
        self.acc += burn_rows_for(flops, x.shape[0])(x, flops)
        ctx.send("out", pkt)


_columns = operator.attrgetter("columns")
_x = operator.itemgetter("x")


def xs_of(pkts: list) -> np.ndarray:
    """The ``x`` rows of the packets `pkts`, in order, as one array (C-level loops: no
    Python step per packet)."""
    return np.concatenate(list(map(_x, map(_columns, pkts))))


class WorkBatch(Work):
    """``Work`` for batched ports (policy ``streams`` with ``batch``): every tuple queued
    is taken at once (``ctx.recv_many``), one kernel call burns all their rows (GIL
    released from ``RELEASE_FLOPS`` per call on), and they leave together
    (``ctx.send_many``)."""

    def process(self, ctx):
        pkts = ctx.recv_many("in")
        if pkts:
            flops = self.cost.flops
            xs = xs_of(pkts)
            self.acc += burn_rows_for(flops, xs.shape[0])(xs, flops)
            ctx.send_many("out", pkts)
        if ctx.at_eos("in"):
            ctx.close()
            ctx.finish()


class Split(StreamOperator):
    """Round-robin over `width` outputs."""

    state = M.UNKNOWN

    def __init__(self, width: int):
        self.outputs = tuple(f"o{k}" for k in range(width))
        self.k = 0

    def on_packet(self, ctx, port, pkt):
        ctx.send(self.outputs[self.k], pkt)
        self.k = (self.k + 1) % len(self.outputs)


class SplitBatch(Split):
    """``Split`` for batched ports: the tuples taken at once are dealt round-robin with
    one slice and one ``send_many`` per output."""

    def process(self, ctx):
        pkts = ctx.recv_many("in")
        if pkts:
            outs = self.outputs
            w = len(outs)
            k = self.k
            for o in range(min(w, len(pkts))):
                ctx.send_many(outs[(k + o) % w], pkts[o::w])
            self.k = (k + len(pkts)) % w
        if ctx.at_eos("in"):
            ctx.close()
            ctx.finish()


class Snk(Operator):
    """Counts rows and checks that each input port sees increasing sequence numbers
    (per-edge FIFO). Under policy ``streams`` it reads only the port being executed
    (``ctx.port``); elsewhere it polls every input."""

    outputs = ()

    def __init__(self, width: int, meter: Meter, batched: bool = False):
        self.inputs = tuple(f"i{k}" for k in range(width))
        self._index = {p: k for k, p in enumerate(self.inputs)}
        self.meter = meter
        self.last = [-1] * width
        self.ended = [False] * width
        self.n_ended = 0
        self.batched = batched

    def _port(self, ctx, j, port):
        meter = self.meter
        if self.batched:
            # Every packet's rows increase (Src's), so the edge is in order iff the rows
            # of the tuples taken at once, after the last seen, increase throughout.
            while True:
                pkts = ctx.recv_many(port)
                if not pkts:
                    break
                xs = xs_of(pkts)
                meter.violations += int(xs[0] <= self.last[j]) + int(np.count_nonzero(np.diff(xs) <= 0))
                self.last[j] = int(xs[-1])
                meter.count += xs.shape[0]
        else:
            while True:
                p = ctx.recv(port)
                if p is None:
                    break
                x = p.columns["x"]
                if x[0] <= self.last[j]:
                    meter.violations += 1
                self.last[j] = int(x[-1])
                meter.count += p.nrows
        if not self.ended[j] and ctx.at_eos(port):
            self.ended[j] = True
            self.n_ended += 1

    def process(self, ctx):
        port = ctx.port
        if port is not None:
            self._port(ctx, self._index[port], port)
        else:
            for j, port in enumerate(self.inputs):
                self._port(ctx, j, port)
        if self.n_ended == len(self.inputs):
            ctx.set_result(self.meter.count)
            ctx.finish()


def check_rows(rows: int) -> None:
    """Rows per tuple must be a positive count (``build``, and the experiment before it
    measures anything)."""
    if rows < 1:
        raise ValueError(f"rows per tuple must be at least 1, got {rows}")


def build(shape: str, n_ops: int, cost: Cost, meter: Meter, stop: threading.Event, rows: int = 1,
          batched: bool = False) -> Plan:
    """The plan of `shape` with `n_ops` worker operators and tuples of `rows` rows
    (module doc); `batched`: the operators that take and send every queued tuple at once
    (for policy ``streams`` with ``batch``; ``WorkBatch``, ``SplitBatch``)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}")
    check_rows(rows)
    plan = Plan(f"streams-{shape}")
    plan.add("src", Src, stop, rows, batched)
    work = WorkBatch if batched else Work if rows == 1 else WorkRows
    if shape == "pipeline":
        names = ["src"] + [plan.add(f"w{i}", work, cost) for i in range(n_ops)]
        plan.add("snk", Snk, 1, meter, batched)
        plan.chain(*names)
        plan.connect(names[-1], "snk.i0")
        return plan
    width = n_ops if shape == "dp" else MIXED_WIDTH
    depth = 1 if shape == "dp" else max(1, n_ops // MIXED_WIDTH)
    plan.add("split", SplitBatch if batched else Split, width)
    plan.connect("src", "split")
    plan.add("snk", Snk, width, meter, batched)
    for k in range(width):
        names = [plan.add(f"w{k}_{d}", work, cost) for d in range(depth)]
        plan.connect(f"split.o{k}", names[0])
        if len(names) > 1:
            plan.chain(*names)
        plan.connect(names[-1], f"snk.i{k}")
    return plan


def n_workers(shape: str, n_ops: int) -> int:
    if shape == "mixed":
        return MIXED_WIDTH * max(1, n_ops // MIXED_WIDTH)
    return n_ops


__all__ = ["COSTS", "Cost", "MIXED_WIDTH", "Meter", "SHAPES", "Snk", "Split", "SplitBatch", "Src", "Work", "WorkBatch",
           "WorkRows", "build", "xs_of",
           "burn", "check_rows", "burn_for", "burn_held", "burn_rows", "burn_rows_for", "burn_rows_held", "n_workers"]
