"""Requests spanning domains (``bobox_sched/domains/span.py``, ``channel.py``): the
channel carries packets of any size and schema in order, across threads here as across
processes; a spanning request's parts fail and cancel together; lanes come from
``Query(parallel=k)``. Every TPC-H answer spanning two domains: ``test_queries.py``."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bobox_sched import Plan, Scheduler, StreamOperator
from bobox_sched.core.atomics import store_word
from bobox_sched.core.errors import RequestCancelled
from bobox_sched.core.sources import StreamChannel
from bobox_sched.domains import channel as C
from bobox_sched.domains import shm
from ops import Boom, CountSink, Endless, Range, SumSink

pytestmark = pytest.mark.slow

DTYPES = [np.int64, np.float64, np.int32, np.uint8]


@st.composite
def packets(draw):
    """A stream of packets: rows from 0 to 3 slots' worth, one or two columns whose
    dtypes change now and then (a new schema descriptor)."""
    out = []
    for _ in range(draw(st.integers(1, 12))):
        rows = draw(st.sampled_from([0, 1, 7, 1000, 131_072, 200_000, 400_000]))
        cols = draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2))
        out.append({f"c{i}": (np.arange(rows) * (i + 3)).astype(dt) for i, dt in enumerate(cols)})
    return out


def pump(reader, stop) -> list:
    """Drain `reader` into its StreamChannel until the end of stream; the items."""
    while True:
        _, done = reader.drain()
        if done or stop.is_set():
            break
    items = []
    while (it := reader.chan._take()) is not None:
        items.append(it)
    return items


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packets())
def test_a_channel_carries_every_packet_in_order(stream):
    seg, bell = C.create_channel(), C.create_bell()
    try:
        w = C.ChannelWriter(seg.name, bell.name)
        r = C._Reader(seg.name, StreamChannel(capacity=None))

        def produce():
            for p in stream:
                w.send(p, len(next(iter(p.values()))))
            w.end()

        t = threading.Thread(target=produce)
        t.start()  # more than SLOTS descriptors: the writer waits for the reader's room
        items = pump(r, threading.Event())
        t.join()
        got = [it for it in items if not isinstance(it, type(C._Reader)) and hasattr(it, "columns")]
        assert items[-1] is not None
        # packets larger than a slot arrive in pieces: compare the concatenation per schema run
        want_rows = sum(len(next(iter(p.values()))) for p in stream)
        assert sum(g.nrows for g in got) == want_rows
        i = 0
        for p in stream:
            n = len(next(iter(p.values())))
            pieces, k = [], 0
            while k < n or (n == 0 and not pieces):
                g = got[i]
                assert list(g.columns) == list(p) and all(g[c].dtype == p[c].dtype for c in p)
                pieces.append(g)
                k += g.nrows
                i += 1
                if n == 0:
                    break
            for c in p:
                np.testing.assert_array_equal(np.concatenate([g[c] for g in pieces]), p[c])
        assert i == len(got)
    finally:
        for s in (seg, bell):
            s.close()
            s.unlink()


def test_a_writer_stops_when_the_reader_is_gone():
    seg, bell = C.create_channel(), C.create_bell()
    try:
        w = C.ChannelWriter(seg.name, bell.name)
        for _ in range(C.SLOTS - 1):
            w.send({"x": np.arange(10)}, 10)  # and a schema before the first: the ring is full now
        store_word(w.m.ctl, 0, 1)  # the reader's request ended
        with pytest.raises(C.ChannelGone):
            w.send({"x": np.arange(10)}, 10)
    finally:
        for s in (seg, bell):
            s.close()
            s.unlink()


def test_lanes_of_a_decomposed_query(tpch):
    from operators import tpch as T

    p = T.plan("q3", tpch, 4)
    lanes = p.lanes
    assert set(lanes.values()) == {0, 1, 2, 3}
    home = [n for n in p.operator_names if n not in lanes]
    assert "collect0" in home and all(n.startswith(("scan_customer", "broadcast", "merge", "collect")) for n in home)
    assert T.plan("q3", tpch, 1).lanes == {}


class Pair(StreamOperator):
    inputs = ("in0", "in1")

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


def lanes_plan(src0, src1, mid=None) -> Plan:
    """Two lanes (sources `src0`, `src1`, the second through `mid`) joined in the home."""
    p = Plan("two-lanes")
    p.add("a", *src0)
    p.lane("a", 0)
    p.add("b", *src1)
    p.lane("b", 1)
    last = "b"
    if mid is not None:
        p.add("m", *mid)
        p.lane("m", 1)
        p.connect("b", "m")
        last = "m"
    p.add("u", Pair)
    p.add("sink", SumSink)
    p.connect("a", "u.in0")
    p.connect(last, "u.in1")
    p.connect("u", "sink")
    return p


def test_a_spanning_request_runs_fails_and_cancels_as_one():
    with Scheduler(domains=2, threads_per_node=1) as s:
        h = s.submit(lanes_plan((Range, 50_000, 1000), (Range, 30_000, 1000)))
        assert h.result(60) == 50_000 * 49_999 // 2 + 30_000 * 29_999 // 2
        assert sorted(c.domain for c in h._children) == [0, 1] and len(h.stats["parts"]) == 2
        # a part fails: the request fails with its error, the other part (endless) is cancelled
        bad = s.submit(lanes_plan((Endless,), (Range, 100_000, 100), (Boom, 5)))
        with pytest.raises(KeyError, match="boom at packet 5"):
            bad.result(60)
        assert bad.failed_operator == "m"
        for c in bad._children:
            c.exception(60)
        assert any(isinstance(c.exception(), RequestCancelled) for c in bad._children)
        # cancelled by the user: every part ends
        forever = s.submit(lanes_plan((Endless,), (Endless,)))
        assert forever.cancel()
        with pytest.raises(RequestCancelled):
            forever.result(60)
        # every part ended: cancelled, or (the race with its cancel) stopped by its channel's other end
        assert all(isinstance(c.exception(60), (RequestCancelled, C.ChannelGone)) for c in forever._children)
        assert not [n for n in shm.ours() if n.endswith("-chan")]
        assert s.submit(lanes_plan((Range, 10, 5), (Range, 10, 5))).result(60) == 90  # still serving
    assert not shm.ours()


def test_a_decomposed_plan_stays_whole_where_one_domain_has_the_workers():
    with Scheduler(domains=2, threads_per_node=1, policy="streams") as s:  # a stream policy: never spans
        h = s.submit(lanes_plan((Range, 100, 10), (Range, 100, 10)))
        assert h.result(60) == 2 * 4950 and h._children is None


def test_parallel_region_channels_spread_over_domains():
    """``submit(plan, parallelism=N)`` with N above a domain's workers: the region's
    channels run in both domains, its splitter and merger in the home one; the output,
    punctuations included, is the sequential run's (the regions property test draws
    such runs too: ``test_regions_runtime.py``)."""
    from bobox_sched.control.punct import Window
    from bobox_sched.regions.fission import parallelize
    from experiments.region_ops import ArraySource, Concat2, FlatMap, Record, Tee2, Work, same_output

    def plan(n, puncts):
        rng = np.random.default_rng(7)
        cols = {"x": rng.integers(-1000, 1000, n).astype(np.int64), "k": rng.integers(0, 64, n).astype(np.int64),
                "k2": rng.integers(0, 64, n).astype(np.int64)}
        p = Plan("region")
        p.add("src", ArraySource, cols, (128, 7), puncts)
        p.add("w", Work, 4)
        p.add("f", FlatMap, 2)
        p.add("sink", Record)
        p.chain("src", "w", "f", "sink")
        return p

    def dag():  # fan-out and in around two regions, no rows: what the regions property test found
        p = Plan("dag")
        p.add("src", ArraySource, {"x": np.zeros(0, np.int64), "k": np.zeros(0, np.int64),
                                   "k2": np.zeros(0, np.int64)}, (0, 3), [(0, Window(wid=0))])
        p.add("tee", Tee2)
        p.add("tee_a", Work, 0)
        p.add("tee_b", Work, 0)
        p.add("concat", Concat2)
        p.add("sink", Record)
        p.connect("src", "tee")
        p.connect("tee.out0", "tee_a")
        p.connect("tee.out1", "tee_b")
        p.connect("tee_a", "concat.in0")
        p.connect("tee_b", "concat.in1")
        p.connect("concat", "sink")
        return parallelize(p, 2, epoch=1)

    plans = [plan(3000, [(500, Window(wid="a")), (2000, Window(wid="b"))]),
             plan(0, [(0, Window(wid="z"))]), dag()]
    with Scheduler(policy="bobox", threads_per_node=1) as one:
        wants = [one.submit(p).result(120) for p in plans]
    with Scheduler(domains=2, threads_per_node=1) as s:
        for p, want in zip(plans, wants):
            for degree in ((2, 5) if p.name == "region" else (None,)):
                h = s.submit(p, parallelism=degree)
                assert same_output(want, h.result(120))
                assert [q for _, q in h.result()["puncts"]] == [q for _, q in want["puncts"]]
                assert sorted(c.domain for c in h._children) == [0, 1]


class FailAfter(StreamOperator):
    """Passes packets on, slowly, and raises once `seconds` passed since its first."""

    def __init__(self, seconds: float):
        self.seconds, self.t0 = seconds, None

    def on_packet(self, ctx, port, pkt):
        import time

        self.t0 = self.t0 or time.monotonic()
        if time.monotonic() - self.t0 > self.seconds:
            raise KeyError("failed after the shutdown began")
        time.sleep(0.005)
        ctx.send("out", pkt)


def test_a_part_failing_during_shutdown_still_ends_the_request_and_the_shutdown():
    """The part in domain 1 fails after ``shutdown()`` began; the home part (an endless
    lane) can only end by the cancel the front then sends it: a domain keeps reading its
    pipe while it shuts down, so the shutdown returns and the request fails with the
    part's error."""
    s = Scheduler(domains=2, threads_per_node=1)
    h = s.submit(lanes_plan((Endless,), (Range, 10**7, 100), (FailAfter, 0.5)))
    t = threading.Thread(target=s.shutdown)
    t.start()
    t.join(120)
    assert not t.is_alive()
    with pytest.raises(KeyError, match="after the shutdown began"):
        h.result(5)
    assert not shm.ours()
