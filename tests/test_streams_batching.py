"""Batched ports of policy ``streams`` (``bobox_sched/policies/streams/batching.py``): one
queue operation moves a batch of tuples, a batch leaves full, at a punctuation, when its
sender goes idle or when it aged; the elastic loop counts tuples; ``ctx.recv_many`` and
``ctx.send_many``. Exactly-once and per-edge order with batches: the random-DAG test of
``test_policy_streams.py`` (its ``batch`` parameter)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_policy_streams import WAIT_S, Collect, Count, Inc

from bobox_sched import BoboxError, Operator, Plan, Scheduler, Source, StreamOperator
from bobox_sched.control import model as M
from bobox_sched.control.punct import Watermark, Window
from bobox_sched.core.packet import Packet
from bobox_sched.core.port import Port
from bobox_sched.policies.streams import batching
from experiments.region_ops import ArraySource, Record, Work, same_output, work_map
from experiments.region_ops import _with as with_columns


def streams(**kw):
    return Scheduler(policy="streams", pin=False, **kw)


def chain(n: int) -> Plan:
    plan = Plan("chain")
    plan.add("src", Count, n)
    plan.add("inc", Inc)
    plan.add("sink", Collect)
    plan.chain("src", "inc", "sink")
    return plan


@pytest.fixture
def pushed(monkeypatch) -> list:
    """Every item pushed into a port's queue (``Port.push``, the dynamic model's), in
    order; a retried push is there each time."""
    items: list = []
    orig = Port.push

    def push(self, item):
        items.append(item)
        return orig(self, item)

    monkeypatch.setattr(Port, "push", push)
    return items


def test_a_queue_operation_moves_a_batch_of_at_most_batch_tuples(pushed):
    """Every item pushed into a port's queue is a list (a batch) of at most `batch`
    tuples plus the end of stream, full batches among them, and the answer is exact."""
    with streams(threads=1, batch=8, queue_capacity=4, batch_latency_s=60) as s:  # none ages
        assert s.submit(chain(200)).result(WAIT_S) == list(range(1, 201))
    batches = list({id(b): b for b in pushed if b.__class__ is list}.values())  # a retried push once
    # nothing went alone (the timer's FLUSH markers aside)
    assert batches and all(b.__class__ is list or b is batching.FLUSH for b in pushed)
    sizes = [sum(1 for x in b if x.__class__ is Packet) for b in batches]
    assert max(sizes) == 8 and sum(sizes) == 2 * 200  # src -> inc and inc -> sink
    assert sizes.count(8) >= 200 // 8 - 1  # the source's are full: it runs ahead


@pytest.mark.parametrize("rows, per_batch", [(2, 4), (8, 1), (100, 1)])
def test_a_batch_is_full_at_batch_rows(rows, per_batch, pushed):
    """Tuples of `rows` rows, batch=8: a batch leaves with 8 rows' worth of tuples, and a
    tuple of 8 rows or more goes alone (the source's batches; none ages)."""
    plan = Plan("rows")
    plan.add("src", Count, 40, rows)
    plan.add("sink", Collect)
    plan.chain("src", "sink")
    with streams(threads=1, batch=8, queue_capacity=64, batch_latency_s=60) as s:
        assert s.submit(plan).result(WAIT_S) == [i for i in range(40) for _ in range(rows)]
    batches = list({id(b): b for b in pushed if b.__class__ is list}.values())  # a retried push once
    sizes = [sum(1 for x in b if x.__class__ is Packet) for b in batches]
    assert max(sizes) == per_batch and sum(sizes) == 40


def test_one_tuple_mode_pushes_each_tuple_alone(pushed):
    with streams(threads=1, batch=1, queue_capacity=4) as s:
        assert s.submit(chain(50)).result(WAIT_S) == list(range(1, 51))
    assert pushed and not any(b.__class__ is list for b in pushed)


@pytest.mark.parametrize("batch", [1, 16])
def test_the_elastic_loop_counts_tuples_not_batches(batch):
    """``total_executed`` (what the elastic controller divides by its period) grows by a
    batch's tuples: 100 tuples and an end of stream on each of the two ports."""
    with streams(threads=1, batch=batch) as s:
        assert s.submit(chain(100)).result(WAIT_S) == list(range(1, 101))
        assert s.policy.total_executed() == 2 * 101


class Trickle(Source):
    """Sends `n` tuples, then waits (re-running every 20 ms without sending) until
    `release` is set, then ends: a sender that stops short of a full batch."""

    def __init__(self, n: int, release: threading.Event):
        self.n, self.i, self.release = n, 0, release

    def process(self, ctx):
        if self.i < self.n:
            p = ctx.new_packet({"x": np.int64}, 1)
            p["x"][:] = self.i
            self.i += 1
            ctx.send("out", p)
            ctx.reschedule()  # at once: the source is not idle yet
            return
        if self.release.is_set():
            ctx.close()
            ctx.finish()
            return
        ctx.reschedule(0.02)


class Arrivals(StreamOperator):
    """Sets `got` once `n` tuples arrived."""

    outputs = ()

    def __init__(self, n: int, got: threading.Event):
        self.n, self.got, self.seen = n, got, []

    def on_packet(self, ctx, port, pkt):
        self.seen.append(int(pkt["x"][0]))
        if len(self.seen) == self.n:
            self.got.set()

    def on_end(self, ctx):
        ctx.set_result(self.seen)


def trickle_plan(release: threading.Event, got: threading.Event) -> Plan:
    """Trickle(5) -> Inc -> Arrivals(5)."""
    plan = Plan("trickle")
    plan.add("src", Trickle, 5, release)
    plan.add("inc", Inc)
    plan.add("sink", Arrivals, 5, got)
    plan.chain("src", "inc", "sink")
    return plan


@pytest.mark.parametrize("model", ["manual", "dynamic", "dedicated"])
def test_a_partial_batch_leaves_while_its_sender_waits(model):
    """5 tuples of a batch of 64 must reach the sink while the source still waits for
    `release` (a liveness bound on the wait, no timing): the source's batch leaves when
    its process returns without running again at once, and the relay's (manual has no
    queues, so no idle rule) when it ages, through the timer's FLUSH marker."""
    release, got = threading.Event(), threading.Event()
    plan = trickle_plan(release, got)
    kw = {"threads": 1} if model == "dynamic" else {}
    with streams(model=model, batch=64, batch_latency_s=0.01, **kw) as s:
        h = s.submit(plan)
        try:
            assert got.wait(WAIT_S), "a partial batch never left"
        finally:
            release.set()
        assert h.result(WAIT_S) == [1, 2, 3, 4, 5]


def test_manual_relays_a_partial_batch_only_through_the_timer(monkeypatch):
    """Negative control of the test above: without the timer's look, manual's relay keeps
    its partial batch until the source ends."""
    from bobox_sched.policies.streams.runtime import StreamsBase

    monkeypatch.setattr(StreamsBase, "_flush_tick", lambda self, request: None)
    release, got = threading.Event(), threading.Event()
    plan = trickle_plan(release, got)
    with streams(model="manual", batch=64, batch_latency_s=0.01) as s:
        h = s.submit(plan)
        assert not got.wait(0.5)  # 50 latency bounds: nothing comes (a negative control)
        release.set()
        assert h.result(WAIT_S) == [1, 2, 3, 4, 5]


class Marks(Source):
    """Two tuples, a watermark, two tuples, end."""

    def __init__(self):
        self.step = 0

    def process(self, ctx):
        self.step += 1
        if self.step <= 4:
            p = ctx.new_packet({"x": np.int64}, 1)
            p["x"][:] = self.step
            ctx.send("out", p)
            if self.step == 2:
                ctx.punctuate(Watermark(2))
            ctx.reschedule()
            return
        ctx.close()
        ctx.finish()


class BatchRelay(Operator):
    """Takes what is queued at once and sends it on at once (recv_many / send_many);
    records the lists it got."""

    inputs = ("in",)
    outputs = ("out",)

    def __init__(self, lists: list):
        self.lists = lists

    def process(self, ctx):
        got = ctx.recv_many("in")
        if got:
            self.lists.append([int(p["x"][0]) for p in got])
            ctx.send_many("out", got)
        if ctx.at_eos("in"):
            ctx.close()
            ctx.finish()


class Order(StreamOperator):
    """Records packets and punctuations in arrival order."""

    outputs = ()
    punct_in = "expecting"

    def __init__(self):
        self.log = []

    def on_packet(self, ctx, port, pkt):
        self.log.append(int(pkt["x"][0]))

    def on_punct(self, ctx, port, punct):
        self.log.append(type(punct).__name__)

    def on_end(self, ctx):
        ctx.set_result(self.log)


@pytest.mark.parametrize("policy", ["streams-batched", "streams-1", "simple"])
def test_recv_many_stops_at_a_punctuation_so_it_follows_what_came_before(policy):
    """A watermark between tuples leaves at once with the batch before it (rule 2) and
    reaches the sink between the same tuples; recv_many never returns packets from both
    sides of it on an oblivious input."""
    plan = Plan("marks")
    plan.add("src", Marks)
    lists: list = []
    plan.add("relay", BatchRelay, lists)
    plan.add("sink", Order)
    plan.chain("src", "relay", "sink")
    kw = {"policy": "simple"} if policy == "simple" else \
        {"policy": "streams", "pin": False, "threads": 1, "batch": 64 if policy == "streams-batched" else 1}
    with Scheduler(**kw) as s:
        log = s.submit(plan).result(WAIT_S)
    assert log == [1, 2, "Watermark", 3, 4]
    assert lists and all(max(lst) <= 2 or min(lst) >= 3 for lst in lists)


def test_recv_many_takes_at_most_limit():
    class Take2(Operator):
        inputs = ("in",)
        outputs = ("out",)

        def __init__(self, sizes: list):
            self.sizes = sizes

        def process(self, ctx):
            got = ctx.recv_many("in", 2)
            if got:
                self.sizes.append(len(got))
                ctx.send_many("out", got)
            if ctx.at_eos("in"):
                ctx.close()
                ctx.finish()

    plan = Plan("take2")
    plan.add("src", Count, 40)
    sizes: list = []
    plan.add("t", Take2, sizes)
    plan.add("sink", Collect)
    plan.chain("src", "t", "sink")
    with streams(threads=1, batch=16) as s:
        assert s.submit(plan).result(WAIT_S) == list(range(40))
    assert max(sizes) == 2 and sum(sizes) == 40


def test_send_many_refuses_what_is_not_a_packet():
    class Bad(Operator):
        inputs = ("in",)
        outputs = ("out",)

        def process(self, ctx):
            ctx.recv_many("in")
            ctx.send_many("out", [Packet({"x": np.zeros(1, np.int64)}), None])

    plan = Plan("bad")
    plan.add("src", Count, 3)
    plan.add("b", Bad)
    plan.add("sink", Collect)
    plan.chain("src", "b", "sink")
    with streams(threads=1, batch=4) as s:
        with pytest.raises(BoboxError, match="sent NoneType"):
            s.submit(plan).result(WAIT_S)


@pytest.mark.parametrize("kw, msg", [
    ({"batch": 0}, "batch must be a positive integer"),
    ({"batch": True}, "batch must be a positive integer"),
    ({"batch": 10**6}, "batch must be at most"),
    ({"batch_latency_s": 0}, "batch_latency_s must be"),
    ({"batch_latency_s": "1"}, "batch_latency_s must be"),
])
def test_bad_batch_options_are_refused_before_anything_starts(kw, msg):
    with pytest.raises(BoboxError, match=msg):
        Scheduler(policy="streams", **kw)


def test_the_defaults_are_the_documented_ones():
    with streams(threads=1) as s:
        assert (s.policy.batch, s.policy.batch_latency_s) == (batching.DEFAULT_BATCH, batching.DEFAULT_LATENCY_S)


class BatchWork(Work):
    """``region_ops.Work`` written with recv_many / send_many, declared AT_MOST_ONE so
    that a region orders its output by sequence numbers (not round-robin)."""

    selectivity_bound = M.AT_MOST_ONE

    def process(self, ctx):
        outs = []
        for pkt in ctx.recv_many("in"):
            y = ctx.new_packet({self.out: np.int64}, pkt.nrows)[self.out]
            work_map(pkt[self.col], self.w, y)
            outs.append(with_columns(pkt, **{self.out: y}))
        if outs:
            ctx.send_many("out", outs)
        if ctx.at_eos("in"):
            ctx.close()
            ctx.finish()


def test_recv_many_and_send_many_inside_a_parallel_region_keep_the_sequential_output():
    """recv_many / send_many in a parallel region's channels (the channel hands them one
    packet at a time, as recv: its bookkeeping ties what is sent to the packet taken
    last): the parallel plan's output equals the sequential one's, rows and window
    punctuations in order. (This operator forwards its input's columns, sequence numbers
    included, so the test passes without the channel's own recv_many too; it guards the
    pair inside regions, not that bookkeeping.)"""
    rng = np.random.default_rng(5)
    cols = {"k": rng.integers(0, 64, 3000).astype(np.int64), "x": rng.integers(0, 1000, 3000).astype(np.int64)}
    p = Plan("batchwork")
    p.add("src", ArraySource, cols, (128, 0, 77), [(1000, Window(wid="a")), (2500, Window(wid="b"))])
    p.add("w", BatchWork, 4)
    p.add("sink", Record)
    p.chain("src", "w", "sink")
    with Scheduler(policy="bobox", threads_per_node=3, pin=False) as s:
        want = s.submit(p).result(WAIT_S)
        for n in (2, 3):
            assert same_output(want, s.submit(p, parallelism=n).result(WAIT_S))


class Blocking(Source):
    """Sends 3 tuples, sleeps past the latency bound, sends a 4th, then waits inside
    ``process`` until `release` (a source looping on a socket), then ends."""

    def __init__(self, release: threading.Event):
        self.release = release

    def process(self, ctx):
        for i in range(4):
            if i == 3:
                time.sleep(0.05)  # 5 latency bounds: the batch is old at the 4th send
            p = ctx.new_packet({"x": np.int64}, 1)
            p["x"][:] = i
            ctx.send("out", p)
        self.release.wait(WAIT_S)
        ctx.close()
        ctx.finish()


def test_a_source_that_never_returns_hands_an_aged_batch_on_at_its_next_send():
    release, got = threading.Event(), threading.Event()
    plan = Plan("blocking")
    plan.add("src", Blocking, release)
    plan.add("sink", Arrivals, 4, got)
    plan.chain("src", "sink")
    with streams(threads=1, batch=64, batch_latency_s=0.01) as s:
        h = s.submit(plan)
        try:
            assert got.wait(WAIT_S), "the aged batch stayed with its source"
        finally:
            release.set()
        assert h.result(WAIT_S) == [0, 1, 2, 3]


def test_the_timer_spaces_its_ticks_by_twenty_times_what_a_tick_took(monkeypatch):
    """A clock that moves 2 ms between the tick's two readings: the next tick comes 40 ms
    later, not after the 1 ms bound (the walk takes at most 1/20 of the GIL)."""
    from types import SimpleNamespace

    from bobox_sched.policies.streams import runtime

    clock = iter([10.0, 10.002])
    monkeypatch.setattr(runtime, "_now", lambda: next(clock))
    delays = []
    req = SimpleNamespace(ACTIVE="a", state="a", tasks={})
    pol = SimpleNamespace(batch_latency_s=0.001, records={}, _flush_tick=None,
                          push_later_fn=lambda delay, fn, request: delays.append(delay))
    runtime.StreamsBase._flush_tick(pol, req)
    assert delays == [pytest.approx(runtime.TICK_SHARE_INV * 0.002)]
