"""Pipeline compilation (operators/pipeline.py): a plan whose row-wise chains run as one
generated kernel per morsel gives the same rows, in the same order, as the
operator-by-operator plan, for hypothesis-generated predicates, projections, join
kinds and aggregations; with tiny packets, so kernels stop and resume mid-chain
(full output packets) and mid-row (full aggregation tables) all the time."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operators import tpch as T
from operators.builder import Query
from operators.expr import case, col, lit
from operators.pipeline import Pipeline
from operators.tpch_sql import compare_tables, duckdb_answer

from bobox_sched import Scheduler

SETTINGS = settings(max_examples=30, deadline=None)
WORDS = ["AIR", "MAIL", "SHIP", "TRUCK", "PROMO X", "PROMO Y", "RAIL"]


@pytest.fixture(scope="module", params=["bobox", "simple"])
def sched(request):
    # tiny packets and buffers: output packets fill after a few rows, every chain of
    # join matches is cut and resumed, back-pressure everywhere
    with Scheduler(policy=request.param, packet_bytes=256, buffer_packets=2) as s:
        yield s


@st.composite
def tables(draw, max_rows=120):
    n = draw(st.integers(0, max_rows))
    skew = draw(st.sampled_from([3, 12, 400]))  # heavy duplicates .. mostly unique
    return pa.table({
        "k": pa.array(draw(st.lists(st.integers(0, skew), min_size=n, max_size=n)), pa.int64()),
        "i": pa.array(draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n)), pa.int64()),
        "v": pa.array(draw(st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=n, max_size=n)),
                      pa.float64()),
        "s": pa.array(draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)), pa.string()),
        "d": pa.array(np.array(draw(st.lists(st.integers(9000, 9100), min_size=n, max_size=n)), np.int32),
                      pa.int32()).cast(pa.date32()),
    })


def int_exprs():
    leaves = st.one_of(st.sampled_from([col("i"), col("k")]), st.integers(-4, 4).map(lit))
    return st.recursive(leaves, lambda sub: st.tuples(st.sampled_from("+-*"), sub, sub).map(
        lambda t: {"+": t[1] + t[2], "-": t[1] - t[2], "*": t[1] * t[2]}[t[0]]), max_leaves=3)


def float_exprs():
    return st.one_of(
        int_exprs().map(lambda e: e * 0.5 + col("v")),
        st.tuples(int_exprs(), st.floats(-2, 2, allow_nan=False)).map(lambda t: col("v") * t[1] - t[0]),
        st.just(col("v") / (col("i") * col("i") + 1)),
    )


def predicates():
    atoms = st.one_of(
        st.tuples(int_exprs(), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), int_exprs()).map(
            lambda t: {"<": t[0] < t[2], "<=": t[0] <= t[2], ">": t[0] > t[2], ">=": t[0] >= t[2],
                       "==": t[0] == t[2], "!=": t[0] != t[2]}[t[1]]),
        st.floats(-50, 50, allow_nan=False).map(lambda x: col("v") < x),
        st.sampled_from(["MAIL", "PROMO", "S", "ZZZ"]).map(lambda w: col("s") >= w),
        st.sampled_from(["AIR", "NOPE"]).map(lambda w: col("s") != w),
        st.sampled_from(["PROMO%", "%AI%"]).map(lambda p: col("s").like(p)),
        st.lists(st.sampled_from(WORDS + ["NOPE"]), min_size=1, max_size=3).map(lambda w: col("s").isin(w)),
        st.integers(9000, 9100).map(lambda x: col("d") < lit(x)),
        st.lists(st.integers(-5, 5), min_size=1, max_size=3).map(lambda v: col("i").isin(v)),
    )
    return st.recursive(atoms, lambda sub: st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] & t[1]), st.tuples(sub, sub).map(lambda t: t[0] | t[1]),
        sub.map(lambda p: ~p)), max_leaves=3)


@st.composite
def steps(draw):
    """A random chain: filters, projections (the same column names, new values) and join
    probes, then maybe an aggregation."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["filter", "project", "join"]))
        if kind == "filter":
            out.append(("filter", draw(predicates())))
        elif kind == "project":
            out.append(("project", draw(int_exprs()), draw(float_exprs()),
                        draw(st.one_of(st.none(), predicates()))))
        else:
            out.append(("join", draw(st.sampled_from(["inner", "semi", "anti"])), draw(st.booleans())))
    agg = draw(st.one_of(st.none(), st.tuples(
        st.lists(st.sampled_from(["k", "s", "d"]), unique=True, max_size=2),
        st.lists(st.sampled_from(["sum", "count", "min", "max", "avg"]), min_size=1, max_size=3))))
    return out, agg


def build(t, b, chain, agg, parallel, fuse):
    q = Query(None, "p", parallel, fuse=fuse)
    s = q.values(t)
    nb = 0
    for step in chain:
        if step[0] == "filter":
            s = s.filter(step[1])
        elif step[0] == "project":
            _, ie, fe, flag = step
            extra = {n: col(n) for n in s.schema.names if n not in ("k", "i", "v", "s", "d")}
            more = {} if flag is None else {"f": case([(flag, 1)], 0)}
            extra = {n: e for n, e in extra.items() if n != "f"}
            s = s.project("k", "s", "d", i=ie, v=fe, **extra, **more)
        else:
            _, kind, two_keys = step
            on = [("k", "k")] + ([("i", "i")] if two_keys else [])
            cols = [(f"b{nb}v", "v"), (f"b{nb}s", "s")] if kind == "inner" else None
            s = s.join(q.values(b, parallel=1), on, kind=kind, columns=cols)
            nb += 1
    if agg is not None:
        keys, funcs = agg
        aggs = [(f"a{j}", fn, None if fn == "count" else (col("v") if fn in ("sum", "avg") else col("i")))
                for j, fn in enumerate(funcs)]
        s = s.aggregate(keys, aggs)
    return q.collect(s)


@SETTINGS
@given(tables(), tables(max_rows=40), steps(), st.integers(1, 2))
def test_fused_plan_equals_operator_by_operator(sched, t, b, chain_agg, parallel):
    chain, agg = chain_agg
    fused = build(t, b, chain, agg, parallel, True)
    plain = build(t, b, chain, agg, parallel, False)
    assert any("+" in name for name in fused.operator_names), fused.operator_names
    assert not any("+" in name for name in plain.operator_names)
    got = sched.submit(fused).result(60)
    want = sched.submit(plain).result(60)
    # one partition: same rows in the same order (floats summed in the same order);
    # two: partitions interleave at unions, so compare as sets (sums within rounding)
    compare_tables(got, want, rel_tol=1e-12 if parallel == 1 else 1e-9, ordered=parallel == 1)


def test_tpch_plans_are_fused_and_correct(tpch):
    """Every TPC-H plan has at least one pipeline, and its answers equal DuckDB's with
    fusion and without (the per-query tests run the fused plans under more settings)."""
    with Scheduler(packet_bytes=4096) as s:
        for q in T.QUERIES:
            p = T.plan(q, tpch, 2)
            assert any("+" in name for name in p.operator_names), (q, p.operator_names)
            compare_tables(s.submit(p).result(300), duckdb_answer(q, tpch))


def test_pipeline_kernel_resumes_inside_join_chains():
    """A join with many matches per probe row into output packets of 3 rows: the kernel
    stops after every third output row, inside the chain, and resumes there."""
    probe = pa.table({"k": pa.array([1, 2, 1, 3, 1], pa.int64()), "x": pa.array([10, 20, 30, 40, 50], pa.int64())})
    bld = pa.table({"k": pa.array([1] * 7 + [3, 3], pa.int64()), "y": pa.array(list(range(9)), pa.int64())})
    q = Query(None, "r", 1)
    s = q.values(probe).join(q.values(bld), [("k", "k")], columns=["y"]).project("x", "y", z=col("x") + col("y"))
    plan = q.collect(s)
    # the probe side's values, the probe and the projection: one pipeline (the build
    # side's values are another, alone)
    assert sorted(plan.operator_names) == ["collect0", "values0+join0+project0", "values1"]
    assert all(getattr(f, "func", None) is Pipeline for n, (f, _, _) in plan._specs.items() if "values" in n)
    with Scheduler(packet_bytes=3 * 8 * 3) as sched:  # 3 rows of 3 int64 columns
        got = sched.submit(plan).result(60)
    want_x = [10] * 7 + [30] * 7 + [40] * 2 + [50] * 7
    want_y = list(range(7)) * 2 + [7, 8] + list(range(7))
    assert got.column("x").to_pylist() == want_x
    assert got.column("y").to_pylist() == want_y
    assert got.column("z").to_pylist() == [x + y for x, y in zip(want_x, want_y)]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-2**40, 2**40), max_size=50), st.integers(1, 2**20), st.booleans())
def test_key_bitmap_marks_exactly_the_present_keys(keys, max_bits, narrow):
    from operators import kernels

    if narrow:  # keys close together, so a bitmap is usually built
        keys = [k % 1000 for k in keys]
    km = np.array([keys], np.int64).reshape(1, len(keys))
    lo, nbits, bits = kernels.key_bitmap(km, max_bits)
    if not keys or max(keys) - min(keys) >= max_bits:
        assert nbits == -1
        return
    assert lo == min(keys) and nbits == max(keys) - min(keys) + 1
    present = {k - lo for k in keys}
    for d in range(0, nbits, max(1, nbits // 500)):
        assert bool((int(bits[d >> 6]) >> (d & 63)) & 1) == (d in present)
    for d in present:
        assert (int(bits[d >> 6]) >> (d & 63)) & 1
