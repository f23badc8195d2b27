"""Generated (fused numba) kernels agree with the numpy evaluation of the same
expressions, on hypothesis-generated expression trees and columns."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from operators import codegen
from operators.expr import Compiled, Field, Schema, case, col, date_days, lit

WORDS = pa.array(sorted(["AIR", "MAIL", "PROMO ONE", "PROMO TWO", "SHIP", "TRUCK"]))
SCHEMA = Schema([
    Field("i", "int", np.dtype(np.int64)),
    Field("f", "float", np.dtype(np.float64)),
    Field("d", "date", np.dtype(np.int32)),
    Field("s", "string", np.dtype(np.int32), WORDS),
])


def numeric():
    leaves = st.one_of(st.sampled_from([col("i"), col("f")]), st.integers(-5, 5).map(lit),
                       st.floats(-3, 3, allow_nan=False).map(lit))
    return st.recursive(leaves, lambda sub: st.tuples(st.sampled_from("+-*"), sub, sub).map(
        lambda t: {"+": t[1] + t[2], "-": t[1] - t[2], "*": t[1] * t[2]}[t[0]]), max_leaves=4)


def predicates():
    cmp = st.tuples(numeric(), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), numeric()).map(
        lambda t: {"<": t[0] < t[2], "<=": t[0] <= t[2], ">": t[0] > t[2], ">=": t[0] >= t[2],
                   "==": t[0] == t[2], "!=": t[0] != t[2]}[t[1]])
    strs = st.one_of(
        st.tuples(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), st.sampled_from(["MAIL", "NOPE", "PROMO", "Z"])).map(
            lambda t: {"==": col("s") == t[1], "!=": col("s") != t[1], "<": col("s") < t[1], "<=": col("s") <= t[1],
                       ">": col("s") > t[1], ">=": col("s") >= t[1]}[t[0]]),
        st.sampled_from(["PROMO%", "%AI%", "_HIP", "%"]).map(lambda p: col("s").like(p)),
        st.lists(st.sampled_from(["AIR", "SHIP", "NOPE"]), min_size=1, max_size=3).map(lambda v: col("s").isin(v)),
        st.integers(8000, 10000).map(lambda k: col("d") >= lit(k)),
        st.lists(st.integers(-3, 3), min_size=1, max_size=3).map(lambda v: col("i").isin(v)),
    )
    atom = st.one_of(cmp, strs)
    return st.recursive(atom, lambda sub: st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] & t[1]), st.tuples(sub, sub).map(lambda t: t[0] | t[1]),
        sub.map(lambda p: ~p)), max_leaves=4)


@st.composite
def columns(draw):
    n = draw(st.integers(0, 60))
    return {
        "i": np.array(draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), np.int64),
        "f": np.array(draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=n, max_size=n)), np.float64),
        "d": np.array(draw(st.lists(st.integers(8000, 10000), min_size=n, max_size=n)), np.int32),
        "s": np.array(draw(st.lists(st.integers(0, len(WORDS) - 1), min_size=n, max_size=n)), np.int32),
    }


SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(predicates(), columns())
def test_filter_gather_matches_numpy(pred, cols):
    n = len(cols["i"])
    want = np.asarray(Compiled(pred, SCHEMA)(cols, n), bool)
    fg = codegen.filter_gather(pred, SCHEMA, SCHEMA.names)
    assert fg is not None
    outs = [np.empty(n, f.dtype) for f in SCHEMA.fields]
    m = fg(cols, outs)
    assert m == want.sum()
    for f, o in zip(SCHEMA.fields, outs):
        np.testing.assert_array_equal(o[:m], cols[f.name][want])


@SETTINGS
@given(st.lists(numeric(), min_size=1, max_size=3), predicates(), columns())
def test_evaluate_matches_numpy(exprs, pred, cols):
    n = len(cols["i"])
    exprs = exprs + [case([(pred, col("f"))], 0.5), col("d").year()]
    ev = codegen.evaluate(exprs, SCHEMA)
    assert ev is not None
    outs = [np.empty(n, Compiled(e, SCHEMA).dtype) for e in exprs]
    if n:
        ev(cols, outs)
    for e, o in zip(exprs, outs):
        np.testing.assert_allclose(o, Compiled(e, SCHEMA)(cols, n), rtol=1e-12, atol=1e-12)


def test_year_kernel_over_calendar_edges():
    days = np.array([date_days(x) for x in ["1970-01-01", "1992-02-29", "1999-12-31", "2000-01-01",
                                             "2000-02-29", "1969-12-31", "1900-03-01", "2100-12-31"]], np.int32)
    ev = codegen.evaluate([col("d").year()], SCHEMA)
    out = [np.empty(len(days), np.int64)]
    cols = {"d": days, "i": np.zeros(len(days), np.int64), "f": np.zeros(len(days)), "s": np.zeros(len(days), np.int32)}
    ev(cols, out)
    assert out[0].tolist() == [1970, 1992, 1999, 2000, 2000, 1969, 1900, 2100]


def test_kernels_are_shared_across_constants_and_cached_on_disk():
    a = codegen.filter_gather(col("i") > 3, SCHEMA, ["i"])
    b = codegen.filter_gather(col("i") > 4, SCHEMA, ["i"])
    assert a.fn is b.fn  # same shape, constants are arguments
    files = list(codegen.cache_dir().glob("bk_*.py"))
    assert files and all(f.read_text().startswith("import numpy as np") for f in files)


def test_unsupported_falls_back():
    assert codegen.evaluate([lit(3)], SCHEMA) is None  # no column: row count unknown
