"""``ctx.send_derived`` and ``operators.stream.send_derived``: what an operator sends with
its parent rows reaches the sink under every policy (a policy's context that collects
what an operator sends -- the ordered policy's units -- must see it), and both take
their arguments in the same order: the output packet, then the packet it came from,
then the parent rows."""

from __future__ import annotations

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Sink, Source, StreamOperator
from bobox_sched.packet import Packet
from bobox_sched.stream import model as M

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
