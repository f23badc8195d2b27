"""Per-packet costs of the stream operators: ``python -m experiments.stream_ops_bench``.

Each operator is driven directly, packet after packet, by a minimal context (no
scheduler: packets from a pool, sends collected), so the figure is the operator's own
cost: Python per packet plus its nogil kernels per row. Each input packet is brought
into the cache before its call is timed, as it is in a pipeline where the consumer runs
right after the producer wrote it (without that, 200 packets of 4096 rows stream 20 MB
from memory and a filter measures DRAM bandwidth: 10 ns/row instead of 1). The same run
then measures the runtime's cost per packet (a source feeding a counting sink through
the scheduler, with and without a pass-through ``Map``) and a streaming pipeline's
throughput with its marker latency, side by side.

Numbers are medians of ``--repeat`` runs after one warm-up run (kernel compilation and
cache loading excluded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from bobox_sched.core.packet import NodePool, PacketSpec, new_packet

from operators.expr import col
from operators.stream.generators import events


class DirectContext:
    """What an operator's ``process`` needs, without a scheduler: inputs are deques,
    sends are collected (and dropped by ``drain``)."""

    def __init__(self, packet_bytes: int = 1 << 19):
        self.pool = NodePool(0, node_local=False)
        self.packet_bytes = packet_bytes
        self.inputs: dict = {}
        self.eos: set = set()
        self.sent = 0
        self.rows = 0
        self.puncts = 0
        self.request = type("R", (), {"future": Future()})()
        self.blocked = False

    def new_packet(self, schema, n):
        return new_packet(self.pool, schema if isinstance(schema, PacketSpec) else PacketSpec(schema), n, None)

    def rows_for(self, spec):
        spec = spec if isinstance(spec, PacketSpec) else PacketSpec(spec)
        return spec.rows_for(self.packet_bytes)

    def send(self, port, pkt):
        self.sent += 1
        self.rows += pkt.nrows
        return True

    def punctuate(self, p, port=None):
        self.puncts += 1

    def recv(self, port):
        q = self.inputs.get(port)
        return q.popleft() if q else None

    def at_eos(self, port):
        return port in self.eos and not self.inputs.get(port)

    def close(self, port=None):
        pass

    def finish(self):
        pass

    def set_result(self, value):
        self.result = value


def _packets(ctx, spec, cols, rows):
    n = len(next(iter(cols.values())))
    out = []
    for a in range(0, n, rows):
        b = min(n, a + rows)
        p = ctx.new_packet(spec, b - a)
        for c in spec.names:
            p.columns[c][:] = cols[c][a:b]
        out.append(p)
    return out


def _warm(p) -> None:
    """Bring packet `p` into the cache, as it is when its consumer runs on the producer's
    thread right after it was written (the runtime's immediate tasks)."""
    for v in p.columns.values():
        v.sum()


def _time_stream(make_op, packets, repeat):
    """Median seconds to push `packets` through a fresh operator (``on_packet`` each,
    timed with the packet in cache, then ``on_end``), and what it sent."""
    times = []
    clock = time.perf_counter
    for r in range(repeat + 1):  # the first run warms kernels up
        op = make_op()
        ctx = DirectContext()
        dt = 0.0
        for p in packets:
            _warm(p)
            t0 = clock()
            op.on_packet(ctx, "in", p)
            dt += clock() - t0
        t0 = clock()
        op.on_end(ctx)
        dt += clock() - t0
        if r:
            times.append(dt)
    return statistics.median(times), ctx


def _time_merge(make_op, a, b, repeat):
    times = []
    clock = time.perf_counter
    for r in range(repeat + 1):
        op = make_op()
        ctx = DirectContext()
        dt = 0.0
        for pa_, pb in zip(a, b):
            _warm(pa_)
            _warm(pb)
            ctx.inputs.setdefault("a", deque()).append(pa_)
            ctx.inputs.setdefault("b", deque()).append(pb)
            t0 = clock()
            op.process(ctx)
            dt += clock() - t0
        ctx.eos.update(("a", "b"))
        t0 = clock()
        op.process(ctx)
        dt += clock() - t0
        if r:
            times.append(dt)
    return statistics.median(times), ctx


def bench_operators(rows_per_packet: int = 4096, packets: int = 200, repeat: int = 5) -> list[dict]:
    """Per-packet and per-row cost of every stream operator (direct drive)."""
    from numba import njit

    from operators.stream import Filter, FlatMap, Map, ParquetSink, Sessionize, Sliding, TimeMerge, Tumbling, WindowAggregate
    from operators.stream.generators import EVENT_SCHEMA, EventSource

    n = rows_per_packet * packets
    ev = events(n, seed=1, n_keys=1000, skew=1.0, mean_gap=10.0)
    ctx = DirectContext()
    spec = PacketSpec(EVENT_SCHEMA)
    pk = _packets(ctx, spec, ev, rows_per_packet)
    S = EVENT_SCHEMA
    mean_rows = 10.0 * rows_per_packet  # event time spanned by one packet

    @njit(nogil=True, cache=True)
    def square(v, out):
        for i in range(v.shape[0]):
            out[i] = v[i] * v[i]

    @njit(nogil=True, cache=True)
    def half(v, keep):
        for i in range(v.shape[0]):
            keep[i] = v[i] < 50.0

    tmp = tempfile.mkdtemp(prefix="bobox-bench-")
    cases = [
        ("map (expression)", lambda: Map(S, [("v2", col("value") * 2.0 + 1.0)])),
        ("map (user kernel)", lambda: Map(S, kernel=square, args=["value"], out=[("v2", np.float64)])),
        ("filter (expression, 50%)", lambda: Filter(S, col("value") < 50.0)),
        ("filter (user kernel, 50%)", lambda: Filter(S, kernel=half, args=["value"])),
        ("flat-map (2 per row)", lambda: FlatMap(S, 2, rank="r")),
        ("window: tumbling, 1 window/packet", lambda: WindowAggregate(
            S, ["key"], [("n", "count", None), ("s", "sum", "value")], Tumbling("ts", int(mean_rows)))),
        ("window: tumbling, 16 windows/packet", lambda: WindowAggregate(
            S, ["key"], [("n", "count", None), ("s", "sum", "value")], Tumbling("ts", int(mean_rows / 16)))),
        ("window: sliding, 4 windows/row", lambda: WindowAggregate(
            S, ["key"], [("n", "count", None), ("s", "sum", "value")],
            Sliding("ts", int(mean_rows), int(mean_rows / 4)))),
        ("sessions (timeout ~ 1 packet)", lambda: Sessionize(S, ["key"], "ts", int(mean_rows), [("n", "count", None)])),
        ("parquet sink (64 Ki-row groups)", lambda: ParquetSink(S, Path(tmp) / "bench.parquet")),
    ]
    out = []
    for name, make in cases:
        t, c = _time_stream(make, pk, repeat)
        out.append({"operator": name, "rows_per_packet": rows_per_packet, "us_per_packet": t / packets * 1e6,
                    "ns_per_row": t / n * 1e9, "out_rows": c.rows, "out_packets": c.sent, "punctuations": c.puncts})
    ev2 = events(n, seed=2, n_keys=1000, skew=1.0, mean_gap=10.0)
    pk2 = _packets(ctx, spec, ev2, rows_per_packet)
    t, c = _time_merge(lambda: TimeMerge(S, "ts"), pk, pk2, repeat)
    out.append({"operator": "timestamp merge (2 inputs)", "rows_per_packet": rows_per_packet,
                "us_per_packet": t / (2 * packets) * 1e6, "ns_per_row": t / (2 * n) * 1e9, "out_rows": c.rows,
                "out_packets": c.sent, "punctuations": c.puncts})
    times = []
    for r in range(repeat + 1):
        src = EventSource(n, 1, 1000, 1.0, 10.0, rows_per_packet=rows_per_packet)
        dc = DirectContext()
        t0 = time.perf_counter()
        for i in range(packets):
            src._next(dc, i)
        if r:
            times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    out.append({"operator": "event generator (source)", "rows_per_packet": rows_per_packet,
                "us_per_packet": t / packets * 1e6, "ns_per_row": t / n * 1e9, "out_rows": n, "out_packets": packets,
                "punctuations": 0})
    return out


class _Replay:
    """A source sending the same prebuilt packets `times` times (packets are immutable
    once sent, so sharing them costs nothing): the runtime's cost without a generator's."""

    def __new__(cls, packets, times, marker_every=0):
        from bobox_sched import Source
        from bobox_sched.control.punct import Marker

        class Replay(Source):
            state = "unknown"

            def __init__(self):
                self.i = 0

            def process(self, ctx):
                total = len(packets) * times
                while self.i < total and not ctx.blocked:
                    ctx.send("out", packets[self.i % len(packets)])
                    self.i += 1
                    if marker_every and self.i % marker_every == 0:
                        ctx.punctuate(Marker())
                if self.i >= total:
                    ctx.close()
                    ctx.finish()

        return Replay()


def bench_runtime(policy: str = "bobox", rows_per_packet: int = 4096, packets: int = 2000,
                  repeat: int = 5) -> dict:
    """The scheduler's cost per packet on ONE worker (so costs add up rather than overlap):
    prebuilt packets -> count sink, and with a pass-through map in between (one more
    operator hop and a map). Then, on every worker, a paced pipeline's throughput with its
    marker latency."""
    from bobox_sched import Plan, Scheduler

    from operators.stream import CountSink, EventSource, Map, Tumbling, WindowAggregate, format_report, stream_report
    from operators.stream.generators import EVENT_SCHEMA

    S = EventSource.schema
    ev = events(rows_per_packet * 16, seed=3)
    prebuilt = _packets(DirectContext(), PacketSpec(EVENT_SCHEMA), ev, rows_per_packet)
    times = max(1, packets // len(prebuilt))
    n = rows_per_packet * len(prebuilt) * times
    sent = len(prebuilt) * times

    def plan(with_map: bool):
        p = Plan("runtime")
        p.add("src", _Replay, prebuilt, times, 10)
        chain = ["src"]
        if with_map:
            p.add("map", Map, S, [("v2", col("value") * 2.0)])
            chain.append("map")
        p.add("sink", CountSink)
        chain.append("sink")
        p.chain(*chain)
        return p

    res = {}
    with Scheduler(policy=policy, pin=False, threads_per_node=1) as s:
        for label, wm in (("source_sink", False), ("source_map_sink", True)):
            ts, reps = [], []
            for r in range(repeat + 1):
                rep = stream_report(s.submit(plan(wm)), rows=n)
                if r:
                    ts.append(rep["seconds"])
                    reps.append(rep)
            t = statistics.median(ts)
            res[label] = {"us_per_packet": t / sent * 1e6, "rows_per_s": n / t,
                          "latency_p50_ms": statistics.median(x["latency_p50_ms"] for x in reps)}
        res["map_hop_us_per_packet"] = res["source_map_sink"]["us_per_packet"] - res["source_sink"]["us_per_packet"]
    with Scheduler(policy=policy, pin=False) as s:
        # a paced pipeline: event source at 1 M rows/s -> tumbling window aggregate -> count
        p = Plan("paced")
        rate = 1_000_000.0
        total = 500_000
        p.add("src", EventSource, total, rate=rate, rows_per_packet=rows_per_packet, marker_every=4)
        w = WindowAggregate(S, ["key"], [("n", "count", None)], Tumbling("ts", 10_000))
        p.add("win", WindowAggregate, S, ["key"], [("n", "count", None)], Tumbling("ts", 10_000))
        p.add("sink", CountSink, w.schema)
        p.chain("src", "win", "sink")
        s.submit(p).result()  # warm-up
        rep = stream_report(s.submit(p), rows=total)
        res["paced_pipeline"] = {**rep, "offered_rows_per_s": rate, "line": format_report(rep)}
    return res


def _table(rows) -> str:
    head = ("operator", "rows/pkt", "us/packet", "ns/row", "out rows", "out pkts", "puncts")
    body = [(r["operator"], str(r["rows_per_packet"]), f"{r['us_per_packet']:.1f}", f"{r['ns_per_row']:.1f}",
             f"{r['out_rows']:,}", str(r["out_packets"]), str(r["punctuations"])) for r in rows]
    w = [max(len(x) for x in c) for c in zip(head, *body)]
    line = lambda cells: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(cells))  # noqa: E731
    return "\n".join([line(head)] + [line(b) for b in body])


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None) -> int:
    p = _Parser(prog="python -m experiments.stream_ops_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=4096, help="rows per packet (default 4096)")
    p.add_argument("--packets", type=int, default=200, help="packets per operator run (default 200)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per figure; the median is shown (default 5)")
    p.add_argument("--policy", choices=["bobox", "simple"], default="bobox", help="policy of the runtime figures")
    p.add_argument("--no-runtime", action="store_true", help="only the operators (no scheduler)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    a = p.parse_args(argv)
    for name in ("rows", "packets", "repeat"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be a positive integer, got {getattr(a, name)}")
    ops = bench_operators(a.rows, a.packets, a.repeat)
    print(f"stream operators, driven directly ({a.packets} packets of {a.rows} rows, median of {a.repeat}):")
    print(_table(ops))
    out = {"operators": ops}
    if not a.no_runtime:
        rt = bench_runtime(a.policy, a.rows, max(a.packets, 500), a.repeat)
        out["runtime"] = rt
        print(f"\nruntime ({a.policy} policy, one worker, {a.rows}-row packets, median of {a.repeat}):")
        print(f"  source -> count sink:        {rt['source_sink']['us_per_packet']:.1f} us/packet "
              f"({rt['source_sink']['rows_per_s']:,.0f} rows/s)")
        print(f"  source -> map -> count sink: {rt['source_map_sink']['us_per_packet']:.1f} us/packet "
              f"({rt['source_map_sink']['rows_per_s']:,.0f} rows/s)")
        print(f"  one more operator hop (map): {rt['map_hop_us_per_packet']:.1f} us/packet")
        print(f"  paced pipeline (1 M rows/s offered) -> tumbling window -> sink: {rt['paced_pipeline']['line']}")
    if a.json:
        print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
