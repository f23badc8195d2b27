"""The API as the README documents it, the same under every policy: ``ctx.port`` names
the input port (or is None), the error types the README names import from where it
names them."""

from __future__ import annotations

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Source, StreamOperator
from bobox_sched.packet import Packet
from bobox_sched.stream import model as M

POLICIES = ["bobox", "simple", "ordered", "streams"]


def sched(policy, **kw):
    kw.setdefault("threads_per_node", 2)
    kw.setdefault("pin", False)
    return Scheduler(policy=policy, **kw)


# -- ctx.port ------------------------------------------------------------------------------


class Rows(Source):
    """`n` one-row packets; records what ``ctx.port`` said on each run."""

    state = M.STATELESS

    def __init__(self, n, seen):
        self.n, self.i, self.seen = n, 0, seen

    def next_packet(self, ctx):
        self.seen.append(("source", ctx.port))
        if self.i >= self.n:
            return None
        self.i += 1
        return Packet({"x": np.array([self.i], np.int64)})


class Ports(StreamOperator):
    """A sink on `inputs`: the result is every (on_packet's port, ctx.port) pair."""

    outputs = ()

    def __init__(self, inputs=("in",)):
        self.inputs = tuple(inputs)
        self.pairs = []

    def on_packet(self, ctx, port, pkt):
        self.pairs.append((port, ctx.port))

    def on_end(self, ctx):
        ctx.set_result(self.pairs)


def _expected(policy, port):
    # streams runs an operator for one input's tuple and names that input; the other
    # policies run it for all its inputs at once: no port is being executed
    return port if policy == "streams" else None


@pytest.mark.parametrize("policy", POLICIES)
def test_ctx_port_names_the_executed_input_or_is_none(policy):
    seen = []
    plan = Plan("port")
    plan.add("src", Rows, 20, seen)
    plan.add("sink", Ports)
    plan.chain("src", "sink")
    with sched(policy) as s:
        pairs = s.submit(plan).result(timeout=120)
    assert len(pairs) == 20
    assert set(pairs) == {("in", _expected(policy, "in"))}
    assert set(seen) == {("source", None)}  # a source runs without a tuple


@pytest.mark.parametrize("policy", ["bobox", "simple", "streams"])  # ordered runs chains only
def test_ctx_port_names_each_of_several_inputs(policy):
    plan = Plan("ports")
    plan.add("a", Rows, 10, [])
    plan.add("b", Rows, 10, [])
    plan.add("sink", Ports, ("left", "right"))
    plan.connect("a", "sink.left")
    plan.connect("b", "sink.right")
    with sched(policy) as s:
        pairs = s.submit(plan).result(timeout=120)
    assert sorted(p for p, _ in pairs) == ["left"] * 10 + ["right"] * 10
    assert all(cp == _expected(policy, p) for p, cp in pairs), set(pairs)
