"""Small operators for the scheduler tests."""

from __future__ import annotations

import threading
import time

import numpy as np

from bobox_sched import Operator, Sink, Source, StreamOperator


class Range(Source):
    """Emits 0..n-1 in packets of `rows` int64 values (node-local packets)."""

    def __init__(self, n: int, rows: int = 100):
        self.n = n
        self.rows = rows
        self.i = 0

    def next_packet(self, ctx):
        if self.i >= self.n:
            return None
        k = min(self.rows, self.n - self.i)
        p = ctx.new_packet({"x": np.int64}, k)
        p["x"][:] = np.arange(self.i, self.i + k)
        self.i += k
        return p


class Endless(Source):
    """Never ends (unbounded source): for cancellation tests."""

    def next_packet(self, ctx):
        p = ctx.new_packet({"x": np.int64}, 10)
        p["x"][:] = 1
        return p


class Double(StreamOperator):
    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.int64}, pkt.nrows)
        np.multiply(pkt["x"], 2, out=out["x"])
        ctx.send("out", out)


class Slow(StreamOperator):
    """Passes packets on after sleeping `delay` seconds each."""

    def __init__(self, delay=0.01):
        self.delay = delay

    def on_packet(self, ctx, port, pkt):
        time.sleep(self.delay)
        ctx.send("out", pkt)


class Boom(StreamOperator):
    """Raises on its `after`-th packet."""

    def __init__(self, after=3):
        self.after = after
        self.seen = 0

    def on_packet(self, ctx, port, pkt):
        self.seen += 1
        if self.seen >= self.after:
            raise KeyError(f"boom at packet {self.seen}")
        ctx.send("out", pkt)


class SumSink(Sink):
    def finalize(self, packets):
        return int(sum(int(p["x"].sum()) for p in packets))


class CountSink(StreamOperator):
    """Counts packets and rows without keeping them."""

    outputs = ()

    def __init__(self):
        self.packets = 0
        self.rows = 0

    def on_packet(self, ctx, port, pkt):
        self.packets += 1
        self.rows += pkt.nrows

    def on_end(self, ctx):
        ctx.set_result({"packets": self.packets, "rows": self.rows})


class Guarded(Operator):
    """Base for instrumented operators: records any second thread entering process()."""

    violations: list = []

    def __init__(self):
        self._guard = threading.Lock()

    def process(self, ctx):
        if not self._guard.acquire(blocking=False):
            Guarded.violations.append(self.name)
            return
        try:
            self.body(ctx)
        finally:
            self._guard.release()
