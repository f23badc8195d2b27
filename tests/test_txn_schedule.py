"""Transactional shared state under the scheduler (spec 002 section 6, items 1-7):
serial equivalence with the timestamp-order oracle over random workloads (TStream in
every NUMA mode, with and without work stealing, under both policies; LOCK, MVLK and PAT
too), no lost updates, all-or-none aborts and rejections, punctuation ordering, versions
freed after every batch, determinism across thread counts, No-Lock diverging, and no
deadlock with more executors than threads."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import topology
from bobox_sched import Plan, Scheduler, Source
from bobox_sched.core.errors import BoboxError
from bobox_sched.core.packet import Packet
from bobox_sched.control.punct import Batch
from bobox_sched.txn import DEC, GT, INC, StateStore, StateTable, TransactionalOperator, TxnConfig
from bobox_sched.txn import coordinator as coord
from bobox_sched.txn.funs import HOLD_BELOW
from operators.txn import make_app, oracle_of, pat_seq_of, run_once, same_outputs
from topology.virtual import virtual_topology

from txn_workload import make_events, make_store, pat_seq, run_oracle, run_scheduled, same

MODES = ("shared-nothing", "shared-per-socket", "shared-everything")


def _vtopo(k=2):
    return virtual_topology(topology.probe(), k)


def _check(store, events, cfg, **kw):
    init = store.dense()
    dense_o, out_o = run_oracle(store, events)
    store.load_dense(init)
    dense, out, summary, grp = run_scheduled(store, events, cfg, **kw)
    assert np.array_equal(dense, dense_o, equal_nan=True), "final state differs from the serial oracle"
    diff = same(out, out_o)
    assert diff is None, diff
    return summary, grp


@pytest.fixture(autouse=True, scope="module")
def per_pool_tasks():
    """Every batch in these tests is small, so all would take the one-task path
    (``Group.single_task_ops``): they run the per-pool tasks, and the tests of the
    one-task path set it themselves (module scope: hypothesis refuses function-scoped
    fixtures)."""
    old = coord.Group.single_task_ops
    coord.Group.single_task_ops = 0
    yield
    coord.Group.single_task_ops = old


# -- 1. serial equivalence ----------------------------------------------------------------


def _every_mode_and_stealing(*rows):
    """``@example`` rows pinned on every run: each of `rows` in every NUMA mode, with and
    without stealing, on two virtual nodes (so shared-per-socket is not shared-everything),
    per-pool tasks, policy bobox."""
    def deco(fn):
        for row in reversed(rows):
            for mode in reversed(MODES):
                for steal in (True, False):
                    for pipe in (True, False):
                        fn = example(**row, mode=mode, steal=steal, policy="bobox", virtual=True, single=0,
                                     pipeline=pipe, direct=True)(fn)
        return fn
    return deco


@given(nkeys=st.sampled_from([1, 3, 40, 10_000]), theta=st.sampled_from([0.0, 0.6, 1.5]),
       interval=st.sampled_from([1, 2, 7, 500]), T=st.integers(1, 8), mode=st.sampled_from(MODES),
       steal=st.booleans(), n=st.integers(1, 150), seed=st.integers(0, 2**31), cycles=st.booleans(),
       constrained=st.booleans(), policy=st.sampled_from(["bobox", "simple"]), virtual=st.booleans(),
       single=st.sampled_from([0, 40, 10**9]), pipeline=st.booleans(), direct=st.booleans())
@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_every_mode_and_stealing(
    # many keys, very hot ones, small batches, most executors, SL-style cycles, constraints
    # (17 of 150 commit, 2 constraint aborts)
    dict(nkeys=10_000, theta=1.5, interval=7, T=8, n=150, seed=7, cycles=True, constrained=True),
    # one record that every operation and condition touches, tiny batches (58 commit,
    # 14 aborts; with SL-style cycles on one record nearly every condition fails)
    dict(nkeys=1, theta=0.0, interval=2, T=8, n=150, seed=0, cycles=False, constrained=True))
def test_tstream_is_serially_equivalent(nkeys, theta, interval, T, mode, steal, n, seed, cycles, constrained,
                                        policy, virtual, single, pipeline, direct):
    """`single`: batches of at most that many operations run in one task (0: none, 40:
    some, 10**9: all); `pipeline`: instances compute batch k+1 during k's state access;
    `direct`: batches without cross-record reads and aborts skip the chains."""
    store = make_store(nkeys, constrained, seed)
    ev = make_events(n, nkeys, theta, seed, cycles=cycles)
    cfg = TxnConfig(store, T, interval=interval, numa_mode=mode, work_stealing=steal, pipeline=pipeline)
    coord.Group.single_task_ops = single
    coord.Group.direct_pools = direct
    try:
        _check(store, ev, cfg, policy=policy, topology=_vtopo() if virtual else None)
    finally:
        coord.Group.single_task_ops = 0
        coord.Group.direct_pools = True


@pytest.mark.parametrize("deps, conds, constrained, single, mode, steal, direct", [
    (False, False, False, 0, "shared-nothing", False, True),  # GS/TP-like: every pool without chains
    (False, True, False, 10**9, "shared-nothing", False, True),  # conditions in one task: read across pools
    (False, True, False, 0, "shared-everything", False, True),  # conditions, one pool
    (True, False, False, 0, "shared-everything", False, False),  # sources: chains
    (False, False, True, 0, "shared-everything", False, False),  # constraints may abort: chains
    (False, False, False, 0, "shared-everything", True, False),  # stealers claim chains
])
def test_batches_without_cross_record_reads_run_without_chains(deps, conds, constrained, single, mode, steal,
                                                               direct, monkeypatch):
    # kernels/direct.py: where no operation reads another record, nothing aborts and no
    # stealer shares a pool, a batch runs in ts order on the store -- and equals the oracle
    monkeypatch.setattr(coord.Group, "single_task_ops", single)
    store = make_store(40, constrained, 3)
    ev = make_events(300, 40, 0.9, 3, deps=deps, conds=conds)
    cfg = TxnConfig(store, 3, interval=15, numa_mode=mode, work_stealing=steal)
    summary, _ = _check(store, ev, cfg, topology=_vtopo(1))  # one node: the one-task path needs one
    with_ops = summary["batches"] - summary["empty_batches"]
    assert with_ops > 0
    assert summary["direct_batches"] == (with_ops if direct else 0)
    if direct:
        assert summary["versions_peak"] == 0 and summary["rounds"] == with_ops


@pytest.mark.parametrize("mode, steal", [("shared-nothing", False), ("shared-nothing", True),
                                         ("shared-per-socket", True), ("shared-everything", True)])
def test_small_batches_run_in_one_task(mode, steal):
    """On one node, a batch of at most ``single_task_ops`` operations runs in one task
    that builds every pool and walks every chain as its own: fused, with no round beyond
    the first even with cross-pool reads and SL-style cycles (no constraints here, so no
    aborts), and equal to the oracle. On the same events the per-pool path (4 workers
    on one node: 4 pools, or one pool and stealers) needs more rounds, or is not fused."""
    ev = make_events(400, 30, 1.0, 11, deps=True, conds=True, cycles=True)
    out = {}
    for single in (0, 10**9):
        store = make_store(30, False, 11)
        coord.Group.single_task_ops = single
        try:
            out[single], grp = _check(store, ev, TxnConfig(store, 4, interval=20, numa_mode=mode,
                                                            work_stealing=steal), threads=4, topology=_vtopo(1))
        finally:
            coord.Group.single_task_ops = 0
    one, per_pool = out[10**9], out[0]
    with_ops = one["batches"] - one["empty_batches"]
    assert sum(len(t) for t in grp.placement.tasks) > 1  # more than one task a round on the per-pool path
    assert one["single_task_batches"] == one["fused_batches"] == one["rounds"] == with_ops
    assert per_pool["single_task_batches"] == 0
    if grp.P > 1:  # cross-pool reads from the last round's snapshot: more rounds
        assert per_pool["rounds"] > with_ops
    else:  # one pool with stealers: never fused
        assert per_pool["fused_batches"] == 0


def test_a_batch_one_task_walks_keeps_the_gil(monkeypatch):
    """Where one task walks a batch (the one-task path), its gathers, builds and walks
    keep the GIL (nothing runs beside them); with a task per pool, large pools'
    builds and walks release it (funs.kernel_for sees the pool's operations)."""
    seen = []
    real = coord.kernel_for

    def spy(K, name, n, workers=0):
        seen.append((name, n))
        return real(K, name, n, workers)

    monkeypatch.setattr(coord, "kernel_for", spy)
    ev = make_events(1200, 3000, 0.0, 13)
    picked = {}
    for single in (10**9, 0):
        store = make_store(3000, False, 13)
        coord.Group.single_task_ops = single
        seen.clear()
        try:
            summary, grp = _check(store, ev, TxnConfig(store, 2, interval=600), threads=2, topology=_vtopo(1))
        finally:
            coord.Group.single_task_ops = 0
        picked[single] = [(name, n) for name, n in seen if name in ("gather_pool", "build_pool", "process_pool")]
        assert picked[single] and summary["single_task_batches"] == (summary["batches"] - summary["empty_batches"]
                                                                     if single else 0)
    assert all(n == 0 for _, n in picked[10**9])
    assert any(name == "build_pool" and n >= HOLD_BELOW["build_pool"] for name, n in picked[0])


def test_small_batches_keep_a_task_per_node_on_several_nodes():
    """With pools on two nodes, small batches keep their per-pool tasks (each walked on
    its pool's node): the one-task path only applies where every pool shares a node."""
    ev = make_events(200, 30, 1.0, 12, cycles=True)
    store = make_store(30, False, 12)
    coord.Group.single_task_ops = 10**9
    try:
        summary, grp = _check(store, ev, TxnConfig(store, 4, interval=20, numa_mode="shared-per-socket"),
                              topology=_vtopo())
    finally:
        coord.Group.single_task_ops = 0
    assert grp.P == 2 and summary["single_task_batches"] == 0
    assert summary["placement_locality"] == 1.0


@given(nkeys=st.sampled_from([1, 3, 40, 10_000]), interval=st.sampled_from([1, 7, 500]), T=st.integers(1, 6),
       mode=st.sampled_from(MODES), steal=st.booleans(), n=st.integers(1, 150), seed=st.integers(0, 2**31),
       constrained=st.booleans(), fuse=st.booleans(), deps=st.booleans())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fused_rounds_are_serially_equivalent(nkeys, interval, T, mode, steal, n, seed, constrained, fuse, deps):
    """A batch whose transactions each touch one pool only walks its chains in the
    build task (round 1 fused into round 0) unless a pool has stealers: always so
    without src= and conditions, and with one pool (shared-everything) even with
    cross-record reads and SL-style cycles. Both ways equal the oracle, with
    constraint aborts too."""
    store = make_store(nkeys, constrained, seed)
    ev = make_events(n, nkeys, 0.9, seed, deps=deps, conds=deps, cycles=deps)
    cfg = TxnConfig(store, T, interval=interval, numa_mode=mode, work_stealing=steal)
    old = coord.Group.fuse_rounds
    coord.Group.fuse_rounds = fuse
    try:
        summary, grp = _check(store, ev, cfg, topology=_vtopo())
    finally:
        coord.Group.fuse_rounds = old
    stealers = any(len(t) > 1 for t in grp.placement.tasks)
    with_ops = summary["batches"] - summary["empty_batches"]
    if not fuse or stealers:
        assert summary["fused_batches"] == 0
    elif not deps or grp.P == 1:
        assert summary["fused_batches"] == with_ops
    if not deps:
        assert summary["versions_peak"] == 0  # nothing reads another record: no versions


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steal", [False, True])
def test_sl_style_cycles_in_every_mode(mode, steal):
    """A <-> B dependencies in every batch (each transaction reads the other record of its
    pair), hot keys: the rounds must resolve cycles without deadlock."""
    store = make_store(5, False, 3)
    ev = make_events(300, 5, 1.2, 3, cycles=True, kinds=(1,))
    summary, _ = _check(store, ev, TxnConfig(store, 4, interval=25, numa_mode=mode, work_stealing=steal),
                        topology=_vtopo())
    assert summary["versions_peak"] > 0  # the cycle's chains kept versions
    if steal:
        assert summary["fused_batches"] == 0  # stealers share a pool: rounds after the build


@pytest.mark.parametrize("mode", ["shared-per-socket", "shared-everything"])
def test_stealers_walk_the_chains_their_chains_need(mode, monkeypatch):
    """A stealer claims and walks the chains of its pool that its chains need, instead
    of waiting a round for each dependency inside the pool: with every task run inline,
    one after another (deterministic), the stealers take no more rounds than one task
    per pool. Reading the other stealers' chains from the last round's snapshot took
    many more (SL, 16 threads on 2 nodes: 309 rounds in 8 batches against 34)."""
    local = threading.local()

    def inline(self, task, target):  # a trampoline: the round a task ends starts here, not deeper
        q = getattr(local, "q", None)
        if q is not None:
            q.append(task)
            return
        local.q = q = collections.deque([task])
        try:
            while q:
                self._run_task(q.popleft().op, None)  # the pushed Task's _PoolTask
        finally:
            local.q = None

    monkeypatch.setattr(coord.Group, "_push", inline)
    ev = make_events(600, 40, 1.2, 7, deps=True, conds=True, cycles=True)
    rounds = {}
    for steal in (False, True):
        store = make_store(40, True, 7)
        summary, grp = _check(store, ev, TxnConfig(store, 4, interval=50, numa_mode=mode, work_stealing=steal),
                              topology=_vtopo())
        assert any(len(t) > 1 for t in grp.placement.tasks) == steal
        rounds[steal] = summary["rounds"]
    assert rounds[False] > summary["batches"]  # dependencies inside pools: rounds after the first
    assert rounds[True] <= rounds[False], rounds


@pytest.mark.parametrize("mode", ["shared-per-socket", "shared-everything"])
def test_stealers_started_together_walk_each_operation_once(mode, monkeypatch):
    """The claim protocol under real races: every round's tasks wait at a barrier, then
    run at once on their own threads (the kernels release the GIL), so stealers of one
    pool claim chains from the cursor and on demand at the same moment, and read chains
    another stealer is walking. Hot keys, cross-record reads, conditions and SL-style
    cycles; three stealers per node's pool, six in the one pool. Each operation is
    walked exactly once (two stealers that both claim a chain both walk it: the walked
    count exceeds the operations; no constraints, so no abort walks a chain again), and
    the state and outputs equal the serial oracle (a value read before its walker
    published it is stale)."""
    errors = []

    def at_once(self, task, target):
        pending = self.__dict__.setdefault("_test_round", [])
        pending.append(task)
        if len(pending) < self.outstanding:
            return
        tasks = pending[:]
        pending.clear()
        barrier = threading.Barrier(len(tasks))

        def run(t):
            try:
                barrier.wait(timeout=30)
                self._run_task(t.op, None)  # the pushed Task's _PoolTask; the last submits the next round
            except BaseException as e:  # noqa: BLE001 -- reported by the test
                errors.append(e)

        for t in tasks:
            threading.Thread(target=run, args=(t,), daemon=True).start()

    monkeypatch.setattr(coord.Group, "_push", at_once)
    monkeypatch.setitem(HOLD_BELOW, "process_pool", 0)  # every walk releases the GIL: the stealers overlap
    for seed in (1, 2, 3):
        ev = make_events(4800, 200, 1.2, seed, deps=True, conds=True, cycles=True)
        store = make_store(200, False, seed)
        summary, grp = _check(store, ev, TxnConfig(store, 6, interval=200, numa_mode=mode, work_stealing=True),
                              threads=3, topology=_vtopo(), timeout=60)
        assert not errors, errors
        assert [len(t) for t in grp.placement.tasks] == ([3, 3] if mode == "shared-per-socket" else [6])
        assert summary["placed_ops"] == summary["operations"], summary
        assert summary["fused_batches"] == 0  # every batch had a walking round after the build


def test_progress_controller_stream_is_equivalent():
    store = make_store(20, True, 5)
    ev = make_events(400, 20, 0.9, 5, cycles=True)
    _check(store, ev, TxnConfig(store, 3, interval=13), controller=True, packet_rows=37)


# -- 6. the baselines match the oracle; No-Lock does not ------------------------------------


@given(scheme=st.sampled_from(["lock", "mvlk", "pat"]), nkeys=st.sampled_from([1, 4, 300, 10_000]),
       theta=st.sampled_from([0.0, 0.9, 1.5]), interval=st.sampled_from([1, 7, 16]), T=st.integers(1, 8),
       n=st.integers(1, 120), seed=st.integers(0, 2**31), constrained=st.booleans(), cycles=st.booleans())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_baselines_are_serially_equivalent(scheme, nkeys, theta, interval, T, n, seed, constrained, cycles):
    store = make_store(nkeys, constrained, seed)
    ev = make_events(n, nkeys, theta, seed, cycles=cycles)
    ps = pat_seq(store, ev, T) if scheme == "pat" else None
    _check(store, ev, TxnConfig(store, T, interval=interval, cc=scheme, pat_seq=ps))


class ReadThenSet(TransactionalOperator):
    """Every event reads record 0, then sets it to its own ts: the read must return the
    previous event's ts."""

    def state_access(self, txn, eb):
        k = np.zeros(eb.n, np.int64)
        txn.read(self.store["a"], k, into="prev")
        txn.write(self.store["a"], k, eb.ts.astype(float))

    def post_process(self, eb):
        return {"ts": eb.ts, "ok": eb.success, "prev": eb["prev"]}


def test_nolock_diverges_on_a_conflicting_workload():
    """One worker thread runs two executors packet by packet: No-Lock executes a whole
    packet of one executor before the other's, so reads see the wrong writes; LOCK (same
    thread count) does not."""
    results = {}
    for cc in ("nolock", "lock"):
        store = StateStore(StateTable("a", 1, init=-1.0))
        ev = {"x": np.zeros(200, np.int64)}
        dense, out, _, _ = run_scheduled(store, ev, TxnConfig(store, 2, interval=50, cc=cc), threads=1,
                                         packet_rows=50, op=ReadThenSet)
        results[cc] = out["prev"]
    want = np.arange(200) - 1.0
    assert np.array_equal(results["lock"], want)
    assert not np.array_equal(results["nolock"], want)


# -- 2. no lost updates ----------------------------------------------------------------------

SCHEMES = ["tstream", "lock", "mvlk", "pat"]


@pytest.mark.parametrize("cc, mode, steal", [("tstream", m, w) for m in MODES for w in (False, True)]
                         + [(cc, MODES[0], False) for cc in SCHEMES[1:]])
def test_deposits_and_transfers_conserve(cc, mode, steal):
    """SL's deposits add exactly what they deposit, its transfers move money without
    creating or losing any (some commit; hot accounts run dry and reject others): TStream in every NUMA
    mode with and without stealing (two virtual nodes), and the baselines; state and
    outputs equal the serial oracle's."""
    s_app = make_app("sl", nkeys=50, theta=1.0, nparts=3)
    for kind in (0, 1):  # deposits only, transfers only
        store = s_app.make_store()
        ev = s_app.events(1200, seed=11 + kind)
        ev["kind"] = np.full(1200, kind, np.int64)
        before = sum(t.values().sum() for t in store.tables)
        dense_o, out_o = oracle_of(s_app, store, ev)
        ps = pat_seq_of(s_app, store, ev, 3) if cc == "pat" else None
        cfg = TxnConfig(store, 3, interval=100, cc=cc, pat_seq=ps, numa_mode=mode, work_stealing=steal)
        with Scheduler(threads_per_node=2, pin=False, topology=_vtopo() if cc == "tstream" else None) as s:
            r = run_once(s, s_app, store, ev, cfg, keep=True)
        after = sum(t.values().sum() for t in store.tables)
        assert np.array_equal(store.dense(), dense_o), "final state differs from the serial oracle"
        assert same_outputs(r["outputs"], out_o)
        ok = r["outputs"]["ok"]
        if kind == 0:
            assert ok.all()
            assert after == before + ev["a"].sum() + ev["s"].sum()
        else:
            assert after == before
            assert 0 < ok.sum() < ok.size  # some transfers committed, some were rejected (hot accounts drained)


@pytest.mark.parametrize("cc", SCHEMES)
def test_tp_counts_distinct_vehicles(cc):
    app = make_app("tp", nkeys=10, vehicles=500, nparts=2)
    store = app.make_store()
    ev = app.events(1500, seed=4)
    ps = pat_seq_of(app, store, ev, 2) if cc == "pat" else None
    with Scheduler(threads_per_node=2, pin=False) as s:
        run_once(s, app, store, ev, TxnConfig(store, 2, interval=64, cc=cc, pat_seq=ps))
    counts = store["count"].values()
    for seg in range(10):
        want = np.unique(ev["vid"][ev["seg"] == seg]).size
        assert counts[seg] == want
        assert store["count"].members(seg).size == want


@pytest.mark.parametrize("name", ["gs", "sl", "ob", "tp"])
def test_apps_equal_the_oracle_under_every_correct_scheme(name):
    app = make_app(name, nkeys=200 if name != "tp" else 20, nparts=2)
    store = app.make_store()
    init = store.dense()
    ev = app.events(1500, seed=2)
    dense_o, out_o = oracle_of(app, store, ev)
    with Scheduler(threads_per_node=2, pin=False) as s:
        for cc in SCHEMES:
            store.load_dense(init)
            ps = pat_seq_of(app, store, ev, 2) if cc == "pat" else None
            r = run_once(s, app, store, ev, TxnConfig(store, 2, interval=100, cc=cc, pat_seq=ps), keep=True)
            assert np.array_equal(store.dense(), dense_o), cc
            assert same_outputs(r["outputs"], out_o), cc


# -- 3. aborts and rejections -----------------------------------------------------------------


class TwoWrites(TransactionalOperator):
    """Each event: a[k1] -= x, then b[k2] -= y (b may not go below 0: that aborts the
    whole transaction, so a[k1] must not change either)."""

    def state_access(self, txn, eb):
        txn.read_modify(self.store["a"], eb["k1"], DEC, param=eb["x"], into="a_after")
        txn.read_modify(self.store["b"], eb["k2"], DEC, param=eb["y"], into="b_after")

    def post_process(self, eb):
        return {"ts": eb.ts, "ok": eb.success, "a_after": eb["a_after"], "b_after": eb["b_after"]}


@pytest.mark.parametrize("cc, mode", [("tstream", m) for m in MODES] + [(cc, MODES[0]) for cc in SCHEMES[1:]])
def test_constraint_abort_is_all_or_none_and_equals_the_oracle_without_them(cc, mode):
    """The aborted set is the serial oracle's (b[k2] would go below 0; b reaching exactly
    0 commits), and an aborted transaction changes neither record."""
    rng = np.random.default_rng(9)
    n = 600
    ev = {"k1": rng.integers(0, 6, n), "k2": rng.integers(0, 6, n), "x": rng.integers(1, 5, n).astype(float),
          "y": rng.integers(1, 9, n).astype(float)}

    def store():
        return StateStore(StateTable("a", 6, init=0.0), StateTable("b", 6, init=100.0, constraint=(0.0, None)))

    s1 = store()
    d_o, out_o = run_oracle(s1, ev, op=TwoWrites)  # the oracle runs on a copy
    ps = pat_seq(s1, ev, 3, op=TwoWrites) if cc == "pat" else None
    dense, out, summary, _ = run_scheduled(s1, ev, TxnConfig(s1, 3, interval=40, numa_mode=mode, cc=cc, pat_seq=ps),
                                           op=TwoWrites, topology=_vtopo() if cc == "tstream" else None)
    aborted = ~out_o["ok"]
    assert aborted.any() and (out_o["b_after"][~aborted] == 0).any()  # aborts, and commits that reach the bound
    assert np.array_equal(out["ok"], out_o["ok"]), np.flatnonzero(out["ok"] != out_o["ok"])[:5]
    assert (summary["aborts"] if cc == "tstream" else summary["baseline_aborts"]) == aborted.sum()
    assert np.array_equal(dense, d_o)
    assert same(out, out_o) is None
    # independently: a[k1] only changed by committed transactions (all or none), b >= 0
    a_want = np.zeros(6)
    np.subtract.at(a_want, ev["k1"][~aborted], ev["x"][~aborted])
    assert np.array_equal(s1["a"].values(), a_want)
    assert (s1["b"].values() >= 0).all()
    # = the serial run that skips the aborted transactions
    s2 = store()
    keep = {k: np.where(aborted, 0, v) if k in ("x", "y") else v for k, v in ev.items()}
    d2, out2 = run_oracle(s2, keep, op=TwoWrites)
    assert np.array_equal(dense, d2)
    assert np.array_equal(out["b_after"][~aborted], out2["b_after"][~aborted])
    assert np.isnan(out["a_after"][aborted]).all()


class Transfer(TransactionalOperator):
    def state_access(self, txn, eb):
        a = self.store["a"]
        txn.require(GT(a, eb["src"], eb["amt"]))
        txn.read_modify(a, eb["src"], DEC, param=eb["amt"], into="s")
        txn.read_modify(a, eb["dst"], INC, param=eb["amt"], into="d")

    def post_process(self, eb):
        return {"ts": eb.ts, "ok": eb.success, "s": eb["s"], "d": eb["d"]}


@pytest.mark.parametrize("cc", SCHEMES)
def test_condition_rejection_is_all_or_none(cc):
    rng = np.random.default_rng(1)
    n = 800
    src = rng.integers(0, 8, n)
    ev = {"src": src, "dst": (src + rng.integers(1, 8, n)) % 8, "amt": rng.integers(1, 40, n).astype(float)}
    store = StateStore(StateTable("a", 8, init=50.0))
    ps = pat_seq(store, ev, 2, op=Transfer) if cc == "pat" else None
    dense_o, out_o = run_oracle(store, ev, op=Transfer)  # the oracle runs on a copy
    dense, out, _, _ = run_scheduled(store, ev, TxnConfig(store, 2, interval=32, cc=cc, pat_seq=ps), op=Transfer)
    assert np.array_equal(dense, dense_o), "final state differs from the serial oracle"
    diff = same(out, out_o)
    assert diff is None, diff
    # The transfers replayed in plain Python, in ts order: one whose source balance (before
    # it) is not above the amount is rejected and moves nothing.
    bal = [50.0] * 8
    ok_want, s_want, d_want = [], [], []
    for i in range(n):
        a, b, x = int(ev["src"][i]), int(ev["dst"][i]), float(ev["amt"][i])
        ok_want.append(bal[a] > x)
        if ok_want[-1]:
            bal[a] -= x
            bal[b] += x
        s_want.append(bal[a])
        d_want.append(bal[b])
    ok = np.array(ok_want)
    assert 0 < ok.sum() < n
    assert np.array_equal(out["ok"], ok), np.flatnonzero(out["ok"] != ok)[:5]
    assert np.array_equal(store["a"].values(), np.array(bal))  # rejected transfers moved nothing
    assert np.array_equal(out["s"][ok], np.array(s_want)[ok]) and np.array_equal(out["d"][ok], np.array(d_want)[ok])


# -- 4. punctuations -----------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", [False, True])
def test_punctuation_orders_batches(monkeypatch, pipeline):
    log = []
    orig_start, orig_finish, orig_post = coord.Group._start_batch, coord.Group._finish, None
    from bobox_sched.txn.operator import TransactionalOperator as TO

    orig_post = TO._post_dual

    def start(self):
        log.append(("start", self.batch))
        orig_start(self)

    def finish(self):
        b = self.batch
        orig_finish(self)
        log.append(("finish", b))

    def post(self, ctx, st_, a):
        log.append(("post", a.batch, self.executor))
        orig_post(self, ctx, st_, a)

    monkeypatch.setattr(coord.Group, "_start_batch", start)
    monkeypatch.setattr(coord.Group, "_finish", finish)
    monkeypatch.setattr(TO, "_post_dual", post)
    store = make_store(30, False, 2)
    ev = make_events(500, 30, 0.8, 2)
    T = 3
    _check(store, ev, TxnConfig(store, T, interval=20, pipeline=pipeline))
    batches = max(e[1] for e in log if e[0] == "start") + 1
    for k in range(batches):
        i_start = log.index(("start", k))
        i_fin = log.index(("finish", k))
        posts = [i for i, e in enumerate(log) if e[0] == "post" and e[1] == k]
        assert len(posts) == T
        assert i_start < i_fin < min(posts)  # post only after all of batch k's chains
        if k + 1 < batches:
            assert max(posts) < log.index(("start", k + 1))  # k+1's state access after k's post


@pytest.mark.parametrize("controller", [False, True])
@pytest.mark.parametrize("pipeline", [False, True])
def test_next_batch_is_dealt_after_every_post(monkeypatch, controller, pipeline):
    # The dealer's gate opens for batch k+1 only once every instance post-processed
    # batch k (Group.gate_on_posts): under the GIL, dealing and computing k+1 beside
    # the posts of k only made those posts wait. Executor 0's posts are slowed down
    # (a sleep: the GIL is free meanwhile), so that a gate opening at barrier 2 lets the
    # other worker deal the next batch before they end. Pipelined, the gate is one batch
    # further: k+2 after every post of k.
    import time

    from bobox_sched.txn import progress
    from bobox_sched.txn.operator import TransactionalOperator as TO

    log = []
    orig_post, orig_posted, orig_gated = TO._post_dual, coord.Group.posted, progress._Dealer._gated

    def post(self, ctx, st_, a):
        if self.executor == 0:
            time.sleep(0.002)
        orig_post(self, ctx, st_, a)

    def posted(self, batch):
        log.append(("post", batch))  # before the gate may open
        orig_posted(self, batch)

    def gated(self, ctx, batch):
        ok = orig_gated(self, ctx, batch)
        if ok:
            log.append(("deal", batch))
        return ok

    monkeypatch.setattr(TO, "_post_dual", post)
    monkeypatch.setattr(coord.Group, "posted", posted)
    monkeypatch.setattr(progress._Dealer, "_gated", gated)
    store = make_store(30, False, 2)
    ev = make_events(600, 30, 0.8, 2)
    T = 3
    _check(store, ev, TxnConfig(store, T, interval=20, pipeline=pipeline), controller=controller, packet_rows=7)
    batches = max(e[1] for e in log if e[0] == "deal") + 1
    assert batches == 10
    ahead = 2 if pipeline else 1
    for k in range(batches - ahead):
        posts = [i for i, e in enumerate(log) if e == ("post", k)]
        assert len(posts) == T
        assert max(posts) < min(i for i, e in enumerate(log) if e == ("deal", k + ahead)), \
            f"batch {k + ahead} dealt early"


@pytest.mark.parametrize("pipeline", [False, True])
def test_pipelined_instances_compute_the_next_batch_during_state_access(monkeypatch, pipeline):
    # With pipeline=True an instance registers batch k+1's operations while batch k is in
    # state access (its pool tasks are slowed down by a sleep, which frees the GIL and the
    # worker's time for the instances); without it, never. Either way equal to the oracle.
    import time

    from bobox_sched.txn.operator import TransactionalOperator as TO

    log = []
    lock = threading.Lock()
    orig_run, orig_start, orig_finish, orig_pre = (coord.Group._run_task, coord.Group._start_batch,
                                                    coord.Group._finish, TO.pre_process)

    def run_task(self, task, worker):
        time.sleep(0.003)
        orig_run(self, task, worker)

    def start(self):
        with lock:
            log.append(("start", self.batch))
        orig_start(self)

    def finish(self):
        with lock:
            log.append(("finish", self.batch))
        orig_finish(self)

    def pre(self, packet):
        if self._tx is not None:  # None: the oracle's run
            with lock:
                log.append(("compute", self._tx.batch))
        return orig_pre(self, packet)

    monkeypatch.setattr(coord.Group, "_run_task", run_task)
    monkeypatch.setattr(coord.Group, "_start_batch", start)
    monkeypatch.setattr(coord.Group, "_finish", finish)
    monkeypatch.setattr(TO, "pre_process", pre)
    store = make_store(30, False, 2)
    ev = make_events(400, 30, 0.8, 2)
    _check(store, ev, TxnConfig(store, 2, interval=20, pipeline=pipeline), packet_rows=5)
    overlapped = 0
    in_sa = None  # the batch in state access
    for kind, b in log:
        if kind == "start":
            in_sa = b
        elif kind == "finish":
            in_sa = None
        elif in_sa is not None:
            assert b == in_sa + 1, f"batch {b} computed during batch {in_sa}'s state access"
            overlapped += 1
    assert (overlapped > 0) == pipeline, overlapped


class _Feed(Source):
    """Sends given items (dict -> packet with a ts column, or a punctuation) in order."""

    def __init__(self, items):
        self.items = list(items)

    def process(self, ctx):
        for it in self.items:
            if isinstance(it, Batch):
                ctx.punctuate(it)
            else:
                ctx.send("out", Packet({"ts": np.asarray(it, np.int64), "k": np.zeros(len(it), np.int64)}))
        ctx.close()
        ctx.finish()


class _Touch(TransactionalOperator):
    def state_access(self, txn, eb):
        txn.read_modify(self.store["a"], eb["k"], INC, param=1.0)


@pytest.mark.parametrize("items, msg", [
    ([[0, 1, 5], Batch(3)], "precedes the punctuation"),  # an event at or above the next punctuation's ts
    ([[0, 1], Batch(3), [2]], "below the last punctuation"),  # time went back
    ([[0], Batch(3), [4], Batch(3)], "does not grow"),
])
def test_bad_timestamps_fail_the_request(items, msg):
    store = StateStore(StateTable("a", 1))
    cfg = TxnConfig(store, 1, interval=10)
    plan = Plan("bad")
    plan.add("src", _Feed, items)
    plan.add("op", _Touch, cfg, 0)
    plan.add("sink", _Null)
    plan.chain("src", "op", "sink")
    with Scheduler(threads_per_node=1, pin=False) as s:
        with pytest.raises(ValueError, match=msg):
            s.submit(plan).result(timeout=60)


from bobox_sched import Sink  # noqa: E402


class _Null(Sink):
    pass


# -- 5. versions -----------------------------------------------------------------------------------


class _CheckedFinish:
    """A group's kernel module (``TxnConfig.kernel_wrap``) whose ``finish_batch`` (and its
    ``_held`` twin) is checked around, at barrier 2 (every chain walked, no instance
    running yet): appends (operations, versions counted) to `log`."""

    def __init__(self, K, log):
        self._K, self._log = K, log

    def __getattr__(self, name):
        return getattr(self._K, name)

    def finish_batch(self, B, npools, nops):
        return self._checked(self._K.finish_batch, B, npools, nops)

    def finish_batch_held(self, B, npools, nops):
        return self._checked(self._K.finish_batch_held, B, npools, nops)

    def _checked(self, kernel, B, npools, nops):
        K = self._K
        # The records read by an operation on another record: its source, its
        # transaction's condition operands (kernels/fields.py F_* and conds' fields).
        oi = B.oi[:nops]
        g, src, x = oi[:, K.F_G], oi[:, K.F_SRC], oi[:, K.F_TXN]
        read = set(src[(src >= 0) & (src != g)].tolist())
        for j in range(nops):
            for cg, _, cg2 in B.conds[B.cond_off[x[j]]:B.cond_off[x[j] + 1]].tolist():
                read.update(r for r in (cg, cg2) if r >= 0 and r != g[j])
        assert set(np.flatnonzero(B.rec_ver).tolist()) == read  # marked: exactly the records read
        # a version for every operation on those records' chains, none on the others
        want = 0
        for p in range(npools):
            for cid in range(B.pool_off[p], B.pool_off[p] + B.pool_nch[p]):
                if B.ch[cid, K.C_G] in read:
                    want += B.ch[cid, K.C_END] - B.ch[cid, K.C_START]
        assert int(B.pool_nch[:npools].sum()) == len(set(g.tolist()))  # a chain per record operated on
        held = K.live_versions(B, npools)
        assert held == want
        versions = kernel(B, npools, nops)
        assert versions == held  # the statistic counts the versions held until now
        assert K.live_versions(B, npools) == 0  # ... and freed
        assert not B.rec_ver.any() and (B.rec_chain < 0).all()  # no mark, no chain left
        self._log.append((nops, versions))
        return versions


def test_versions_only_where_read_and_freed_after_every_batch(monkeypatch):
    """Versions exist only on the chains of records that another record's operation
    reads (a source or a condition operand), one per operation on them, and every batch
    frees them all (``_CheckedFinish``: the kernel's ``live_versions`` before and right
    after ``finish_batch``). With chains for every batch (no direct runs: those build no
    chains and keep no versions)."""
    monkeypatch.setattr(coord.Group, "direct_pools", False)
    # no cross-record reads: nothing is versioned
    log0 = []
    store = make_store(50, False, 1)
    ev = make_events(400, 50, 0.5, 1, deps=False, conds=False)
    s0, _ = _check(store, ev, TxnConfig(store, 2, interval=30, kernel_wrap=lambda K: _CheckedFinish(K, log0)))
    assert len(log0) == s0["batches"] - s0["empty_batches"] > 0
    assert s0["versions_peak"] == 0 and all(v == 0 for _, v in log0)
    # sources and conditions: versions, at most one per operation of the batch (N x m)
    log1 = []
    store = make_store(50, False, 1)
    ev = make_events(400, 50, 0.9, 1, cycles=True)
    s1, _ = _check(store, ev, TxnConfig(store, 2, interval=30, kernel_wrap=lambda K: _CheckedFinish(K, log1)))
    assert len(log1) == s1["batches"] - s1["empty_batches"] > 0
    assert s1["versions_peak"] == max(v for _, v in log1) > 0
    assert all(v <= n for n, v in log1)


# -- 6. determinism ----------------------------------------------------------------------------------


def test_identical_output_across_thread_counts_and_runs():
    ev = make_events(700, 60, 1.0, 8, cycles=True)
    outs = []
    for threads in (1, 2, 2, 4):
        store = make_store(60, True, 8)
        dense, out, _, _ = run_scheduled(store, ev, TxnConfig(store, 4, interval=25), threads=threads)
        outs.append((dense, out))
    for dense, out in outs[1:]:
        assert np.array_equal(dense, outs[0][0])
        assert same(out, outs[0][1]) is None


# -- 7. no deadlock -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cc", SCHEMES + ["nolock"])
def test_more_executors_than_threads(cc):
    """8 executors on one worker thread: baselines' waits return instead of spinning on
    an executor that cannot run; TStream's barriers never block."""
    store = make_store(10, False, 4)
    ev = make_events(400, 10, 1.0, 4)
    ps = pat_seq(store, ev, 8) if cc == "pat" else None
    cfg = TxnConfig(store, 8, interval=10, cc=cc, pat_seq=ps, spin_us=50)
    if cc == "nolock":
        run_scheduled(store, ev, cfg, threads=1)
    else:
        _check(store, ev, cfg, threads=1)


@pytest.mark.timeout(120)  # the old dealing spun for minutes: fail by timeout, not hang CI
@pytest.mark.parametrize("cc", ["lock", "mvlk", "pat"])
def test_baselines_finish_when_a_batch_share_outgrows_the_input_buffer(cc):
    """The README's scale: 1000 events, interval 500, 64-row packets, so each executor's
    share of a batch is 8 packets against an input buffer of 4. A baseline runs a
    transaction only after every smaller ts; the dealer must not keep executor 1's
    events behind executor 0's later ones in its outbox (progress.deal: ts order)."""
    store = make_store(300, False, 3)
    ev = make_events(1000, 300, 0.9, 3)
    ps = pat_seq(store, ev, 2) if cc == "pat" else None
    cfg = TxnConfig(store, 2, interval=500, cc=cc, pat_seq=ps)
    _check(store, ev, cfg, packet_rows=64, timeout=600)


# -- NUMA placement ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, pools", [("shared-nothing", 2), ("shared-per-socket", 2), ("shared-everything", 1)])
def test_pools_follow_numa_mode_and_run_on_their_node(mode, pools):
    store = make_store(400, False, 6)
    ev = make_events(600, 400, 0.6, 6)
    summary, grp = _check(store, ev, TxnConfig(store, 2, interval=50, numa_mode=mode), threads=1, topology=_vtopo())
    assert summary["pools"] == pools
    assert len(store.segments) == 2  # one segment per (virtual) node
    if mode != "shared-everything":
        assert summary["placement_locality"] == 1.0  # every pool task ran on its pool's node
    assert summary["page_locality"] == 1.0 or not topology.memory.numa_available()


@pytest.mark.parametrize("policy", ["streams", "ordered"])
def test_policies_without_runtime_tasks_refuse_transactional_state(policy):
    """streams and ordered run only the plan's own ports or stages: a TStream request
    fails at once with a clear error instead of waiting for rounds nobody runs."""
    store = make_store(40, False, 1)
    ev = make_events(60, 40, 0.6, 1)
    cfg = TxnConfig(store, 1, interval=7)
    # (ordered refuses the plan already: its operators are not per-unit StreamOperators)
    with pytest.raises(ValueError, match=f"policy '{policy}' runs only the plan's ports|must be a StreamOperator"):
        run_scheduled(store, ev, cfg, policy=policy, timeout=60)
