"""Policy ``streams`` (IBM Streams' dynamic threading, spec 004 section 5.3): the free
list and LRU order driven deterministically, then the invariants on real threads:
exclusivity per port and per multi-input operator, per-edge FIFO under fan-in, exactly
once with every queue and lock free at quiescence, bounded queues and reSchedule touching
only the blocked port, suspension, shutdown, no deadlock with a gate-like operator, a
1,000-operator pipeline with capacity 1, concurrent requests, the comparison models."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ops import Guarded
from test_stress import build_plan, check_result, random_dags

from bobox_sched import BoboxError, Operator, Plan, Scheduler, Source, StreamOperator
from bobox_sched.operator import EOS
from bobox_sched.policies.streams_ports import EMPTY, PortRecord, PortTable, SPSCEnforcer, find_work_non_blocking
from bobox_sched.policies.streams_threads import StreamsWorker, placement
from bobox_sched.stream import model as M

WAIT_S = 120


def until(cond, timeout=20.0):
    """Wait for `cond()` (a liveness bound, not a timing assertion)."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.002)


# -- SPSCEnforcer, port records and the free list, without threads --------------------------

class FakeReq:
    ACTIVE = "active"
    state = "active"


class FakeOp:
    def __init__(self, name, inputs=("in",)):
        self.name = name
        self.inputs = inputs
        self._bx_req = FakeReq()


def ports(n, capacity=4):
    return [PortRecord(FakeOp(f"op{i}"), 0, capacity, None, False) for i in range(n)]


def test_spsc_queue_is_bounded_and_push_always_releases_the_producer_lock():
    q = SPSCEnforcer(2)
    assert q.push("a") and q.push("b")
    assert not q.push("c")  # full: fails, does not drop anything (no maxlen)
    assert list(q.queue) == ["a", "b"] and len(q) == 2
    assert q.prod_try_lock()  # E1: released after the failed push ...
    assert not q.push("c")  # ... and a push while another producer holds it fails at once
    q.prod_unlock()
    assert q.cons_try_lock() and not q.cons_try_lock()
    assert q.pop() == "a" and q.pop() == "b" and q.pop() is EMPTY
    q.cons_unlock()
    assert q.push("c") and q.prod_try_lock()  # released after a successful push too
    with pytest.raises(ValueError):
        SPSCEnforcer(0)


def test_find_work_takes_the_first_port_with_work_and_lru_puts_it_at_the_tail():
    table = PortTable()
    p = ports(4)
    table.register(p)
    assert list(table.free) == p
    p[2].q.push("t0")
    p[2].q.push("t1")
    port, item = find_work_non_blocking(table)
    assert port is p[2] and item == "t0"
    assert list(table.free) == [p[3], p[0], p[1]]  # the ports tried went to the tail
    assert not p[2].q.cons_try_lock()  # checked out with its consumer lock held
    assert p[2].q.pop() == "t1"  # drain the same port, then give it back
    p[2].q.cons_unlock()
    table.give_back(p[2])
    assert list(table.free) == [p[3], p[0], p[1], p[2]]  # most recently used last


def test_find_work_stops_after_one_circuit_and_on_an_empty_list():
    table = PortTable()
    assert find_work_non_blocking(table) is None
    p = ports(3)
    table.register(p)
    assert find_work_non_blocking(table) is None
    assert sorted(table.free, key=lambda r: r.pid) == p  # each port exactly once
    assert [r.q.cons_try_lock() for r in p] == [True] * 3  # no lock left held
    for r in p:
        r.q.cons_unlock()


def test_find_work_skips_a_taken_port_and_a_busy_operator():
    table = PortTable()
    p = ports(2)
    m = threading.Lock()
    two = [PortRecord(FakeOp("join", ("a", "b")), j, 4, m, False) for j in range(2)]
    table.register(p + two)
    p[0].q.push("x")
    assert p[0].q.cons_try_lock()  # another thread executes port 0
    two[1].q.push("y")
    m.acquire()  # another thread is inside the two-input operator (port a)
    assert find_work_non_blocking(table) is None
    assert len(table.free) == 4 and len(p[0].q) == 1 and len(two[1].q) == 1
    m.release()
    port, item = find_work_non_blocking(table)
    assert port is two[1] and item == "y" and m.locked()


def test_retired_ports_leave_the_free_list_lazily():
    table = PortTable()
    p = ports(3)
    table.register(p)
    p[0].q.push("x")
    table.retire([p[0], p[1]])
    assert len(table) == 1 and len(p[0].q) == 0
    assert find_work_non_blocking(table) is None
    assert list(table.free) == [p[2]]  # the retired ones were dropped when popped
    table.give_back(p[0])  # a checked-out retired port is not pushed back
    assert list(table.free) == [p[2]]


# -- operators for the threaded tests --------------------------------------------------------

class Count(Source):
    def __init__(self, n, rows=1):
        self.n, self.i, self.rows = n, 0, rows

    def next_packet(self, ctx):
        if self.i >= self.n:
            return None
        p = ctx.new_packet({"x": np.int64}, self.rows)
        p["x"][:] = self.i
        self.i += 1
        return p


class Inc(StreamOperator):
    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE

    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.int64}, pkt.nrows)
        np.add(pkt["x"], 1, out=out["x"])
        ctx.send("out", out)


class Collect(StreamOperator):
    outputs = ()

    def __init__(self):
        self.seen = []

    def on_packet(self, ctx, port, pkt):
        self.seen.extend(int(v) for v in pkt["x"])

    def on_end(self, ctx):
        ctx.set_result(self.seen)


def streams(**kw):
    kw.setdefault("policy", "streams")
    kw.setdefault("pin", False)
    return Scheduler(**kw)


def check_quiescent(handle):
    """Exactly once done: nothing was left in any queue when the request ended, and every
    lock is free (spec 5.3 item 3)."""
    req = handle._request
    assert req.streams_dropped == 0
    for port in req.streams_ports:
        q = port.q
        assert len(q) == 0, port
        # The thread whose execution ended the request (the sink's) completes the future
        # from inside that execution: it lets go of its port's locks right after.
        deadline = time.monotonic() + 10
        while True:
            got_p = q.prod_try_lock()
            got_c = q.cons_try_lock()
            free = got_p and got_c and (port.mutex is None or not port.mutex.locked())
            if got_p:
                q.prod_unlock()
            if got_c:
                q.cons_unlock()
            if free or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        assert free, port


# -- exclusivity, FIFO, exactly once: random DAGs ----------------------------------------------

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(random_dags(), st.integers(1, 3), st.integers(1, 5), st.integers(1, 3),
       st.sampled_from(["dynamic", "dynamic", "manual", "dedicated"]))
def test_random_dags_exactly_once_in_order_one_thread_per_operator(spec, cap, copies, threads, model):
    """Guarded operators record a second thread entering (one thread per operator: the
    state lock of multi-input operators, the consumer lock of ports); check_result checks
    every edge's sequence (per-edge FIFO, fan-in included) and exactly once."""
    plan, edges = build_plan(spec)
    Guarded.violations = []
    kw = dict(model=model, queue_capacity=cap, packet_bytes=4096)
    if model == "dynamic":
        kw["threads"] = threads
    with streams(**kw) as s:
        handles = [s.submit(plan) for _ in range(copies)]
        for h in handles:
            check_result(h.result(WAIT_S), edges, spec[1])
            check_quiescent(h)
        gc.collect()
        assert s.bytes.held == 0
    assert Guarded.violations == []


class PortGuard(Operator):
    """Two inputs that may run concurrently (declared max_parallelism 2): records a
    second thread in the same *port* and whether the two ports ever overlapped."""

    inputs = ("a", "b")
    outputs = ("out",)
    state = M.STATELESS
    max_parallelism = 2

    def __init__(self):
        self.inside = [threading.Lock(), threading.Lock()]
        self.violations = 0
        self.seen = {"a": [], "b": []}
        self.overlap = 0
        self.closed = set()
        self.lock = threading.Lock()

    def process(self, ctx):
        for j, port in enumerate(self.inputs):
            pkt = ctx.recv(port)
            if pkt is None:
                if ctx.at_eos(port):
                    with self.lock:
                        self.closed.add(port)
                continue
            if not self.inside[j].acquire(False):
                self.violations += 1
                continue
            try:
                if self.inside[1 - j].locked():
                    self.overlap += 1
                time.sleep(0.0002)
                self.seen[port].append(int(pkt["x"][0]))
            finally:
                self.inside[j].release()
        with self.lock:
            done = len(self.closed) == 2 and not ctx.op._bx_finishing
            if done:
                ctx.set_result({"seen": self.seen, "violations": self.violations, "overlap": self.overlap})
                ctx.close()
                ctx.finish()


def test_ports_of_a_concurrent_operator_run_in_parallel_but_never_twice_each():
    plan = Plan("conc")
    plan.add("a", Count, 300)
    plan.add("b", Count, 300)
    plan.add("g", PortGuard)
    plan.add("sink", Collect)
    plan.connect("a", "g.a")
    plan.connect("b", "g.b")
    plan.connect("g", "sink")
    with streams(threads=2, queue_capacity=8) as s:
        res = s.submit(plan).result(WAIT_S)["g"]
    assert res["violations"] == 0
    assert res["seen"] == {"a": list(range(300)), "b": list(range(300))}


# -- bounded queues, reSchedule -------------------------------------------------------------

class Slow(StreamOperator):
    state = M.STATELESS

    def __init__(self, s):
        self.s = s

    def on_packet(self, ctx, port, pkt):
        time.sleep(self.s)
        ctx.send("out", pkt)


@pytest.mark.parametrize("cap", [1, 4, 8])
def test_reschedule_executes_only_the_blocked_port_at_most_limit_plus_one_per_hold(cap, monkeypatch):
    plan = Plan("bp")
    plan.add("src", Count, 200)
    plan.add("a", Inc)
    plan.add("slow", Slow, 0.0005)
    plan.add("b", Inc)
    plan.add("sink", Collect)
    plan.chain("src", "a", "slow", "b", "sink")
    tl = threading.local()
    log = {"holds": [], "wrong_port": 0, "over": 0, "on_source": 0, "executes": 0}
    orig_push = SPSCEnforcer.push

    def push(self, item):
        st_ = getattr(tl, "st", None)
        if st_ and st_[-1][0] == "R" and st_[-1][1].q is self:
            if st_[-1][2]:
                log["holds"].append(st_[-1][2])
            st_[-1][2] = 0  # a retry of the push ends a lock hold
        ok = orig_push(self, item)
        if len(self.queue) > self.capacity:
            log["over"] += 1
        return ok

    monkeypatch.setattr(SPSCEnforcer, "push", push)
    # One scheduler thread: while it sleeps in `slow`, the source's own thread finds the
    # queue of `a` full and free, and drains it through reSchedule.
    with streams(threads=1, queue_capacity=cap) as s:
        pol = s.policy
        orig_rs, orig_ex = pol.re_schedule, pol.execute

        def re_schedule(w, port, item):
            st_ = tl.__dict__.setdefault("st", [])
            st_.append(["R", port, 0])
            try:
                orig_rs(w, port, item)
            finally:
                top = st_.pop()
                if top[2]:
                    log["holds"].append(top[2])

        def execute(w, port, item):
            st_ = tl.__dict__.setdefault("st", [])
            log["executes"] += 1
            if st_ and st_[-1][0] == "R":
                if st_[-1][1] is not port:
                    log["wrong_port"] += 1
                st_[-1][2] += 1
                if not w.is_scheduler_thread:
                    log["on_source"] += 1
            st_.append(["E", port])
            try:
                orig_ex(w, port, item)
            finally:
                st_.pop()

        pol.re_schedule, pol.execute = re_schedule, execute
        h = s.submit(plan)
        assert h.result(WAIT_S) == list(range(2, 202))
        check_quiescent(h)
        limit = pol.resched_limit
    assert limit == cap // 4
    assert log["over"] == 0 and log["wrong_port"] == 0
    assert log["holds"], "no reSchedule drained anything: the test did not fill a queue"
    assert max(log["holds"]) <= limit + 1
    if cap == 1:
        assert log["on_source"] > 0  # the source's own thread executed downstream ports


class Tagged(StreamOperator):
    """Sink recording which thread executed each tuple."""

    outputs = ()

    def __init__(self, gate):
        self.gate = gate
        self.by = []

    def on_packet(self, ctx, port, pkt):
        self.gate(int(pkt["x"][0]))
        self.by.append((int(pkt["x"][0]), threading.current_thread().name))

    def on_end(self, ctx):
        ctx.set_result(self.by)


# -- suspension ----------------------------------------------------------------------------

def test_suspension_is_non_preemptive_and_a_parked_thread_executes_nothing_until_woken():
    from bobox_sched.stream.sources import QueueSource, StreamChannel

    entered, release = threading.Event(), threading.Event()
    first = []

    def gate(x):
        if x == 0:
            first.append(threading.current_thread().name)
            entered.set()
            assert release.wait(WAIT_S)

    ch = StreamChannel(capacity=None)
    plan = Plan("susp")
    plan.add("src", QueueSource, ch)
    plan.add("sink", Tagged, gate)
    plan.chain("src", "sink")
    with streams(threads=2) as s:
        pol = s.policy
        h = s.submit(plan)
        ch.put({"x": np.array([0])})
        assert entered.wait(WAIT_S)
        (w,) = [w for w in s.workers if w.thread.name == first[0]]
        w.notify_suspended()  # told while inside an operator: it finishes the tuple first
        time.sleep(0.05)
        assert not w.in_suspension
        release.set()
        until(lambda: w.in_suspension)
        for i in range(1, 200):
            ch.put({"x": np.array([i])})
        until(lambda: pol.total_executed() >= 200)
        w.notify_wakeup()
        for i in range(200, 400):
            ch.put({"x": np.array([i])})
        ch.close()
        by = h.result(WAIT_S)
    assert [x for x, _ in by] == list(range(400))
    assert by[0][1] == w.thread.name  # the tuple it was in was completed by it
    assert all(name != w.thread.name for x, name in by if 1 <= x < 200)


class AlwaysOk:
    usage = 0.0
    limit = 1.0

    def sample(self):
        return 0.0

    def acceptable(self):
        return True


def test_elastic_level_equals_running_threads_after_each_period():
    with streams(elastic=True, min_level=1, max_level=4, period_s=3600, steps="linear") as s:
        pol = s.policy
        assert len(s.workers) == 4 and pol.level == 1
        until(lambda: sum(w.in_suspension for w in s.workers) == 3)
        pol.cpu_guard = AlwaysOk()  # CPU always acceptable for this synthetic curve
        curve = {1: 100.0, 2: 200.0, 3: 300.0, 4: 250.0}
        levels = []
        for _ in range(8):
            lvl = pol.adapt(curve[pol.level])
            levels.append(lvl)
            until(lambda: sum(not w.in_suspension for w in s.workers) == lvl)
            assert pol.running_threads() == lvl
        assert levels[:4] == [2, 3, 4, 3] and levels[-1] == 3
        assert [e for *_, e in pol.trace] == ["adapt"] * 8


def test_a_thread_stuck_in_an_operator_is_unsuspendable_and_adaptation_is_postponed():
    from bobox_sched.stream.sources import QueueSource, StreamChannel

    entered, release = threading.Event(), threading.Event()
    where = []

    def gate(x):
        if x == 0:
            where.append(threading.current_thread().name)
            entered.set()
            assert release.wait(WAIT_S)

    ch = StreamChannel(capacity=None)
    plan = Plan("stuck")
    plan.add("src", QueueSource, ch)
    plan.add("sink", Tagged, gate)
    plan.chain("src", "sink")
    with streams(elastic=True, min_level=1, max_level=3, threads=3, period_s=3600) as s:
        pol = s.policy
        h = s.submit(plan)
        ch.put({"x": np.array([0])})
        assert entered.wait(WAIT_S)
        (w,) = [w for w in s.workers if w.thread.name == where[0]]
        with pol._ctl_lock:  # last period's decision: suspend that thread
            pol.suspended_list.append(w)
            w.notify_suspended()
        time_before = pol.elastic.time
        assert pol.adapt(1000.0) == 3
        assert not w.suspendable and not w.suspended and pol.postponed == 1
        assert pol.trace[-1][3] == "postponed" and pol.elastic.time == time_before
        assert pol.running_threads() == 3  # another thread would be suspended if the level were lower
        release.set()
        ch.close()
        h.result(WAIT_S)


# -- shutdown and portsClosed ----------------------------------------------------------------

def test_find_work_blocking_returns_false_only_on_shutdown_or_ports_closed():
    with streams(threads=1) as s:
        pol = s.policy
        for flag in ("notify_shutdown", "notify_ports_closed"):
            w = StreamsWorker(s, 0, None, None)
            out = []
            t = threading.Thread(target=lambda w=w: out.append(pol.next_task(w)))
            t.start()
            time.sleep(0.05)
            assert t.is_alive()  # nothing to do: blocks (backing off), does not return
            getattr(w, flag)()
            t.join(WAIT_S)
            assert out == [None]
        workers = list(s.workers)
    assert all(not w.thread.is_alive() and w.ports_closed for w in workers)
    assert s.policy.g_ports_closed and s.policy.g_shutdown


def test_shutdown_joins_every_thread_with_a_request_running():
    from bobox_sched.stream.sources import QueueSource, StreamChannel

    ch = StreamChannel(capacity=4)
    plan = Plan("forever")
    plan.add("src", QueueSource, ch)
    plan.add("sink", Collect)
    plan.chain("src", "sink")
    s = streams(elastic=True, min_level=1, max_level=3, period_s=0.05)
    h = s.submit(plan)
    ch.put({"x": np.array([1])})
    s.shutdown(wait=True, cancel=True)
    assert h.state == "cancelled"
    assert all(not w.thread.is_alive() for w in s.workers)
    assert not s.policy._ctl_thread.is_alive() and not s.policy.op_threads


# -- deadlock rule ---------------------------------------------------------------------------

class Gate(Operator):
    """Blocks on its data port until credit arrives on its control port (like SPL's Gate):
    needs another thread to execute the control port while one is blocked in data."""

    inputs = ("data", "ctrl")
    outputs = ("out",)
    state = M.STATELESS
    max_parallelism = 2

    def __init__(self, blocked):
        self.cond = threading.Condition()
        self.credit = 0
        self.blocked = blocked
        self.closed = set()

    def process(self, ctx):
        p = ctx.recv("data")
        if p is not None:
            with self.cond:
                while self.credit == 0:
                    self.blocked.set()
                    if not self.cond.wait(WAIT_S):
                        raise RuntimeError("gate starved: deadlock")
                self.credit -= 1
            ctx.send("out", p)
        c = ctx.recv("ctrl")
        if c is not None:
            with self.cond:
                self.credit += c.nrows
                self.cond.notify_all()
        with self.cond:
            for port in self.inputs:
                if ctx.at_eos(port):
                    self.closed.add(port)
            if len(self.closed) == 2 and not ctx.op._bx_finishing:
                ctx.close()
                ctx.finish()


class Credits(Source):
    def __init__(self, n, after):
        self.n, self.i, self.after = n, 0, after

    def next_packet(self, ctx):
        if self.i == 0:
            assert self.after.wait(WAIT_S)  # only once the gate is blocked
        if self.i >= self.n:
            return None
        self.i += 1
        return ctx.new_packet({"x": np.int64}, 1)


def test_no_deadlock_with_a_gate_like_operator_at_the_minimum_level():
    blocked = threading.Event()
    plan = Plan("gate")
    plan.add("data", Count, 50)
    plan.add("ctrl", Credits, 50, blocked)
    plan.add("gate", Gate, blocked)
    plan.add("sink", Collect)
    plan.connect("data", "gate.data")
    plan.connect("ctrl", "gate.ctrl")
    plan.connect("gate", "sink")
    with streams(elastic=True, max_level=3, period_s=3600) as s:
        h = s.submit(plan)
        assert s.policy.min_level == 3 == s.policy.level  # 1 + the gate's 2 input ports
        assert h.result(WAIT_S) == list(range(50))


# -- deep pipelines ---------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["dynamic", "manual"])
def test_a_1000_operator_pipeline_with_queue_capacity_1(model):
    n_ops = 1000
    plan = Plan("deep")
    plan.add("src", Count, 30)
    names = ["src"]
    for i in range(n_ops):
        plan.add(f"op{i}", Inc)
        names.append(f"op{i}")
    plan.add("sink", Collect)
    names.append("sink")
    plan.chain(*names)
    kw = {"threads": 2} if model == "dynamic" else {}
    with streams(model=model, queue_capacity=1, **kw) as s:
        h = s.submit(plan)
        assert h.result(WAIT_S) == [i + n_ops for i in range(30)]
        check_quiescent(h)
        assert s.policy.depth == n_ops + 2


# -- concurrent requests ----------------------------------------------------------------------

def test_concurrent_requests_register_and_retire_ports_and_the_free_list_is_conserved():
    plan = Plan("p")
    plan.add("src", Count, 40)
    plan.add("a", Inc)
    plan.add("b", Inc)
    plan.add("sink", Collect)
    plan.chain("src", "a", "b", "sink")
    with streams(threads=2, queue_capacity=2) as s:
        pol = s.policy
        hs = [s.submit(plan) for _ in range(20)]
        assert [h.result(WAIT_S) for h in hs] == [list(range(2, 42))] * 20
        until(lambda: len(pol.table) == 0 and len(pol.table.free) == 0)  # retired, then dropped
        from bobox_sched.stream.sources import QueueSource, StreamChannel

        ch = StreamChannel(capacity=None)
        live = Plan("live")
        live.add("src", QueueSource, ch)
        live.add("a", Inc)
        live.add("sink", Collect)
        live.chain("src", "a", "sink")
        h = s.submit(live)
        for i in range(50):
            ch.put({"x": np.array([i])})
        sink = h._request.ops["sink"]
        until(lambda: len(sink.seen) == 50)
        # quiescent, request alive: every port on the free list exactly once, none taken
        mine = sorted(p.pid for p in h._request.streams_ports)
        until(lambda: sorted(p.pid for p in list(pol.table.free)) == mine)
        assert all(len(p.q) == 0 for p in h._request.streams_ports)
        ch.close()
        assert h.result(WAIT_S) == list(range(1, 51))


# -- options ------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,msg", [
    (dict(threads=0), "threads"),
    (dict(elastic="yes"), "elastic"),
    (dict(min_level=2), "needs elastic=True"),
    (dict(elastic=True, min_level=3, max_level=2), "above max_level"),
    (dict(elastic=True, period_s=0), "period_s"),
    (dict(elastic=True, sens=1.5), "sens"),
    (dict(elastic=True, cpu_limit=0), "cpu_limit"),
    (dict(elastic=True, form="x"), "form"),
    (dict(model="x"), "model"),
    (dict(model="manual", threads=2), "not known for model 'manual'"),
    (dict(queue_capacity=0), "queue_capacity"),
    (dict(placement="x"), "placement"),
    (dict(nonsense=1), "nonsense"),
])
def test_bad_options_are_refused_before_anything_starts(kw, msg):
    before = threading.active_count()
    with pytest.raises(BoboxError, match=msg):
        Scheduler(policy="streams", **kw)
    assert threading.active_count() == before


def test_other_policies_refuse_options():
    with pytest.raises(BoboxError, match="policy 'bobox' has no option 'threads'"):
        Scheduler(policy="bobox", threads=2)


def test_thread_places_follow_the_numa_order():
    from test_policy_bobox import make_topology

    topo = make_topology(2, 2)
    assert [n.os_index for n in placement(topo, 6, "fill")] == [0, 0, 1, 1, 0, 0]
    assert [n.os_index for n in placement(topo, 6, "interleave")] == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("order", ["fill", "interleave"])
def test_threads_are_pinned_to_their_node(order):
    import topology
    from topology.virtual import virtual_topology

    topo = virtual_topology(topology.probe(), 2)
    cpus = {n.os_index: set(n.cpus) for n in topo.cpu_nodes}
    with Scheduler(topology=topo, policy="streams", threads=3, placement=order) as s:
        until(lambda: all(w.pinned_mask is not None for w in s.workers))
        assert [w.node_id for w in s.workers] == [n.os_index for n in placement(topo, 3, order)]
        assert all(w.pinned_mask == cpus[w.node_id] for w in s.workers)
        assert s.stats()["policy_detail"]["placement"] == order


class Dribble(Operator):
    """Stashes what arrives and emits one stashed packet every second run, asking to be
    run again (ctx.reschedule) while some are left: runs without a tuple (RERUN)."""

    def __init__(self, delay=None):
        self.inputs, self.outputs = ("in",), ("out",)
        self.stash = []
        self.delay = delay
        self.runs = 0

    def process(self, ctx):
        self.runs += 1
        while True:
            p = ctx.recv("in")
            if p is None:
                break
            self.stash.append(p)
        if self.stash and self.runs % 2 == 0:
            ctx.send("out", self.stash.pop(0))
        if self.stash:
            ctx.reschedule(self.delay)
        elif ctx.at_eos("in"):
            ctx.close()
            ctx.finish()


@pytest.mark.parametrize("model", ["dynamic", "manual", "dedicated"])
@pytest.mark.parametrize("delay", [None, 0.001])
def test_reschedule_of_an_operator_with_inputs_runs_it_again(model, delay):
    plan = Plan("dribble")
    plan.add("src", Count, 60)
    plan.add("d", Dribble, delay)
    plan.add("sink", Collect)
    plan.chain("src", "d", "sink")
    with streams(model=model, queue_capacity=2) as s:
        h = s.submit(plan)
        assert h.result(WAIT_S) == list(range(60))
        assert s.timers.fired > 0
        check_quiescent(h)


class Boom(StreamOperator):
    def on_packet(self, ctx, port, pkt):
        if int(pkt["x"][0]) == 7:
            raise ValueError("boom at 7")
        ctx.send("out", pkt)


@pytest.mark.parametrize("model", ["dynamic", "manual", "dedicated"])
def test_an_operator_that_raises_fails_only_its_request(model):
    bad = Plan("bad")
    bad.add("src", Count, 100)
    bad.add("boom", Boom)
    bad.add("sink", Collect)
    bad.chain("src", "boom", "sink")
    good = Plan("good")
    good.add("src", Count, 50)
    good.add("a", Inc)
    good.add("sink", Collect)
    good.chain("src", "a", "sink")
    with streams(model=model, queue_capacity=1) as s:
        hb, hg = s.submit(bad), s.submit(good)
        with pytest.raises(ValueError, match="boom at 7"):
            hb.result(WAIT_S)
        assert hb.failed_operator == "boom"
        assert hg.result(WAIT_S) == list(range(1, 51))
