"""The ordered policy on real threads (spec 000 T5, T6, T8): random chains of stateless,
partitioned and stateful operators (filters that drop whole packets, flat-maps, empty
packets, skewed keys, window punctuations) against the sequential reference, for
heuristics x reorder modes x schemes x capacities x row orders x worker counts: egress
rows and punctuation positions byte-identical, final per-key states identical, nothing
lost or duplicated (the row counts and bytes), no deadlock (bounded waits), never more
threads in an operator than declared nor two in one bucket (instrumented)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ordered_ops import GUARDS, build, make_items
from ordered_ops import sequential as _sequential

from bobox_sched import Scheduler
from bobox_sched.policies.ordered import policy as OP

WAIT_S = 120  # far above an honest run (~0.1 s): a deadlock fails, not hangs


@pytest.fixture(autouse=True, scope="module")
def frequent_thread_switches():
    """Switch threads every 50 us instead of 5 ms, so that more interleavings of the
    workers' steps happen in these short runs."""
    import sys

    old = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    yield
    sys.setswitchinterval(old)

HEURISTICS = ["ct", "lp", "et", "qst"]
REORDERS = ["nonblocking", "lock"]
SCHEMES = ["hybrid", "partitioned", "shared"]
CAPACITIES = [1, 2, 64]
ROW_ORDERS = ["exact", "packet"]
WORKERS = [1, 2, 4]

# A chain with every kind of unit: a filter that drops whole packets (selectivity 0 on
# some), a partitioned running sum that emits 0..2 rows per row, a flat-map (x3), a
# range-partitioned operator, a stateful one.
RICH_CHAIN = [
    ("sl", "filter", {"mod": 4, "rem": 1}),
    ("ps", {"skip": 3, "dup": True}),
    ("sl", "flatmap", {"fan": 3}),
    ("ps", {"partitioner": "range", "key_range": (0, 40), "partitions": 8}),
    ("sf",),
]


def run_ordered(chain, items, run_id, workers, **opts):
    with Scheduler(policy="ordered", threads_per_node=workers, pin=False, **opts) as s:
        pol = s.policy
        stages = []
        done = pol.request_done

        def request_done(request):  # keep the chain's stages for the quiescence check
            with pol._lock:
                stages.extend(stage for ch in pol.chains if ch.request is request for stage in ch.stages)
            done(request)

        pol.request_done = request_done
        h = s.submit(build(chain, items, run_id=run_id))
        try:
            res = h.result(WAIT_S)
        except TimeoutError:
            raise AssertionError(f"hung ({workers} workers, {opts}):\n{hang_report(s, h)}") from None
        stats = s.stats()
    # every worker has exited: nothing may be left in flight (spec T5, "no packet leaked")
    assert stages, "the request's stages were not seen"
    for stage in stages:
        where = f"{stage.name} ({workers} workers, {opts})"
        assert stage.reorder.pending() == 0, f"units left in the reorder buffer of {where}"
        assert stage.credits.available() == stage.capacity, f"dequeue credits not given back in {where}"
        queued = len(stage.worklist) if stage.worklist is not None else len(stage.queues)
        assert queued == 0, f"units left in the worklist of {where}"
        if stage.is_hybrid:
            assert all(c.load() == 0 for c in stage.queues.count), f"a bucket count is not 0 in {where}"
    return by_operator(res), stats


def hang_report(s, h) -> str:
    """Where every thread is, and the chain's per-operator state, when a run hung: a rare
    hang (once in CI under 3.12: scheme shared, capacity 1, one-packet buffers; not
    reproduced in 40 runs of that test and 15 of this file) must explain itself."""
    import sys
    import traceback

    lines = []
    for tid, frame in sys._current_frames().items():
        lines.append(f"--- thread {tid}")
        lines.extend(traceback.format_stack(frame)[-8:])
    pol = s.policy
    lines.append(f"idle workers: {len(pol.idle)}, drains queued: {len(pol.drains)}")
    for st in pol.chain_stats(h.id) or ():
        lines.append(str({k: v for k, v in st.items() if not isinstance(v, (list, dict))}))
    return "".join(x if x.endswith("\n") else x + "\n" for x in lines)


def by_operator(res):
    """{operator: result}: a request whose only result is the sink's returns it bare."""
    return {"sink": res} if "rows" in res else res


def check_run(chain, items, run_id, ref, **opts):
    res, stats = run_ordered(chain, items, run_id, **opts)
    assert res["sink"]["rows"] == ref["sink"]["rows"], "rows lost or duplicated"
    assert res["sink"]["k"] == ref["sink"]["k"] and res["sink"]["x"] == ref["sink"]["x"], \
        f"egress differs from the sequential run ({opts})"
    assert res["sink"]["puncts"] == ref["sink"]["puncts"], "punctuations moved relative to the rows"
    for name in ref:
        assert res[name] == ref[name], f"final state of {name} differs ({opts})"
    bad = {name: g.violations[:3] for (rid, name), g in GUARDS.items() if rid == run_id and g.violations}
    assert not bad, f"parallelism beyond the declaration: {bad}"
    return stats


_ids = itertools.count(1)


def sequential(chain, items, **kw):
    return by_operator(_sequential(chain, items, **kw))


@pytest.fixture(scope="module")
def rich():
    rng = np.random.default_rng(7)
    items = make_items(60, 40, 40, rng, zipf=1.4, empty_every=7, window_every=5)
    refs = {ro: sequential(RICH_CHAIN, items, row_order=ro) for ro in ROW_ORDERS}
    return items, refs


@pytest.mark.parametrize("heuristic", HEURISTICS)
@pytest.mark.parametrize("reorder", REORDERS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_cross_product(rich, heuristic, reorder, scheme):
    """The full cross product (4 x 2 x 3 x 3 x 2 x 3 = 432 runs) of the runtime's
    switches on one chain that has every kind of unit; 24 tests of 18 runs each."""
    items, refs = rich
    for capacity, row_order, workers in itertools.product(CAPACITIES, ROW_ORDERS, WORKERS):
        check_run(RICH_CHAIN, items, next(_ids), refs[row_order], workers=workers, heuristic=heuristic,
                  reorder=reorder, scheme=scheme, capacity=capacity, row_order=row_order)


MAX_FANOUT = 2000


@st.composite
def chains(draw):
    n = draw(st.integers(1, 5))
    chain = []
    # Rows multiply along flat-maps: three of fan ~40 (a 64 000-fold input, ~120 s on the
    # one-thread reference run) timed out the reference on a loaded 2-core machine. The
    # product of the fans stays under MAX_FANOUT, which keeps every run a few seconds.
    fanout = 1
    for _ in range(n):
        kind = draw(st.sampled_from(["sl", "ps", "sf"]))
        if kind == "sl":
            mode = draw(st.sampled_from(["map", "filter", "flatmap"]))
            kw = {"mod": draw(st.integers(2, 5)), "rem": draw(st.integers(0, 1))} if mode == "filter" else \
                {"fan": draw(st.integers(1, max(1, min(50, MAX_FANOUT // fanout))))} if mode == "flatmap" else {}
            fanout *= kw.get("fan", 1)
            kw["par"] = draw(st.sampled_from([1, 2, 64]))
            kw["shake"] = draw(st.sampled_from([0, 2]))
            chain.append(("sl", mode, kw))
        elif kind == "ps":
            kw = {"skip": draw(st.sampled_from([0, 2, 5])), "dup": draw(st.booleans()),
                  "partitions": draw(st.sampled_from([1, 3, 16, 100, "auto"])),
                  "par": draw(st.sampled_from([1, 2, 1 << 20])), "shake": draw(st.sampled_from([0, 3]))}
            if draw(st.booleans()):
                kw.update(partitioner="range", key_range=(0, draw(st.integers(5, 60))))
            chain.append(("ps", kw))
        else:
            chain.append(("sf",))
    return chain


@functools.lru_cache(maxsize=1)
def one_node():
    """This machine's topology seen as one node (``topology.virtual``), so that
    threads_per_node is the number of workers."""
    from topology import probe
    from topology.virtual import virtual_topology

    return virtual_topology(probe(), 1)


def auto_resolved(chain, workers):
    """`chain` with partitions="auto" replaced by the p the ordered policy picks for
    `workers`: with row_order="packet" a packet's rows come out in bucket order, so the
    sequential reference needs the same p (with "exact" any p gives the same egress)."""
    out = []
    for spec in chain:
        if spec[0] == "ps" and spec[1].get("partitions") == "auto":
            m = min(spec[1].get("par", 1 << 20), workers)
            spec = ("ps", {**spec[1], "partitions": 1 if m == 1 else min(100, 2 * m)})
        out.append(spec)
    return out


@settings(max_examples=60, deadline=None)
@given(chains(), st.integers(0, 2**31), st.sampled_from(HEURISTICS), st.sampled_from(REORDERS),
       st.sampled_from(SCHEMES), st.sampled_from(CAPACITIES + [3]), st.sampled_from(ROW_ORDERS),
       st.sampled_from(WORKERS), st.sampled_from([None, 1, 2]), st.sampled_from([0, 1.1, 2.0]))
def test_random_chains(chain, seed, heuristic, reorder, scheme, capacity, row_order, workers, worklist, zipf):
    """Random chains, inputs and switches (hypothesis samples the product that is too big
    to run whole): skewed (Zipf) or uniform keys, empty packets, windows."""
    rng = np.random.default_rng(seed)
    items = make_items(int(rng.integers(0, 40)), 40, int(rng.integers(1, 80)), rng, zipf=zipf,
                       empty_every=int(rng.integers(0, 5)), window_every=int(rng.integers(0, 4)))
    ref = sequential(chain if row_order == "exact" else auto_resolved(chain, workers), items, row_order=row_order)
    check_run(chain, items, next(_ids), ref, workers=workers, heuristic=heuristic, reorder=reorder,
              scheme=scheme, capacity=capacity, row_order=row_order, worklist=worklist, topology=one_node())


# ---------------------------------------------------------------------------------------
# T8: end of stream with capacity 1 and one-packet buffers

@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("reorder", REORDERS)
def test_end_of_stream_with_capacity_1_and_one_packet_buffers(rich, scheme, reorder):
    items, refs = rich
    for workers in (1, 2, 4):
        check_run(RICH_CHAIN, items, next(_ids), refs["exact"], workers=workers, scheme=scheme, reorder=reorder,
                  capacity=1, worklist=1)


def test_empty_stream_and_only_punctuations():
    from bobox_sched.control.punct import Window

    for items in ([], [Window(1), Window(2)], [{"k": np.zeros(0, np.int64), "x": np.zeros(0, np.int64)}]):
        ref = sequential(RICH_CHAIN, items)
        check_run(RICH_CHAIN, items, next(_ids), ref, workers=2, capacity=1, worklist=1)


def test_spin_mode_matches_too():
    """window_full="spin" (the paper's retry loop instead of credits) stays ordered."""
    rng = np.random.default_rng(3)
    items = make_items(20, 30, 20, rng)
    chain = [("sl", "flatmap", {"fan": 5}), ("ps", {"partitions": 4})]
    ref = sequential(chain, items)
    check_run(chain, items, next(_ids), ref, workers=2, capacity=4, window_full="spin")


@pytest.mark.parametrize("workers,par,expect", [(1, 1 << 20, 1), (2, 1 << 20, 4), (4, 1 << 20, 8), (4, 3, 6),
                                                 (64, 1 << 20, 100)])
def test_auto_partitions_follow_the_workers(workers, par, expect):
    """partitions="auto": with M = min(max_parallelism, workers), p = 1 if M = 1, else
    min(100, 2 x M) under ordered, and 1 under a policy that runs a packet at a time
    (simple: the sequential reference); the egress and the final per-key state are the
    same at every p. (One node: the workers are threads_per_node.)"""
    rng = np.random.default_rng(11)
    items = make_items(12, 30, 25, rng)
    chain = [("ps", {"partitions": "auto", "par": par}), ("ps", {"partitions": "auto", "partitioner": "range",
                                                                 "key_range": (0, 25), "skip": 2})]
    ref = sequential(chain, items)
    plan = build(chain, items, run_id=next(_ids))
    with Scheduler(policy="ordered", threads_per_node=workers, pin=False, topology=one_node()) as s:
        assert len(s.policy.workers) == workers
        h = s.submit(plan)
        res = by_operator(h.result(WAIT_S))
        ps = [st for st in s.policy.chain_stats(h.id) if st["kind"] == "partitioned"]
    assert [st["partitions"] for st in ps] == [expect, min(100, 2 * workers) if workers > 1 else 1]
    assert [st["M"] for st in ps] == [min(workers, par, expect), min(workers, 100)]
    assert res == ref
    rid = next(_ids)
    with Scheduler(policy="simple", threads_per_node=1, pin=False) as s:
        assert by_operator(s.submit(build(chain, items, run_id=rid)).result(WAIT_S)) == ref
    assert [GUARDS[(rid, t)].p for t in ("o0", "o1")] == [1, 1]


def test_auto_partitions_of_a_copied_instance():
    """Plan.add(name, instance) copies the instance per request: a copy of one whose p
    was already fixed (its cache copied with it) is resolved again at submit."""
    from ordered_ops import PS, Feed, Record

    from bobox_sched import Plan

    items = make_items(6, 20, 10, np.random.default_rng(5))
    template = PS(partitions="auto", tag="tpl")
    assert template.resolve_partitions(8) == 16
    plans = []
    for _ in range(2):
        plan = Plan("copied")
        plan.add("src", Feed, items)
        plan.add("o0", template)
        plan.add("sink", Record)
        plan.chain("src", "o0", "sink")
        plans.append(plan)
    with Scheduler(policy="ordered", threads_per_node=2, pin=False, topology=one_node()) as s:
        h = s.submit(plans[0])
        h.result(WAIT_S)
        assert [st["partitions"] for st in s.policy.chain_stats(h.id) if st["kind"] == "partitioned"] == [4]
    GUARDS.pop((0, "tpl"), None)
    with Scheduler(policy="simple", threads_per_node=1, pin=False) as s:
        s.submit(plans[1]).result(WAIT_S)
    assert GUARDS[(0, "tpl")].p == 1  # what on_slice saw


def test_auto_partitions_refused_with_range_bounds():
    from bobox_sched.control import model as M
    from bobox_sched.policies.ordered.partitioned import PartitionedOperator

    class R(PartitionedOperator):
        state = M.Partitioned("k")
        partitions = "auto"
        partitioner = "range"
        bounds = [1.0]

    with pytest.raises(ValueError, match="partitions='auto' with range partitioning needs key_range"):
        R()._partitioning()

    class Bad(PartitionedOperator):
        state = M.Partitioned("k")
        partitions = "many"

    with pytest.raises(ValueError, match="partitions must be a positive integer or 'auto', got 'many'"):
        Bad()._partitioning()


# ---------------------------------------------------------------------------------------
# T6: scheduler invariants at every decision

def test_scheduler_invariants_at_every_decision(monkeypatch, rich):
    items, refs = rich
    seen = {"decisions": 0, "sf_max": 0, "early": 0}
    errors = []
    orig_decide = OP.OrderedPolicy.decide
    orig_run = OP.OrderedPolicy._run_task

    def decide(self, w):
        got = orig_decide(self, w)
        if got is not None:
            stage, quota = got
            seen["decisions"] += 1
            # decide() runs under _lock, but a stage's worklist, credits and end are also
            # moved by workers already inside it (lock-free dequeues; the one that runs the
            # end-of-stream unit finishes the stage). The full check is exact only while
            # nobody else is in the stage; w < M is lock-protected and always checked.
            if stage.w >= stage.M:
                errors.append(f"{stage.name} chosen but full (w = {stage.w}, M = {stage.M})")
            elif (stage.w == 0 or len(self.workers) == 1) and (stage.finished or not stage.schedulable()):
                errors.append(f"{stage.name} chosen but finished or not schedulable")
            if stage.w + 1 > stage.M:
                errors.append(f"{stage.name}: w would be {stage.w + 1} > M = {stage.M}")
            if quota < 1:
                errors.append(f"quota {quota}")
            if stage.kind in ("stateful", "source") and stage.M != 1:
                errors.append(f"{stage.name}: stateful with M = {stage.M}")
            if stage.kind == "stateful":
                seen["sf_max"] = max(seen["sf_max"], stage.w + 1)  # what this allotment makes it
        for ch in self.chains:
            for s in ch.stages:
                if s.w > s.M:
                    errors.append(f"{s.name}: w = {s.w} > M = {s.M}")
        return got

    def run_task(self, worker, task):
        orig_run(self, worker, task)
        rep = worker.ord_report
        if isinstance(task, OP.Allotment) and rep is not None and len(self.workers) == 1:
            st = task.stage
            n = rep[2]
            if n > task.quota and st.kind != "partitioned":  # hybrid: delegated units run anyway
                errors.append(f"{st.name}: {n} units for quota {task.quota}")
            if n < task.quota and st.kind not in ("partitioned", "source"):
                # one worker: nothing ran meanwhile, so it returned early only for an
                # empty worklist or no credit
                if st.size() and st.credits.available() and not st.finished:
                    errors.append(f"{st.name}: returned after {n} of {task.quota} with work and credit left")
                seen["early"] += 1

    monkeypatch.setattr(OP.OrderedPolicy, "decide", decide)
    monkeypatch.setattr(OP.OrderedPolicy, "_run_task", run_task)
    for h in HEURISTICS:
        for workers in (1, 3):
            check_run(RICH_CHAIN, items, next(_ids), refs["exact"], workers=workers, heuristic=h, capacity=4)
    assert not errors, errors[:5]
    assert seen["decisions"] > 50 and seen["sf_max"] == 1 and seen["early"] > 0


def run_on_five_workers(op_cls, items, sink_cls):
    """Feed(items) -> op_cls -> sink_cls under policy ordered (CT) with 5 workers; the
    sink's result."""
    from bobox_sched import Plan
    from ordered_ops import Feed

    plan = Plan(op_cls.__name__)
    plan.add("src", Feed, items)
    plan.add("op", op_cls)
    plan.add("sink", sink_cls)
    plan.chain("src", "op", "sink")
    with Scheduler(policy="ordered", threads_per_node=5, pin=False, heuristic="ct") as s:
        return s.submit(plan).result(WAIT_S)


def test_stateless_operator_runs_on_several_workers_at_once():
    """Parallelism is real: a slow stateless operator is inside several workers at once
    (the guard's peak), and never more than it declared."""
    import time

    from bobox_sched import Sink, StreamOperator
    from bobox_sched.control import model as M
    from ordered_ops import Guard

    guard = Guard(3)

    class Slow(StreamOperator):
        state = M.STATELESS
        max_parallelism = 3

        def on_packet(self, ctx, port, pkt):
            guard.enter()
            try:
                time.sleep(0.003)  # releases the GIL like a nogil kernel
                ctx.send("out", pkt)
            finally:
                guard.leave()

    out = run_on_five_workers(Slow, [{"k": np.arange(3), "x": np.arange(3) + i} for i in range(60)], Sink)
    assert [int(p["x"][0]) for p in out] == list(range(60))
    assert not guard.violations and 2 <= guard.peak <= 3


def test_partitioned_operator_runs_on_several_workers_but_not_beyond_declared():
    """A partitioned operator runs up to min(max_parallelism, p, workers) buckets at once
    (here 2 of 16 buckets, 5 workers), never two workers in one bucket, and each key's
    rows still arrive in order."""
    import time

    from bobox_sched.core.packet import Packet
    from bobox_sched.control import model as M
    from bobox_sched.policies.ordered.partitioned import PartitionedOperator
    from ordered_ops import Guard, Record

    guard = Guard(2)

    class SlowPS(PartitionedOperator):
        state = M.Partitioned("k")
        partitions = 16
        max_parallelism = 2

        def new_state(self):
            return {}

        def on_slice(self, ctx, rows, state, emit):
            b = int(self.bucket_ids(Packet({"k": rows["k"][:1]}))[0])
            guard.enter(b)
            try:
                time.sleep(0.003)  # releases the GIL like a nogil kernel
                emit(rows, np.arange(rows.nrows))
            finally:
                guard.leave(b)

    items = [{"k": np.arange(16, dtype=np.int64), "x": np.full(16, i, np.int64)} for i in range(20)]
    res = run_on_five_workers(SlowPS, items, Record)
    k, x = np.frombuffer(res["k"], np.int64), np.frombuffer(res["x"], np.int64)
    assert res["rows"] == 16 * 20
    for key in range(16):
        assert list(x[k == key]) == list(range(20))
    assert not guard.violations, guard.violations[:3]
    assert guard.peak == 2


# ---------------------------------------------------------------------------------------
# many requests at once, failures, cancellation

def test_concurrent_requests_each_ordered(rich):
    items, refs = rich
    chains = [RICH_CHAIN, [("sl", "flatmap", {"fan": 4}), ("ps", {"partitions": 5})], [("sf",), ("sl", "map")]]
    expect = [refs["exact"]] + [sequential(c, items) for c in chains[1:]]
    with Scheduler(policy="ordered", threads_per_node=3, pin=False, capacity=4) as s:
        hs = [(k, s.submit(build(chains[k % 3], items, run_id=next(_ids)))) for k in range(9)]
        for k, h in hs:
            assert by_operator(h.result(WAIT_S)) == expect[k % 3]
        assert s.stats()["requests_active"] == 0


def test_an_operator_that_raises_fails_only_its_request():
    from bobox_sched import Plan, StreamOperator
    from bobox_sched.control import model as M
    from ordered_ops import Feed, Record

    class Boom(StreamOperator):
        state = M.STATELESS
        max_parallelism = 4

        def on_packet(self, ctx, port, pkt):
            if int(pkt["x"][0]) == 7:
                raise ZeroDivisionError("unit 7")
            ctx.send("out", pkt)

    items = [{"k": np.zeros(2, np.int64), "x": np.full(2, i, np.int64)} for i in range(30)]
    plan = Plan("boom")
    plan.add("src", Feed, items)
    plan.add("boom", Boom)
    plan.add("sink", Record)
    plan.chain("src", "boom", "sink")
    with Scheduler(policy="ordered", threads_per_node=2, pin=False) as s:
        h = s.submit(plan)
        with pytest.raises(ZeroDivisionError, match="unit 7"):
            h.result(WAIT_S)
        assert h.failed_operator == "boom"
        ok = s.submit(build([("sl", "map")], items[:5], run_id=next(_ids)))
        assert ok.result(WAIT_S)["rows"] == 10


def test_cancel_an_unbounded_stream():
    from bobox_sched import Plan
    from bobox_sched.core.errors import RequestCancelled
    from bobox_sched.core.packet import Packet
    from bobox_sched.core.sources import GeneratorSource
    from ordered_ops import PS, Record

    def make(ctx, i):
        return Packet({"k": np.arange(8, dtype=np.int64) % 3, "x": np.full(8, i, np.int64)})

    plan = Plan("endless")
    plan.add("src", GeneratorSource, make)
    plan.add("ps", PS, partitions=4)
    plan.add("sink", Record)
    plan.chain("src", "ps", "sink")
    with Scheduler(policy="ordered", threads_per_node=2, pin=False) as s:
        h = s.submit(plan)
        import time

        while not s.policy.chain_stats(h.id) or s.policy.chain_stats(h.id)[1]["units"] < 20:
            time.sleep(0.01)
        assert h.cancel()
        with pytest.raises(RequestCancelled):
            h.result(WAIT_S)
    # shutdown returned: the workers left the cancelled request's units alone
