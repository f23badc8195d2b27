"""bobox_sched.txn building blocks: atomics in nogil kernels, Fun/CFun registration,
state tables and their node-local placement, the txn API's checks, the progress
controller's dealing, and the serial oracle kernel against a plain-Python one."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from bobox_sched.core.packet import Packet
from bobox_sched.txn import (GE, INC, EventBlotter, StateStore, StateTable, TransactionalOperator, TxnConfig,
                             register_cfun, register_fun)
from bobox_sched.core.atomics import atomic_add, atomic_cas, atomic_max, atomic_store, cpu_relax
from bobox_sched.txn.funs import FEW_WORKERS, HOLD_BELOW, HOLD_BELOW_FEW, kernel_for, kernels
from bobox_sched.txn.oracle import record, reference_run, serial_run
from bobox_sched.txn.ops import OpBuffer, Txn
from bobox_sched.txn.progress import batch_punct_ts, deal
from topology.memory import live_nodes, numa_available

from txn_workload import RandomOp, make_events, make_store, pat_seq, run_oracle, run_scheduled, same


# -- atomics ---------------------------------------------------------------------------


@njit(nogil=True)
def _fetch_add(a, n):
    for _ in range(n):
        atomic_add(a, 0, 1)


@njit(nogil=True)
def _cas_lock_increment(a, n):
    """A spin lock made of cmpxchg guarding a plain increment."""
    for _ in range(n):
        while atomic_cas(a, 1, 0, 1) != 0:
            cpu_relax()
        a[2] = a[2] + 1
        atomic_store(a, 1, 0)


@njit(nogil=True)
def _max_of(a, vals):
    for v in vals:
        atomic_max(a, 3, v)


def _threads(fn, *args, k=4):
    ts = [threading.Thread(target=fn, args=args) for _ in range(k)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_atomics_are_exact_across_threads_in_nogil_kernels():
    a = np.zeros(4, np.int64)
    _fetch_add(a, 1)
    _cas_lock_increment(a, 1)
    a[:] = 0
    _threads(_fetch_add, a, 200_000)
    assert a[0] == 800_000
    _threads(_cas_lock_increment, a, 50_000)
    assert a[2] == 200_000 and a[1] == 0
    vals = np.random.default_rng(0).integers(-1000, 1000, 10_000)
    _threads(_max_of, a, vals)
    assert a[3] == vals.max()


def test_atomics_refuse_other_arrays():
    """Typing refuses anything but a 1-D int32/int64 (or unsigned) array, naming it."""
    @njit
    def add(a):
        return atomic_add(a, 0, 1)

    @njit
    def amax(a):
        return atomic_max(a, 0, 1)

    for fn, a, shown in [(add, np.zeros(2), r"array\(float64, 1d, C\)"),
                         (add, np.zeros((2, 2), np.int64), r"array\(int64, 2d, C\)"),
                         (add, np.zeros(2, np.int16), r"array\(int16, 1d, C\)"),
                         (amax, np.zeros(2, np.float32), r"array\(float32, 1d, C\)")]:
        with pytest.raises(TypeError, match=r"atomics need a 1-D int32/int64 array, got " + shown):
            fn(a)
    assert add(np.zeros(2, np.int32)) == 0  # the same kernels accept an int array


# -- Fun / CFun ------------------------------------------------------------------------


def times3_plus(cur, src, param, bits):
    return cur * 3.0 + param


def within_ten(a, b):
    return abs(a - b) <= 10.0


def test_user_registered_fun_and_cfun_run_in_the_kernels():
    t3 = register_fun("TIMES3_PLUS", times3_plus)
    w10 = register_cfun("WITHIN_TEN", within_ten)
    assert register_fun("TIMES3_PLUS", times3_plus) is t3  # idempotent
    a = StateTable("a", 4, init=[1.0, 2.0, 30.0, 4.0])
    st = StateStore(a)

    class Op(TransactionalOperator):
        def state_access(self, txn, eb):
            txn.require(w10(a, eb["k"], 5.0))
            txn.read_modify(a, eb["k"], t3, param=1.0, into="new")

        def post_process(self, eb):
            return {"ts": eb.ts, "ok": eb.success, "new": eb["new"]}

    op = Op(TxnConfig(st, 1), 0)
    rec = record(op, [Packet({"k": np.array([0, 2, 0]), "ts": np.array([0, 1, 2])})])
    res, verdict, aborts = serial_run(st, rec)
    assert list(verdict[:3]) == [1, 0, 1]  # |30 - 5| > 10: rejected
    assert a.values().tolist() == [13.0, 2.0, 30.0, 4.0]  # 1 -> 4 -> 13
    assert aborts == 0


def test_small_kernel_calls_keep_the_gil():
    """Each batch-step kernel has a GIL-holding twin: calls below its threshold get the
    twin, calls at or above it the GIL-releasing kernel; the twin runs the same code."""
    K = kernels()
    for name, n in HOLD_BELOW.items():
        held, free = getattr(K, name + "_held"), getattr(K, name)
        assert kernel_for(K, name, 0) is held and kernel_for(K, name, n - 1) is held
        assert kernel_for(K, name, n) is free
        assert free.targetoptions.get("nogil") is True and not held.targetoptions.get("nogil")
    # with one or two workers (FEW_WORKERS), two kernels keep it longer; from three on,
    # and with an unknown count, the general thresholds apply
    assert HOLD_BELOW_FEW and all(HOLD_BELOW_FEW[k] > HOLD_BELOW[k] for k in HOLD_BELOW_FEW)
    for name, n in HOLD_BELOW_FEW.items():
        held, free = getattr(K, name + "_held"), getattr(K, name)
        for w in range(1, FEW_WORKERS + 1):
            assert kernel_for(K, name, n - 1, w) is held and kernel_for(K, name, n, w) is free
        for w in (0, FEW_WORKERS + 1, 16):
            assert kernel_for(K, name, HOLD_BELOW[name], w) is free
            assert kernel_for(K, name, HOLD_BELOW[name] - 1, w) is held
    assert kernel_for(K, "build_pool", HOLD_BELOW["build_pool"], 2) is K.build_pool  # only those two change
    txn_of = np.array([2, 0, 2, 1, 0], np.int64)
    outs = []
    for fn in (K.by_txn, K.by_txn_held):
        off, order = np.empty(4, np.int64), np.empty(5, np.int64)
        fn(3, txn_of, 5, off, order)
        outs.append((off.tolist(), order.tolist()))
    assert outs[0] == outs[1] == ([0, 2, 3, 5], [1, 4, 3, 0, 2])


def test_registration_errors():
    with pytest.raises(ValueError):
        register_fun("LAMBDA", lambda cur, src, param, bits: cur)
    with pytest.raises(ValueError):
        register_fun("TWO", within_ten)  # a CFun's arity
    with pytest.raises(ValueError):
        register_fun("TIMES3_PLUS", within_ten.__class__)


# -- tables ----------------------------------------------------------------------------


def test_table_values_sets_and_errors():
    a = StateTable("a", 5, record_bytes=100, init=np.arange(5.0))
    s = StateTable("s", 3, set_capacity=130)
    st = StateStore(a, s)
    assert st.width == max(13, 1 + 3)
    assert a.values().tolist() == [0, 1, 2, 3, 4]
    a.load(7.0)
    assert a.values().tolist() == [7.0] * 5
    assert st["s"] is s and len(s) == 3
    with pytest.raises(ValueError):
        StateTable("x", 0)
    with pytest.raises(ValueError):
        StateTable("x", 3, constraint=(5, 1))
    with pytest.raises(ValueError):
        StateTable("x", 3, set_capacity=8, constraint=(0, None))
    with pytest.raises(ValueError):
        StateStore(StateTable("d", 1), StateTable("d", 1))
    with pytest.raises(ValueError):
        StateStore(a)  # already in a store


def test_place_keeps_values_and_pages_are_on_the_segment_node():
    a = StateTable("a", 3000, record_bytes=128, init=np.arange(3000.0))
    st = StateStore(a)
    live = live_nodes()
    nodes = [live[i % len(live)] for i in range(2)]
    st.place(np.arange(3000) % 2, nodes)
    assert a.values().tolist() == list(np.arange(3000.0))
    assert len(st.segments) == len(set(nodes))
    if numa_available():
        for placed, hist in st.page_nodes():
            assert set(hist) == {placed}, (placed, hist)


def test_set_insert_keeps_the_set_and_its_size():
    s = StateTable("s", 2, set_capacity=200)
    st = StateStore(s)
    from bobox_sched.txn import SET_INSERT

    class Op(TransactionalOperator):
        def state_access(self, txn, eb):
            txn.read_modify(s, eb["k"], SET_INSERT, param=eb["v"], into="n")

    vids = np.array([5, 199, 5, 64, 0, 199])
    rec = record(Op(TxnConfig(st, 1), 0), [Packet({"k": np.zeros(6, np.int64), "v": vids.astype(float),
                                                   "ts": np.arange(6)})])
    serial_run(st, rec)
    assert s.values()[0] == 4
    assert s.members(0).tolist() == [0, 5, 64, 199]


# -- the txn API -----------------------------------------------------------------------


def _txn(st, n=3):
    eb = EventBlotter(Packet({"k": np.arange(n), "ts": np.arange(n)}))
    return Txn(kernels(), OpBuffer(), st, eb), eb


def test_txn_api_checks():
    a = StateTable("a", 3)
    st = StateStore(a)
    txn, eb = _txn(st)
    with pytest.raises(IndexError):
        txn.write(a, np.array([0, 1, 3]), 1.0)
    with pytest.raises(ValueError):
        txn.write(a, np.array([0, 1]), 1.0)  # one key per event
    with pytest.raises(ValueError):
        txn.write(a, eb["k"], 1.0, where=np.array([1, 0, 1]))  # not boolean
    txn.read(a, eb["k"], into="x")
    with pytest.raises(ValueError):
        txn.read(a, eb["k"], into="x")
    with pytest.raises(TypeError):
        txn.read_modify(a, eb["k"], GE)
    other = StateStore(StateTable("zz", 3))
    with pytest.raises(ValueError):
        txn.read(other["zz"], eb["k"], into="y")
    assert txn._buf.n == 3 and txn._buf.ntx == 3  # one READ per row; the failed calls left nothing


def test_config_checks():
    st = StateStore(StateTable("a", 3))
    for bad in (dict(executors=0), dict(executors=1, interval=0), dict(executors=1, cc="2pl"),
                dict(executors=1, numa_mode="numa"), dict(executors=1, cc="lock", dual_mode=True),
                dict(executors=1, cc="pat"), dict(executors=1, spin_us=0)):
        with pytest.raises(ValueError):
            TxnConfig(st, **bad)
    assert TxnConfig(st, 2).dual_mode and not TxnConfig(st, 2, cc="mvlk").dual_mode


# -- pool-local batches (the coordinator fuses their first round into the build) ------


def _ops(rows):
    """Operation rows (record, source, transaction) in an instance buffer's layout."""
    ib = np.zeros((max(len(rows), 1), 8), np.int64)
    for i, (g, src, x) in enumerate(rows):
        ib[i, 2], ib[i, 5], ib[i, 7] = g, src, x
    return ib


@pytest.mark.parametrize("ops, conds, local", [
    ([(0, -1, 0), (2, -1, 0), (1, 3, 1)], [], 1),  # sources in the operation's pool
    ([(0, -1, 0), (1, -1, 0)], [], 1),  # a transaction writing in two pools reads nothing
    ([(0, 1, 0)], [], 0),  # a source in another pool
    ([(0, -1, 0)], [(0, 2, -1)], 1),  # a condition on a record of the same pool
    ([(0, -1, 0)], [(0, 1, -1)], 0),  # ... of another pool
    ([(0, -1, 0)], [(0, 2, 3)], 0),  # a condition comparing with a record of another pool
    ([(0, -1, 0), (1, -1, 0)], [(0, 2, -1)], 0),  # a conditional transaction in two pools
    ([(0, -1, 0), (1, -1, 1)], [(0, 2, -1)], 1),  # ... only the unconditional one spans none
    ([], [(0, 1, -1), (0, 3, -1)], 1),  # conditions only, one pool
    ([], [(0, 1, -1), (0, 2, -1)], 0),
])
def test_pool_local_finds_every_cross_pool_read(ops, conds, local):
    pool_of = np.array([0, 1, 0, 1], np.int64)  # record g -> pool g mod 2
    cb = np.zeros((max(len(conds), 1), 4), np.int64)
    for c, (x, g, g2) in enumerate(conds):
        cb[c] = (x, g, 0, g2)
    ntx = 1 + max([x for *_, x in ops] + [x for x, *_ in conds])
    assert kernels().pool_local(_ops(ops), len(ops), cb, len(conds), ntx, pool_of) == local


# -- the progress controller -----------------------------------------------------------


@given(T=st.integers(1, 6), I=st.integers(1, 9), sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8),
       max_rows=st.sampled_from([None, 1, 3]))
@settings(max_examples=60, deadline=None)
def test_deal_is_round_robin_batch_by_batch_with_monotone_punctuations(T, I, sizes, max_rows):
    counts = [0] * T
    j = 0
    seen = {t: [] for t in range(T)}
    puncts = {t: [] for t in range(T)}
    order = []  # (batch, executor) in dealing order
    for n in sizes:
        for t, pos, batch, pts in deal(j, n, counts, T, I, max_rows):
            assert np.all(pos % T == t)
            assert np.all(pos // T // I == batch)  # every position of the piece is in `batch`
            seen[t].extend(pos.tolist())
            order.append((batch, t))
            if pts is not None:
                assert pts == batch_punct_ts(batch, I, T)
                assert max(seen[t]) < pts
                puncts[t].append(pts)
        j += n
    for t in range(T):
        assert seen[t] == list(range(t, j, T))
        assert puncts[t] == sorted(puncts[t]) and len(set(puncts[t])) == len(puncts[t])
        assert len(puncts[t]) == len(seen[t]) // I
    # batch by batch: once any executor got a piece of batch b, no executor gets a piece
    # of a lower batch -- also when a packet does not end at a batch boundary (a dealer
    # gated at batch b + 1 must have dealt every executor's part of b, or b never ends)
    top = -1
    for b, _ in order:
        assert b >= top
        top = b


# -- the oracle kernel against plain Python ----------------------------------------------


@given(n=st.integers(1, 60), nkeys=st.sampled_from([1, 2, 5, 40]), seed=st.integers(0, 10_000),
       constrained=st.booleans(), cycles=st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_serial_oracle_kernel_equals_plain_python(n, nkeys, seed, constrained, cycles):
    st_ = make_store(nkeys, constrained, seed)
    ev = make_events(n, nkeys, 0.8, seed, cycles=cycles)
    ev["ts"] = np.random.default_rng(seed).permutation(n).astype(np.int64)  # any ts order
    op = RandomOp(TxnConfig(st_, 1), 0)
    rec = record(op, [Packet(ev)])
    rows_py, res_py, ver_py = reference_run(st_, rec)
    res, ver, _ = serial_run(st_, rec)
    assert np.array_equal(st_.dense(), rows_py, equal_nan=True)
    assert np.array_equal(ver[:rec.buf.ntx], ver_py[:rec.buf.ntx])
    assert np.array_equal(res[:rec.buf.nslots], res_py[:rec.buf.nslots], equal_nan=True)


def test_funs_with_sources_read_the_pre_transaction_value():
    """READ_MODIFY sources other than the target are read as of transaction start, even
    when the transaction wrote them earlier (spec 1.6)."""
    from bobox_sched.txn import ADD_SRC

    a = StateTable("a", 2, init=[10.0, 1.0])
    st = StateStore(a)

    class Op(TransactionalOperator):
        def state_access(self, txn, eb):
            txn.write(a, np.zeros(eb.n, np.int64), 100.0)  # a[0] <- 100 ...
            txn.read_modify(a, np.ones(eb.n, np.int64), ADD_SRC, src=(a, np.zeros(eb.n, np.int64)))  # a[1] += a[0]
            txn.read_modify(a, np.zeros(eb.n, np.int64), INC, param=1.0, into="a0")  # own write seen: 101

    rec = record(Op(TxnConfig(st, 1), 0), [Packet({"ts": np.array([0])})])
    res, verdict, _ = serial_run(st, rec)
    assert a.values().tolist() == [101.0, 11.0]  # a[1] = 1 + 10 (pre-transaction a[0])
    assert res[0] == 101.0


@given(n=st.integers(1, 40), L=st.integers(1, 5), nkeys=st.sampled_from([2, 7, 50]), seed=st.integers(0, 2**31),
       src_2d=st.booleans(), param_2d=st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_two_d_keys_equal_one_call_per_column(n, L, nkeys, seed, src_2d, param_2d):
    """Keys of shape (rows, L) issue L operations per row in one call, exactly as L calls
    with the columns in order: the same final state and the same results, with masks,
    per-row or per-operation parameters and sources, and repeated keys in a row."""
    from bobox_sched.txn import ADD_SRC
    from bobox_sched.txn.oracle import serial_oracle

    rng = np.random.default_rng(seed)
    cols = {"ts": np.arange(n), "m": rng.random(n) < 0.6, "p": rng.random(n)}
    for j in range(L):
        cols[f"k{j}"] = rng.integers(0, nkeys, n)
        cols[f"s{j}"] = rng.integers(0, nkeys, n)
        cols[f"v{j}"] = rng.random(n)

    def two_d(eb, name):
        return np.column_stack([eb[f"{name}{j}"] for j in range(L)])

    class Cols(TransactionalOperator):
        def state_access(self, txn, eb):
            a, m = self.store["a"], eb["m"]
            for j in range(L):
                txn.read(a, eb[f"k{j}"], into=f"r{j}", where=m)
            for j in range(L):
                txn.write(a, eb[f"k{j}"], eb[f"v{j}"], where=~m)
            for j in range(L):
                txn.read_modify(a, eb[f"k{j}"], ADD_SRC, param=eb[f"v{j}"] if param_2d else eb["p"],
                                src=(a, eb[f"s{j}"] if src_2d else eb["s0"]), into=f"u{j}")

        def post_process(self, eb):
            return {"ts": eb.ts, **{f"{c}{j}": eb[f"{c}{j}"] for c in "ru" for j in range(L)}}

    class TwoD(TransactionalOperator):
        def state_access(self, txn, eb):
            a, m, k = self.store["a"], eb["m"], two_d(eb, "k")
            txn.read(a, k, into="r", where=m)
            txn.write(a, k, two_d(eb, "v"), where=~m)
            txn.read_modify(a, k, ADD_SRC, param=two_d(eb, "v") if param_2d else eb["p"],
                            src=(a, two_d(eb, "s") if src_2d else eb["s0"]), into="u")

        def post_process(self, eb):
            return {"ts": eb.ts, **{f"{c}{j}": eb[c][:, j] for c in "ru" for j in range(L)}}

    runs = []
    for Op in (Cols, TwoD):
        store = StateStore(StateTable("a", nkeys, init=np.arange(nkeys, dtype=np.float64)))
        dense, outs, _ = serial_oracle(Op(TxnConfig(store, 1), 0), store, [Packet(dict(cols))])
        runs.append((dense, outs[0]))
    (d1, o1), (d2, o2) = runs
    assert np.array_equal(d1, d2, equal_nan=True)
    assert o1.keys() == o2.keys() and all(np.array_equal(o1[c], o2[c], equal_nan=True) for c in o1)


def test_two_d_keys_checks():
    a = StateTable("a", 3)
    txn, eb = _txn(StateStore(a))
    k2 = np.array([[0, 1], [1, 2], [2, 0]])
    with pytest.raises(ValueError):
        txn.write(a, k2, np.ones((3, 3)))  # values: (3,) or (3, 2)
    with pytest.raises(ValueError):
        txn.read_modify(a, k2, INC, src=(a, np.zeros((3, 3), np.int64)))  # source keys: (3,) or (3, 2)
    with pytest.raises(ValueError):
        txn.write(a, np.zeros((2, 2), np.int64), 1.0)  # one row of keys per event
    with pytest.raises(ValueError):
        txn.read(a, np.zeros((3, 300), np.int64), into="big")  # more than 255 operations per transaction
    txn.read(a, k2, into="x")
    txn.write(a, k2, np.ones((3, 2)))
    assert txn._buf.n == 12 and txn._seq == 4 and eb.slots["x"] == (0, 2)
    txn.read(a, k2[:, :1], into="one")  # (3, 1) keys: a (3, 1) column
    assert eb.slots["one"] == (6, 1) and txn._seq == 5


def _equal_to_the_oracle(cc: str, mode: str, executors: int, events: int, constrained: bool = True) -> None:
    """A scheduled run of a random workload (60 keys) under `cc` and `mode` equals the
    serial oracle's: final records and every output."""
    store = make_store(60, constrained=constrained, seed=3)
    ev = make_events(events, 60, 0.8, seed=5)
    ps = pat_seq(make_store(60, constrained=True, seed=3), ev, executors) if cc == "pat" else None
    cfg = TxnConfig(store, executors, interval=40, cc=cc, numa_mode=mode, pat_seq=ps)
    dense, out, _, _ = run_scheduled(store, ev, cfg, threads=2)
    want_dense, want_out = run_oracle(make_store(60, constrained=constrained, seed=3), ev)
    assert np.array_equal(dense, want_dense), (cc, mode)
    assert same(out, want_out) is None, (cc, mode)


@pytest.mark.parametrize("cc,mode,executors,release", [
    ("tstream", "shared-nothing", 3, False), ("tstream", "shared-nothing", 3, True),
    ("tstream", "shared-everything", 2, False), ("tstream", "shared-per-socket", 4, False),
    ("lock", "shared-nothing", 3, False), ("lock", "shared-nothing", 3, True), ("mvlk", "shared-nothing", 2, False),
    ("pat", "shared-nothing", 2, False)])
def test_entry_cache_call_sites_keep_their_argument_types(monkeypatch, cc, mode, executors, release):
    """funs.EntryCache calls a kernel's compiled entry point without checking types: every
    call site that uses it must pass the types of its first call, always. Checked here on
    random workloads (constraints and aborts, cross-record sources, several batches and
    pools), whose results must also equal the serial oracle's; with `release`, every call
    takes the GIL-releasing twin of its kernel (the small batches here take the held ones)."""
    from numba import typeof
    from numba.core.dispatcher import Dispatcher

    from bobox_sched.txn import funs

    first: dict = {}
    calls = {"fast": 0}
    orig = funs.EntryCache.call

    def checked(self, d, *args):
        if isinstance(d, Dispatcher):
            sig = tuple(typeof(a) for a in args)
            assert first.setdefault(d.py_func.__name__ + str(id(self)), sig) == sig, d.py_func.__name__
            calls["fast"] += d in self._ep and self._ep[d] is not d
        return orig(self, d, *args)

    monkeypatch.setattr(funs.EntryCache, "call", checked)
    if release:
        monkeypatch.setattr(funs, "HOLD_BELOW", {k: 0 for k in funs.HOLD_BELOW})
        monkeypatch.setattr(funs, "HOLD_BELOW_FEW", {k: 0 for k in funs.HOLD_BELOW_FEW})
    _equal_to_the_oracle(cc, mode, executors, 600)
    assert calls["fast"] > 0  # the entry points were used, not only the dispatcher


ENTRY_CONFIGS = [("tstream", "shared-nothing", 3), ("tstream", "shared-everything", 2), ("tstream", "shared-per-socket", 4),
                 ("lock", "shared-nothing", 3), ("mvlk", "shared-nothing", 2), ("pat", "shared-nothing", 2),
                 ("tstream", "shared-nothing", 2), ("tstream-plain", "shared-nothing", 2), ("lock-plain", "shared-nothing", 2)]


def test_groups_sharing_an_entry_cache_pass_its_first_types_across_configurations(monkeypatch):
    """Groups of one kind share an EntryCache for the process (funs.shared_entry_cache,
    keyed in coordinator.Group): every call through a shared cache, from any group of any
    configuration run in this process, must pass the types of that cache's first call.
    The configurations run one after another here, into the same caches, each result
    against the serial oracle; "-plain" runs a store without constraints. The type check
    guards the key against mixing types; these stores' views all have one numba type, so
    here a coarser key shows in the count of caches (a key that leaves out the scheme and
    modes fails it: 1 cache)."""
    from numba import typeof
    from numba.core.dispatcher import Dispatcher

    from bobox_sched.txn import funs

    monkeypatch.setattr(funs, "_SHARED", {})
    first: dict = {}
    orig = funs.EntryCache.call

    def checked(self, d, *args):
        if isinstance(d, Dispatcher):
            sig = tuple(typeof(a) for a in args)
            name = d.py_func.__name__
            assert first.setdefault((id(self), name), sig) == sig, f"{name}: other types through one cache"
        return orig(self, d, *args)

    monkeypatch.setattr(funs.EntryCache, "call", checked)
    for kind, mode, executors in ENTRY_CONFIGS:
        _equal_to_the_oracle(kind.split("-")[0], mode, executors, 300, constrained=not kind.endswith("-plain"))
    assert len(funs._SHARED) >= 4  # one cache per kind of group: schemes and modes apart


def test_a_later_request_calls_every_kernel_past_the_dispatcher(monkeypatch):
    """The second request of a kind finds its kernels' entry points in the shared cache:
    none of its calls goes through numba's dispatcher (the first call of each kernel in a
    request cost about 1 ms before the caches were shared)."""
    from bobox_sched.txn import funs

    monkeypatch.setattr(funs, "_SHARED", {})
    misses: list = []
    orig = funs.EntryCache.call

    def counted(self, d, *args):
        misses.append(d not in self._ep)
        return orig(self, d, *args)

    monkeypatch.setattr(funs.EntryCache, "call", counted)
    ev = make_events(300, 60, 0.8, seed=5)
    for run in range(2):
        misses.clear()
        store = make_store(60, constrained=True, seed=3)
        run_scheduled(store, ev, TxnConfig(store, 2, interval=40), threads=2)
        assert misses, "no kernel call went through the cache"
        if run == 0:
            assert any(misses)
    assert not any(misses), f"{sum(misses)} of {len(misses)} calls of the second request missed the cache"


def test_entry_cache_keeps_a_timing_wrapper_around_the_entry_point():
    """With the kernels wrapped for the serial fraction (operators.released), the cache
    keeps the timing: it wraps the compiled entry point the same way (so the timed calls
    skip the dispatcher too), and the run equals the oracle."""
    from numba.core.dispatcher import Dispatcher

    from bobox_sched.txn import funs
    from operators import released

    seen = []
    orig = funs.EntryCache.call

    def spy(self, d, *args):
        out = orig(self, d, *args)
        seen.append((d, self._ep.get(d)))
        return out

    store = make_store(60, constrained=True, seed=3)
    ev = make_events(400, 60, 0.8, seed=5)
    cfg = TxnConfig(store, 2, interval=40, kernel_wrap=released.timed_namespace)
    was = released.enable(True)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(funs.EntryCache, "call", spy)
            dense, out, _, grp = run_scheduled(store, ev, cfg, threads=2)
    finally:
        released.enable(was)
    want_dense, want_out = run_oracle(make_store(60, constrained=True, seed=3), ev)
    assert np.array_equal(dense, want_dense) and same(out, want_out) is None
    wrapped = [(d, e) for d, e in seen if isinstance(getattr(d, "__wrapped__", None), Dispatcher)]
    assert wrapped, "the timed kernels went through the cache"
    for d, e in wrapped:
        assert e is not d and e.rewrap is released.timed  # a timed wrapper ...
        assert not isinstance(e.__wrapped__, Dispatcher)  # ... around the entry point
