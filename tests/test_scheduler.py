"""The runtime end to end, with real worker threads: results, back-pressure, errors,
cancellation, shutdown, metrics, on both policies."""

import gc
import threading
import time
import traceback

import numpy as np
import pytest
from ops import Boom, CountSink, Double, Endless, Range, Slow, SumSink

from bobox_sched import (
    BoboxError,
    Operator,
    Plan,
    RequestCancelled,
    Scheduler,
    SchedulerShutdown,
    StreamOperator,
)

POLICIES = ["bobox", "simple"]


def chain_plan(n=10_000, rows=100, mid=(Double,), sink=SumSink, name="chain"):
    p = Plan(name)
    p.add("src", Range, n, rows)
    names = ["src"]
    for i, m in enumerate(mid):
        p.add(f"m{i}", m)
        names.append(f"m{i}")
    p.add("sink", sink)
    names.append("sink")
    p.chain(*names)
    return p


@pytest.fixture(params=POLICIES)
def sched(request):
    s = Scheduler(policy=request.param)
    yield s
    s.shutdown(cancel=True)


def test_results_many_concurrent_requests(sched):
    plan = chain_plan(5000, 77, mid=(Double, Double))
    handles = [sched.submit(plan) for _ in range(30)]
    want = 4 * sum(range(5000))
    assert [h.result(60) for h in handles] == [want] * 30
    st = sched.stats()
    assert st["requests_done"] == 30 and st["requests_active"] == 0
    assert sum(int(v) for k, v in st["steps"].items() if k != "5") == st["tasks"]
    hs = handles[0].stats
    assert hs["state"] == "done" and hs["operators"] == 4
    # The source runs once per packet; the others drain their buffers, so at least once each.
    assert hs["tasks"] >= 65 + 3 and hs["packets"] == 3 * 65  # 65 source packets, doubled twice


class Split(StreamOperator):
    outputs = ("a", "b")

    def on_packet(self, ctx, port, pkt):
        ctx.send("a", pkt)
        ctx.send("b", pkt)


class Add2(StreamOperator):
    """Sums everything from two inputs into one number."""

    inputs = ("l", "r")
    outputs = ()

    def __init__(self):
        self.total = 0

    def on_packet(self, ctx, port, pkt):
        self.total += int(pkt["x"].sum()) * (1 if port == "l" else 10)

    def on_end(self, ctx):
        ctx.set_result(self.total)


def test_multiple_ports_diamond(sched):
    p = Plan("diamond")
    p.add("src", Range, 1000, 10)
    p.add("split", Split)
    p.add("d", Double)
    p.add("s", Slow, 0.0)
    p.add("add", Add2)
    p.connect("src", "split")
    p.connect("split.a", "d")
    p.connect("split.b", "s")
    p.connect("d", "add.l")
    p.connect("s", "add.r")
    total = sum(range(1000))
    assert sched.submit(p).result(30) == 2 * total + 10 * total


class OccupancyProbe(StreamOperator):
    """Slow consumer that records its input buffer length (runtime internals)."""

    outputs = ()

    def __init__(self):
        self.max_seen = 0
        self.n = 0

    def on_packet(self, ctx, port, pkt):
        self.max_seen = max(self.max_seen, len(ctx.task.inq[0]) + 1)
        self.n += 1
        time.sleep(0.0005)

    def on_end(self, ctx):
        ctx.set_result((self.n, self.max_seen))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cap", [1, 3])
def test_back_pressure_bounds_buffers_and_memory(policy, cap):
    rows = 1000
    with Scheduler(policy=policy, buffer_packets=cap) as s:
        p = Plan("bp")
        p.add("src", Range, 300 * rows, rows)
        p.add("probe", OccupancyProbe)
        p.connect("src", "probe")
        h = s.submit(p)
        n, max_seen = h.result(60)
    assert n == 300
    assert max_seen <= cap
    # in flight at most: the buffer, one packet being consumed, one in the producer's
    # outbox, one being produced
    assert h.stats["peak_bytes_held"] <= (cap + 3) * rows * 8


def test_failing_operator_fails_only_its_request(sched):
    bad = chain_plan(100_000, 100, mid=(Boom,), name="bad")
    good = chain_plan(20_000, 100, mid=(Double,), name="good")
    hb = sched.submit(bad)
    hg = [sched.submit(good) for _ in range(5)]
    with pytest.raises(KeyError, match="boom at packet 3") as ei:
        hb.result(30)
    frames = [f.name for f in traceback.extract_tb(ei.value.__traceback__)]
    assert "on_packet" in frames  # the operator's own frame is kept
    assert hb.state == "failed" and hb.failed_operator == "m0"
    assert hb.stats["state"] == "failed"
    assert all(h.result(30) == 2 * sum(range(20_000)) for h in hg)
    gc.collect()
    assert hb._request.bytes.held == 0  # the failed request's packets were released
    assert hb._request.ops is None


class StartedSink(CountSink):
    """Counts like CountSink and sets `started` once it has seen `n` packets."""

    def __init__(self, started, n=3):
        super().__init__()
        self.started, self.n = started, n

    def on_packet(self, ctx, port, pkt):
        super().on_packet(ctx, port, pkt)
        if self.packets == self.n:
            self.started.set()


def test_cancel_unbounded_request(sched):
    started = threading.Event()
    p = Plan("endless")
    p.add("src", Endless)
    p.add("sink", StartedSink, started)
    p.connect("src", "sink")
    h = sched.submit(p)
    assert started.wait(10)  # packets flow (a source that ended early never gets here)
    assert not h.done()  # an unbounded request does not end by itself
    assert h.cancel() is True
    with pytest.raises(RequestCancelled):
        h.result(10)
    assert h.cancel() is False
    assert sched.submit(chain_plan(1000)).result(10) == 2 * sum(range(1000))
    gc.collect()
    deadline = time.time() + 5
    while h._request.bytes.held and time.time() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert h._request.bytes.held == 0


def test_result_timeout(sched):
    p = Plan("endless")
    p.add("src", Endless)
    p.add("sink", CountSink)
    p.connect("src", "sink")
    h = sched.submit(p)
    with pytest.raises(TimeoutError):
        h.result(0.05)
    h.cancel()


@pytest.mark.parametrize("policy", POLICIES)
def test_shutdown_waits_for_running_requests(policy):
    s = Scheduler(policy=policy)
    hs = [s.submit(chain_plan(2000, 100, mid=(Slow,))) for _ in range(4)]
    s.shutdown(wait=True)
    assert all(h.done() for h in hs)
    assert [h.result(0) for h in hs] == [sum(range(2000))] * 4
    assert all(not w.thread.is_alive() for w in s.workers)
    with pytest.raises(SchedulerShutdown):
        s.submit(chain_plan(10))


@pytest.mark.parametrize("policy", POLICIES)
def test_shutdown_cancel_and_context_manager(policy):
    p = Plan("endless")
    p.add("src", Endless)
    p.add("sink", CountSink)
    p.connect("src", "sink")
    with Scheduler(policy=policy) as s:
        h = s.submit(p)
        s.shutdown(wait=True, cancel=True)
    with pytest.raises(RequestCancelled):
        h.result(1)
    with pytest.raises(SchedulerShutdown, match="shut down"):
        s.submit(p)


def test_invalid_plans_and_arguments():
    with Scheduler() as s:
        p = Plan("bad")
        p.add("d", Double)
        with pytest.raises(ValueError, match="operator 'd'"):
            s.submit(p)
        with pytest.raises(TypeError):
            s.submit("not a plan")
        with pytest.raises(BoboxError, match="unknown NUMA node"):
            s.submit(chain_plan(10), node=99)
    with pytest.raises(BoboxError, match="unknown policy 'fifo'"):
        Scheduler(policy="fifo")
    with pytest.raises(BoboxError, match="threads_per_node"):
        Scheduler(threads_per_node=0)
    with pytest.raises(BoboxError, match="packet_bytes"):
        Scheduler(packet_bytes=-1)
    with pytest.raises(BoboxError, match="buffer_packets"):
        Scheduler(buffer_packets=0)


def test_packet_size_defaults():
    import topology

    topo = topology.probe()
    with Scheduler() as s:
        assert s.packet_bytes == topo.packet_bytes
    with Scheduler(policy="simple") as s:
        from bobox_sched.policies.simple import SIMPLE_PACKET_BYTES

        assert s.packet_bytes == SIMPLE_PACKET_BYTES
    with Scheduler(packet_bytes=4096) as s:
        assert s.packet_bytes == 4096


class Emitter(Operator):
    """Emits packets sized with ctx.rows_for: checks the packet-size plumbing."""

    outputs = ("out",)

    def __init__(self):
        self.left = 5

    def process(self, ctx):
        if self.left == 0:
            ctx.close()
            ctx.finish()
            return
        p = ctx.new_packet({"x": np.int64, "y": np.float64}, ctx.rows_for({"x": np.int64, "y": np.float64}))
        p["x"][:] = 1
        p["y"][:] = 0.5
        self.left -= 1
        ctx.send("out", p)
        ctx.reschedule()


def test_packets_sized_to_target_and_node_local():
    import topology

    with Scheduler(packet_bytes=64 * 1024, locality_sample=1) as s:
        p = Plan("sz")
        p.add("e", Emitter)
        p.add("c", CountSink)
        p.connect("e", "c")
        r = s.submit(p).result(10)
        assert r == {"packets": 5, "rows": 5 * (64 * 1024 // 16)}
        st = s.stats()
        assert st["locality"]["samples"] == 5 and st["locality"]["pages"] > 0
        if topology.numa_available():
            assert st["locality"]["local_fraction"] == 1.0


def test_idle_workers_sleep():
    with Scheduler() as s:
        s.submit(chain_plan(1000)).result(10)
        deadline = time.time() + 5
        while time.time() < deadline and sum(len(n.idle) for n in s.policy.nodes) < len(s.workers):
            time.sleep(0.01)
        assert sum(len(n.idle) for n in s.policy.nodes) == len(s.workers)


def test_map_returns_results_in_order(sched):
    plans = [chain_plan(n, 10) for n in (10, 200, 3000)]
    assert sched.map(plans, timeout=60) == [2 * sum(range(n)) for n in (10, 200, 3000)]


def test_submit_from_many_threads(sched):
    plan = chain_plan(2000, 50)
    out = []

    def client():
        out.extend(h.result(60) for h in [sched.submit(plan) for _ in range(5)])

    ts = [threading.Thread(target=client) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out == [2 * sum(range(2000))] * 30


def test_workers_survive_a_topology_with_nodes_this_machine_lacks():
    """A captured or virtual topology may name nodes the kernel does not have: workers
    pin to the CPUs, skip the memory policy, and every request still completes."""
    from test_policy_bobox import make_topology

    import topology

    cpus = [c.os_index for c in topology.probe().cpus]
    topo = make_topology(2, 1) if len(cpus) >= 2 else make_topology(1, 1)
    with Scheduler(topology=topo, balance_interval=0.01) as s:
        hs = [s.submit(chain_plan(3000, 50), node=0) for _ in range(6)]
        assert [h.result(60) for h in hs] == [2 * sum(range(3000))] * 6
        assert all(w.thread.is_alive() for w in s.workers)


def test_shutdown_never_loses_a_sleeping_worker():
    """Shutting down while workers are on their way to sleep (tiny GIL switch interval to
    shake out the interleavings) must always end every worker."""
    import sys

    from test_policy_bobox import make_topology

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(150):
            s = Scheduler(topology=make_topology(2, 2), threads_per_node=2, balance_interval=None, pin=False)
            s.shutdown(wait=False)
            for w in s.workers:
                w.thread.join(10)
                assert not w.thread.is_alive(), "a worker missed the shutdown"
    finally:
        sys.setswitchinterval(old)


@pytest.mark.parametrize("policy", POLICIES)
def test_done_callback_may_call_shutdown(policy):
    s = Scheduler(policy=policy)
    h = s.submit(chain_plan(1000, 100))
    returned = threading.Event()
    h.add_done_callback(lambda _h: (s.shutdown(), returned.set()))
    assert h.result(10) == 2 * sum(range(1000))
    assert returned.wait(10) and not s._active


def test_ended_requests_are_freed(sched):
    import weakref

    refs = []
    for i in range(60):
        if i % 2:
            p = Plan("endless")
            p.add("src", Endless)
            p.add("sink", CountSink)
            p.connect("src", "sink")
            h = sched.submit(p)
            time.sleep(0.002)
            h.cancel()
        else:
            h = sched.submit(chain_plan(5000, 10, mid=(Boom,)))
        with pytest.raises((RequestCancelled, KeyError)):
            h.result(30)
        refs.append(weakref.ref(h._request))
        del h
    sched.submit(chain_plan(100)).result(10)  # workers move on to other work
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive <= len(sched.workers)  # at most each worker's last request (ops dropped)


def test_failed_operator_is_the_one_that_raised_first(sched):
    h = sched.submit(chain_plan(100_000, 100, mid=(Boom, Double), name="twice"))
    with pytest.raises(KeyError):
        h.result(30)
    assert h.failed_operator == "m0" and h.stats["failed_operator"] == "m0"


@pytest.mark.parametrize("policy", ["bobox", "simple"])
def test_task_stats_off_runs_the_same_and_reads_no_clock(policy):
    """Scheduler(task_stats=False): the same results and failures; the workers' own
    counters go on, but no time and no per-request locality step is recorded per task."""
    plan = chain_plan(5000, 77, mid=(Double, Double))
    with Scheduler(policy=policy, threads_per_node=2, pin=False, task_stats=False) as s:
        handles = [s.submit(plan) for _ in range(8)]
        assert [h.result(60) for h in handles] == [4 * sum(range(5000))] * 8
        with pytest.raises(KeyError, match="boom at packet 3"):
            s.submit(chain_plan(100_000, 100, mid=(Boom,), name="bad")).result(30)
        st = s.stats()
        assert st["tasks"] > 8 * 65
        assert st["busy_s"] == 0
        assert handles[0].stats["tasks"] == 0  # no per-request step counter


@pytest.mark.parametrize("policy", POLICIES + ["streams"])
@pytest.mark.parametrize("failing", [False, True])
def test_a_request_ends_even_when_its_clean_up_raises(policy, failing):
    """The clean-up after a request's last operator (or its failure) raises: the request
    still ends (result() answers instead of waiting forever), with that error when it had
    completed, or with its own error and a note naming the clean-up's when it had failed;
    the scheduler runs the next request and shuts down."""
    s = Scheduler(policy=policy)
    try:
        orig = s.policy.request_done
        calls = []

        def request_done(req):
            calls.append(req.id)
            orig(req)
            if len(calls) == 1:
                raise RuntimeError("planted clean-up error")

        s.policy.request_done = request_done
        h = s.submit(chain_plan(2000, 100, mid=(Boom,) if failing else (Double,), name="first"))
        if failing:
            with pytest.raises(KeyError, match="boom at packet 3") as ei:
                h.result(30)
            assert any("RuntimeError: planted clean-up error" in n for n in ei.value.__notes__)
            assert h.failed_operator == "m0"
        else:
            with pytest.raises(RuntimeError, match="planted clean-up error") as ei:
                h.result(30)
            assert any("which had completed" in n for n in ei.value.__notes__)
        assert h.state == "failed" and h.done() and h._request.ops is None
        assert s.submit(chain_plan(2000, 100, name="second")).result(30) == 2 * sum(range(2000))
        assert len(calls) == 2
        s.shutdown()  # returns: no request is left behind
    finally:
        s.shutdown(wait=False, cancel=True)  # after a failed assertion: do not wait for a stuck request
