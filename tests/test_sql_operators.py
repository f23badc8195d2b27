"""The operators a SQL front end needs for TPC-H beyond equi-joins and literals: left
outer joins (with a `matched` flag), residual (non-equi) join conditions for inner, left,
semi and anti joins, cross joins with a small build side, SUBSTRING on dictionary-coded
strings, string literals missing from a dictionary, and comparisons of string columns
with different dictionaries.

Each plan runs with one and three partitions, fused and operator by operator, on tiny
packets (many packets per operator, kernels resuming mid-chain), and is compared with
DuckDB's answer to the same SQL over the same pyarrow tables."""

import datetime

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from operators.builder import Query
from operators.expr import Cmp, Lit, Substr, case, col
from operators.tpch_sql import compare_tables

from bobox_sched import Scheduler

MODES = [(1, False), (1, True), (3, False), (3, True)]
mode_ids = [f"p{p}-{'fused' if f else 'plain'}" for p, f in MODES]


@pytest.fixture(scope="module")
def sched():
    # tiny packets and buffers: every operator sees many packets, fused kernels stop and
    # resume inside join chains, back-pressure everywhere
    with Scheduler(packet_bytes=256, buffer_packets=2) as s:
        yield s


def duck(sql: str, **tables) -> pa.Table:
    con = duckdb.connect(":memory:")
    try:
        for name, t in tables.items():
            con.register(name, t)
        r = con.sql(sql).arrow()
        return r.read_all() if isinstance(r, pa.RecordBatchReader) else r
    finally:
        con.close()


def run(sched, q, stream, output=None):
    return sched.submit(q.collect(stream, output)).result(120)


def fused_joins(plan) -> list[str]:
    """The pipeline operators of `plan` that contain a join probe."""
    return [n for n in plan.operator_names if "+" in n and "join" in n]


WORDS = ["AIR", "MAIL", "SHIP", "TRUCK", "PROMO X", "héllo wörld", "13-555", "31-000", "29-123", "ünï"]


def probe_table(n=300, keys=40, seed=1):
    r = np.random.default_rng(seed)
    return pa.table({
        "k": pa.array(r.integers(0, keys, n), pa.int64()),
        "x": pa.array(r.integers(-50, 50, n), pa.int64()),
        "v": pa.array(np.round(r.normal(0, 10, n), 3), pa.float64()),
        "s": pa.array(r.choice(WORDS, n).tolist(), pa.string()),
    })


def build_table(n=90, keys=60, seed=2):
    r = np.random.default_rng(seed)
    return pa.table({
        "bk": pa.array(r.integers(0, keys, n), pa.int64()),  # duplicates, and keys the probe lacks
        "bx": pa.array(r.integers(-50, 50, n), pa.int64()),
        "bv": pa.array(np.round(r.normal(0, 10, n), 3), pa.float64()),
        "bd": pa.array(r.integers(8000, 9000, n).astype(np.int32), pa.int32()).cast(pa.date32()),
        "bs": pa.array(r.choice(["b one", "b two", "b three"], n).tolist(), pa.string()),
    })


# ------------------------------------------------------------------------------------
# left outer join


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
@pytest.mark.parametrize("strategy", ["broadcast", "shuffle"])
def test_left_join_fills_zeros_and_flags_matches(sched, parallel, fuse, strategy):
    p, b = probe_table(), build_table()
    q = Query(None, "left", parallel, fuse=fuse)
    s = q.values(p).join(q.values(b, parallel=2), [("k", "bk")], kind="left", columns=["bx", "bv", "bd"],
                         matched="m", strategy=strategy)
    plan = q.collect(s)
    if fuse and (strategy == "broadcast" or parallel == 1):  # (a shuffled probe side: a union, then the join alone)
        assert fused_joins(plan), plan.operator_names
    got = sched.submit(plan).result(120)
    want = duck("""select p.k, p.x, p.v, p.s, coalesce(b.bx, 0) as bx, coalesce(b.bv, 0.0) as bv,
                          coalesce(b.bd, date '1970-01-01') as bd, b.bk is not null as m
                   from p left join b on p.k = b.bk""", p=p, b=b)
    assert got.num_rows > p.num_rows  # duplicates matched, and some rows unmatched
    assert 0 < pc.sum(pc.invert(got["m"])).as_py() < p.num_rows
    compare_tables(got, want, ordered=False)


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_left_join_with_residual_then_aggregate_like_q13(sched, parallel, fuse):
    """Q13: customers left join their orders whose comment is not like a pattern, orders
    per customer (the sum of `matched`), then customers per order count."""
    r = np.random.default_rng(3)
    cust = pa.table({"c_custkey": pa.array(np.arange(120), pa.int64())})
    n = 400
    orders = pa.table({
        "o_orderkey": pa.array(np.arange(n), pa.int64()),
        "o_custkey": pa.array(r.integers(0, 150, n), pa.int64()),  # customers 120.. have none
        "o_comment": pa.array(r.choice(["fine", "special requests", "a special few requests", "requests"],
                                       n).tolist()),
    })
    q = Query(None, "q13", parallel, fuse=fuse)
    j = q.values(cust).join(q.values(orders), [("c_custkey", "o_custkey")], kind="left", columns=[],
                            matched="m", residual=~col("o_comment").like("%special%requests%"))
    per = j.aggregate(["c_custkey"], [("c_count", "sum", col("m"))])
    dist = per.aggregate(["c_count"], [("custdist", "count", None)]).sort([("custdist", "desc"), ("c_count", "desc")])
    got = run(sched, q, dist)
    want = duck("""select c_count, count(*) as custdist from (
                       select c_custkey, count(o_orderkey) as c_count
                       from cust left outer join orders
                         on c_custkey = o_custkey and o_comment not like '%special%requests%'
                       group by c_custkey) as c_orders
                   group by c_count order by custdist desc, c_count desc""", cust=cust, orders=orders)
    assert 0 in got["c_count"].to_pylist()
    compare_tables(got, want, ordered=True)


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_left_join_with_sparse_keys(sched, parallel, fuse):
    """Few build keys spread over a wide range: fused probes test the build side's key
    bitmap first, and a probe row that misses it still comes out, zero-filled."""
    from operators.ops import HashJoin

    r = np.random.default_rng(8)
    p = pa.table({"k": pa.array(r.integers(0, 1000, 300), pa.int64()), "x": pa.array(np.arange(300), pa.int64())})
    bk = np.concatenate([r.choice(p["k"].to_numpy(), 12), r.integers(0, 1000, 8)])
    b = pa.table({"bk": pa.array(bk, pa.int64()), "bx": pa.array(r.integers(1, 50, 20), pa.int64())})
    join = HashJoin(q_schema(b), q_schema(p), [col("bk")], [col("k")], "left")
    join._add_build(_packet(b))
    join._build()
    assert join._bits[1] >= 0  # a bitmap is made for these keys
    q = Query(None, "sparse", parallel, fuse=fuse)
    s = q.values(p).join(q.values(b, parallel=1), [("k", "bk")], kind="left", columns=["bx"], matched="m",
                         residual=col("x") > col("bx"))
    got = run(sched, q, s)
    want = duck("select p.*, coalesce(b.bx, 0) as bx, b.bk is not null as m from p left join b "
                "on p.k = b.bk and p.x > b.bx", p=p, b=b)
    assert 0 < pc.sum(want["m"]).as_py() < 100
    compare_tables(got, want, ordered=False)


def q_schema(t):
    q = Query(None, "schema", 1)
    return q.values(t).schema


class _packet:
    """The columns of a pyarrow table of integers, as a packet."""

    def __init__(self, t):
        self.columns = {n: t[n].to_numpy() for n in t.column_names}
        self.nrows = t.num_rows


def test_left_join_refuses_string_build_columns_and_misplaced_matched():
    p, b = probe_table(), build_table()
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="build column 'bs' is a string"):
        q.values(p).join(q.values(b), [("k", "bk")], kind="left", columns=["bx", "bs"])
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="build column 'bs' is a string"):
        q.values(p).join(q.values(b), [("k", "bk")], kind="left")  # all columns: bs among them
    q = Query(None, "e", 1)
    # a string used only by the residual is fine
    q.values(p).join(q.values(b), [("k", "bk")], kind="left", columns=["bx"], residual=col("bs") == "b one")
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="matched='m' is for left joins"):
        q.values(p).join(q.values(b), [("k", "bk")], kind="inner", matched="m")
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="unknown join kind 'outer'"):
        q.values(p).join(q.values(b), [("k", "bk")], kind="outer")
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="use Stream.cross"):
        q.values(p).join(q.values(b), [])


# ------------------------------------------------------------------------------------
# residual join conditions


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
@pytest.mark.parametrize("kind", ["inner", "left", "semi", "anti"])
def test_residual_join(sched, parallel, fuse, kind):
    p, b = probe_table(), build_table()
    residual = (col("x") < col("bx")) & (col("bs") != "b two") & (col("v") * 2 > col("bv") - 5)
    q = Query(None, "res", parallel, fuse=fuse)
    cols = ["bx", "bv"] if kind in ("inner", "left") else None
    s = q.values(p).join(q.values(b, parallel=2), [("k", "bk")], kind=kind, columns=cols, residual=residual)
    plan = q.collect(s)
    if fuse:
        assert fused_joins(plan), plan.operator_names
    got = sched.submit(plan).result(120)
    cond = "p.k = b.bk and p.x < b.bx and b.bs <> 'b two' and p.v * 2 > b.bv - 5"
    if kind == "inner":
        sql = f"select p.*, b.bx, b.bv from p join b on {cond}"
    elif kind == "left":
        sql = f"select p.*, coalesce(b.bx, 0) as bx, coalesce(b.bv, 0.0) as bv from p left join b on {cond}"
    else:
        sql = f"select * from p where {'' if kind == 'semi' else 'not '}exists (select * from b where {cond})"
    want = duck(sql, p=p, b=b)
    assert 0 < want.num_rows
    compare_tables(got, want, ordered=False)


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_q21_exists_and_not_exists_with_residual(sched, parallel, fuse):
    """Q21's core: late line items of multi-supplier orders where no other supplier was
    late: ``exists (l2: same order, other supplier)`` and ``not exists (l3: same
    order, other supplier, late)``."""
    r = np.random.default_rng(21)
    n = 500
    li = pa.table({
        "l_orderkey": pa.array(r.integers(0, 120, n), pa.int64()),
        "l_suppkey": pa.array(r.integers(0, 6, n), pa.int64()),
        "l_late": pa.array(r.random(n) < 0.4),
    })
    q = Query(None, "q21", parallel, fuse=fuse)
    l1, l2, l3 = (q.values(li) for _ in range(3))
    l2 = l2.project(l2_orderkey=col("l_orderkey"), l2_suppkey=col("l_suppkey"))
    l3 = l3.filter(col("l_late")).project(l3_orderkey=col("l_orderkey"), l3_suppkey=col("l_suppkey"))
    s = l1.filter(col("l_late"))
    s = s.join(l2, [("l_orderkey", "l2_orderkey")], kind="semi", residual=col("l2_suppkey") != col("l_suppkey"),
               strategy="shuffle")
    s = s.join(l3, [("l_orderkey", "l3_orderkey")], kind="anti", residual=col("l3_suppkey") != col("l_suppkey"))
    s = s.aggregate(["l_suppkey"], [("numwait", "count", None)])
    got = run(sched, q, s)
    want = duck("""select l1.l_suppkey, count(*) as numwait from li l1
                   where l1.l_late
                     and exists (select * from li l2 where l2.l_orderkey = l1.l_orderkey
                                 and l2.l_suppkey <> l1.l_suppkey)
                     and not exists (select * from li l3 where l3.l_orderkey = l1.l_orderkey
                                     and l3.l_suppkey <> l1.l_suppkey and l3.l_late)
                   group by l1.l_suppkey""", li=li)
    assert want.num_rows > 0
    compare_tables(got, want, ordered=False)


@st.composite
def semi_case(draw):
    n = draw(st.integers(0, 60))
    m = draw(st.integers(0, 40))
    keys = draw(st.sampled_from([2, 5, 30]))
    ints = lambda size, lo, hi: draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size))  # noqa: E731
    p = pa.table({"k": pa.array(ints(n, 0, keys), pa.int64()), "a": pa.array(ints(n, -5, 5), pa.int64())})
    b = pa.table({"bk": pa.array(ints(m, 0, keys), pa.int64()), "ba": pa.array(ints(m, -5, 5), pa.int64())})
    op = draw(st.sampled_from(["<", "<=", "!=", "=="]))
    return p, b, op, draw(st.sampled_from(["semi", "anti"])), draw(st.integers(1, 3)), draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(semi_case())
def test_residual_semi_anti_property(sched, case_):
    p, b, op, kind, parallel, fuse = case_
    residual = {"<": col("a") < col("ba"), "<=": col("a") <= col("ba"), "!=": col("a") != col("ba"),
                "==": col("a") == col("ba")}[op]
    q = Query(None, "prop", parallel, fuse=fuse)
    s = q.values(p).join(q.values(b), [("k", "bk")], kind=kind, residual=residual)
    got = run(sched, q, s)
    # numpy reference: all pairs, equal keys and the residual, any per probe row
    pk, pa_ = p["k"].to_numpy(), p["a"].to_numpy()
    bk, ba = b["bk"].to_numpy(), b["ba"].to_numpy()
    cmp = {"<": np.less, "<=": np.less_equal, "!=": np.not_equal, "==": np.equal}[op]
    hit = ((pk[:, None] == bk[None, :]) & cmp(pa_[:, None], ba[None, :])).any(axis=1)
    want = p.filter(pa.array(hit if kind == "semi" else ~hit, pa.bool_()))
    compare_tables(got, want, ordered=False)


@pytest.mark.parametrize("kind", ["inner", "left", "anti"])
def test_residual_through_numpy_when_no_kernel(sched, monkeypatch, kind):
    """Without the generated pair kernel, the residual's columns are gathered by the pair
    indices and evaluated by the numpy closures: the same answer."""
    from operators import codegen

    monkeypatch.setattr(codegen, "pair_filter", lambda *a: None)
    p, b = probe_table(), build_table()
    q = Query(None, "res", 2, fuse=False)
    s = q.values(p).join(q.values(b), [("k", "bk")], kind=kind, columns=["bx"] if kind != "anti" else None,
                         residual=(col("x") < col("bx")) & (col("bs") != "b two"))
    got = run(sched, q, s)
    cond = "p.k = b.bk and p.x < b.bx and b.bs <> 'b two'"
    sql = {"inner": f"select p.*, b.bx from p join b on {cond}",
           "left": f"select p.*, coalesce(b.bx, 0) as bx from p left join b on {cond}",
           "anti": f"select * from p where not exists (select * from b where {cond})"}[kind]
    compare_tables(got, duck(sql, p=p, b=b), ordered=False)


def test_residual_errors():
    p, b = probe_table(), build_table()
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="column 'x' is on both sides"):
        q.values(p).join(q.values(b.rename_columns(["bk", "x", "bv", "bd", "bs"])), [("k", "bk")], kind="semi",
                         residual=col("x") != 1)
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="is not a condition"):
        q.values(p).join(q.values(b), [("k", "bk")], residual=col("x") + col("bx"))
    q = Query(None, "e", 1)
    with pytest.raises(KeyError, match="no column 'zz' on either side"):
        q.values(p).join(q.values(b), [("k", "bk")], residual=col("zz") > 1)


# ------------------------------------------------------------------------------------
# cross join


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_cross_join_with_scalar_subquery_like_q22(sched, parallel, fuse):
    """Rows above the average of a subset: ``x > (select avg(x) from p where x > 0)``."""
    p = probe_table()
    q = Query(None, "cross", parallel, fuse=fuse)
    src, sub = q.values(p).tee(2)
    avg = sub.filter(col("x") > 0).aggregate([], [("avg_x", "avg", col("x"))])
    s = src.cross(avg).filter(col("x") > col("avg_x")).project("k", "x", "avg_x")
    plan = q.collect(s)
    if fuse:
        assert fused_joins(plan), plan.operator_names
    got = sched.submit(plan).result(120)
    want = duck("select k, x, (select avg(x) from p where x > 0) as avg_x from p "
                "where x > (select avg(x) from p where x > 0)", p=p)
    assert 0 < want.num_rows < p.num_rows
    compare_tables(got, want, ordered=False)


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_cross_join_many_build_rows_and_residual(sched, parallel, fuse):
    p, b = probe_table(n=60), build_table(n=7)
    q = Query(None, "cross", parallel, fuse=fuse)
    s = q.values(p).cross(q.values(b, parallel=2), columns=["bx", "bs"], residual=col("x") <= col("bx"))
    got = run(sched, q, s)
    want = duck("select p.*, b.bx, b.bs from p cross join b where p.x <= b.bx", p=p, b=b)
    assert p.num_rows < want.num_rows < p.num_rows * b.num_rows
    compare_tables(got, want, ordered=False)
    q = Query(None, "cross", parallel, fuse=fuse)
    got = run(sched, q, q.values(p).cross(q.values(b.slice(0, 0))))
    assert got.num_rows == 0 and got.column_names == p.column_names + b.column_names


# ------------------------------------------------------------------------------------
# substring on dictionary-coded strings


def phones(n=400, seed=5):
    r = np.random.default_rng(seed)
    cc = r.choice(["13", "31", "23", "29", "30", "18", "17"], n)
    return pa.table({
        "c_custkey": pa.array(np.arange(n), pa.int64()),
        "c_phone": pa.array([f"{c}-{r.integers(100, 999)}-{r.integers(1000, 9999)}" for c in cc]),
        "c_acctbal": pa.array(np.round(r.normal(0, 1000, n), 2)),
        "s": pa.array(r.choice(WORDS, n).tolist()),
    })


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_substr_in_filter_isin_group_key_like_q22(sched, parallel, fuse):
    c = phones()
    q = Query(None, "q22", parallel, fuse=fuse)
    s = q.values(c).filter(col("c_phone").substr(1, 2).isin(["13", "31", "23", "29", "30", "18", "99"])
                           & (col("c_acctbal") > 0))
    s = s.aggregate([("cntrycode", col("c_phone").substr(1, 2))],
                    [("numcust", "count", None), ("totacctbal", "sum", col("c_acctbal"))]).sort(["cntrycode"])
    got = run(sched, q, s)
    want = duck("""select substring(c_phone, 1, 2) as cntrycode, count(*) as numcust, sum(c_acctbal) as totacctbal
                   from c where substring(c_phone, 1, 2) in ('13', '31', '23', '29', '30', '18', '99')
                     and c_acctbal > 0
                   group by cntrycode order by cntrycode""", c=c)
    assert want.num_rows == 6
    compare_tables(got, want, ordered=True)


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_substr_projection_comparisons_like_and_characters(sched, parallel, fuse):
    c = phones()
    q = Query(None, "sub", parallel, fuse=fuse)
    s = q.values(c).filter((col("s").substr(2, 3) >= "IP") | col("s").substr(1, 4).like("%ö%")
                           | (col("s").substr(4, 5) == "lo wö"))
    s = s.project("c_custkey", a=col("s").substr(2, 3), b=col("s").substr(9, 5), e=col("s").substr(1, 0),
                  nested=Substr(col("s").substr(2, 6), 2, 2), mid=col("c_phone").substr(4, 3),
                  lk=case([(col("s").substr(2, 4).like("%l_ w%"), 1)], 0))
    got = run(sched, q, s)
    want = duck("""select c_custkey, substr(s, 2, 3) as a, substr(s, 9, 5) as b, substr(s, 1, 0) as e,
                          substr(substr(s, 2, 6), 2, 2) as nested, substr(c_phone, 4, 3) as mid,
                          case when substr(s, 2, 4) like '%l_ w%' then 1 else 0 end as lk
                   from c where substr(s, 2, 3) >= 'IP' or substr(s, 1, 4) like '%ö%'
                     or substr(s, 4, 5) = 'lo wö'""", c=c)
    assert 0 < want.num_rows < c.num_rows
    assert "éll" in want["a"].to_pylist()  # characters, not bytes
    compare_tables(got, want, ordered=False)


def test_substr_errors():
    with pytest.raises(ValueError, match="substr start must be >= 1"):
        col("s").substr(0, 2)
    with pytest.raises(ValueError, match="substr length must be >= 0"):
        col("s").substr(1, -1)
    with pytest.raises(TypeError, match="integer constant"):
        col("s").substr(col("k"), 1)
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="substr of a non-string"):
        q.values(probe_table()).project(y=col("x").substr(1, 2))


# ------------------------------------------------------------------------------------
# string literals absent from the dictionary; string columns of different dictionaries


LITERALS = ["AIR", "AAA", "", "B", "MAIL", "MAILZ", "zzz", "ü", "héllo wörld", "13-556"]


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_string_literals_absent_from_dictionary(sched, parallel, fuse):
    p = probe_table()
    exprs, sql = {}, []
    for i, w in enumerate(LITERALS):
        for op, name in (("==", "eq"), ("!=", "ne"), ("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge")):
            e = {"==": col("s") == w, "!=": col("s") != w, "<": col("s") < w, "<=": col("s") <= w,
                 ">": col("s") > w, ">=": col("s") >= w}[op]
            exprs[f"{name}{i}"] = case([(e, 1)], 0)
            sql.append(f"case when s {'=' if op == '==' else op} '{w}' then 1 else 0 end as {name}{i}")
    exprs["in_absent"] = case([(col("s").isin(["nope", "MAILZ"]), 1)], 0)
    exprs["in_mixed"] = case([(col("s").isin(["nope", "SHIP", "AIR"]), 1)], 0)
    exprs["lit_left"] = case([(Cmp("<", Lit("MAILZ"), col("s")), 1)], 0)
    sql += ["case when s in ('nope', 'MAILZ') then 1 else 0 end as in_absent",
            "case when s in ('nope', 'SHIP', 'AIR') then 1 else 0 end as in_mixed",
            "case when 'MAILZ' < s then 1 else 0 end as lit_left"]
    q = Query(None, "lits", parallel, fuse=fuse)
    s = q.values(p).filter((col("s") != "no-such-value") & ~(col("s") == "no-such-value")).project("k", "s", **exprs)
    got = run(sched, q, s)
    want = duck(f"select k, s, {', '.join(sql)} from p", p=p)
    compare_tables(got, want, ordered=False)
    # a filter that keeps nothing (an absent literal) and one on an absent range
    q = Query(None, "lits", parallel, fuse=fuse)
    got = run(sched, q, q.values(p).filter(col("s") == "no-such-value"))
    assert got.num_rows == 0
    q = Query(None, "lits", parallel, fuse=fuse)
    got = run(sched, q, q.values(p).filter((col("s") > "MAILZ") & (col("s") < "SHIO")))
    compare_tables(got, duck("select * from p where s > 'MAILZ' and s < 'SHIO'", p=p), ordered=False)


@pytest.mark.parametrize("parallel,fuse", MODES, ids=mode_ids)
def test_string_columns_of_different_dictionaries_compare_as_strings(sched, parallel, fuse):
    r = np.random.default_rng(11)
    n = 200
    a = pa.table({"k": pa.array(np.arange(n), pa.int64()),
                  "s": pa.array(r.choice(["FRANCE", "GERMANY", "PERU", "ALGERIA"], n).tolist())})
    b = pa.table({"bk": pa.array(np.arange(n), pa.int64()),
                  "t": pa.array(r.choice(["GERMANY", "FRANCE", "CHINA", "ZAMBIA", "PERU"], n).tolist())})
    q = Query(None, "strs", parallel, fuse=fuse)
    j = q.values(a).join(q.values(b), [("k", "bk")], columns=["t"])
    s = j.filter((col("s") == col("t")) | (col("s") > col("t"))).project(
        "k", "s", "t", lt=case([(col("s") < col("t"), 1)], 0), ne=case([(col("t") != col("s"), 1)], 0))
    got = run(sched, q, s)
    want = duck("""select a.k, s, t, case when s < t then 1 else 0 end as lt, case when t <> s then 1 else 0 end as ne
                   from a join b on a.k = b.bk where s = t or s > t""", a=a, b=b)
    assert 0 < want.num_rows < n
    compare_tables(got, want, ordered=False)
    q = Query(None, "e", 1)
    with pytest.raises(ValueError, match="comparing a string expression with a int expression"):
        q.values(a).filter(col("s") == col("k"))


def test_dates_fill_as_epoch_in_left_join(sched):
    p = pa.table({"k": pa.array([1, 2], pa.int64())})
    b = pa.table({"bk": pa.array([1], pa.int64()), "bd": pa.array([datetime.date(1995, 3, 1)])})
    q = Query(None, "d", 1)
    got = run(sched, q, q.values(p).join(q.values(b), [("k", "bk")], kind="left", columns=["bd"], matched="m"))
    assert sorted(got.to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "bd": datetime.date(1995, 3, 1), "m": True}, {"k": 2, "bd": datetime.date(1970, 1, 1), "m": False}]


def test_numpy_and_generated_evaluation_of_string_expressions():
    """The numpy closures (operators use them where no kernel is generated) and the
    generated kernels give the strings' answers for absent literals, two dictionaries,
    and substrings."""
    from operators import codegen
    from operators.expr import Compiled, Field, Schema

    da = pa.array(sorted(["AIR", "MAIL", "SHIP", "héllo", "ünï"]))
    db = pa.array(sorted(["AIR", "BOAT", "MAIL", "ZZ"]))
    schema = Schema([Field("s", "string", np.dtype(np.int32), da), Field("t", "string", np.dtype(np.int32), db)])
    r = np.random.default_rng(4)
    n = 200
    cols = {"s": r.integers(0, len(da), n).astype(np.int32), "t": r.integers(0, len(db), n).astype(np.int32)}
    S = [da[i].as_py() for i in cols["s"]]
    T = [db[i].as_py() for i in cols["t"]]
    ops = {"==": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y,
           "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}
    cases = []
    for op, f in ops.items():
        for w in ["AIR", "B", "MAILZ", "", "zz", "ü"]:
            cases.append((Cmp(op, col("s"), Lit(w)), [f(x, w) for x in S]))
            cases.append((Cmp(op, Lit(w), col("t")), [f(w, y) for y in T]))
        cases.append((Cmp(op, col("s"), col("t")), [f(x, y) for x, y in zip(S, T)]))
        cases.append((Cmp(op, col("s").substr(1, 1), col("t").substr(2, 1)), [f(x[:1], y[1:2]) for x, y in zip(S, T)]))
    cases.append((col("s").isin(["nope", "ZZ"]), [False] * n))
    cases.append((col("s").substr(2, 2).isin(["él", "IR", "xx"]), [x[1:3] in ("él", "IR") for x in S]))
    cases.append((col("s").substr(2, 3).like("%l%"), ["l" in x[1:4] for x in S]))
    for e, want in cases:
        got_np = np.asarray(Compiled(e, schema)(cols, n), np.bool_)
        assert got_np.tolist() == want, e
        k = codegen.evaluate([e], schema)
        assert k is not None, e
        out = np.empty(n, np.bool_)
        k(cols, [out])
        assert out.tolist() == want, e


@pytest.mark.parametrize("parallel", [1, 3])
def test_chain_of_new_join_kinds_in_one_pipeline(sched, parallel):
    """left join (residual) -> inner join on a zero-filled column -> semi join (residual)
    -> cross join -> projection: one generated kernel, which stops on every full tiny
    output packet inside the chains and resumes there; the same rows (in the same order,
    one partition) as the operator-by-operator plan, and DuckDB's."""
    r = np.random.default_rng(9)
    p = probe_table(n=200, keys=30)
    b1 = build_table(n=60, keys=40, seed=3)
    b2 = pa.table({"ck": pa.array(r.integers(-50, 50, 150), pa.int64()),
                   "cy": pa.array(r.integers(0, 9, 150), pa.int64())})
    b2 = pa.concat_tables([b2, pa.table({"ck": pa.array([0, 0], pa.int64()), "cy": pa.array([4, 7], pa.int64())})])
    b3 = pa.table({"dk": pa.array(r.integers(0, 30, 40), pa.int64()), "dz": pa.array(r.integers(0, 9, 40), pa.int64())})
    lim = pa.table({"c": pa.array([1000], pa.int64())})

    def plan(fuse):
        q = Query(None, "chain", parallel, fuse=fuse)
        s = q.values(p).join(q.values(b1, parallel=1), [("k", "bk")], kind="left", columns=["bx", "bv"], matched="m",
                             residual=col("x") > col("bx"))
        s = s.join(q.values(b2, parallel=1), [("bx", "ck")], columns=["cy"])
        s = s.join(q.values(b3, parallel=1), [("k", "dk")], kind="semi", residual=col("dz") > col("cy"))
        s = s.cross(q.values(lim, parallel=1))
        s = s.project("k", "x", "bx", "bv", "m", "cy", "c", z=col("x") + col("cy") + col("c"))
        return q.collect(s)

    fused, plain = plan(True), plan(False)
    assert any(n.count("join") == 4 for n in fused_joins(fused)), fused.operator_names
    got = sched.submit(fused).result(120)
    compare_tables(got, sched.submit(plain).result(120), ordered=parallel == 1)
    want = duck("""with j1 as (select p.*, coalesce(b1.bx, 0) as bx, coalesce(b1.bv, 0.0) as bv, b1.bk is not null as m
                                from p left join b1 on p.k = b1.bk and p.x > b1.bx),
                        j2 as (select j1.*, b2.cy from j1 join b2 on j1.bx = b2.ck)
                   select k, x, bx, bv, m, cy, c, x + cy + c as z from j2 cross join lim
                   where exists (select * from b3 where b3.dk = j2.k and b3.dz > j2.cy)""",
                p=p, b1=b1, b2=b2, b3=b3, lim=lim)
    assert want.num_rows > 50 and 0 < pc.sum(pc.invert(want["m"])).as_py() < want.num_rows
    compare_tables(got, want, ordered=False)
