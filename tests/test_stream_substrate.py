"""The stream substrate: punctuations in band and in order, the operator model's safe
defaults, unbounded sources (channel-fed, rate-paced), shutdown by final punctuation or
cancellation, latency markers. Under both policies."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from bobox_sched import Operator, Plan, Scheduler, Source, StreamOperator
from bobox_sched.core.errors import RequestCancelled
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.control.punct import Batch, Marker, Pulse, Punctuation, Watermark, Window
from bobox_sched.core.sources import GeneratorSource, QueueSource, StreamChannel

POLICIES = ["bobox", "simple", "streams"]


def sched(policy, **kw):
    kw.setdefault("threads_per_node", 2)
    kw.setdefault("pin", False)
    return Scheduler(policy=policy, **kw)


class Items(Source):
    """Emits a fixed list of items: ints become one-row packets, punctuations are sent."""

    def __init__(self, items):
        self.items = list(items)
        self.i = 0

    def process(self, ctx):
        while self.i < len(self.items):
            it = self.items[self.i]
            self.i += 1
            if isinstance(it, Punctuation):
                ctx.punctuate(it)
            else:
                p = ctx.new_packet({"x": np.int64}, 1)
                p["x"][0] = it
                ctx.send("out", p)
            if ctx.blocked:
                ctx.reschedule()
                return
        ctx.close()
        ctx.finish()


class AddOne(StreamOperator):
    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE

    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.int64}, pkt.nrows)
        np.add(pkt["x"], 1, out=out["x"])
        ctx.send("out", out)


class DropAll(StreamOperator):
    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE

    def on_packet(self, ctx, port, pkt):
        pass


class Record(StreamOperator):
    """Sink that records what arrives, punctuations included (expecting input)."""

    outputs = ()
    punct_in = M.EXPECTING

    def __init__(self):
        self.seen = []

    def on_packet(self, ctx, port, pkt):
        self.seen.extend(int(v) for v in pkt["x"])

    def on_punct(self, ctx, port, p):
        self.seen.append(p)

    def on_end(self, ctx):
        ctx.set_result(self.seen)


class ObliviousSink(StreamOperator):
    outputs = ()

    def __init__(self):
        self.rows = 0

    def on_packet(self, ctx, port, pkt):
        self.rows += pkt.nrows

    def on_end(self, ctx):
        ctx.set_result(self.rows)


class TwoIn(StreamOperator):
    inputs = ("a", "b")

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


def items_with_punct(n=40):
    out = []
    for i in range(n):
        out.append(i)
        if i % 7 == 3:
            out.append(Window(wid=i))
        if i % 11 == 5:
            out.append(Batch(ts=i))
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("buffers", [1, 4])
def test_punctuations_travel_in_order_through_oblivious_operators(policy, buffers):
    items = items_with_punct()
    plan = Plan("p")
    plan.add("src", Items, items)
    plan.add("a", AddOne)
    plan.add("b", AddOne)
    plan.add("sink", Record)
    plan.chain("src", "a", "b", "sink")
    want = [it + 2 if isinstance(it, int) else it for it in items]
    with sched(policy, buffer_packets=buffers) as s:
        got = [s.submit(plan) for _ in range(4)]
        for h in got:
            assert h.result(timeout=60) == want


def rows_with_windows(first, wid0=0, every=5, n=20):
    """Rows first, first+1, ... with Window(wid0 + k) after the k-th group of `every`."""
    out = []
    for i in range(n):
        out.append(first + i)
        if i % every == every - 1:
            out.append(Window(wid0 + i // every))
    return out


def fan_in(a_items, b_items, op=TwoIn, **kw) -> Plan:
    plan = Plan("fanin")
    plan.add("s1", Items, a_items)
    plan.add("s2", Items, b_items)
    plan.add("j", op)
    plan.add("sink", Record)
    plan.connect("s1", "j.a")
    plan.connect("s2", "j.b")
    plan.connect("j", "sink")
    return plan


def window_of(seen):
    """Each row's window: the number of punctuations before it in `seen`."""
    out, w = {}, 0
    for v in seen:
        if isinstance(v, Window):
            w += 1
        else:
            out[v] = w
    return out


@pytest.mark.parametrize("buffers", [1, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_fan_in_forwards_each_window_once_after_it_closed_on_every_input(policy, buffers):
    """Both inputs close windows 0-3 after every 5 rows: each window end leaves the 2-input
    operator once, after every row of that window from either input and before every
    row of the next (core.task.Alignment); each input's rows stay in order."""
    with sched(policy, buffer_packets=buffers) as s:
        seen = s.submit(fan_in(rows_with_windows(0), rows_with_windows(100))).result(timeout=60)
    assert [v for v in seen if isinstance(v, Window)] == [Window(k) for k in range(4)], seen
    assert [v for v in seen if type(v) is int and v < 100] == list(range(20)), seen
    assert [v for v in seen if type(v) is int and v >= 100] == list(range(100, 120)), seen
    assert window_of(seen) == {first + i: i // 5 for first in (0, 100) for i in range(20)}, seen


@pytest.mark.parametrize("policy", POLICIES)
def test_an_input_that_ends_releases_the_windows_waiting_for_it(policy):
    """Input b carries no window: the windows of a wait for b to end, then leave once each,
    in order; every row of b comes before the first of them."""
    with sched(policy) as s:
        seen = s.submit(fan_in(rows_with_windows(0), list(range(100, 110)))).result(timeout=60)
    wins = [k for k, v in enumerate(seen) if isinstance(v, Window)]
    assert [seen[k] for k in wins] == [Window(k) for k in range(4)], seen
    assert max(k for k, v in enumerate(seen) if type(v) is int and v >= 100) < wins[0], seen
    assert [v for v in seen if type(v) is int and v < 100] == list(range(20)), seen


@pytest.mark.parametrize("policy", POLICIES)
def test_inputs_that_wait_at_different_windows_fail_the_request(policy):
    from bobox_sched import OperatorError

    with sched(policy) as s:
        h = s.submit(fan_in(rows_with_windows(0), rows_with_windows(100, wid0=10)))
        with pytest.raises(OperatorError, match=r"operator 'j': its inputs wait at different punctuations "
                                                r"\('a' at Window\(wid=0\), 'b' at Window\(wid=10\)\)"):
            h.result(timeout=60)


def rows_with_watermarks(first, times, every=5):
    """Rows first, first+1, ... with Watermark(times[k]) after the k-th group of `every`."""
    out = []
    for k, t in enumerate(times):
        out.extend(range(first + k * every, first + (k + 1) * every))
        out.append(Watermark(t))
    return out


@pytest.mark.parametrize("buffers", [1, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_fan_in_forwards_the_minimum_watermark_of_its_inputs(policy, buffers):
    """Watermarks are not aligned but merged: the 2-input operator sends the minimum over
    its inputs' latest watermarks each time it advances, never a time that one input has
    not reached, never one twice; no input is held back for them (every row arrives)."""
    a = rows_with_watermarks(0, [10, 20, 30, 40])
    b = rows_with_watermarks(100, [5, 25, 26, 50])
    with sched(policy, buffer_packets=buffers) as s:
        seen = s.submit(fan_in(a, b)).result(timeout=60)
    wms = [v.t for v in seen if isinstance(v, Watermark)]
    assert wms == sorted(set(wms)) and set(wms) <= {5, 10, 20, 25, 26, 30, 40, 50}, seen
    assert wms[-1] == 50, seen  # once both ended: the largest watermark seen
    assert sorted(v for v in seen if type(v) is int) == list(range(20)) + list(range(100, 120)), seen
    # Never ahead of an input: a row of input X after X's g-th watermark is taken after
    # it and before X's next, so every watermark sent before that row is at most X's
    # g-th time (and none precedes a row before X's first watermark).
    last = None
    for v in seen:
        if isinstance(v, Watermark):
            last = v.t
        elif type(v) is int:
            first, times = (0, [10, 20, 30, 40]) if v < 100 else (100, [5, 25, 26, 50])
            g = (v - first) // 5
            assert (last is None) if g == 0 else (last is None or last <= times[g - 1]), (v, last, seen)


@pytest.mark.parametrize("policy", POLICIES)
def test_an_input_without_watermarks_holds_the_minimum_back_until_it_ends(policy):
    """Input b sends no watermark: none leaves while b is open (its event time is
    unknown); once b ended, a's watermarks leave as they come (the last is a's last)."""
    with sched(policy) as s:
        seen = s.submit(fan_in(rows_with_watermarks(0, [10, 20, 30]), list(range(100, 110)))).result(timeout=60)
    wms = [k for k, v in enumerate(seen) if isinstance(v, Watermark)]
    times = [seen[k].t for k in wms]
    assert times and times == sorted(set(times)) and set(times) <= {10, 20, 30} and times[-1] == 30, seen
    assert max(k for k, v in enumerate(seen) if type(v) is int and v >= 100) < wms[0], seen


@pytest.mark.parametrize("policy", POLICIES)
def test_a_fan_in_that_removes_punctuations_sends_only_rows(policy):
    class TwoInRemoves(TwoIn):
        punct_out = M.REMOVES

    with sched(policy) as s:
        seen = s.submit(fan_in(rows_with_windows(0), rows_with_windows(100), TwoInRemoves)).result(timeout=60)
    assert len(seen) == 40 and all(type(v) is int for v in seen), seen
    assert [v for v in seen if v < 100] == list(range(20)), seen
    assert [v for v in seen if v >= 100] == list(range(100, 120)), seen


class RemovesPunct(AddOne):
    punct_out = M.REMOVES


class GeneratesWindows(StreamOperator):
    """Passes rows and ends a window after every `k` packets (generates punctuations)."""

    punct_out = M.GENERATES

    def __init__(self, k):
        self.k, self.n = k, 0

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)
        self.n += 1
        if self.n % self.k == 0:
            ctx.punctuate(Window(self.n))


@pytest.mark.parametrize("policy", POLICIES)
def test_removes_and_generates(policy):
    plan = Plan("rm")
    plan.add("src", Items, [1, Window(0), 2, Window(1), 3])
    plan.add("rm", RemovesPunct)
    plan.add("gen", GeneratesWindows, 2)
    plan.add("sink", Record)
    plan.chain("src", "rm", "gen", "sink")
    with sched(policy) as s:
        assert s.submit(plan).result(timeout=60) == [2, 3, Window(2), 4]


@pytest.mark.parametrize("policy", POLICIES)
def test_pulses_cross_an_operator_that_drops_every_row(policy):
    plan = Plan("pulse")
    plan.add("src", Items, [1, Pulse(seq=10), 2, 3, Pulse(seq=11), Window(5)])
    plan.add("drop", DropAll)
    plan.add("sink", Record)
    plan.chain("src", "drop", "sink")
    with sched(policy) as s:
        seen = s.submit(plan).result(timeout=60)
    # Pulses are runtime-handled even at an expecting sink (it is not control-aware):
    # they pass through the dropping operator and end at the sink without reaching its code.
    assert seen == [Window(5)]


@pytest.mark.parametrize("policy", POLICIES)
def test_latency_markers_are_measured_at_the_sink(policy, monkeypatch):
    """Markers stamped 3, 8 and 1 ms before a sink whose clock stands still: the
    latencies are exactly those, in ms (mean, p50, p99 by linear interpolation, max)."""
    import bobox_sched.core.request as request

    now = 10**15
    monkeypatch.setattr(request, "_marker_clock", lambda: now)
    plan = Plan("lat")
    plan.add("src", Items, [1, Marker(now - 3_000_000), 2, Marker(now - 8_000_000), 3, Marker(now - 1_000_000)])
    plan.add("a", AddOne)
    plan.add("sink", ObliviousSink)
    plan.chain("src", "a", "sink")
    with sched(policy) as s:
        h = s.submit(plan)
        assert h.result(timeout=60) == 3
    assert h._request.latencies_ns == [3_000_000, 8_000_000, 1_000_000]  # each once, in order
    assert h.stats["latency"] == {"markers": 3, "mean_ms": 4.0, "p50_ms": 3.0, "p99_ms": 7.9, "max_ms": 8.0}


def test_operator_model_safe_defaults_and_declarations():
    class Plain(StreamOperator):
        def on_packet(self, ctx, port, pkt):
            pass

    m = M.model_of(Plain())
    assert m.state == M.UNKNOWN and m.selectivity == M.UNKNOWN and m.forwarding == M.UNKNOWN
    assert m.max_parallelism == 1 and not m.forwards("x")
    assert m.punct_in == {"in": M.OBLIVIOUS} and m.punct_out == {"out": M.PRESERVES}
    assert M.model_of(TwoIn()).punct_out == {"out": M.PRESERVES}  # aligned over its inputs
    with pytest.raises(ValueError, match="an operator with no input cannot preserve punctuations"):
        M.model_of(type("Bad", (Source,), {"punct_out": M.PRESERVES})())
    with pytest.raises(ValueError, match="selectivity_bound"):
        M.model_of(type("Bad2", (Plain,), {"selectivity_bound": "often"})())
    with pytest.raises(ValueError, match="needs a declared state"):
        M.model_of(type("Bad3", (Plain,), {"max_parallelism": 4})())

    class Keyed(StreamOperator):
        state = M.Partitioned("k", "j")
        forwarding = M.FunctionAny("k")

        def on_packet(self, ctx, port, pkt):
            pass

    k = M.model_of(Keyed())
    assert k.key == ("k", "j") and k.forwards("k") and not k.forwards("j")
    legacy = type("Legacy", (Plain,), {"kind": "partitioned", "partition_key": ["g"]})()
    assert M.model_of(legacy).key == ("g",)
    assert M.model_of(type("L2", (Plain,), {"kind": "stateful"})()).state == M.UNKNOWN
    assert Operator.kind is None  # no silent "stateless" default any more


def test_library_operators_declare_their_model():
    from operators import ops
    from operators.expr import Field, Schema, col, lit

    sch = Schema([Field("a", "int", np.dtype(np.int64)), Field("b", "int", np.dtype(np.int64))])
    assert M.model_of(ops.Limit(sch, 5)).state == M.UNKNOWN  # it keeps a counter
    f = M.model_of(ops.Filter(sch, col("a") > lit(1)))
    assert f.state == M.STATELESS and f.selectivity == M.AT_MOST_ONE and f.forwards("b")
    p = M.model_of(ops.Project(sch, [("a", col("a")), ("c", col("a") + col("b"))]))
    assert p.selectivity == M.EXACTLY_ONE and p.forwards("a") and not p.forwards("b") and not p.forwards("c")
    agg = M.model_of(ops.HashAggregate(sch, [("a", col("a"))], [("s", "sum", col("b"))]))
    assert agg.key == ("a",) and agg.punct_out == {"out": M.REMOVES}


@pytest.mark.parametrize("policy", POLICIES)
def test_channel_fed_source_from_another_thread(policy):
    ch = StreamChannel(capacity=4)
    plan = Plan("feed")
    plan.add("src", QueueSource, ch, 4, 3)  # batch 4, a latency marker every 3 packets
    plan.add("a", AddOne)
    plan.add("sink", Record)
    plan.chain("src", "a", "sink")
    n = 200

    def producer():
        for i in range(n):
            ch.put({"x": np.array([i], dtype=np.int64)}, timeout=30)
            if i == 100:
                ch.put(Window("mid"))
        ch.close()

    with sched(policy) as s:
        h = s.submit(plan)
        t = threading.Thread(target=producer)
        t.start()
        seen = h.result(timeout=60)
        t.join()
    rows = [v for v in seen if isinstance(v, int)]
    assert rows == list(range(1, n + 1))
    assert seen.index(Window("mid")) == 101
    assert h.stats["latency"]["markers"] == n // 3


@pytest.mark.parametrize("policy", POLICIES)
def test_unbounded_source_ends_by_cancel_and_its_producer_is_told(policy):
    ch = StreamChannel(capacity=2)
    plan = Plan("forever")
    plan.add("src", QueueSource, ch)
    plan.add("sink", ObliviousSink)
    plan.chain("src", "sink")
    errors = []

    def producer():
        try:
            i = 0
            while True:
                ch.put({"x": np.array([i], dtype=np.int64)})
                i += 1
        except RuntimeError as e:
            errors.append(str(e))

    with sched(policy) as s:
        h = s.submit(plan)
        t = threading.Thread(target=producer)
        t.start()
        while h.stats["tasks"] < 2 and not h.done():
            time.sleep(0.01)
        assert h.cancel()
        with pytest.raises(RequestCancelled):
            h.result(timeout=10)
        t.join(timeout=10)
    assert not t.is_alive() and errors and "ended" in errors[0]


class Keep(StreamOperator):
    """A sink that keeps a pooled copy of every packet (operator state)."""

    outputs = ()

    def __init__(self):
        self.kept = []

    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.int64}, pkt.nrows)
        out["x"][:] = pkt["x"]
        self.kept.append(out)


@pytest.mark.parametrize("policy", POLICIES)
def test_cancelled_channel_request_releases_its_operators_while_the_channel_lives(policy):
    """The channel (held by its producer, and by the plan) referred to the source
    operator, and through its edges to every operator downstream: a cancelled request's
    operator state stayed alive as long as the channel did. It must be released at the
    end like any request's, and the channel still tells put() that its reader ended."""
    import gc

    ch = StreamChannel(capacity=None)
    plan = Plan("kept")
    plan.add("src", QueueSource, ch)
    plan.add("keep", Keep)
    plan.chain("src", "keep")
    with sched(policy) as s:
        h = s.submit(plan)
        for i in range(5):
            ch.put({"x": np.arange(1000, dtype=np.int64) + i})
        deadline = time.monotonic() + 60
        while h._request.bytes.packets < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert h._request.bytes.packets == 5
        assert h.cancel()
        account = h._request.bytes
        deadline = time.monotonic() + 60
        while account.held and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
        assert account.held == 0, "the cancelled request's operators are still alive"
        with pytest.raises(RuntimeError, match="ended"):
            ch.put({"x": np.arange(3)})


@pytest.mark.parametrize("policy", POLICIES)
def test_rate_paced_generator_holds_no_worker(policy):
    """A paced source waits on the timer thread: with ONE worker, a CPU request submitted
    meanwhile runs to completion while the paced one is still waiting."""

    def make(ctx, i):
        if i >= 5:
            return None
        return Packet({"x": np.full(10, i, dtype=np.int64)})

    slow = Plan("paced")
    slow.add("src", GeneratorSource, make, 20.0)  # 20 rows/s: 10-row packets every 0.5 s
    slow.add("sink", ObliviousSink)
    slow.chain("src", "sink")
    quick = Plan("quick")
    quick.add("src", Items, list(range(50)))
    quick.add("sink", ObliviousSink)
    quick.chain("src", "sink")
    with sched(policy, threads_per_node=1) as s:
        hs = s.submit(slow)
        hq = s.submit(quick)
        assert hq.result(timeout=30) == 50
        assert not hs.done()  # still pacing: the worker was free for the quick request
        assert hs.result(timeout=30) == 50
        assert s.timers.fired >= 4


def test_channel_refuses_bad_items_and_second_consumer():
    ch = StreamChannel()
    with pytest.raises(TypeError):
        ch.put(42)
    with pytest.raises(ValueError):
        StreamChannel(capacity=0)
    plan = Plan("two")
    plan.add("src", QueueSource, ch)
    plan.add("sink", ObliviousSink)
    plan.chain("src", "sink")
    with sched("bobox") as s:
        h1 = s.submit(plan)
        ch.put({"x": np.arange(3)})
        while h1.stats["tasks"] < 2 and not h1.done():
            time.sleep(0.01)
        h2 = s.submit(plan)  # the same channel: its source fails the second request
        with pytest.raises(RuntimeError, match="already feeds"):
            h2.result(timeout=10)
        ch.close()
        assert h1.result(timeout=10) == 3


class NodeOf(StreamOperator):
    """Records, on every run, the node the runtime says it runs on and the CPUs the
    kernel lets its thread run on (the thread's affinity mask)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE

    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    def on_packet(self, ctx, port, pkt):
        self.log.append((self.tag, ctx.node, frozenset(os.sched_getaffinity(0))))
        ctx.send("out", pkt)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a thread affinity mask of 2 CPUs or more to split into two nodes")
def test_placed_operators_run_on_their_node():
    """Two virtual nodes made of this machine's CPUs (one real NUMA node here: the
    NUMA-VM tier checks real nodes), workers pinned: a placed operator runs only on
    workers of its node, and the kernel's affinity mask of the thread running it is
    exactly that node's CPUs, so the placement holds where threads really run."""
    import topology
    from topology.virtual import virtual_topology

    topo = virtual_topology(topology.probe(), 2)
    nodes = topo.cpu_nodes
    ids = [n.os_index for n in nodes]
    assert set(nodes[0].cpus).isdisjoint(nodes[1].cpus)
    log = []
    plan = Plan("placed")
    plan.add("src", Items, list(range(60)))
    plan.add("a", NodeOf, log, "a")
    plan.add("b", NodeOf, log, "b")
    plan.add("sink", ObliviousSink)
    plan.chain("src", "a", "b", "sink")
    plan.place("a", 0)
    plan.place("b", 3)  # slots wrap around the node count: 3 % 2 = node 1
    with pytest.raises(ValueError):
        plan.place("a", -1)
    with Scheduler(topology=topo, threads_per_node=1, pin=True, buffer_packets=1) as s:
        hs = [s.submit(plan) for _ in range(3)]
        assert [h.result(timeout=60) for h in hs] == [60] * 3
        masks = {w.node_id: w.pinned_mask for w in s.workers}
    assert masks == {ids[0]: set(nodes[0].cpus), ids[1]: set(nodes[1].cpus)}  # each worker pinned
    for tag, node in (("a", nodes[0]), ("b", nodes[1])):
        runs = [(n, cpus) for t, n, cpus in log if t == tag]
        assert len(runs) == 3 * 60 and set(runs) == {(node.os_index, frozenset(node.cpus))}, (tag, set(runs))
    bad = Plan("bad")
    bad.add("src", Items, [1])
    bad.add("sink", ObliviousSink)
    bad.chain("src", "sink")
    bad.place("nope", 0)
    with pytest.raises(ValueError, match="names no operator"):
        bad.validate()
