"""The heuristics of Prasaad et al. section 6 on hand-computed snapshots (spec 000 T7),
the policy's decision on fake stages (quota, CT window reset, QST thresholds, ingress
first), and the policy's options and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Sink, Source, StreamOperator
from bobox_sched.core.errors import BoboxError
from bobox_sched.policies.ordered.heuristics import (
    OpView,
    choose,
    choose_ct,
    choose_et,
    choose_lp,
    choose_qst,
    ct_value,
    et_priority,
    qst_thresholds,
)

US = 1e-6


def v(pos, **kw):
    kw.setdefault("I", 10.0)
    kw.setdefault("c", 1 * US)
    kw.setdefault("w", 0)
    kw.setdefault("M", 4)
    kw.setdefault("cs", 1.0)
    return OpView(pos=pos, **kw)


# -- ET (Eq 2) ------------------------------------------------------------------------------

def test_et_priority_is_zero_at_max_parallelism():
    a = v(1, I=100, c=1 * US, w=1, M=1)  # w = M: priority 0
    b = v(2, I=10, c=1 * US, w=0, M=4)  # 10 * 1e-6 / 1 = 1e-5
    assert et_priority(a) == 0.0 and et_priority(b) == pytest.approx(1e-5)
    assert choose_et([a, b]) is b


def test_et_hand_computed_and_tie_goes_downstream():
    a = v(1, I=1000, c=2 * US, w=1)  # 1000 * 2e-6 / 2 = 1.0e-3
    b = v(2, I=300, c=5 * US, w=0)  # 300 * 5e-6 / 1 = 1.5e-3
    c = v(3, I=600, c=5 * US, w=1)  # 600 * 5e-6 / 2 = 1.5e-3: ties with b
    assert choose_et([a, b]) is b
    assert choose_et([a, b, c]) is c  # tie: the later operator (closer to the egress)


# -- CT (Eq 3) ------------------------------------------------------------------------------

def test_ct_with_selectivities_0_1_and_50():
    # o1 filters (s = 0.1), o2 flat-maps (s = 50); cs literal: 0.1, 5, 5
    s = 0.002
    o1 = v(1, c=1 * US, cs=0.1, Tw=0.010, w=1)  # (0.010 + 0.002) / (1e-6 * 0.1) = 120000
    o2 = v(2, c=2 * US, cs=5.0, Tw=0.020, w=0)  # 0.020 / (2e-6 * 5) = 2000
    o3 = v(3, c=0.5 * US, cs=5.0, Tw=0.004, w=2)  # (0.004 + 0.004) / (0.5e-6 * 5) = 3200
    assert ct_value(o1, s) == pytest.approx(120000)
    assert ct_value(o2, s) == pytest.approx(2000)
    assert ct_value(o3, s) == pytest.approx(3200)
    assert choose_ct([o1, o2, o3], s) is o2  # the bottleneck


def test_ct_after_a_window_reset_ties_go_upstream():
    s = 0.002
    views = [v(k, c=(k + 1) * US, cs=1.0, Tw=0.0, w=0) for k in (1, 2, 3)]
    assert all(ct_value(x, s) == 0 for x in views)
    assert choose_ct(views, s) is views[0]


# -- QST (Eq 1) and LP ------------------------------------------------------------------------

def test_qst_thresholds_and_choice():
    T = qst_thresholds([0.1, 5.0, 5.0], 1010.0)
    assert T == pytest.approx([10.0, 500.0, 500.0])
    o1 = v(1, out_rows=20, T=T[0])  # its output (o2's worklist) is over 10: throttled
    o2 = v(2, out_rows=100, T=T[1])  # under 500: open
    o3 = v(3, T=float("inf"))  # its output is the egress
    assert choose_qst([o1, o2, o3]) is o2  # the earliest open one
    o2.out_rows = 600
    assert choose_qst([o1, o2]) is o2  # all throttled: the latest candidate (fallback)


def test_lp_picks_the_latest_and_older_requests_first():
    a, b = v(1), v(3, age=1)
    c = v(3, age=0)
    assert choose_lp([a, b]) is b
    assert choose_lp([a, b, c]) is c


def test_numa_tiebreak_prefers_the_local_operator_only_on_ties():
    far = v(2, local=False)
    near = v(1, local=True)
    assert choose_lp([far, near], numa=True) is far  # not a tie: position decides
    x = v(2, local=False, age=0)
    y = v(2, local=True, age=1)
    assert choose_lp([x, y], numa=False) is x
    assert choose_lp([x, y], numa=True) is y
    s = 0.002
    p, q = v(1, local=False), v(2, local=True)  # CT: both 0 -> tie
    assert choose_ct([p, q], s, numa=False) is p and choose_ct([p, q], s, numa=True) is q


def test_choose_rejects_unknown_heuristic_and_empty():
    assert choose("ct", [], 0.001) is None
    with pytest.raises(ValueError, match="heuristic must be one of"):
        choose("fifo", [v(1)], 0.001)


# -- the policy's decision on fake stages -----------------------------------------------------

class FakeStage:
    def __init__(self, pos, size=0, c=None, sel=None, rpu=None, w=0, M=4, tw=0.0, kind="stateless", ok=True):
        self.pos, self._size, self.c, self.sel, self.rpu = pos, size, c, sel, rpu
        self.w, self.M, self.tw, self.kind, self.ok = w, M, tw, kind, ok
        self.down = None
        self.units = 0
        self.busy_ns = 0
        self.name = f"o{pos}"

    def schedulable(self):
        return self.ok and self.w < self.M and self._size > 0

    def size(self):
        return self._size

    def head_node(self):
        return None


class FakeChain:
    def __init__(self, stages):
        self.stages = stages
        for a, b in zip(stages, stages[1:]):
            a.down = b


@pytest.fixture
def policy():
    with Scheduler(policy="ordered", threads_per_node=1, pin=False, time_slice=0.002, heuristic="ct") as s:
        pol = s.policy
        w = s.workers[0]
        yield pol, w
        with pol._lock:
            pol.chains = []


def _chain(*ops):
    return FakeChain([FakeStage(0, kind="source", ok=False)] + list(ops))


def test_decide_ct_quota_and_window_reset(policy):
    pol, w = policy
    o1 = FakeStage(1, size=5, c=1 * US, sel=0.1, rpu=100, tw=0.010, w=1)
    o2 = FakeStage(2, size=5, c=2 * US, sel=50, rpu=10, tw=0.020)
    o3 = FakeStage(3, size=5, c=0.5 * US, sel=1.0, rpu=500, tw=0.004, w=2)
    with pol._lock:
        pol.chains = [_chain(o1, o2, o3)]
        import time

        pol._win_start = time.perf_counter()
        st, quota = pol.decide(w)
    assert st is o2
    assert quota == int(0.002 / (2 * US * 10))  # time_slice / (c_i x rows per unit) = 100 units
    with pol._lock:  # the window ends: T^w = 0 for all; then n_i = w_i s / (c cs)
        pol._win_start -= 10
        st, _ = pol.decide(w)
        assert o1.tw == o2.tw == o3.tw == 0.0
    # o1: 1 * 0.002 / (1e-6 * 0.1) = 20000; o2: 0; o3: 2 * 0.002 / (0.5e-6 * 5) = 1600
    assert st is o2


def test_decide_ct_cumulative_literal_or_inputs(policy):
    """cs_i = prod_{k<=i} s_k (Eq 3 as written, the default) or prod_{k<i} s_k
    (``ct_cumulative="inputs"``): selectivities 0.1, 50, 1 give cs 0.1, 5, 5 or 1, 0.1, 5.
    With one worker on each and c = 1 us, n_i = 0.002 / (1e-6 cs_i): literal 20000, 400,
    400 (a tie: the earlier, o2); inputs 2000, 20000, 400 (o3)."""
    import time

    pol, w = policy
    picks = {}
    for mode in ("literal", "inputs"):
        ops = [FakeStage(i, size=5, c=1 * US, sel=sel, w=1) for i, sel in ((1, 0.1), (2, 50.0), (3, 1.0))]
        with pol._lock:
            pol.opts["ct_cumulative"] = mode
            pol.chains = [_chain(*ops)]
            pol._win_start = time.perf_counter()
            st, _ = pol.decide(w)
        picks[mode] = st.pos
    assert picks == {"literal": 2, "inputs": 3}


def test_decide_quota_is_at_least_one_and_skips_full_operators(policy):
    pol, w = policy
    o1 = FakeStage(1, size=3, c=5000 * US, rpu=100, w=0, M=1)  # one unit costs 0.5 s >> slice
    o2 = FakeStage(2, size=3, c=1 * US, w=2, M=2)  # w = M: not schedulable
    with pol._lock:
        pol.chains = [_chain(o1, o2)]
        st, quota = pol.decide(w)
    assert st is o1 and quota == 1


def test_decide_ingress_first_then_heuristic(policy):
    pol, w = policy
    ch = _chain(FakeStage(1, size=3, c=1 * US))
    ch.stages[0].ok = True
    ch.stages[0]._size = 1
    ch.stages[0].M = 1
    with pol._lock:
        pol.chains = [ch]
        st, _ = pol.decide(w)
    assert st is ch.stages[0]


def test_decide_qst_uses_thresholds(policy):
    pol, w = policy
    pol.heuristic = "qst"
    pol.qst_capacity = 1010.0
    o1 = FakeStage(1, size=1, c=1 * US, sel=0.1, rpu=1)
    o2 = FakeStage(2, size=20, c=1 * US, sel=50, rpu=1)  # o1's output queue: 20 rows > T_1 = 10
    o3 = FakeStage(3, size=100, c=1 * US, sel=1, rpu=1)  # o2's output: 100 < T_2 = 500
    sink = FakeStage(4, size=0, c=1 * US, sel=1, rpu=1)
    with pol._lock:
        # cs = 0.1, 5, 5, 5 -> sum 15.1: T = 6.7, 334.4, 334.4 (o3's output is the egress sink's)
        pol.chains = [_chain(o1, o2, o3, sink)]
        st, _ = pol.decide(w)
    assert st is o2


# -- options and refusals --------------------------------------------------------------------------

class One(Source):
    def next_packet(self, ctx):
        return None


class Pass(StreamOperator):
    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


def test_bad_options_are_one_line_errors():
    with pytest.raises(BoboxError, match="heuristic must be one of"):
        Scheduler(policy="ordered", heuristic="fifo", pin=False)
    with pytest.raises(BoboxError, match="has no option 'heuristc'"):
        Scheduler(policy="ordered", heuristc="ct", pin=False)
    with pytest.raises(BoboxError, match="policy 'bobox' has no option 'heuristic'"):
        Scheduler(policy="bobox", heuristic="ct", pin=False)
    with pytest.raises(BoboxError, match="capacity must be a positive integer"):
        Scheduler(policy="ordered", capacity=0, pin=False)


def test_non_chains_are_refused_at_submit():
    from bobox_sched.core.operator import Operator

    class Two(Operator):
        inputs = ("a", "b")
        outputs = ()

        def process(self, ctx):
            pass

    plan = Plan("join")
    plan.add("s1", One)
    plan.add("s2", One)
    plan.add("j", Two)
    plan.connect("s1", "j.a")
    plan.connect("s2", "j.b")
    with Scheduler(policy="ordered", threads_per_node=1, pin=False) as s:
        with pytest.raises(ValueError, match="linear chains only"):
            s.submit(plan)
        assert s.stats()["requests_active"] == 0


def test_partitioned_state_needs_a_partitioned_operator():
    from bobox_sched.control import model as M

    class Keyed(StreamOperator):
        state = M.Partitioned("k")
        max_parallelism = 4

        def on_packet(self, ctx, port, pkt):
            ctx.send("out", pkt)

    plan = Plan("bad")
    plan.add("src", One)
    plan.add("k", Keyed)
    plan.add("sink", Sink)
    plan.chain("src", "k", "sink")
    with Scheduler(policy="ordered", threads_per_node=1, pin=False) as s:
        with pytest.raises(ValueError, match="not a PartitionedOperator"):
            s.submit(plan)


def test_processing_latency_markers_and_decision_cost():
    from bobox_sched.control import model as M
    from bobox_sched.core.sources import GeneratorSource

    from bobox_sched.core.packet import Packet

    def make(ctx, i):
        return None if i >= 50 else Packet({"x": np.arange(100) + i})

    class Map(StreamOperator):
        state = M.STATELESS
        max_parallelism = 8

        def on_packet(self, ctx, port, pkt):
            ctx.send("out", Packet({"x": pkt["x"] * 2}))

    plan = Plan("lat")
    plan.add("src", GeneratorSource, make, marker_every=5)
    plan.add("map", Map)
    plan.add("sink", Sink)
    plan.chain("src", "map", "sink")
    with Scheduler(policy="ordered", threads_per_node=2, pin=False) as s:
        h = s.submit(plan)
        out = h.result(60)
        stats = s.stats()["policy_detail"]
        chain = s.policy.chain_stats(h.id)
    assert [int(p["x"][0]) for p in out] == [2 * i for i in range(50)]
    lat = h.stats["latency"]
    assert lat is not None and lat["markers"] == 10
    # End-to-end runs from ingress, before the first operator stamps the marker (processing
    # latency), to after the sink measured it, inside the request's life: per marker
    # processing <= end-to-end, so also rank by rank (which marker is which is not kept).
    req = h._request
    e2e, proc = sorted(req.e2e_ns), sorted(req.latencies_ns)
    assert len(e2e) == len(proc) == 10 and all(e >= p for e, p in zip(e2e, proc)), (e2e, proc)
    assert e2e[-1] <= (req.t_end - req.t_submit) * 1e9 + 1000, (e2e, req.t_end - req.t_submit)
    assert stats["decisions"] > 0 and stats["decision_us_mean"] > 0
    assert [c["operator"] for c in chain] == ["src", "map", "sink"]
    assert chain[1]["M"] == 2 and chain[1]["units"] >= 50


# -- NUMA: wake-up preference and state placement ----------------------------------------------

def test_wake_prefers_an_idle_worker_on_the_packets_node():
    import threading
    import types

    from bobox_sched.policies.ordered.policy import OrderedPolicy

    class W:
        def __init__(self, node):
            self.node_id = node
            self.released = 0
            self.park = types.SimpleNamespace(release=self._release)

        def _release(self):
            self.released += 1

    class Stage:
        def __init__(self, node):
            self.node = node

        def head_node(self):
            return self.node

    for numa, expect in ((True, 0), (False, 1)):
        ws = [W(0), W(1)]  # idle list: pop() takes the last one without the preference
        fake = types.SimpleNamespace(_lock=threading.Lock(), idle=list(ws), numa=numa)
        OrderedPolicy.wake_one(fake, Stage(0))
        assert [w.released for w in ws] == [1 if i == expect else 0 for i in range(2)]
        assert fake.idle == [w for i, w in enumerate(ws) if i != expect]


def test_bucket_state_moves_to_the_node_of_its_last_owner():
    from bobox_sched.control import model as M
    from bobox_sched.policies.ordered.partitioned import PartitionedOperator

    class P(PartitionedOperator):
        state = M.Partitioned("k")
        partitions = 4

        def new_state(self):
            return {"sums": np.zeros(3)}

    op = P()
    a = op.state_for(2, node=0)
    assert op.state_for(2, node=0) is a  # same node: the same object
    a["sums"][0] = 5.0
    b = op.state_for(2, node=1)  # another node owns the bucket now: a copy made by it
    assert b is not a and b["sums"] is not a["sums"] and b["sums"][0] == 5.0
    assert op.state_for(2, node=1) is b and [x for x, _ in op.bucket_states()] == [2]


def test_numa_tiebreak_run_on_virtual_nodes():
    import topology as T
    from topology.virtual import virtual_topology

    from bobox_sched import Plan, Sink
    from bobox_sched.control import model as M
    from bobox_sched.core.sources import GeneratorSource
    from bobox_sched.core.packet import Packet

    class Map(StreamOperator):
        state = M.STATELESS
        max_parallelism = 4

        def on_packet(self, ctx, port, pkt):
            out = ctx.new_packet({"x": np.int64}, pkt.nrows)  # on this worker's node
            out["x"][:] = pkt["x"] + 1
            ctx.send("out", out)

    def make(ctx, i):
        if i >= 40:
            return None
        p = ctx.new_packet({"x": np.int64}, 50)
        p["x"][:] = np.arange(50) + 50 * i
        return p

    topo = virtual_topology(T.probe(), 2)
    plan = Plan("numa")
    plan.add("src", GeneratorSource, make)
    plan.add("map", Map)
    plan.add("sink", Sink)
    plan.chain("src", "map", "sink")
    with Scheduler(policy="ordered", topology=topo, threads_per_node=2, pin=False, numa_tiebreak=True) as s:
        out = s.submit(plan).result(60)
        assert s.stats()["policy_detail"]["numa_tiebreak"] is True
    assert np.array_equal(np.concatenate([p["x"] for p in out]), np.arange(2000) + 1)
