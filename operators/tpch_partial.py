"""Distributed forms of the TPC-H plans: a *partial* plan per data partition and a
*combine* plan over the union of the partial results.

The Spark pipeline (``experiments/spark/``) splits the data by order key:
partition ``p`` holds the ``p``-th part of ``orders`` and the ``lineitem`` rows of exactly
those orders (co-partitioned on the order key), plus the six small tables whole
(replicated). Every query below is decomposed so that

    answer(q) == combine(q, union over p of partial(q, p))

with the same columns, order and limit as ``operators.tpch.plan(q)`` / the query text:

    plan = partial_plan("q1", "DATA/_partitions/part-3", parallel=4)   # on an executor
    final = combine_plan("q1", partials, "DATA", parallel=1)          # partials: pa.Table

How each query decomposes (what makes it correct):

* Grouping on the order key, or joins on it (Q3, Q4, Q12, Q18, the lineitem-orders join of
  Q5 and Q10): partition-local, because both sides of every order live in one partition.
  Q3 and Q18 group by the order key, so a group never spans partitions: the local top-k
  is the global top-k restricted to the partition, and the combine is a merge of top-ks.
* Groupings on other keys (Q1 flags, Q4 priority, Q5 nation, Q12 ship mode, Q10
  customer) and global sums (Q6, Q14, Q19): partial sums and counts per partition, summed
  by the combine; averages (Q1) and ratios (Q14) are computed only after the sums.
* Joins with the small tables (customer, nation, region, supplier, part): each
  partition joins against the whole (replicated) table.

Partial plans read a *partition view* (a folder whose ``lineitem.parquet`` and
``orders.parquet`` are one part, the rest the small tables); combine plans read the
partials through ``Query.values`` and, for Q10 only, the replicated ``customer`` and
``nation`` tables of the whole data folder (customer attributes are joined after the
per-customer sums, so partial results carry two columns instead of eight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from bobox_sched import Plan

from operators import tpch
from operators.builder import Query
from operators.expr import col
from operators.tpch_sql import output_columns

REV = tpch.REV

__all__ = ["SUPPORTED", "Distributed", "DISTRIBUTED", "partial_plan", "combine_plan", "describe"]


@dataclass(frozen=True)
class Distributed:
    """How one query runs partitioned.

    ``partial(data_dir, parallel)``: the plan over one partition view.
    ``combine(partials, data_dir, parallel)``: the plan over the union of the partial
    results (a pyarrow Table) producing the final answer; ``data_dir`` is the whole data
    folder (only its replicated tables may be read).
    ``how``: one line on the decomposition (``bobox spark run --help`` lists them).
    """

    name: str
    partial: Callable[..., Plan]
    combine: Callable[..., Plan]
    how: str


def _non_null(stream, columns: list[str]):
    """Rows whose `columns` are not NaN. A global SUM over no rows is NULL in SQL, which
    our aggregation produces as NaN: a partition where no row qualifies contributes such
    a row, and SUM ignores NULLs, so the combine drops them (all partitions empty: no rows
    left, and the combine's own SUM is NaN again, as the single-machine plan's would be)."""
    pred = None
    for c in columns:
        p = col(c) == col(c)  # False only for NaN
        pred = p if pred is None else pred & p
    return stream.filter(pred)


def _sum_all(partials: pa.Table, data, name: str, keys: list[str], sums: list[str], order, parallel: int):
    """combine = SUM(each of `sums`) GROUP BY `keys` ORDER BY `order` (the common case)."""
    q = Query(data, f"{name}-combine", parallel)
    v = _non_null(q.values(partials), sums) if not keys else q.values(partials)
    agg = v.aggregate(keys, [(s, "sum", col(s)) for s in sums])
    if order:
        agg = agg.sort(order)
    return q.collect(agg, output_columns(name))


def _top_k(partials: pa.Table, data, name: str, order, k: int, parallel: int):
    """combine = the first `k` rows of the union ORDER BY `order` (a merge of top-ks)."""
    q = Query(data, f"{name}-combine", parallel)
    v = q.values(partials)
    return q.collect(v.sort(order, limit=k), output_columns(name))


# -- Q1 -----------------------------------------------------------------------------------

_Q1_SUMS = ["sum_qty", "sum_base_price", "sum_disc_price", "sum_charge", "sum_disc", "count_order"]


def _q1_partial(data, parallel=1):
    q = Query(data, "q1-partial", parallel)
    agg = tpch.q1_lineitem(q).aggregate(
        ["l_returnflag", "l_linestatus"],
        [
            ("sum_qty", "sum", col("l_quantity")),
            ("sum_base_price", "sum", col("l_extendedprice")),
            ("sum_disc_price", "sum", REV),
            ("sum_charge", "sum", REV * (1 + col("l_tax"))),
            ("sum_disc", "sum", col("l_discount")),  # for avg_disc
            ("count_order", "count", None),  # the divisor of every average
        ],
    )
    return q.collect(agg, ["l_returnflag", "l_linestatus"] + _Q1_SUMS)


def _q1_combine(partials, data, parallel=1):
    q = Query(data, "q1-combine", parallel)
    agg = q.values(partials).aggregate(["l_returnflag", "l_linestatus"], [(s, "sum", col(s)) for s in _Q1_SUMS])
    n = col("count_order")
    out = agg.project("l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price", "sum_charge",
                      "count_order", avg_qty=col("sum_qty") / n, avg_price=col("sum_base_price") / n,
                      avg_disc=col("sum_disc") / n)
    return q.collect(out.sort(["l_returnflag", "l_linestatus"]), output_columns("q1"))


# -- Q10 ----------------------------------------------------------------------------------


def _q10_partial(data, parallel=1):
    # A customer's orders spread over partitions: per-customer sums here, summed again
    # (then ranked) by the combine.
    q = Query(data, "q10-partial", parallel)
    return q.collect(tpch.q10_revenue_per_customer(q), ["o_custkey", "revenue"])


def _q10_combine(partials, data, parallel=1):
    q = Query(data, "q10-combine", parallel)
    per_cust = q.values(partials).aggregate(["o_custkey"], [("revenue", "sum", col("revenue"))])
    return q.collect(tpch.q10_top_customers(q, per_cust), output_columns("q10"))


# -- Q14 ----------------------------------------------------------------------------------


def _q14_partial(data, parallel=1):
    # The ratio of sums is not a sum of ratios: ship both sums, divide in the combine.
    q = Query(data, "q14-partial", parallel)
    return q.collect(tpch.q14_sums(q), ["promo", "total"])


def _q14_combine(partials, data, parallel=1):
    q = Query(data, "q14-combine", parallel)
    v = _non_null(q.values(partials), ["promo", "total"])
    agg = v.aggregate([], [("promo", "sum", col("promo")), ("total", "sum", col("total"))])
    return q.collect(tpch.q14_ratio(agg), output_columns("q14"))


# -- the table ----------------------------------------------------------------------------

DISTRIBUTED: dict[str, Distributed] = {
    "q1": Distributed("q1", _q1_partial, _q1_combine,
                      "partial sums and counts per (returnflag, linestatus); combine sums them, then the averages"),
    "q3": Distributed(
        "q3", tpch.q3,
        lambda p, d, k=1: _top_k(p, d, "q3", [("revenue", "desc"), "o_orderdate"], 10, k),
        "groups by order key (partition-local): local top 10; combine merges the top 10s"),
    "q4": Distributed(
        "q4", tpch.q4,
        lambda p, d, k=1: _sum_all(p, d, "q4", ["o_orderpriority"], ["order_count"], ["o_orderpriority"], k),
        "semi-join on order key (partition-local), counts per priority; combine sums them"),
    "q5": Distributed(
        "q5", tpch.q5,
        lambda p, d, k=1: _sum_all(p, d, "q5", ["n_name"], ["revenue"], [("revenue", "desc")], k),
        "revenue per nation (small tables replicated); combine sums per nation"),
    "q6": Distributed(
        "q6", tpch.q6,
        lambda p, d, k=1: _sum_all(p, d, "q6", [], ["revenue"], None, k),
        "partial revenue sums; combine sums them"),
    "q10": Distributed("q10", _q10_partial, _q10_combine,
                       "revenue per customer; combine sums per customer, joins customer and nation, top 20"),
    "q12": Distributed(
        "q12", tpch.q12,
        lambda p, d, k=1: _sum_all(p, d, "q12", ["l_shipmode"], ["high_line_count", "low_line_count"],
                                   ["l_shipmode"], k),
        "line counts per ship mode (join on order key is partition-local); combine sums them"),
    "q14": Distributed("q14", _q14_partial, _q14_combine,
                       "promo and total revenue sums (part replicated); combine divides the sums of sums"),
    "q18": Distributed(
        "q18", tpch.q18,
        lambda p, d, k=1: _top_k(p, d, "q18", [("o_totalprice", "desc"), "o_orderdate"], 100, k),
        "groups by order key (partition-local): local top 100; combine merges the top 100s"),
    "q19": Distributed(
        "q19", tpch.q19,
        lambda p, d, k=1: _sum_all(p, d, "q19", [], ["revenue"], None, k),
        "partial revenue sums (part replicated); combine sums them"),
}

# Every query of operators.tpch has a distributed form.
SUPPORTED = tuple(DISTRIBUTED)


def _get(name: str) -> Distributed:
    try:
        return DISTRIBUTED[name.lower()]
    except KeyError:
        raise KeyError(f"unknown query {name!r} (known: {', '.join(SUPPORTED)})") from None


def partial_plan(name: str, partition_dir, parallel: int = 1) -> Plan:
    """The plan computing query `name`'s partial result over one partition view."""
    return _get(name).partial(partition_dir, parallel)


def combine_plan(name: str, partials: pa.Table, data_dir, parallel: int = 1) -> Plan:
    """The plan turning the union of `name`'s partial results into its answer (columns
    ``output_columns(name)``, ordered and limited as the query text says)."""
    return _get(name).combine(partials, data_dir, parallel)


def describe(name: str) -> str:
    """One line: how query `name` is decomposed."""
    return _get(name).how
