"""Map, filter and flat-map against numpy on random streams (random packet sizes, empty
packets), punctuations kept in order, parents carried for hidden columns (``__seq``),
declared operator models. Under both policies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from bobox_sched.control import model as M
from bobox_sched.control.punct import Batch, Window
from operators.expr import col
from operators.stream import SEQ, Filter, FlatMap, Map
from operators.stream.derive import derive
from stream_ops_support import POLICIES, chain_plan, cut, puncts, rows, scheds  # noqa: F401

SETTINGS = settings(max_examples=25, deadline=None)
DT = {"k": np.int64, "x": np.float64, "n": np.int64}


@st.composite
def streams(draw, max_rows=400):
    """Random columns cut into random packets (empty ones included), with window
    punctuations between some packets and a hidden __seq column on every row."""
    n = draw(st.integers(0, max_rows))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    cols = {"k": rng.integers(0, 5, n).astype(np.int64), "x": rng.normal(size=n),
            "n": rng.integers(0, 4, n).astype(np.int64), SEQ: np.arange(n, dtype=np.int64) * 3 + 1}
    sizes = draw(st.lists(st.integers(0, 60), max_size=20))
    packets = cut(cols, sizes)
    items = []
    for i, p in enumerate(packets):
        items.append(p)
        if draw(st.booleans()):
            items.append(Window(i) if i % 2 else Batch(ts=i))
    return cols, items


def expected_puncts(items):
    return [it for it in items if not isinstance(it, dict)]


@njit(nogil=True)
def _cube(x, k, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i] * x[i] + k[i]


@njit(nogil=True)
def _keep_even(k, keep):
    for i in range(k.shape[0]):
        keep[i] = k[i] % 2 == 0


@njit(nogil=True)
def _count_k(k, counts):
    for i in range(k.shape[0]):
        counts[i] = k[i] % 3


@njit(nogil=True)
def _expand(parents, rank, v, out):
    for t in range(parents.shape[0]):
        out[t] = v[parents[t]] * (rank[t] + 1)


def _not_jitted(x, out):
    out[:] = x


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=streams())
def test_map_expressions_and_kernel(scheds, policy, data):
    cols, items = data
    plan = chain_plan("map", items, DT,
                      (Map, (DT, [("y", col("x") * 2.0 + col("k")), ("k", col("k") + 1)]), {}),
                      (Map, ({"k": np.int64, "x": np.float64, "n": np.int64, "y": np.float64},), {
                          "kernel": _cube, "args": ["x", "k"], "out": [("z", np.float64)], "drop": ["n"]}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    got = rows(seen, ["x", "y", "k", "z", SEQ])
    k1 = cols["k"] + 1
    np.testing.assert_array_equal(got["k"], k1)
    np.testing.assert_allclose(got["y"], cols["x"] * 2.0 + cols["k"])
    np.testing.assert_allclose(got["z"], cols["x"] ** 3 + k1)
    np.testing.assert_array_equal(got[SEQ], cols[SEQ])
    assert all("n" not in s for s in seen if isinstance(s, dict))
    assert puncts(seen) == expected_puncts(items)


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=streams())
def test_filter_predicate_and_kernel_carry_parents(scheds, policy, data):
    cols, items = data
    plan = chain_plan("filter", items, DT,
                      (Filter, (DT, (col("x") > -0.3) & (col("n") != 2)), {}),
                      (Filter, (DT,), {"kernel": _keep_even, "args": ["k"]}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    got = rows(seen, ["k", "x", "n", SEQ])
    mask = (cols["x"] > -0.3) & (cols["n"] != 2) & (cols["k"] % 2 == 0)
    for c in ("k", "x", "n", SEQ):
        np.testing.assert_array_equal(got[c], cols[c][mask])  # __seq follows its row: gaps
    assert all(len(s["k"]) for s in seen if isinstance(s, dict))  # no empty packet sent
    assert puncts(seen) == expected_puncts(items)


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=streams())
def test_flat_map_counts_rank_expand_and_parents(scheds, policy, data):
    cols, items = data
    plan = chain_plan("flat", items, DT,
                      (FlatMap, (DT, col("n")), {"rank": "r"}),
                      (FlatMap, ({**DT, "r": np.int64}, _count_k), {
                          "args": ["k"], "expand": _expand, "out": [("w", np.float64)], "rank": "r2"}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    got = rows(seen, ["k", "x", "n", "r", "r2", "w", SEQ])
    p1 = np.repeat(np.arange(len(cols["k"])), cols["n"])
    r1 = np.concatenate([np.arange(c) for c in cols["n"]]) if len(p1) else np.empty(0, np.int64)
    c2 = cols["k"][p1] % 3
    p2 = np.repeat(np.arange(len(p1)), c2)
    r2 = np.concatenate([np.arange(c) for c in c2]) if len(p2) else np.empty(0, np.int64)
    src = p1[p2]
    for c in ("k", "x", "n", SEQ):
        np.testing.assert_array_equal(got[c], cols[c][src])  # __seq duplicated per output
    np.testing.assert_array_equal(got["r"], r1[p2])
    np.testing.assert_array_equal(got["r2"], r2)
    np.testing.assert_allclose(got["w"], cols["k"][src] * (r2 + 1))  # expand got args=["k"]
    assert puncts(seen) == expected_puncts(items)


@pytest.mark.parametrize("policy", POLICIES)
def test_flat_map_output_bigger_than_a_packet(scheds, policy):
    """One input row making many outputs: cut into packets of the scheduler's size."""
    cols = {"k": np.array([0, 1], np.int64), "x": np.array([1.0, 2.0]), "n": np.array([70_000, 3], np.int64)}
    plan = chain_plan("big", [cols], DT, (FlatMap, (DT, "n"), {"rank": "r"}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    sizes = [len(s["k"]) for s in seen if isinstance(s, dict)]
    assert sum(sizes) == 70_003 and len(sizes) > 1
    got = rows(seen)
    np.testing.assert_array_equal(got["r"][:70_000], np.arange(70_000))
    np.testing.assert_array_equal(got["k"], np.repeat([0, 1], [70_000, 3]))


def test_models_declared():
    m = M.model_of(Map(DT, [("y", col("x") + 1.0), ("k", col("k") * 2)], drop=["n"]))
    assert m.state == M.STATELESS and m.selectivity == M.EXACTLY_ONE
    assert m.forwards("x") and not m.forwards("k") and not m.forwards("n") and not m.forwards("y")
    assert m.punct_out == {"out": M.PRESERVES} and m.punct_in == {"in": M.OBLIVIOUS}
    f = M.model_of(Filter(DT, col("x") > 0))
    assert f.state == M.STATELESS and f.selectivity == M.AT_MOST_ONE and f.forwards("k") and f.forwards("x")
    fm = M.model_of(FlatMap(DT, "n"))
    assert fm.state == M.STATELESS and fm.selectivity == M.UNKNOWN and fm.selectivity_range == (0, None)
    assert fm.forwards("x") and not M.model_of(FlatMap(DT, "n", rank="r")).forwards("r")
    assert Map.seq_aware and Filter.seq_aware and FlatMap.seq_aware


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="nogil"):
        Map(DT, kernel=njit(lambda x, o: None), args=["x"], out=[("y", np.float64)])
    with pytest.raises(ValueError, match="numba"):
        Map(DT, kernel=_not_jitted, args=["x"], out=[("y", np.float64)])
    with pytest.raises(ValueError, match="either"):
        Filter(DT)
    with pytest.raises(KeyError):
        Filter(DT, col("nope") > 1)
    with pytest.raises(ValueError, match="integer"):
        FlatMap(DT, col("x"))


def test_derive_gathers_hidden_columns_by_parents():
    from bobox_sched.core.packet import Packet

    class Ctx:
        def new_packet(self, schema, n):
            spec = schema if not isinstance(schema, dict) else None
            names = spec.names if spec else list(schema)
            dts = spec.dtypes if spec else [np.dtype(d) for d in schema.values()]
            return Packet({nm: np.empty(n, dt) for nm, dt in zip(names, dts)}, n)

    parent = Packet({"x": np.arange(5), SEQ: np.arange(5) * 10, "__tag": np.arange(5) % 2 == 0})
    out = derive(Ctx(), parent, Packet({"x": np.array([4, 4, 1])}), np.array([4, 4, 1]))
    np.testing.assert_array_equal(out[SEQ], [40, 40, 10])
    np.testing.assert_array_equal(out["__tag"], [True, True, False])
    same = derive(Ctx(), parent, Packet({"x": np.arange(5)}))
    assert same[SEQ] is parent[SEQ]
    with pytest.raises(ValueError, match="parents"):
        derive(Ctx(), parent, Packet({"x": np.arange(2)}))


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=10, deadline=None)
@given(data=streams(), degree=st.integers(2, 4))
def test_row_operators_form_a_parallel_region_with_the_sequential_output(scheds, policy, data, degree):
    """Filter -> FlatMap -> Map is one stateless region (they declare seq_aware): run as
    `degree` channels, the output (rows and punctuations, in order) is the sequential one."""
    _, items = data
    items = [{k: v for k, v in it.items() if k != SEQ} if isinstance(it, dict) else it for it in items]
    plan = chain_plan("region", items, DT,
                      (Filter, (DT, col("x") > -0.3), {}),
                      (FlatMap, (DT, col("n")), {"rank": "r"}),
                      (Map, ({**DT, "r": np.int64}, [("y", col("x") * col("r"))]), {}))
    assert [list(r.ops) for r in plan.regions().regions] == [["op0", "op1", "op2"]], plan.explain_regions()
    want = scheds[policy].submit(plan).result(timeout=60)
    got = scheds[policy].submit(plan, parallelism=degree).result(timeout=60)
    assert puncts(got) == puncts(want)
    a, b = rows(want, ["k", "x", "n", "r", "y"]), rows(got, ["k", "x", "n", "r", "y"])
    for c in a:
        np.testing.assert_array_equal(b[c], a[c])
    assert not any(SEQ in s for s in got if isinstance(s, dict))  # the last merger strips it
