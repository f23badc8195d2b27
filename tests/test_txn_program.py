"""Access programs (bobox_sched.txn.program): an operator's state access registered by one
kernel call per packet, and its pre- and post-processing by derived-column kernels,
must mean exactly what the equivalent methods mean -- the same operations in the same
order, so the same final state and outputs under every scheme -- and refuse what they
cannot mean with one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from bobox_sched.core.packet import Packet
from bobox_sched.txn import ADD_SRC, GT, INC, StateStore, StateTable, TransactionalOperator, TxnConfig
from bobox_sched.txn.funs import kernels
from bobox_sched.txn.oracle import record, serial_oracle
from bobox_sched.txn.ops import OpBuffer, Txn
from bobox_sched.txn.program import Col, Derive, Program, Read, ReadModify, Require, Write
from operators.txn.apps import APPS, make_app

from txn_workload import (RandomOp, RandomProgramOp, make_events, make_store, pat_seq, run_oracle, run_scheduled,
                          same)


def _packets(app, n=700, rows=250, seed=4):
    ev = app.events(n, seed=seed)
    ev["ts"] = np.arange(n, dtype=np.int64)
    ev["t_in"] = np.zeros(n, np.int64)
    return [Packet({k: v[i:i + rows] for k, v in ev.items()}) for i in range(0, n, rows)]


def _buffers(rec):
    b = rec.buf
    return (b.ib[:b.n].tolist(), b.fb[:b.n].tolist(), b.cb[:b.nc].tolist(), b.cf[:b.nc].tolist(),
            b.tts[:b.ntx].tolist(), b.nslots, b.has_src, [eb.slots for eb in rec.blotters])


@pytest.mark.parametrize("name", APPS)
def test_each_apps_program_registers_what_its_methods_register(name):
    """Byte for byte: every operation row, condition, transaction and result slot."""
    bufs = []
    for prog in (True, False):
        app = make_app(name, program=prog)
        op = app.operator(TxnConfig(app.make_store(), 1), 0, **app.operator_kwargs())
        assert (op.program is not None) == prog
        bufs.append(_buffers(record(op, _packets(app))))
    assert bufs[0] == bufs[1]


@pytest.mark.parametrize("name", APPS)
def test_each_apps_program_emits_what_its_methods_emit(name):
    """The serial oracle's outputs (post kernels included) and final state agree."""
    runs = []
    for prog in (True, False):
        app = make_app(name, program=prog)
        store = app.make_store()
        op = app.operator(TxnConfig(store, 1), 0, **app.operator_kwargs())
        # TP: enough events that segments pass 50 vehicles, so that tolls are charged
        dense, outs, _ = serial_oracle(op, store, _packets(app, n=12_000, rows=4000))
        runs.append((dense, outs))
    (d1, o1), (d2, o2) = runs
    assert np.array_equal(d1, d2, equal_nan=True)
    assert len(o1) == len(o2) == 3
    if name == "tp":
        assert all((o["toll"] > 0).any() and (o["toll"] == 0).any() for o in o1)
    if name == "gs":
        assert all((o["sum"] > 0).any() and (o["sum"] == 0).any() for o in o1)
    for a, b in zip(o1, o2):
        assert list(a) == list(b)
        for c in a:
            assert np.array_equal(np.asarray(a[c]), np.asarray(b[c]), equal_nan=True), c


@pytest.mark.parametrize("cc,mode,executors", [
    ("tstream", "shared-nothing", 3), ("tstream", "shared-everything", 2), ("lock", "shared-nothing", 2),
    ("mvlk", "shared-nothing", 2), ("pat", "shared-nothing", 2)])
def test_random_programs_run_scheduled_equal_the_methods_oracle(cc, mode, executors):
    """The random workload (conditions on constants and records, sources, aborts, every
    Fun) as a program with a pre kernel, scheduled, equals the methods form run serially."""
    store = make_store(60, constrained=True, seed=3)
    ev = make_events(500, 60, 0.8, seed=5)
    ps = pat_seq(make_store(60, constrained=True, seed=3), ev, executors) if cc == "pat" else None
    cfg = TxnConfig(store, executors, interval=40, cc=cc, numa_mode=mode, pat_seq=ps)
    dense, out, _, _ = run_scheduled(store, ev, cfg, threads=2, op=RandomProgramOp)
    want_dense, want_out = run_oracle(make_store(60, constrained=True, seed=3), ev, op=RandomOp)
    assert np.array_equal(dense, want_dense)
    assert same(out, want_out) is None


@given(n=st.integers(1, 30), seed=st.integers(0, 2**31), cycles=st.booleans())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_program_serially_equals_the_methods(n, seed, cycles):
    ev = make_events(n, 9, 0.5, seed=seed, cycles=cycles)
    d1, o1 = run_oracle(make_store(9, constrained=True, seed=seed % 7), ev, op=RandomProgramOp)
    d2, o2 = run_oracle(make_store(9, constrained=True, seed=seed % 7), ev, op=RandomOp)
    assert np.array_equal(d1, d2)
    assert same(o1, o2) is None


# -- the pieces ----------------------------------------------------------------------------


def _store():
    return StateStore(StateTable("a", 5, init=np.arange(5.0)), StateTable("b", 5, init=10.0))


def _reg(program, cols, store=None):
    store = store or _store()
    bp = program.bind(store, kernels(), 1)
    buf = OpBuffer()
    eb = bp.blotter(Packet(cols))
    bp.register(eb, buf)
    return buf, eb


def _txn_buf(fn, cols, store=None):
    store = store or _store()
    buf = OpBuffer()
    from bobox_sched.txn.ops import EventBlotter

    eb = EventBlotter(Packet(cols))
    fn(Txn(kernels(), buf, store, eb), eb)
    return buf, eb


def _same_buf(a, b):
    return (a.ib[:a.n].tolist(), a.fb[:a.n].tolist(), a.cb[:a.nc].tolist(), a.cf[:a.nc].tolist(), a.nslots) == \
        (b.ib[:b.n].tolist(), b.fb[:b.n].tolist(), b.cb[:b.nc].tolist(), b.cf[:b.nc].tolist(), b.nslots)


@given(n=st.integers(1, 12), L=st.integers(1, 4), seed=st.integers(0, 2**31),
       op=st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), neg=st.booleans(), x=st.integers(-1, 3),
       col=st.sampled_from(["q", "f", "m"]))
@settings(max_examples=60, deadline=None)
def test_row_filters_equal_numpy_masks(n, L, seed, op, neg, x, col):
    """Every comparison, negated or not, on int, float and bool columns, with 2-D keys,
    per-operation parameters, a fixed key column and a source: the same rows as a txn
    call given the numpy mask."""
    rng = np.random.default_rng(seed)
    cols = {"ts": np.arange(n), "k": rng.integers(0, 5, (n, L)), "p": rng.random((n, L)), "q": rng.integers(-1, 4, n),
            "f": rng.integers(-1, 4, n).astype(float), "m": rng.random(n) < 0.5, "s": rng.integers(0, 5, n)}
    ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}
    mask = ops[op](cols[col].astype(float), float(x))
    w = {"==": Col(col) == x, "!=": Col(col) != x, "<": Col(col) < x, "<=": Col(col) <= x, ">": Col(col) > x,
         ">=": Col(col) >= x}[op]
    if neg:
        w, mask = ~w, ~mask
    prog = Program(access=(ReadModify("a", "k", ADD_SRC, param="p", src=("b", "s"), into="u", where=w),
                           Write("b", Col("k")[L - 1], 3.5, where=w),
                           Require(GT("a", "s", Col("f")), GT("b", "s", ("a", Col("k")[0])), where=w)))

    def by_calls(txn, eb):
        txn.read_modify("a", eb["k"], ADD_SRC, param=eb["p"], src=("b", eb["s"]), into="u", where=mask)
        txn.write("b", eb["k"][:, L - 1], 3.5, where=mask)
        txn.require(GT("a", eb["s"], eb["f"]), GT("b", eb["s"], ("a", eb["k"][:, 0])), where=mask)

    (a, ea), (b, eb) = _reg(prog, cols), _txn_buf(by_calls, cols)
    assert _same_buf(a, b) and ea.slots == eb.slots and a.has_src and b.has_src


def test_pre_kernels_make_columns_the_access_reads():
    def twice(k, out):
        for i in range(k.shape[0]):
            out[i] = 2 * k[i]

    prog = Program(access=(Read("a", "k2", into="r"),), pre=(Derive(twice, ("k",), (("k2", np.int64),)),),
                   emit=("ts", "r", "k2"))
    st_ = _store()
    op = type("Op", (TransactionalOperator,), {"program": prog})(TxnConfig(st_, 1), 0)
    _, outs, _ = serial_oracle(op, st_, [Packet({"ts": np.arange(3), "k": np.array([0, 1, 2])})])
    assert outs[0]["k2"].tolist() == [0, 2, 4] and outs[0]["r"].tolist() == [0.0, 2.0, 4.0]


def test_program_errors_are_one_line_and_name_the_problem():
    cols = {"ts": np.arange(3), "k": np.array([0, 1, 9]), "f": np.ones(3), "k2": np.zeros((3, 2), np.int64)}
    with pytest.raises(IndexError, match=r"table 'a'.*ts=2.*outside 0\.\.4"):
        _reg(Program(access=(Write("a", "k", 1.0),)), cols)
    with pytest.raises(ValueError, match="'nope' is not a column"):
        _reg(Program(access=(Read("a", "nope", into="r"),)), cols)
    with pytest.raises(ValueError, match="must hold integers"):
        _reg(Program(access=(Read("a", "f", into="r"),)), cols)
    with pytest.raises(ValueError, match="no table 'zz'"):
        _reg(Program(access=(Read("zz", "k", into="r"),)), cols)
    with pytest.raises(ValueError, match="has 2 columns"):
        _reg(Program(access=(Read("a", "k", into="r", where=Col("k2") == 0),)), cols)
    with pytest.raises(ValueError, match="written twice"):
        Program(access=(Read("a", "k", into="r"), Read("b", "k", into="r")))
    with pytest.raises(TypeError, match="compares"):
        Col("k") == "x"  # noqa: B015
    with pytest.raises(TypeError, match="not a truth value"):
        bool(Col("k") == 1)
    with pytest.raises(TypeError, match="must be a Fun"):
        ReadModify("a", "k", "INC")

    @njit(nogil=False)
    def held(a, out):
        out[:] = a

    with pytest.raises(ValueError, match="keeps the GIL"):
        Derive(held, ("k",), (("x", np.int64),))

    def copy(a, out):
        out[:] = a

    with pytest.raises(ValueError, match="width must be an int >= 1, not 0"):
        Derive(copy, ("k",), (("x", np.int64, 0),))
    # a later packet must keep the first one's widths
    prog = Program(access=(Read("a", "k", into="r"),))
    bp = prog.bind(_store(), kernels(), 1)
    buf = OpBuffer()
    bp.register(bp.blotter(Packet({"ts": np.arange(2), "k": np.array([0, 1])})), buf)
    with pytest.raises(ValueError, match="the first packet's rows had one value"):
        bp.register(bp.blotter(Packet({"ts": np.arange(2), "k": np.zeros((2, 2), np.int64)})), buf)
    # int32 keys and float32 parameters are converted, not refused
    b32, _ = _reg(Program(access=(ReadModify("a", "k", INC, param="p"),)),
                  {"ts": np.arange(2), "k": np.array([1, 2], np.int32), "p": np.array([0.5, 1.5], np.float32)})
    assert b32.ib[:2, 2].tolist() == [1, 2] and b32.fb[:2].tolist() == [0.5, 1.5]
