"""Stress: hypothesis-generated random DAGs and packet streams, many concurrent requests,
on both policies and on one- and multi-node topologies.

Checked for every request: every packet delivered exactly once and in order on every
edge, never two threads inside one operator (instrumented), every request completes
within a bounded wait (no deadlock), and no packet memory is left held afterwards."""

import gc
import threading
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from ops import Guarded
from test_policy_bobox import make_topology

from bobox_sched import Plan, Scheduler

WAIT_S = 120  # bounded wait per request: far above any honest run (~0.1 s)


class StressSource(Guarded):
    def __init__(self, count, outputs):
        super().__init__()
        self.outputs = outputs
        self.count = count
        self.sent = {p: 0 for p in outputs}

    def body(self, ctx):
        if ctx.blocked:
            return
        if self.sent[self.outputs[0]] >= self.count:
            ctx.close()
            ctx.set_result({"recv": {}, "sent": dict(self.sent)})
            ctx.finish()
            return
        for port in self.outputs:
            pkt = ctx.new_packet({"seq": np.int64}, 1)
            pkt["seq"][0] = self.sent[port]
            self.sent[port] += 1
            ctx.send(port, pkt)
        ctx.reschedule()


class StressNode(Guarded):
    """Receives on every input, forwards `fanout` packets per received packet on every
    output, numbering each output's packets 0, 1, 2, ..."""

    def __init__(self, inputs, outputs, fanout, yield_every):
        super().__init__()
        self.inputs = inputs
        self.outputs = outputs
        self.fanout = fanout
        self.yield_every = yield_every
        self.recv = {p: [] for p in inputs}
        self.sent = {p: 0 for p in outputs}
        self.ended = set()
        self.runs = 0

    def body(self, ctx):
        self.runs += 1
        if self.yield_every and self.runs % self.yield_every == 0:
            time.sleep(0)  # give other threads a chance to race into this operator
        for port in self.inputs:
            if ctx.blocked:
                return
            pkt = ctx.recv(port)
            if pkt is not None:
                self.recv[port].append(int(pkt["seq"][0]))
                for out in self.outputs:
                    for _ in range(self.fanout):
                        o = ctx.new_packet({"seq": np.int64}, 1)
                        o["seq"][0] = self.sent[out]
                        self.sent[out] += 1
                        ctx.send(out, o)
            if ctx.at_eos(port):
                self.ended.add(port)
        if len(self.ended) == len(self.inputs) and not ctx.blocked:
            ctx.close()
            ctx.set_result({"recv": self.recv, "sent": dict(self.sent)})
            ctx.finish()


@st.composite
def random_dags(draw):
    n_src = draw(st.integers(1, 3))
    n = draw(st.integers(n_src + 1, 9))
    preds = {}
    for j in range(n_src, n):
        k = draw(st.integers(1, min(3, j)))
        preds[j] = draw(st.lists(st.integers(0, j - 1), min_size=k, max_size=k, unique=True))
    for i in range(n_src):  # every source feeds someone (unconnected ports are invalid)
        if not any(i in ps for ps in preds.values()):
            j = draw(st.integers(n_src, n - 1))
            preds[j].append(i)
    succ = {i: [] for i in range(n)}
    for j, ps in preds.items():
        for i in ps:
            succ[i].append(j)
    counts = [draw(st.integers(0, 25)) for _ in range(n_src)]
    fanouts = [draw(st.integers(0, 2)) for _ in range(n)]
    yields = [draw(st.sampled_from([0, 1, 3])) for _ in range(n)]
    return n_src, n, preds, succ, counts, fanouts, yields


def build_plan(spec):
    n_src, n, preds, succ, counts, fanouts, yields = spec
    plan = Plan("stress")
    edges = []
    for i in range(n):
        outs = tuple(f"o{j}" for j in succ[i])
        if i < n_src:
            plan.add(f"n{i}", StressSource, counts[i], outs)
        else:
            ins = tuple(f"i{p}" for p in preds[i])
            plan.add(f"n{i}", StressNode, ins, outs, fanouts[i], yields[i])
    for j, ps in preds.items():
        for i in ps:
            plan.connect(f"n{i}.o{j}", f"n{j}.i{i}")
            edges.append((i, j))
    return plan, edges


def check_result(res, edges, n):
    assert set(res) == {f"n{i}" for i in range(n)}, "an operator never finished"
    for i, j in edges:
        sent = res[f"n{i}"]["sent"][f"o{j}"]
        got = res[f"n{j}"]["recv"][f"i{i}"]
        assert got == list(range(sent)), f"edge n{i}->n{j}: sent {sent}, received {got[:20]}..."


SETTINGS = settings(max_examples=80, deadline=None)


def run_stress(spec, sched_kwargs, copies):
    plan, edges = build_plan(spec)
    Guarded.violations = []
    with Scheduler(**sched_kwargs) as s:
        handles = [s.submit(plan) for _ in range(copies)]
        results = [h.result(WAIT_S) for h in handles]
        for r in results:
            check_result(r, edges, spec[1])
        gc.collect()
        assert s.bytes.held == 0
    assert Guarded.violations == []


@SETTINGS
@given(random_dags(), st.integers(1, 3), st.integers(2, 8), st.sampled_from(["bobox", "simple"]))
def test_random_dags_single_node(spec, cap, copies, policy):
    run_stress(spec, dict(policy=policy, buffer_packets=cap, packet_bytes=4096), copies)


@SETTINGS
@given(random_dags(), st.integers(1, 2), st.integers(2, 8))
def test_random_dags_four_nodes_with_fast_balancer(spec, cap, copies):
    # 4 nodes x 1 thread on this machine's CPUs (unpinned), balancer every 5 ms so that
    # migrations and shares happen while requests run.
    run_stress(
        spec,
        dict(topology=make_topology(4, 1), pin=False, threads_per_node=1, buffer_packets=cap,
             balance_interval=0.005),
        copies,
    )


def test_balancer_acts_under_load_with_real_threads():
    """Many requests forced onto node 0 of a 4-node topology: the balancer must move or
    share work to the idle nodes, and every answer must still be right."""
    from ops import Range, Slow, SumSink

    plan = Plan("slow")
    plan.add("src", Range, 400, 10)
    plan.add("slow", Slow, 0.001)
    plan.add("sink", SumSink)
    plan.chain("src", "slow", "sink")
    with Scheduler(topology=make_topology(4, 1), pin=False, threads_per_node=1, balance_interval=0.01) as s:
        hs = [s.submit(plan, node=0) for _ in range(6)]
        assert [h.result(WAIT_S) for h in hs] == [sum(range(400))] * 6
        st_ = s.stats()
    assert st_["migrations"] + st_["shares"] >= 1
    moved = [h.stats for h in hs if h.stats["migrations"] or h.stats["shares"]]
    assert moved and any(set(m["nodes"]) - {0} for m in moved)


def test_many_concurrent_submitters_and_requests():
    spec = (1, 4, {1: [0], 2: [0, 1], 3: [1, 2]}, {0: [1, 2], 1: [2, 3], 2: [3], 3: []}, [40], [1, 1, 2, 1], [0, 1, 0, 3])
    plan, edges = build_plan(spec)
    Guarded.violations = []
    with Scheduler(buffer_packets=1, packet_bytes=4096) as s:
        errors = []

        def client():
            try:
                for h in [s.submit(plan) for _ in range(10)]:
                    check_result(h.result(WAIT_S), edges, 4)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=client) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert errors == []
        assert s.stats()["requests_done"] == 80
    assert Guarded.violations == []


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.integers(1, 3), st.booleans(), st.sampled_from([None, 0.002]))
def test_no_lost_wakeup_with_sleeping_nodes_and_one_packet_buffers(spec, copies, on_node0, balance):
    """The lock-free wake decision (a pusher's only queued task wakes nobody; a deferred
    push by a worker with nothing queued wakes nobody): with one-packet buffers every
    send may block and every take wakes a waiter, and with few requests on 2 nodes x 2
    threads most workers sleep most of the time. A lost wake-up shows as a hang."""
    plan, edges = build_plan(spec)
    Guarded.violations = []
    with Scheduler(topology=make_topology(2, 2), pin=False, threads_per_node=2, buffer_packets=1,
                   balance_interval=balance) as s:
        handles = [s.submit(plan, node=0 if on_node0 else None) for _ in range(copies)]
        for h in handles:
            check_result(h.result(WAIT_S), edges, spec[1])
        gc.collect()
        assert s.bytes.held == 0
    assert Guarded.violations == []
