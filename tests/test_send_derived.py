"""``ctx.send_derived`` and ``operators.stream.send_derived``: what an operator sends with
its parent rows reaches the sink under every policy (a policy's context that collects
what an operator sends -- the ordered policy's units -- must see it), and both take
their arguments in the same order: the output packet, then the packet it came from,
then the parent rows."""

from __future__ import annotations

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Sink, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M

POLICIES = ["bobox", "simple", "ordered", "streams"]
N = 1000


class Numbers(Source):
    """0..n-1 in packets of 100 rows."""

    state = M.STATELESS

    def __init__(self, n):
        self.n, self.i = n, 0

    def next_packet(self, ctx):
        if self.i >= self.n:
            return None
        k = min(100, self.n - self.i)
        p = Packet({"x": np.arange(self.i, self.i + k, dtype=np.int64)})
        self.i += k
        return p


class Evens(StreamOperator):
    """The even rows, sent with ``ctx.send_derived`` (a selection vector)."""

    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    seq_aware = True

    def on_packet(self, ctx, port, pkt):
        idx = np.flatnonzero(pkt["x"] % 2 == 0)
        ctx.send_derived("out", Packet({"x": pkt["x"][idx]}), pkt, idx)


def evens_plan() -> Plan:
    plan = Plan("evens")
    plan.add("numbers", Numbers, N)
    plan.add("evens", Evens)
    plan.add("sink", Sink)
    plan.chain("numbers", "evens", "sink")
    return plan


@pytest.mark.parametrize("policy", POLICIES)
def test_send_derived_rows_reach_the_sink_under_every_policy(policy):
    with Scheduler(policy=policy, threads_per_node=2, pin=False) as s:
        out = s.submit(evens_plan()).result(timeout=120)
    got = np.concatenate([p["x"] for p in out]) if out else np.zeros(0, np.int64)
    np.testing.assert_array_equal(got, np.arange(0, N, 2))


# -- one argument order: the output packet, then the packet it came from --------------------


class RecordingCtx:
    """What operators.stream.send_derived needs of a context: new_packet and send."""

    def __init__(self):
        self.sent = []

    def new_packet(self, schema, n):
        return Packet({nm: np.empty(n, dt) for nm, dt in zip(schema.names, schema.dtypes)}, n)

    def send(self, port, pkt):
        self.sent.append((port, pkt))
        return True


def _input_and_output():
    parent = Packet({"x": np.arange(5, dtype=np.int64), "__seq": np.arange(5, dtype=np.int64) * 10})
    idx = np.array([1, 3], np.int64)
    return parent, Packet({"x": parent["x"][idx] * 100}), idx


def test_stream_send_derived_takes_the_output_packet_first():
    from operators.stream import send_derived

    parent, out, idx = _input_and_output()
    ctx = RecordingCtx()
    assert send_derived(ctx, "out", out, parent, idx)  # ctx.send_derived's order
    ((port, sent),) = ctx.sent
    assert port == "out" and sent is out
    np.testing.assert_array_equal(sent["x"], [100, 300])
    np.testing.assert_array_equal(sent["__seq"], [10, 30])  # the hidden column, gathered by parents


def test_stream_send_derived_refuses_swapped_packets():
    from operators.stream import send_derived

    parent, out, idx = _input_and_output()
    del parent.columns["__seq"]  # outside a region: nothing else would show the swap
    ctx = RecordingCtx()
    with pytest.raises(ValueError, match=r"out has 5 rows but 2 parent rows are given; the output packet comes first"):
        send_derived(ctx, "out", parent, out, idx)
    with pytest.raises(ValueError, match=r"out has 5 rows but parent 2 \(a 1:1 output without parents\)"):
        send_derived(ctx, "out", parent, out)
    with pytest.raises(TypeError, match="parent must be a Packet, got ndarray"):
        send_derived(ctx, "out", out, idx)  # the input packet left out
    assert ctx.sent == []


class SwappedEvens(Evens):
    """Evens with ctx.send_derived's two packets swapped."""

    def on_packet(self, ctx, port, pkt):
        idx = np.flatnonzero(pkt["x"] % 2 == 0)
        ctx.send_derived("out", pkt, Packet({"x": pkt["x"][idx]}), idx)


@pytest.mark.parametrize("policy", POLICIES)
def test_ctx_send_derived_with_swapped_packets_fails_outside_a_region(policy):
    plan = Plan("swapped")
    plan.add("numbers", Numbers, N)
    plan.add("evens", SwappedEvens)
    plan.add("sink", Sink)
    plan.chain("numbers", "evens", "sink")
    with Scheduler(policy=policy, threads_per_node=2, pin=False) as s:
        h = s.submit(plan)
        with pytest.raises(ValueError, match=r"50 parent indices for a packet of 100 rows .*output packet comes first"):
            h.result(timeout=120)
