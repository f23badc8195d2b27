"""TPC-H query texts (validation parameters) and DuckDB reference answers.

    want = duckdb_answer("q1", data_dir)          # pyarrow Table, columns output_columns("q1")
    compare_tables(got, want)                     # AssertionError naming the first difference

The texts are the TPC-H specification's (v3) with the qualification ("validation")
substitution parameters of its section 2.4, SELECT lists, ORDER BY and LIMIT as given
there. Q18's last column has no alias in the spec; it is named ``sum(l_quantity)``, as
DuckDB names it.
"""

from __future__ import annotations

import datetime
import math
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.data import TABLES, DataError, decimal_to_float64, find_tables

_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)  # pyarrow >= 16

__all__ = ["QUERIES", "OUTPUT_COLUMNS", "output_columns", "duckdb_answer", "compare_tables"]

QUERIES: dict[str, str] = {
    # Q1: pricing summary report; DELTA = 90.
    "q1": """
select
    l_returnflag,
    l_linestatus,
    sum(l_quantity) as sum_qty,
    sum(l_extendedprice) as sum_base_price,
    sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
    sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
    avg(l_quantity) as avg_qty,
    avg(l_extendedprice) as avg_price,
    avg(l_discount) as avg_disc,
    count(*) as count_order
from
    lineitem
where
    l_shipdate <= date '1998-12-01' - interval '90' day
group by
    l_returnflag,
    l_linestatus
order by
    l_returnflag,
    l_linestatus
""",
    # Q2: minimum cost supplier; SIZE = 15, TYPE = BRASS, REGION = EUROPE.
    "q2": """
select
    s_acctbal,
    s_name,
    n_name,
    p_partkey,
    p_mfgr,
    s_address,
    s_phone,
    s_comment
from
    part,
    supplier,
    partsupp,
    nation,
    region
where
    p_partkey = ps_partkey
    and s_suppkey = ps_suppkey
    and p_size = 15
    and p_type like '%BRASS'
    and s_nationkey = n_nationkey
    and n_regionkey = r_regionkey
    and r_name = 'EUROPE'
    and ps_supplycost = (
        select
            min(ps_supplycost)
        from
            partsupp,
            supplier,
            nation,
            region
        where
            p_partkey = ps_partkey
            and s_suppkey = ps_suppkey
            and s_nationkey = n_nationkey
            and n_regionkey = r_regionkey
            and r_name = 'EUROPE'
    )
order by
    s_acctbal desc,
    n_name,
    s_name,
    p_partkey
limit 100
""",
    # Q7: volume shipping; NATION1 = FRANCE, NATION2 = GERMANY.
    "q7": """
select
    supp_nation,
    cust_nation,
    l_year,
    sum(volume) as revenue
from
    (
        select
            n1.n_name as supp_nation,
            n2.n_name as cust_nation,
            extract(year from l_shipdate) as l_year,
            l_extendedprice * (1 - l_discount) as volume
        from
            supplier,
            lineitem,
            orders,
            customer,
            nation n1,
            nation n2
        where
            s_suppkey = l_suppkey
            and o_orderkey = l_orderkey
            and c_custkey = o_custkey
            and s_nationkey = n1.n_nationkey
            and c_nationkey = n2.n_nationkey
            and (
                (n1.n_name = 'FRANCE' and n2.n_name = 'GERMANY')
                or (n1.n_name = 'GERMANY' and n2.n_name = 'FRANCE')
            )
            and l_shipdate between date '1995-01-01' and date '1996-12-31'
    ) as shipping
group by
    supp_nation,
    cust_nation,
    l_year
order by
    supp_nation,
    cust_nation,
    l_year
""",
    # Q8: national market share; NATION = BRAZIL, REGION = AMERICA,
    # TYPE = ECONOMY ANODIZED STEEL.
    "q8": """
select
    o_year,
    sum(case
        when nation = 'BRAZIL' then volume
        else 0
    end) / sum(volume) as mkt_share
from
    (
        select
            extract(year from o_orderdate) as o_year,
            l_extendedprice * (1 - l_discount) as volume,
            n2.n_name as nation
        from
            part,
            supplier,
            lineitem,
            orders,
            customer,
            nation n1,
            nation n2,
            region
        where
            p_partkey = l_partkey
            and s_suppkey = l_suppkey
            and l_orderkey = o_orderkey
            and o_custkey = c_custkey
            and c_nationkey = n1.n_nationkey
            and n1.n_regionkey = r_regionkey
            and r_name = 'AMERICA'
            and s_nationkey = n2.n_nationkey
            and o_orderdate between date '1995-01-01' and date '1996-12-31'
            and p_type = 'ECONOMY ANODIZED STEEL'
    ) as all_nations
group by
    o_year
order by
    o_year
""",
    # Q9: product type profit measure; COLOR = green.
    "q9": """
select
    nation,
    o_year,
    sum(amount) as sum_profit
from
    (
        select
            n_name as nation,
            extract(year from o_orderdate) as o_year,
            l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity as amount
        from
            part,
            supplier,
            lineitem,
            partsupp,
            orders,
            nation
        where
            s_suppkey = l_suppkey
            and ps_suppkey = l_suppkey
            and ps_partkey = l_partkey
            and p_partkey = l_partkey
            and o_orderkey = l_orderkey
            and s_nationkey = n_nationkey
            and p_name like '%green%'
    ) as profit
group by
    nation,
    o_year
order by
    nation,
    o_year desc
""",
    # Q3: shipping priority; SEGMENT = BUILDING, DATE = 1995-03-15.
    "q3": """
select
    l_orderkey,
    sum(l_extendedprice * (1 - l_discount)) as revenue,
    o_orderdate,
    o_shippriority
from
    customer,
    orders,
    lineitem
where
    c_mktsegment = 'BUILDING'
    and c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and o_orderdate < date '1995-03-15'
    and l_shipdate > date '1995-03-15'
group by
    l_orderkey,
    o_orderdate,
    o_shippriority
order by
    revenue desc,
    o_orderdate
limit 10
""",
    # Q4: order priority checking; DATE = 1993-07-01.
    "q4": """
select
    o_orderpriority,
    count(*) as order_count
from
    orders
where
    o_orderdate >= date '1993-07-01'
    and o_orderdate < date '1993-07-01' + interval '3' month
    and exists (
        select
            *
        from
            lineitem
        where
            l_orderkey = o_orderkey
            and l_commitdate < l_receiptdate
    )
group by
    o_orderpriority
order by
    o_orderpriority
""",
    # Q5: local supplier volume; REGION = ASIA, DATE = 1994-01-01.
    "q5": """
select
    n_name,
    sum(l_extendedprice * (1 - l_discount)) as revenue
from
    customer,
    orders,
    lineitem,
    supplier,
    nation,
    region
where
    c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and l_suppkey = s_suppkey
    and c_nationkey = s_nationkey
    and s_nationkey = n_nationkey
    and n_regionkey = r_regionkey
    and r_name = 'ASIA'
    and o_orderdate >= date '1994-01-01'
    and o_orderdate < date '1994-01-01' + interval '1' year
group by
    n_name
order by
    revenue desc
""",
    # Q6: forecasting revenue change; DATE = 1994-01-01, DISCOUNT = 0.06, QUANTITY = 24.
    "q6": """
select
    sum(l_extendedprice * l_discount) as revenue
from
    lineitem
where
    l_shipdate >= date '1994-01-01'
    and l_shipdate < date '1994-01-01' + interval '1' year
    and l_discount between 0.06 - 0.01 and 0.06 + 0.01
    and l_quantity < 24
""",
    # Q10: returned item reporting; DATE = 1993-10-01.
    "q10": """
select
    c_custkey,
    c_name,
    sum(l_extendedprice * (1 - l_discount)) as revenue,
    c_acctbal,
    n_name,
    c_address,
    c_phone,
    c_comment
from
    customer,
    orders,
    lineitem,
    nation
where
    c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and o_orderdate >= date '1993-10-01'
    and o_orderdate < date '1993-10-01' + interval '3' month
    and l_returnflag = 'R'
    and c_nationkey = n_nationkey
group by
    c_custkey,
    c_name,
    c_acctbal,
    c_phone,
    n_name,
    c_address,
    c_comment
order by
    revenue desc
limit 20
""",
    # Q12: shipping modes and order priority; SHIPMODE1 = MAIL, SHIPMODE2 = SHIP, DATE = 1994-01-01.
    # Q11: important stock identification; NATION = GERMANY, FRACTION = 0.0001.
    "q11": """
select
    ps_partkey,
    sum(ps_supplycost * ps_availqty) as value
from
    partsupp,
    supplier,
    nation
where
    ps_suppkey = s_suppkey
    and s_nationkey = n_nationkey
    and n_name = 'GERMANY'
group by
    ps_partkey having
        sum(ps_supplycost * ps_availqty) > (
            select
                sum(ps_supplycost * ps_availqty) * 0.0001
            from
                partsupp,
                supplier,
                nation
            where
                ps_suppkey = s_suppkey
                and s_nationkey = n_nationkey
                and n_name = 'GERMANY'
        )
order by
    value desc
""",
    "q12": """
select
    l_shipmode,
    sum(case
        when o_orderpriority = '1-URGENT'
            or o_orderpriority = '2-HIGH'
            then 1
        else 0
    end) as high_line_count,
    sum(case
        when o_orderpriority <> '1-URGENT'
            and o_orderpriority <> '2-HIGH'
            then 1
        else 0
    end) as low_line_count
from
    orders,
    lineitem
where
    o_orderkey = l_orderkey
    and l_shipmode in ('MAIL', 'SHIP')
    and l_commitdate < l_receiptdate
    and l_shipdate < l_commitdate
    and l_receiptdate >= date '1994-01-01'
    and l_receiptdate < date '1994-01-01' + interval '1' year
group by
    l_shipmode
order by
    l_shipmode
""",
    # Q13: customer distribution; WORD1 = special, WORD2 = requests. The derived
    # table's column list (c_custkey, c_count) is written as aliases in its SELECT list.
    "q13": """
select
    c_count,
    count(*) as custdist
from
    (
        select
            c_custkey,
            count(o_orderkey) as c_count
        from
            customer left outer join orders on
                c_custkey = o_custkey
                and o_comment not like '%special%requests%'
        group by
            c_custkey
    ) as c_orders
group by
    c_count
order by
    custdist desc,
    c_count desc
""",
    # Q14: promotion effect; DATE = 1995-09-01.
    "q14": """
select
    100.00 * sum(case
        when p_type like 'PROMO%'
            then l_extendedprice * (1 - l_discount)
        else 0
    end) / sum(l_extendedprice * (1 - l_discount)) as promo_revenue
from
    lineitem,
    part
where
    l_partkey = p_partkey
    and l_shipdate >= date '1995-09-01'
    and l_shipdate < date '1995-09-01' + interval '1' month
""",
    # Q15: top supplier; DATE = 1996-01-01. The view revenue0 is written as a CTE.
    "q15": """
with revenue0 as (
    select
        l_suppkey as supplier_no,
        sum(l_extendedprice * (1 - l_discount)) as total_revenue
    from
        lineitem
    where
        l_shipdate >= date '1996-01-01'
        and l_shipdate < date '1996-01-01' + interval '3' month
    group by
        l_suppkey
)
select
    s_suppkey,
    s_name,
    s_address,
    s_phone,
    total_revenue
from
    supplier,
    revenue0
where
    s_suppkey = supplier_no
    and total_revenue = (
        select
            max(total_revenue)
        from
            revenue0
    )
order by
    s_suppkey
""",
    # Q16: parts/supplier relationship; BRAND = Brand#45, TYPE = MEDIUM POLISHED,
    # SIZE1..8 = 49, 14, 23, 45, 19, 3, 36, 9.
    "q16": """
select
    p_brand,
    p_type,
    p_size,
    count(distinct ps_suppkey) as supplier_cnt
from
    partsupp,
    part
where
    p_partkey = ps_partkey
    and p_brand <> 'Brand#45'
    and p_type not like 'MEDIUM POLISHED%'
    and p_size in (49, 14, 23, 45, 19, 3, 36, 9)
    and ps_suppkey not in (
        select
            s_suppkey
        from
            supplier
        where
            s_comment like '%Customer%Complaints%'
    )
group by
    p_brand,
    p_type,
    p_size
order by
    supplier_cnt desc,
    p_brand,
    p_type,
    p_size
""",
    # Q17: small-quantity-order revenue; BRAND = Brand#23, CONTAINER = MED BOX.
    "q17": """
select
    sum(l_extendedprice) / 7.0 as avg_yearly
from
    lineitem,
    part
where
    p_partkey = l_partkey
    and p_brand = 'Brand#23'
    and p_container = 'MED BOX'
    and l_quantity < (
        select
            0.2 * avg(l_quantity)
        from
            lineitem
        where
            l_partkey = p_partkey
    )
""",
    # Q18: large volume customer; QUANTITY = 300.
    "q18": """
select
    c_name,
    c_custkey,
    o_orderkey,
    o_orderdate,
    o_totalprice,
    sum(l_quantity)
from
    customer,
    orders,
    lineitem
where
    o_orderkey in (
        select
            l_orderkey
        from
            lineitem
        group by
            l_orderkey
        having
            sum(l_quantity) > 300
    )
    and c_custkey = o_custkey
    and o_orderkey = l_orderkey
group by
    c_name,
    c_custkey,
    o_orderkey,
    o_orderdate,
    o_totalprice
order by
    o_totalprice desc,
    o_orderdate
limit 100
""",
    # Q19: discounted revenue; QUANTITY1 = 1, QUANTITY2 = 10, QUANTITY3 = 20,
    # BRAND1 = Brand#12, BRAND2 = Brand#23, BRAND3 = Brand#34.
    "q19": """
select
    sum(l_extendedprice * (1 - l_discount)) as revenue
from
    lineitem,
    part
where
    (
        p_partkey = l_partkey
        and p_brand = 'Brand#12'
        and p_container in ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
        and l_quantity >= 1 and l_quantity <= 1 + 10
        and p_size between 1 and 5
        and l_shipmode in ('AIR', 'AIR REG')
        and l_shipinstruct = 'DELIVER IN PERSON'
    )
    or
    (
        p_partkey = l_partkey
        and p_brand = 'Brand#23'
        and p_container in ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK')
        and l_quantity >= 10 and l_quantity <= 10 + 10
        and p_size between 1 and 10
        and l_shipmode in ('AIR', 'AIR REG')
        and l_shipinstruct = 'DELIVER IN PERSON'
    )
    or
    (
        p_partkey = l_partkey
        and p_brand = 'Brand#34'
        and p_container in ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG')
        and l_quantity >= 20 and l_quantity <= 20 + 10
        and p_size between 1 and 15
        and l_shipmode in ('AIR', 'AIR REG')
        and l_shipinstruct = 'DELIVER IN PERSON'
    )
""",
    # Q20: potential part promotion; COLOR = forest, DATE = 1994-01-01, NATION = CANADA.
    "q20": """
select
    s_name,
    s_address
from
    supplier,
    nation
where
    s_suppkey in (
        select
            ps_suppkey
        from
            partsupp
        where
            ps_partkey in (
                select
                    p_partkey
                from
                    part
                where
                    p_name like 'forest%'
            )
            and ps_availqty > (
                select
                    0.5 * sum(l_quantity)
                from
                    lineitem
                where
                    l_partkey = ps_partkey
                    and l_suppkey = ps_suppkey
                    and l_shipdate >= date '1994-01-01'
                    and l_shipdate < date '1994-01-01' + interval '1' year
            )
    )
    and s_nationkey = n_nationkey
    and n_name = 'CANADA'
order by
    s_name
""",
    # Q21: suppliers who kept orders waiting; NATION = SAUDI ARABIA.
    "q21": """
select
    s_name,
    count(*) as numwait
from
    supplier,
    lineitem l1,
    orders,
    nation
where
    s_suppkey = l1.l_suppkey
    and o_orderkey = l1.l_orderkey
    and o_orderstatus = 'F'
    and l1.l_receiptdate > l1.l_commitdate
    and exists (
        select
            *
        from
            lineitem l2
        where
            l2.l_orderkey = l1.l_orderkey
            and l2.l_suppkey <> l1.l_suppkey
    )
    and not exists (
        select
            *
        from
            lineitem l3
        where
            l3.l_orderkey = l1.l_orderkey
            and l3.l_suppkey <> l1.l_suppkey
            and l3.l_receiptdate > l3.l_commitdate
    )
    and s_nationkey = n_nationkey
    and n_name = 'SAUDI ARABIA'
group by
    s_name
order by
    numwait desc,
    s_name
limit 100
""",
    # Q22: global sales opportunity; I1..I7 = 13, 31, 23, 29, 30, 18, 17.
    "q22": """
select
    cntrycode,
    count(*) as numcust,
    sum(c_acctbal) as totacctbal
from
    (
        select
            substring(c_phone from 1 for 2) as cntrycode,
            c_acctbal
        from
            customer
        where
            substring(c_phone from 1 for 2) in
                ('13', '31', '23', '29', '30', '18', '17')
            and c_acctbal > (
                select
                    avg(c_acctbal)
                from
                    customer
                where
                    c_acctbal > 0.00
                    and substring(c_phone from 1 for 2) in
                        ('13', '31', '23', '29', '30', '18', '17')
            )
            and not exists (
                select
                    *
                from
                    orders
                where
                    o_custkey = c_custkey
            )
    ) as custsale
group by
    cntrycode
order by
    cntrycode
""",
}

OUTPUT_COLUMNS: dict[str, tuple[str, ...]] = {
    "q1": (
        "l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price",
        "sum_charge", "avg_qty", "avg_price", "avg_disc", "count_order",
    ),
    "q3": ("l_orderkey", "revenue", "o_orderdate", "o_shippriority"),
    "q4": ("o_orderpriority", "order_count"),
    "q5": ("n_name", "revenue"),
    "q6": ("revenue",),
    "q10": ("c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment"),
    "q12": ("l_shipmode", "high_line_count", "low_line_count"),
    "q14": ("promo_revenue",),
    "q18": ("c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice", "sum(l_quantity)"),
    "q19": ("revenue",),
    "q2": ("s_acctbal", "s_name", "n_name", "p_partkey", "p_mfgr", "s_address", "s_phone", "s_comment"),
    "q7": ("supp_nation", "cust_nation", "l_year", "revenue"),
    "q8": ("o_year", "mkt_share"),
    "q9": ("nation", "o_year", "sum_profit"),
    "q11": ("ps_partkey", "value"),
    "q13": ("c_count", "custdist"),
    "q15": ("s_suppkey", "s_name", "s_address", "s_phone", "total_revenue"),
    "q16": ("p_brand", "p_type", "p_size", "supplier_cnt"),
    "q17": ("avg_yearly",),
    "q20": ("s_name", "s_address"),
    "q21": ("s_name", "numwait"),
    "q22": ("cntrycode", "numcust", "totacctbal"),
}

# in query-number order (the texts above are grouped as they were added)
QUERIES = dict(sorted(QUERIES.items(), key=lambda kv: int(kv[0][1:])))
OUTPUT_COLUMNS = dict(sorted(OUTPUT_COLUMNS.items(), key=lambda kv: int(kv[0][1:])))


def _key(query: str) -> str:
    key = str(query).strip().lower()
    if key not in QUERIES:
        raise DataError(f"unknown TPC-H query {query!r} (known: {', '.join(QUERIES)})")
    return key


def output_columns(query: str) -> list[str]:
    """The result column names of ``query`` ("q1", ...) in the order of its SELECT list."""
    return list(OUTPUT_COLUMNS[_key(query)])


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _normalize(table: pa.Table, duck_types: list[Any], names: list[str]) -> pa.Table:
    """DECIMAL -> float64, HUGEINT -> int64, any string type -> string; dates kept."""
    arrays = []
    for col, dtype in zip(table.columns, duck_types):
        t = col.type
        dname = str(dtype).upper()
        if dname in ("HUGEINT", "UHUGEINT"):
            col = col.cast(pa.int64())
        elif pa.types.is_decimal(t):
            col = pa.array(decimal_to_float64(col), mask=col.is_null().to_numpy(zero_copy_only=False))
        elif pa.types.is_large_string(t) or _is_string_view(t):
            col = col.cast(pa.string())
        elif pa.types.is_date64(t):
            col = col.cast(pa.date32())
        arrays.append(col)
    return pa.Table.from_arrays(arrays, names=names)


def duckdb_answer(query: str, data_dir: str | os.PathLike, threads: int = 1) -> pa.Table:
    """The answer to ``query`` computed by DuckDB over the Parquet files of ``data_dir``.

    Columns are named ``output_columns(query)``; DECIMAL results become float64, HUGEINT
    sums int64, dates stay date32 and strings are ``pa.string()``.
    """
    import duckdb

    key = _key(query)
    files = find_tables(data_dir)
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"SET threads = {max(1, int(threads))}")
        for table in TABLES:
            paths = ", ".join(_sql_str(str(p.resolve())) for p in files[table])
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{paths}])")
        try:
            rel = con.sql(QUERIES[key])
            duck_types = list(rel.types)
            result = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
        except duckdb.Error as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(f"DuckDB failed on TPC-H {key} over {data_dir}: {msg}") from None
    finally:
        con.close()
    if isinstance(result, pa.RecordBatchReader):
        result = result.read_all()
    names = output_columns(key)
    if result.num_columns != len(names):
        raise DataError(f"DuckDB answered {key} with {result.num_columns} columns, expected {len(names)}")
    return _normalize(result, duck_types, names)


# --------------------------------------------------------------------------- comparison


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return "string"
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    return "other"


def _as_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    k = _kind(arr.type)
    if k == "string" and not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    elif k == "date":
        arr = arr.cast(pa.date32()).cast(pa.int32())
    return arr


def _numeric(arr: pa.Array) -> np.ndarray:
    """Floats (NaN where null) for a numeric array."""
    if pa.types.is_boolean(arr.type):
        arr = arr.cast(pa.int8())
    if pa.types.is_decimal(arr.type):
        return decimal_to_float64(arr)
    return arr.cast(pa.float64()).to_numpy(zero_copy_only=False)


def _sort_all(table: pa.Table) -> pa.Table:
    """``table`` sorted by every column: exact columns first, floating ones last."""
    exact = [n for n, f in zip(table.column_names, table.schema) if _kind(f.type) in ("int", "date", "string")]
    floats = [n for n, f in zip(table.column_names, table.schema) if _kind(f.type) == "float"]
    keys = [(n, "ascending") for n in exact + floats]
    if not keys or table.num_rows < 2:
        return table
    plain = pa.Table.from_arrays([_as_array(c) for c in table.columns], names=table.column_names)
    return table.take(pc.sort_indices(plain, sort_keys=keys))


def _fmt(v: Any) -> str:
    return v.isoformat() if isinstance(v, datetime.date) else repr(v)


def _row(table: pa.Table, i: int) -> str:
    return "{" + ", ".join(f"{n}: {_fmt(table.column(n)[i].as_py())}" for n in table.column_names) + "}"


def _column_mismatch(name: str, gcol: pa.ChunkedArray, wcol: pa.ChunkedArray, rel_tol: float) -> tuple[np.ndarray, Any]:
    """(mask of differing rows, function row -> detail text) for one column pair."""
    kg, kw = _kind(gcol.type), _kind(wcol.type)
    g, w = _as_array(gcol), _as_array(wcol)
    gnull = g.is_null().to_numpy(zero_copy_only=False)
    wnull = w.is_null().to_numpy(zero_copy_only=False)
    bad = gnull != wnull
    both = ~gnull & ~wnull
    no_detail = lambda i: ""  # noqa: E731
    if {kg, kw} <= {"int", "date"}:
        gv = _ints(g)
        wv = _ints(w)
        return bad | (both & (gv != wv)), no_detail
    if {kg, kw} <= {"int", "float"}:
        gv, wv = _numeric(g), _numeric(w)
        with np.errstate(invalid="ignore", over="ignore"):
            tol = np.maximum(rel_tol * np.maximum(np.abs(gv), np.abs(wv)), 1e-9)
            close = (np.abs(gv - wv) <= tol) | (np.isnan(gv) & np.isnan(wv)) | (gv == wv)
        bad |= both & ~close

        def detail(i: int) -> str:
            if not both[i]:
                return ""
            delta, denom = float(abs(gv[i] - wv[i])), float(abs(wv[i]) or abs(gv[i]))
            rel = delta / denom if denom and delta < denom * 1e300 else math.inf
            return f" (relative difference {rel:.3g} > {rel_tol:g})"

        return bad, detail
    if kg == kw == "string":
        eq = pc.equal(g, w).fill_null(True).to_numpy(zero_copy_only=False).astype(bool)
        return bad | ~eq, no_detail
    if kg == kw == "other" and g.type == w.type:
        eq = np.array([a == b for a, b in zip(g.to_pylist(), w.to_pylist())], dtype=bool)
        return bad | ~eq, no_detail
    raise AssertionError(f"column {name!r}: types differ: got {gcol.type}, want {wcol.type}")


def _ints(arr: pa.Array) -> np.ndarray:
    if pa.types.is_boolean(arr.type):
        arr = arr.cast(pa.int8())
    return arr.fill_null(0).cast(pa.int64()).to_numpy(zero_copy_only=False)


def compare_tables(got: pa.Table, want: pa.Table, rel_tol: float = 1e-6, ordered: bool = True) -> None:
    """Raise AssertionError (naming the first difference) unless ``got`` equals ``want``.

    Same column names in the same order, same row count, values equal row by row:
    floats within ``rel_tol`` relative (1e-9 absolute near 0), ints, strings and dates
    exactly (dates may also be given as int days); ints vs floats compare numerically.
    ``ordered=False`` sorts both by all columns first.
    """
    if got.column_names != want.column_names:
        raise AssertionError(f"column names differ: got {got.column_names}, want {want.column_names}")
    if got.num_rows != want.num_rows:
        raise AssertionError(f"row count differs: got {got.num_rows}, want {want.num_rows}")
    if not ordered:
        got, want = _sort_all(got), _sort_all(want)
    for name in got.column_names:
        gcol, wcol = got.column(name), want.column(name)
        bad, detail = _column_mismatch(name, gcol, wcol, rel_tol)
        if bad.any():
            i = int(np.argmax(bad))
            raise AssertionError(
                f"column {name!r} row {i}: got {_fmt(gcol[i].as_py())}, want {_fmt(wcol[i].as_py())}{detail(i)}"
                f"\n  got row:  {_row(got, i)}\n  want row: {_row(want, i)}"
            )
