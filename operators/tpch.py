"""TPC-H query plans written with the plan builder (standard validation parameters).

Each ``qN(data_dir, parallel)`` returns a :class:`bobox_sched.Plan` whose result is a
pyarrow Table with the columns of the query text, in order. Plans follow the usual
hand-optimised shape: selections pushed into the scans, small relations on the build
side of hash joins, aggregation before joins with dimension tables where the grouping
key determines them (Q10), the IN-subquery of Q18 as a grouped semi-join.
"""

from __future__ import annotations

from operators.builder import Query
from operators.expr import case, col, date

REV = col("l_extendedprice") * (1 - col("l_discount"))


def q1_lineitem(q: Query):
    """Q1's input: line items shipped by 1998-09-02 (delta = 90 days)."""
    return q.scan("lineitem", ["l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount",
                               "l_tax", "l_shipdate"], where=col("l_shipdate") <= date("1998-09-02"))


def q1(data, parallel=1):
    q = Query(data, "q1", parallel)
    agg = q1_lineitem(q).aggregate(
        ["l_returnflag", "l_linestatus"],
        [
            ("sum_qty", "sum", col("l_quantity")),
            ("sum_base_price", "sum", col("l_extendedprice")),
            ("sum_disc_price", "sum", REV),
            ("sum_charge", "sum", REV * (1 + col("l_tax"))),
            ("avg_qty", "avg", col("l_quantity")),
            ("avg_price", "avg", col("l_extendedprice")),
            ("avg_disc", "avg", col("l_discount")),
            ("count_order", "count", None),
        ],
    )
    out = agg.sort(["l_returnflag", "l_linestatus"])
    return q.collect(out, ["l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price",
                           "sum_charge", "avg_qty", "avg_price", "avg_disc", "count_order"])


def q3(data, parallel=1):
    q = Query(data, "q3", parallel)
    cust = q.scan("customer", ["c_custkey", "c_mktsegment"], where=col("c_mktsegment") == "BUILDING", parallel=1)
    orders = q.scan("orders", ["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"],
                    where=col("o_orderdate") < date("1995-03-15"))
    orders = orders.join(cust, [("o_custkey", "c_custkey")], kind="semi")
    li = q.scan("lineitem", ["l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"],
                where=col("l_shipdate") > date("1995-03-15"))
    j = li.join(orders, [("l_orderkey", "o_orderkey")], columns=["o_orderdate", "o_shippriority"],
                strategy="shuffle")
    agg = j.aggregate(["l_orderkey", "o_orderdate", "o_shippriority"], [("revenue", "sum", REV)])
    out = agg.sort([("revenue", "desc"), "o_orderdate"], limit=10)
    return q.collect(out, ["l_orderkey", "revenue", "o_orderdate", "o_shippriority"])


def q4(data, parallel=1):
    q = Query(data, "q4", parallel)
    orders = q.scan("orders", ["o_orderkey", "o_orderpriority", "o_orderdate"],
                    where=(col("o_orderdate") >= date("1993-07-01")) & (col("o_orderdate") < date("1993-10-01")))
    late = q.scan("lineitem", ["l_orderkey", "l_commitdate", "l_receiptdate"],
                  where=col("l_commitdate") < col("l_receiptdate"))
    o = orders.join(late, [("o_orderkey", "l_orderkey")], kind="semi", strategy="shuffle")
    agg = o.aggregate(["o_orderpriority"], [("order_count", "count", None)])
    return q.collect(agg.sort(["o_orderpriority"]), ["o_orderpriority", "order_count"])


def q5(data, parallel=1):
    q = Query(data, "q5", parallel)
    region = q.scan("region", ["r_regionkey", "r_name"], where=col("r_name") == "ASIA", parallel=1)
    nation = q.scan("nation", ["n_nationkey", "n_name", "n_regionkey"], parallel=1)
    nation_s, nation_c = nation.join(region, [("n_regionkey", "r_regionkey")], kind="semi").tee(2)
    supp = q.scan("supplier", ["s_suppkey", "s_nationkey"], parallel=1)
    supp = supp.join(nation_s, [("s_nationkey", "n_nationkey")], columns=["n_name"])
    cust = q.scan("customer", ["c_custkey", "c_nationkey"])
    cust = cust.join(nation_c, [("c_nationkey", "n_nationkey")], kind="semi")
    orders = q.scan("orders", ["o_orderkey", "o_custkey", "o_orderdate"],
                    where=(col("o_orderdate") >= date("1994-01-01")) & (col("o_orderdate") < date("1995-01-01")))
    orders = orders.join(cust, [("o_custkey", "c_custkey")], columns=["c_nationkey"])
    li = q.scan("lineitem", ["l_orderkey", "l_suppkey", "l_extendedprice", "l_discount"])
    li = li.join(orders, [("l_orderkey", "o_orderkey")], columns=["c_nationkey"], strategy="shuffle")
    li = li.join(supp, [("l_suppkey", "s_suppkey"), ("c_nationkey", "s_nationkey")], columns=["n_name"])
    agg = li.aggregate(["n_name"], [("revenue", "sum", REV)])
    return q.collect(agg.sort([("revenue", "desc")]), ["n_name", "revenue"])


def q6(data, parallel=1):
    q = Query(data, "q6", parallel)
    li = q.scan("lineitem", ["l_extendedprice", "l_discount", "l_shipdate", "l_quantity"],
                where=(col("l_shipdate") >= date("1994-01-01")) & (col("l_shipdate") < date("1995-01-01"))
                & (col("l_discount") >= 0.05) & (col("l_discount") <= 0.07) & (col("l_quantity") < 24))
    agg = li.aggregate([], [("revenue", "sum", col("l_extendedprice") * col("l_discount"))])
    return q.collect(agg, ["revenue"])


def q10_revenue_per_customer(q: Query):
    """Q10's lost revenue per customer (o_custkey, revenue): returned items of orders of
    1993-Q4. c_custkey determines the other grouping columns, so the plan aggregates
    first and joins the customer details to the (few) groups afterwards."""
    orders = q.scan("orders", ["o_orderkey", "o_custkey", "o_orderdate"],
                    where=(col("o_orderdate") >= date("1993-10-01")) & (col("o_orderdate") < date("1994-01-01")))
    li = q.scan("lineitem", ["l_orderkey", "l_extendedprice", "l_discount", "l_returnflag"],
                where=col("l_returnflag") == "R")
    j = li.join(orders, [("l_orderkey", "o_orderkey")], columns=["o_custkey"], strategy="shuffle")
    return j.aggregate(["o_custkey"], [("revenue", "sum", REV)])


def q10_top_customers(q: Query, per_cust):
    """Customer and nation details of the per-customer revenues, top 20 by revenue."""
    cust = q.scan("customer", ["c_custkey", "c_name", "c_acctbal", "c_address", "c_phone", "c_comment",
                               "c_nationkey"], parallel=1)
    nation = q.scan("nation", ["n_nationkey", "n_name"], parallel=1)
    c = per_cust.join(cust, [("o_custkey", "c_custkey")],
                      columns=["c_custkey", "c_name", "c_acctbal", "c_address", "c_phone", "c_comment", "c_nationkey"])
    c = c.join(nation, [("c_nationkey", "n_nationkey")], columns=["n_name"])
    return c.sort([("revenue", "desc")], limit=20)


Q10_COLUMNS = ["c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment"]


def q10(data, parallel=1):
    q = Query(data, "q10", parallel)
    return q.collect(q10_top_customers(q, q10_revenue_per_customer(q)), Q10_COLUMNS)


def q12(data, parallel=1):
    q = Query(data, "q12", parallel)
    li = q.scan("lineitem", ["l_orderkey", "l_shipmode", "l_commitdate", "l_receiptdate", "l_shipdate"],
                where=col("l_shipmode").isin(["MAIL", "SHIP"]) & (col("l_commitdate") < col("l_receiptdate"))
                & (col("l_shipdate") < col("l_commitdate")) & (col("l_receiptdate") >= date("1994-01-01"))
                & (col("l_receiptdate") < date("1995-01-01")))
    orders = q.scan("orders", ["o_orderkey", "o_orderpriority"])
    # The few selected line items (0.5 %) are the build side, all orders the probe side:
    # a small hash table probed in cache, instead of hashing 1.5 M orders per SF.
    j = orders.join(li, [("o_orderkey", "l_orderkey")], columns=["l_shipmode"])
    high = col("o_orderpriority").isin(["1-URGENT", "2-HIGH"])
    agg = j.aggregate(["l_shipmode"], [("high_line_count", "sum", case([(high, 1)], 0)),
                                       ("low_line_count", "sum", case([(~high, 1)], 0))])
    return q.collect(agg.sort(["l_shipmode"]), ["l_shipmode", "high_line_count", "low_line_count"])


def q14_sums(q: Query):
    """Q14's two sums (promo, total) over September 1995's line items."""
    li = q.scan("lineitem", ["l_partkey", "l_extendedprice", "l_discount", "l_shipdate"],
                where=(col("l_shipdate") >= date("1995-09-01")) & (col("l_shipdate") < date("1995-10-01")))
    part = q.scan("part", ["p_partkey", "p_type"])
    j = li.join(part, [("l_partkey", "p_partkey")], columns=["p_type"], strategy="shuffle")
    return j.aggregate([], [("promo", "sum", case([(col("p_type").like("PROMO%"), REV)], 0.0)),
                            ("total", "sum", REV)])


def q14_ratio(sums):
    return sums.project(promo_revenue=100.0 * col("promo") / col("total"))


def q14(data, parallel=1):
    q = Query(data, "q14", parallel)
    return q.collect(q14_ratio(q14_sums(q)), ["promo_revenue"])


def q18(data, parallel=1):
    q = Query(data, "q18", parallel)
    li = q.scan("lineitem", ["l_orderkey", "l_quantity"])
    per_order = li.aggregate(["l_orderkey"], [("sum_qty", "sum", col("l_quantity"))])
    big = per_order.filter(col("sum_qty") > 300)
    orders = q.scan("orders", ["o_orderkey", "o_custkey", "o_orderdate", "o_totalprice"])
    o = orders.join(big, [("o_orderkey", "l_orderkey")], columns=["sum_qty"])
    cust = q.scan("customer", ["c_custkey", "c_name"], parallel=1)
    o = o.join(cust, [("o_custkey", "c_custkey")], columns=["c_name", "c_custkey"])
    out = o.sort([("o_totalprice", "desc"), "o_orderdate"], limit=100)
    return q.collect(out, ["c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice",
                           ("sum(l_quantity)", "sum_qty")])


def q19(data, parallel=1):
    q = Query(data, "q19", parallel)
    li = q.scan("lineitem", ["l_partkey", "l_quantity", "l_extendedprice", "l_discount", "l_shipmode",
                             "l_shipinstruct"],
                where=col("l_shipmode").isin(["AIR", "AIR REG"]) & (col("l_shipinstruct") == "DELIVER IN PERSON")
                & (col("l_quantity") >= 1) & (col("l_quantity") <= 30))
    part = q.scan("part", ["p_partkey", "p_brand", "p_container", "p_size"],
                  where=(col("p_size") >= 1) & (col("p_size") <= 15)
                  & col("p_brand").isin(["Brand#12", "Brand#23", "Brand#34"]), parallel=1)
    j = li.join(part, [("l_partkey", "p_partkey")], columns=["p_brand", "p_container", "p_size"])
    qty, brand, cont, size = col("l_quantity"), col("p_brand"), col("p_container"), col("p_size")
    pred = (
        ((brand == "Brand#12") & cont.isin(["SM CASE", "SM BOX", "SM PACK", "SM PKG"])
         & (qty >= 1) & (qty <= 11) & (size <= 5))
        | ((brand == "Brand#23") & cont.isin(["MED BAG", "MED BOX", "MED PKG", "MED PACK"])
           & (qty >= 10) & (qty <= 20) & (size <= 10))
        | ((brand == "Brand#34") & cont.isin(["LG CASE", "LG BOX", "LG PACK", "LG PKG"])
           & (qty >= 20) & (qty <= 30) & (size <= 15))
    )
    agg = j.filter(pred).aggregate([], [("revenue", "sum", REV)])
    return q.collect(agg, ["revenue"])


QUERIES = {"q1": q1, "q3": q3, "q4": q4, "q5": q5, "q6": q6, "q10": q10, "q12": q12, "q14": q14, "q18": q18,
           "q19": q19}

# The main job's mix: the queries the issue names, in TPC-H order.
DEFAULT_MIX = ["q1", "q3", "q5", "q6", "q10", "q12", "q14", "q18"]


def plan(name: str, data, parallel: int = 1):
    try:
        fn = QUERIES[name.lower()]
    except KeyError:
        raise KeyError(f"unknown query {name!r} (known: {', '.join(QUERIES)})") from None
    return fn(data, parallel)
