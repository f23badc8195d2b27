"""A packet's bucket slices in one call (issue 33, seed 000): ``on_slices``, the slice
groups of the ordered stage, ``HybridQueue.consume_batched`` under every preemption
point, and the table directory the TPCx-BB kernels find their bucket tables through."""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import pytest
from test_task_races import every_point, preempt_at

from bobox_sched import Plan, Scheduler
from bobox_sched.policies.ordered.hybrid import HybridQueue
from operators.stream.ordered_micro import DigestSink, Replay
from operators.stream.ordered_queries import ItemCounts
from operators.stream.ordered_table import Directory, Table, table_at

NO_COST = {"first": 0.0, "partitioned": 0.0, "other": 0.0}


# -- the TPCx-BB kernel over many slices against an independent oracle ---------------------

class CountingItemCounts(ItemCounts):
    """ItemCounts that counts its kernel calls and the spans they took."""

    calls = []

    def on_slices(self, ctx, rows, spans, states, emit):
        CountingItemCounts.calls.append(len(spans))
        super().on_slices(ctx, rows, spans, states, emit)


def _running_counts(items: np.ndarray) -> np.ndarray:
    """Row i's count: how often its item came up to and including row i (numpy only)."""
    order = np.argsort(items, kind="stable")
    s = items[order]
    first = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    run = np.arange(len(s)) - np.repeat(first, np.diff(np.r_[first, len(s)]))
    out = np.empty(len(items), np.int64)
    out[order] = run + 1
    return out


def _digest(cols: dict) -> dict:
    d = hashlib.sha256()
    for name in sorted(cols):
        d.update(name.encode())
        d.update(hashlib.sha256(np.ascontiguousarray(cols[name]).view(np.uint8)).digest())
    return {"rows": len(next(iter(cols.values()))), "digest": d.hexdigest()}


class PacketOrderCounts(CountingItemCounts):
    row_order = "packet"


def _counts_plan(items, rows_per_packet, partitions, op=CountingItemCounts, marker_every=0):
    plan = Plan("counts")
    plan.add("source", Replay, {"item": items}, rows_per_packet, marker_every)
    plan.add("counts", op, cost_us=0.0, partitions=partitions)
    plan.add("egress", DigestSink)
    plan.chain("source", "counts", "egress")
    return plan


@pytest.mark.parametrize("policy,workers,scheme", [("simple", 1, None), ("ordered", 2, "hybrid"),
                                                   ("ordered", 2, "partitioned"), ("ordered", 3, "shared")])
def test_kernel_over_many_slices_gives_the_running_counts(policy, workers, scheme):
    """Every bucket's table found through the directory, growing as keys come: the
    egress is the numpy oracle's, whatever the scheme cuts the calls into."""
    rng = np.random.default_rng(5)
    items = (rng.zipf(1.3, 30_000) % 5000).astype(np.int64)
    want = _digest({"item": items, "count": _running_counts(items)})
    opts = {"scheme": scheme} if scheme else {}
    CountingItemCounts.calls = []
    with Scheduler(policy=policy, threads_per_node=workers, pin=False, **opts) as s:
        got = s.submit(_counts_plan(items, 1000, 100)).result(300)
    assert got == want
    assert sum(CountingItemCounts.calls) >= 30 * 90  # ~100 non-empty buckets per packet


@pytest.mark.parametrize("opts", [{"scheme": "hybrid", "window_full": "spin"},
                                  {"scheme": "hybrid", "capacity": 1, "worklist": 1},
                                  {"scheme": "hybrid", "heuristic": "qst"}])
def test_packet_row_order_and_the_window_modes_give_the_sequential_egress(opts):
    """``row_order="packet"`` (a packet's rows in bucket order, from span keys), a
    spinning full window (no batches there), one credit, and latency markers (control
    units between packets): all give the one-thread run's egress."""
    rng = np.random.default_rng(9)
    items = (rng.zipf(1.2, 20_000) % 3000).astype(np.int64)
    with Scheduler(policy="simple", threads_per_node=1, pin=False) as s:
        want = s.submit(_counts_plan(items, 700, 100, PacketOrderCounts, 3)).result(300)
    assert want != _digest({"item": items, "count": _running_counts(items)})  # packet order is not row order
    with Scheduler(policy="ordered", threads_per_node=2, pin=False, **opts) as s:
        got = s.submit(_counts_plan(items, 700, 100, PacketOrderCounts, 3)).result(300)
    assert got == want


def test_one_kernel_call_per_packet_on_one_thread():
    """Under one-thread policies a packet's slices are one call (not one per bucket)."""
    items = np.arange(20_000, dtype=np.int64) % 997
    CountingItemCounts.calls = []
    with Scheduler(policy="simple", threads_per_node=1, pin=False) as s:
        s.submit(_counts_plan(items, 2000, 100)).result(300)
    assert CountingItemCounts.calls == [100] * 10


def test_hybrid_batches_hold_many_slices():
    """Under HYBRID-QUEUE a worker runs the slices it holds of a packet in calls of up to
    ``BATCH_SLICES`` (not one call per slice)."""
    from bobox_sched.policies.ordered.stage import BATCH_SLICES

    items = np.arange(20_000, dtype=np.int64) % 997
    CountingItemCounts.calls = []
    # a long time slice: the allotment's quota (time_slice / measured unit cost) never
    # cuts a batch short, even when a kernel's first call compiles or loads
    with Scheduler(policy="ordered", threads_per_node=1, pin=False, scheme="hybrid", time_slice=10.0) as s:
        s.submit(_counts_plan(items, 2000, 100)).result(300)
    assert sum(CountingItemCounts.calls) == 1000
    assert max(CountingItemCounts.calls) == BATCH_SLICES
    # A quota or the credits may cut a batch short: on average still >= 8 slices a call.
    assert len(CountingItemCounts.calls) * 8 <= 1000, CountingItemCounts.calls


# -- consume_batched under every preemption point -----------------------------------------

# (bucket, unit, last slice of its packet): three packets over buckets 0..2
UNITS = [(0, "p0b0", False), (1, "p0b1", False), (2, "p0b2", True),
         (0, "p1b0", False), (2, "p1b2", True),
         (1, "p2b1", False), (2, "p2b2", True)]


def _queue(units):
    q = HybridQueue(3)
    for b, u, last in units:
        q.add(b, u, last)
    return q


@pytest.mark.parametrize("quota,batch_max", [(1, 8), (2, 8), (10, 8), (10, 2)])
def test_consume_batched_two_consumers_every_preemption_point(quota, batch_max):
    """Every unit runs once, a bucket's units in arrival order and never two of one
    bucket in one batch or at once (H1, H2), whatever bytecode the other worker's
    consume comes in at; counts end at 0."""

    def case(n):
        q = _queue(UNITS)
        ran, bad = [], []

        def run_batch(batch):
            bs = [b for b, _ in batch]
            if len(set(bs)) != len(bs) or len(bs) > batch_max:
                bad.append(list(batch))
            ran.extend(batch)

        def consume():
            q.consume_batched(lambda: True, lambda: None, None, run_batch, quota, batch_max=batch_max)

        def other():
            if any(c._lock.locked() for c in q.count):
                return False  # inside a count's two-bytecode lock: it would wait
            consume()

        fired = preempt_at(n, consume, other)
        while q.has_work():
            consume()
        assert not bad, bad
        assert sorted(u for _, u in ran) == sorted(u for _, u, _ in UNITS)
        for b in range(3):
            assert [u for bb, u in ran if bb == b] == [u for bb, u, _ in UNITS if bb == b]
        assert all(c.value == 0 for c in q.count) and not q.master and not any(q.parts)
        return fired

    assert every_point(case) > 10


def test_consume_batched_with_credits_control_units_and_a_sort_key():
    """Credits stop a batch (and come back when a pop finds nothing), a control unit
    first runs the batch that holds buckets, and delegated units come back sorted by the
    caller's key, whatever the other worker's timing."""
    units = [(0, (1, "g1", 0), False), (1, (1, "g1", 1), True), (1, (2, "g2", 0), False),
             (0, (2, "g2", 1), True), (0, (3, "g3", 0), True)]

    def case(n):
        q = HybridQueue(2)
        for b, u, last in units[:3]:
            q.add(b, u, last)
        q.add_control((9, "ctl", 0))
        for b, u, last in units[3:]:
            q.add(b, u, last)
        credits = [3]
        events = []

        def take():
            if credits[0] == 0:
                return False
            credits[0] -= 1
            return True

        def give():
            credits[0] += 1

        def run(u, b):
            events.append(("control", u))
            credits[0] += 1  # the stage gives a control unit's credit back too (at advance)

        def run_batch(batch):
            keys = [u[0] * 10 + u[2] for _, u in batch]
            assert keys == sorted(keys), batch  # the sort key's order (first batches: master order)
            events.append(("batch", [u for _, u in batch]))
            credits[0] += len(batch)  # the stage gives a credit back per unit it ran

        def consume():
            q.consume_batched(take, give, run, run_batch, 10, order=lambda e: (e[1][0], e[1][2]))

        def other():
            if any(c._lock.locked() for c in q.count):
                return False
            consume()

        fired = preempt_at(n, consume, other)
        while q.has_work():
            consume()
        ran = [u for kind, x in events if kind == "batch" for u in x]
        assert sorted(ran) == sorted(u for _, u, _ in units)
        for b in (0, 1):
            assert [u for u in ran if u in [v for bb, v, _ in units if bb == b]] == \
                [v for bb, v, _ in units if bb == b]
        assert ("control", (9, "ctl", 0)) in events
        assert credits[0] == 3 and all(c.value == 0 for c in q.count)
        return fired

    assert every_point(case) > 10


def test_consume_batched_runs_a_packet_in_one_batch_and_stops_at_its_last_slice():
    q = _queue(UNITS)
    batches = []
    q.consume_batched(lambda: True, lambda: None, None, lambda b: batches.append([u for _, u in b]), 100)
    assert batches == [["p0b0", "p0b1", "p0b2"], ["p1b0", "p1b2"], ["p2b1", "p2b2"]]


def test_consume_batched_runs_its_batch_before_a_control_unit():
    """A control unit's entry ends the batch: the held slices run first (they hold
    buckets), then the control unit; a batch also ends at batch_max."""
    q = HybridQueue(5)
    for b in range(3):
        q.add(b, f"s{b}")
    q.add_control("ctl")
    for b in range(5):
        q.add(b, f"t{b}", b == 4)
    events = []
    q.consume_batched(lambda: True, lambda: None, lambda u, b: events.append(u),
                      lambda batch: events.append([u for _, u in batch]), 100, batch_max=4)
    assert events == [["s0", "s1", "s2"], "ctl", ["t0", "t1", "t2", "t3"], ["t4"]]


# -- the table directory ------------------------------------------------------------------

def test_directory_follows_a_table_that_grows():
    """A bound table's rebuild (reserve) rewrites its row: a kernel reading through the
    directory sees the grown table and its keys."""
    from numba import njit

    @njit
    def keys_of(d, b):
        keys, ivals, fvals, meta = table_at(d, b)
        return keys.shape[0], meta[1], ivals.shape[1]

    d = Directory(4)
    t = Table(iwidth=3)
    d.bind(2, t)
    assert keys_of(d.rows, 2) == (64, 0, 3)
    t.keys[5] = 77
    t.meta[:] = 1
    t.reserve(100)
    assert t.keys.shape[0] > 64
    cap, live, width = keys_of(d.rows, 2)
    assert (cap, live, width) == (t.keys.shape[0], 1, 3)
    assert d.rows[2, 0] == t.keys.ctypes.data


def test_copied_table_comes_back_unbound():
    d = Directory(2)
    t = Table()
    d.bind(1, t)
    for c in (t.copy(), copy.deepcopy(t)):
        assert c.bound is None and c.keys.ctypes.data != t.keys.ctypes.data


def test_emit_checks_its_parent_indices():
    """A parent outside the slice (or a float one) is an error, never another slice's row."""
    from bobox_sched.core.packet import Packet
    from bobox_sched.policies.ordered.partitioned import SliceGroup, SpanCollector, _OneSpan

    rows = Packet({"k": np.arange(6, dtype=np.int64)})
    spans = np.array([[0, 0, 2], [1, 2, 6]], np.int64)
    g = SliceGroup(rows, np.arange(6, dtype=np.int64), spans)
    one = _OneSpan(SpanCollector(g, spans, True, [], []), 2, 4)
    out = Packet({"k": np.zeros(2, np.int64)})
    with pytest.raises(IndexError, match=r"in 0\.\.3"):
        one(out, np.array([0, 4]))
    with pytest.raises(IndexError, match=r"in 0\.\.3"):
        one(out, np.array([-1, 0]))
    with pytest.raises(TypeError, match="integer row indices"):
        one(out, np.array([0.0, 1.0]))
    with pytest.raises(IndexError, match=r"in 0\.\.5"):
        SpanCollector(g, spans, True, [], [])(out, np.array([0, 6]))
    keys = []
    one = _OneSpan(SpanCollector(g, spans, False, [], keys), 2, 4)
    one(out, np.array([3, 0]))
    assert keys[0].tolist() == [1, 1]  # both rows of span 1 (packet order: by span)
