"""The API as the README documents it, the same under every policy: ``ctx.port`` names
the input port (or is None), the error types the README names import from where it
names them, ``TxnSink`` gives the same result types with or without events, and
``parallelism=`` is bounded by its cap in ``bobox_sched/core/limits.py``."""

from __future__ import annotations

import numpy as np
import pytest

from test_send_derived import Numbers
from test_stream_substrate import ObliviousSink

from bobox_sched import Plan, Scheduler, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.core.errors import BoboxError, OperatorError
from bobox_sched.control import model as M

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


# -- MisdeclaredOperator, from where the README names it --------------------------------


class DropsOneRow(StreamOperator):
    """Declared EXACTLY_ONE, but drops the first row of every packet."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", Packet({"x": pkt["x"][1:]}))


def test_misdeclared_operator_imports_from_where_the_readme_names_it():
    from bobox_sched import MisdeclaredOperator  # the README's path (inside: ImportError fails this test only)
    from bobox_sched.regions import MisdeclaredOperator as in_regions
    from bobox_sched.regions.merger import MisdeclaredOperator as defined

    assert MisdeclaredOperator is defined and in_regions is defined
    plan = Plan("liar")
    plan.add("src", Numbers, 1000)
    plan.add("liar", DropsOneRow)
    plan.add("sink", ObliviousSink)
    plan.chain("src", "liar", "sink")
    with sched("bobox") as s:
        h = s.submit(plan, parallelism=2)
        with pytest.raises(MisdeclaredOperator, match="declared EXACTLY_ONE"):
            h.result(timeout=120)
        # One family of runtime errors: a broken declaration is an operator breaking the
        # runtime's protocol, caught like the others (except OperatorError / BoboxError).
        assert isinstance(h.exception(), OperatorError) and isinstance(h.exception(), BoboxError)


# -- TxnSink: the same result types with and without events --------------------------------


@pytest.mark.parametrize("cc", ["tstream", "lock"])
def test_txn_sink_outputs_are_an_empty_dict_on_zero_events(cc):
    from bobox_sched.txn import TxnConfig
    from operators.txn import make_app, oracle_of, run_once, same_outputs

    app = make_app("gs", nkeys=50, nparts=2)
    with sched("bobox") as s:
        for n in (0, 300):  # the zero-event result has the types of a run with events
            store = app.make_store()
            ev = app.events(n, seed=1)
            dense_o, out_o = oracle_of(app, store, ev)
            r = run_once(s, app, store, ev, TxnConfig(store, 2, interval=100, cc=cc), keep=True)
            assert r["events"] == n
            assert isinstance(r["outputs"], dict), r["outputs"]
            assert (r["outputs"] == {}) == (n == 0)
            assert same_outputs(r["outputs"], out_o)  # an empty run equals the empty oracle
            assert np.array_equal(store.dense(), dense_o)
            other = app.make_store()
            kept_none = run_once(s, app, other, ev, TxnConfig(other, 2, interval=100, cc=cc))
            assert kept_none["outputs"] is None  # without keep: None, with events or without


# -- parallelism= is bounded ------------------------------------------------------------------


class Inc(StreamOperator):
    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", Packet({"x": pkt["x"] + 1}))


def region_plan() -> Plan:
    plan = Plan("region")
    plan.add("src", Numbers, 1000)
    plan.add("inc", Inc)
    plan.add("sink", ObliviousSink)
    plan.chain("src", "inc", "sink")
    return plan


def test_parallelism_above_the_cap_is_refused_before_any_work():
    from bobox_sched import BoboxError
    from bobox_sched.core.limits import MAX_CHANNELS
    from bobox_sched.regions.fission import parallelize

    over = MAX_CHANNELS + 1
    plan = region_plan()
    assert f"inc@{MAX_CHANNELS - 1}" in parallelize(plan, MAX_CHANNELS).operator_names  # the cap is allowed
    msg = rf"^{{}} must be at most {MAX_CHANNELS} channels per region \(the cap in bobox_sched/core/limits.py\), got {over}$"
    for degree in (over, {0: over}, {"inc": over}):
        with pytest.raises(BoboxError, match=msg.format("degree")):
            parallelize(plan, degree)
    with sched("bobox") as s:
        with pytest.raises(BoboxError, match=msg.format("parallelism")):
            s.submit(plan, parallelism=over)
        assert s.stats()["requests_done"] == 0 and not s._active  # no request was made
        h = s.submit(plan, parallelism=2)  # the scheduler goes on
        assert h.result(timeout=120) == 1000 and h.id == 0  # the first request
