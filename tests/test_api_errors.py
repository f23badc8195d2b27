"""Bad input through the Python API (issue 9): operators that break the runtime's
protocol fail their own request with a message naming the operator, never hang the
scheduler; a failed request shows the same traceback however often it is asked."""

import gc
import threading
import time
import traceback

import numpy as np
import pytest
from ops import CountSink, Double, Range, Slow, SumSink

from bobox_sched import BoboxError, Operator, OperatorError, OperatorStalled, Packet, Plan, Scheduler, Source, StreamOperator
from bobox_sched.core import task

POLICIES = ["bobox", "simple"]
# Generous bounds that only stop a hung test; nothing here asserts a duration.
HANG = 120


def wait_released(req):
    deadline = time.time() + 10
    while req.bytes.held and time.time() < deadline:
        gc.collect()
        time.sleep(0.01)
    return req.bytes.held


def shutdown_returns(sched) -> bool:
    t = threading.Thread(target=sched.shutdown, daemon=True)
    t.start()
    t.join(HANG)
    return not t.is_alive()


# -- an operator that stops reading its input ------------------------------------------


class Deaf(Operator):
    """Never reads its input (and never asks to be rescheduled)."""

    inputs = ("in",)
    outputs = ("out",)

    def process(self, ctx):
        pass


class OneEared(Operator):
    """Reads `a` to its end but never `b`, then sits there."""

    inputs = ("a", "b")
    outputs = ("out",)

    def __init__(self):
        self.rows = 0

    def process(self, ctx):
        while (p := ctx.recv("a")) is not None:
            self.rows += p.nrows


def deaf_plan(n=100_000):
    return _chain(n, mid=Deaf, sink=CountSink, name="deaf", mid_name="deaf")


@pytest.mark.parametrize("policy", POLICIES)
def test_operator_that_stops_reading_fails_its_request_and_shutdown_returns(policy):
    s = Scheduler(policy=policy)
    try:
        good = [s.submit(p) for p in [_chain(20_000)] * 3]
        h = s.submit(deaf_plan())
        with pytest.raises(OperatorStalled, match=r"operator 'deaf' \(Deaf\) made no progress") as ei:
            h.result(HANG)
        msg = str(ei.value)
        assert "'in' (4 packets)" in msg  # the port left unread, and how full it is
        assert f"{task.STALL_RUNS} times" in msg
        assert isinstance(ei.value, BoboxError) and "\n" not in msg
        assert h.state == "failed" and h.failed_operator == "deaf"
        # the stuck run counted no-progress re-queues up to the threshold, then stopped
        assert h.stats["tasks"] >= task.STALL_RUNS
        assert [g.result(HANG) for g in good] == [2 * sum(range(20_000))] * 3
        assert wait_released(h._request) == 0
    finally:
        assert shutdown_returns(s), "shutdown() did not return"
    assert all(not w.thread.is_alive() for w in s.workers)


@pytest.mark.parametrize("policy", POLICIES)
def test_shutdown_returns_while_a_stuck_request_is_running(policy):
    """shutdown() without cancel waits for the request: it must end by itself."""
    s = Scheduler(policy=policy)
    h = s.submit(deaf_plan())
    assert shutdown_returns(s), "shutdown() did not return"
    assert isinstance(h.exception(0), OperatorStalled)


@pytest.mark.parametrize("policy", POLICIES)
def test_stall_names_the_unread_port(policy):
    p = Plan("one-eared")
    p.add("sa", Range, 50, 10)
    p.add("sb", Range, 10_000, 10)
    p.add("join", OneEared)
    p.add("sink", CountSink)
    p.connect("sa", "join.a")
    p.connect("sb", "join.b")
    p.connect("join", "sink")
    with Scheduler(policy=policy) as s:
        h = s.submit(p)
        with pytest.raises(OperatorStalled) as ei:
            h.result(HANG)
    assert "operator 'join' (OneEared)" in str(ei.value)
    assert "input on 'b' (" in str(ei.value) and "'a'" not in str(ei.value)
    assert h.failed_operator == "join"


# -- operators that wait must not be flagged -------------------------------------------


class StashJoin(Operator):
    """The hash join's way of waiting: drains `build` to its end while stashing every
    `probe` packet, then emits the probe packets. Correct, however slow `build` is."""

    inputs = ("build", "probe")
    outputs = ("out",)

    def __init__(self):
        self.stash = []
        self.built = 0

    def process(self, ctx):
        while (p := ctx.recv("build")) is not None:
            self.built += p.nrows
        while (p := ctx.recv("probe")) is not None:
            self.stash.append(p)
        if not ctx.at_eos("build"):
            return
        while self.stash and not ctx.blocked:
            ctx.send("out", self.stash.pop(0))
        if ctx.at_eos("probe") and not self.stash and not ctx.blocked:
            ctx.close()
            ctx.finish()


class Poller(Operator):
    """Leaves its input unread for its first `polls` runs but asks to be run again each
    time (ctx.reschedule(): a deliberate wait, not a stall), then passes everything on."""

    inputs = ("in",)
    outputs = ("out",)

    def __init__(self, polls):
        self.polls = polls

    def process(self, ctx):
        if self.polls:
            self.polls -= 1
            ctx.reschedule()
            return
        while not ctx.blocked and (p := ctx.recv("in")) is not None:
            ctx.send("out", p)
        if ctx.at_eos("in") and not ctx.blocked:
            ctx.close()
            ctx.finish()


@pytest.fixture
def strict(monkeypatch):
    """The strictest threshold: a second re-queue for unread input without a packet
    taken or sent fails the request. Correct operators never get there."""
    monkeypatch.setattr(task, "STALL_RUNS", 2)


@pytest.mark.parametrize("policy", POLICIES)
def test_waiting_operators_are_not_flagged(strict, policy):
    p = Plan("stash")
    p.add("sb", Range, 2_000, 10)
    p.add("slow", Slow, 0.002)  # the build side trickles in while the probe side fills up
    p.add("sp", Range, 20_000, 10)
    p.add("join", StashJoin)
    p.add("poll", Poller, 50)
    p.add("sink", SumSink)
    p.connect("sb", "slow")
    p.connect("slow", "join.build")
    p.connect("sp", "join.probe")
    p.chain("join", "poll", "sink")
    with Scheduler(policy=policy, buffer_packets=1) as s:
        hs = [s.submit(p) for _ in range(3)] + [s.submit(_chain(5_000)) for _ in range(3)]
        assert [h.result(HANG) for h in hs] == [sum(range(20_000))] * 3 + [2 * sum(range(5_000))] * 3


@pytest.mark.parametrize("policy", POLICIES)
def test_tpch_plans_are_not_flagged(strict, tpch, policy):
    """Hash joins, merges, aggregates, limits, tiny packets and one-packet buffers (full
    buffers everywhere), every query at once: none ever re-queued twice without progress."""
    from operators import tpch as T
    from operators.tpch_sql import compare_tables, duckdb_answer

    with Scheduler(policy=policy, packet_bytes=2048, buffer_packets=1) as s:
        hs = {q: s.submit(T.plan(q, tpch, 3)) for q in T.QUERIES}
        for q, h in hs.items():
            compare_tables(h.result(300), duckdb_answer(q, tpch), rel_tol=1e-6)


# -- what an operator may send ---------------------------------------------------------


class Misbehave(StreamOperator):
    """Passes packets on; on its 3rd packet does `how`."""

    def __init__(self, how):
        self.how = how
        self.n = 0

    def on_packet(self, ctx, port, pkt):
        self.n += 1
        if self.n < 3:
            ctx.send("out", pkt)
            return
        how = self.how
        if how == "after-close":
            ctx.close("out")
            ctx.close("out")  # closing twice is harmless
            ctx.send("out", pkt)
        elif how == "after-close-all":
            ctx.close()
            ctx.send("out", pkt)
        elif how == "none":
            ctx.send("out", None)
        elif how == "array":
            ctx.send("out", pkt["x"])
        elif how == "dict":
            ctx.send("out", dict(pkt.columns))
        elif how == "unknown-port":
            ctx.send("nope", pkt)
        elif how == "unknown-input":
            ctx.recv("nope")
        elif how == "close-unknown":
            ctx.close("nope")
        elif how == "negative-rows":
            ctx.new_packet({"x": np.int64}, -5)
        elif how == "bool-rows":
            ctx.new_packet({"x": np.int64}, True)


MISUSE = [
    ("after-close", OperatorError, r"operator 'bad' sent a packet on output 'out' after closing it"),
    ("after-close-all", OperatorError, r"operator 'bad' sent a packet on output 'out' after closing it"),
    ("none", OperatorError, r"operator 'bad' sent NoneType on output 'out': send\(\) takes a Packet"),
    ("array", OperatorError, r"operator 'bad' sent ndarray on output 'out'"),
    ("dict", OperatorError, r"operator 'bad' sent dict on output 'out'"),
    ("unknown-port", OperatorError, r"operator 'bad' has no output port 'nope' \(outputs: 'out'\)"),
    ("unknown-input", OperatorError, r"operator 'bad' has no input port 'nope' \(inputs: 'in'\)"),
    ("close-unknown", OperatorError, r"operator 'bad' has no output port 'nope'"),
    ("negative-rows", ValueError, r"packet row count must be >= 0, got -5"),
    ("bool-rows", TypeError, r"packet row count must be an integer, got True"),
]


def _submit_misbehaving(s, cases):
    """One src -> Misbehave(how) -> sink request per case, all submitted before any is awaited."""
    handles = []
    for how, _, _ in cases:
        p = Plan(how)
        p.add("src", Range, 10_000, 10)
        p.add("bad", Misbehave, how)
        p.add("sink", CountSink)
        p.chain("src", "bad", "sink")
        handles.append(s.submit(p))
    return handles


@pytest.mark.parametrize("policy", POLICIES)
def test_protocol_misuse_fails_the_request_naming_the_operator(policy):
    with Scheduler(policy=policy) as s:
        handles = _submit_misbehaving(s, MISUSE)
        good = s.submit(_chain(10_000))
        for (how, exc, pattern), h in zip(MISUSE, handles):
            with pytest.raises(exc, match=pattern) as ei:
                h.result(HANG)
            assert h.failed_operator == "bad", how
            # the traceback points at the operator's own call
            frames = [f.name for f in traceback.extract_tb(ei.value.__traceback__)]
            assert "on_packet" in frames, how
        assert good.result(HANG) == 2 * sum(range(10_000))


class Quitter(StreamOperator):
    """Passes its first packets on, then finishes early without closing its output
    (then, with `then_send`, tries to send once more)."""

    def __init__(self, then_send=False):
        self.n = 0
        self.then_send = then_send

    def on_packet(self, ctx, port, pkt):
        self.n += 1
        ctx.send("out", pkt)
        if self.n == 3:
            ctx.finish()
            if self.then_send:
                ctx.send("out", pkt)


@pytest.mark.parametrize("policy", POLICIES)
def test_finish_without_close_ends_the_stream(policy):
    """finish() closes what is still open: the receivers see the end of stream (they
    waited for ever before, and so did shutdown())."""
    s = Scheduler(policy=policy)
    try:
        h = s.submit(_chain(1000, mid=Quitter))
        assert h.result(HANG) == sum(range(30))
        bad = s.submit(_chain(1000, mid=lambda: Quitter(then_send=True)))
        with pytest.raises(OperatorError, match="operator 'm' sent a packet on output 'out' after closing it"):
            bad.result(HANG)
    finally:
        assert shutdown_returns(s), "shutdown() did not return"


class Burst(Operator):
    """Sends `n` packets of 10 rows per run while its receiver has room (fills the
    receiver's buffer before the receiver runs)."""

    outputs = ("out",)

    def __init__(self, n):
        self.n = n
        self.i = 0

    def process(self, ctx):
        while self.i < self.n and not ctx.blocked:
            p = ctx.new_packet({"x": np.int64}, 10)
            p["x"][:] = np.arange(self.i * 10, self.i * 10 + 10)
            ctx.send("out", p)
            self.i += 1
        if self.i == self.n and not ctx.blocked:
            ctx.finish()


@pytest.mark.parametrize("policy", POLICIES)
def test_finish_in_on_packet_is_the_last_callback_with_packets_buffered(policy):
    """A StreamOperator that finishes in on_packet while more packets wait in its buffer
    (a run drains the buffer) gets no on_packet after that: it used to be called for the
    next buffered packet, whose send then failed the request (sent after closing). One
    worker, so the source fills the buffer before the quitter first runs."""
    from test_policy_bobox import make_topology

    with Scheduler(topology=make_topology(1, 1), policy=policy, threads_per_node=1, pin=False) as s:
        p = Plan("burst")
        p.add("src", Burst, 100)
        p.add("m", Quitter)
        p.add("sink", SumSink)
        p.chain("src", "m", "sink")
        assert s.submit(p).result(HANG) == sum(range(30))


class BadSource(Source):
    def __init__(self, value):
        self.value = value

    def next_packet(self, ctx):
        return self.value


def test_source_returning_a_non_packet_fails():
    with Scheduler() as s:
        p = Plan("badsrc")
        p.add("src", BadSource, np.arange(3))
        p.add("sink", CountSink)
        p.connect("src", "sink")
        with pytest.raises(OperatorError, match=r"operator 'src' sent ndarray on output 'out'"):
            s.submit(p).result(HANG)


class PacketSubclass(Packet):
    __slots__ = ()


class SendsSubclass(StreamOperator):
    def on_packet(self, ctx, port, pkt):
        ctx.send("out", PacketSubclass(pkt.columns, pkt.nrows))


def test_packet_subclasses_are_packets():
    with Scheduler() as s:
        assert s.submit(_chain(1000, mid=SendsSubclass)).result(HANG) == sum(range(1000))


# -- the traceback of a failed request -------------------------------------------------


class Boom(StreamOperator):
    def on_packet(self, ctx, port, pkt):
        self.explode(pkt)

    def explode(self, pkt):
        try:
            {}["missing"]
        except KeyError:
            raise RuntimeError(f"boom with {pkt.nrows} rows") from None


def _frames(tb):
    return [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(tb)]


@pytest.mark.parametrize("policy", POLICIES)
def test_result_shows_the_same_traceback_every_time(policy):
    with Scheduler(policy=policy) as s:
        h = s.submit(_chain(1000, mid=Boom))
        seen = []
        for _ in range(5):
            with pytest.raises(RuntimeError, match="boom with 10 rows") as ei:
                h.result(HANG)
            seen.append(_frames(ei.value.__traceback__))
        assert all(f == seen[0] for f in seen)
        names = [name for _, _, name in seen[0]]
        # this test's frame, result(), then the operator's own frames, ending at the raise
        assert names[1] == "result" and names[-2:] == ["on_packet", "explode"], names
        original = seen[0][2:]
        # exception() shows the operator's own frames, the same every time
        assert _frames(h.exception(0).__traceback__) == original
        with pytest.raises(RuntimeError):
            h.result(0)
        assert _frames(h.exception(0).__traceback__) == original
        # The operator raised while handling a KeyError ("from None"): that context is
        # the original one. result() called while the caller handles another exception
        # shows that one as the context of this raise, and only of this one.
        try:
            raise LookupError("unrelated")
        except LookupError:
            with pytest.raises(RuntimeError) as ei:
                h.result(0)
            assert type(ei.value.__context__) is LookupError
        with pytest.raises(RuntimeError) as ei:
            h.result(0)
        assert type(ei.value.__context__) is KeyError and ei.value.__suppress_context__
        assert _frames(ei.value.__traceback__)[1:] == seen[0][1:]


def _chain(n, mid=Double, sink=SumSink, name="chain", mid_name="m"):
    """Range(n) -> mid -> sink."""
    p = Plan(name)
    p.add("src", Range, n, 10)
    p.add(mid_name, mid)
    p.add("sink", sink)
    p.chain("src", mid_name, "sink")
    return p


# -- the other policies: the issue's cases there too -----------------------------------

ISSUE_MISUSE = [m for m in MISUSE if m[0] in ("after-close", "after-close-all", "none", "negative-rows",
                                                 "close-unknown")]


@pytest.mark.parametrize("policy", ["streams", "ordered"])
def test_issue_misuse_raises_under_every_policy(policy):
    """send after close(), send(None) and new_packet(-5) raise under the policies with
    their own contexts too (streams' threads, ordered's units), naming the operator."""
    with Scheduler(policy=policy) as s:
        handles = _submit_misbehaving(s, ISSUE_MISUSE)
        for (how, exc, pattern), h in zip(ISSUE_MISUSE, handles):
            with pytest.raises(exc, match=pattern):
                h.result(HANG)
            assert h.state == "failed", how


def test_operator_that_stops_reading_under_streams_policy():
    s = Scheduler(policy="streams")
    try:
        h = s.submit(deaf_plan())
        with pytest.raises(OperatorStalled, match=r"operator 'deaf' \(Deaf\) made no progress"):
            h.result(HANG)
        assert h.failed_operator == "deaf"
    finally:
        assert shutdown_returns(s), "shutdown() did not return"
