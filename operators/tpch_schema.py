"""The column types the TPC-H plans expect, and the check that data matches them.

A data folder whose columns have other types gave *silent wrong answers*: ``l_shipdate``
stored as text made 5 of 10 queries wrong (q6 revenue NaN, q3 no rows), ``l_orderkey``
stored as float made 6 of 10 return no rows, all with exit status 0. The plans compare
dates with dates and join integer keys, so every scanned column is checked against the
TPC-H specification's type (clause 1.4: Identifier and Integer, Decimal, Date, fixed and
variable Text) before any work:

    check_types("lineitem", files, schemas, ["l_shipdate"])   # DataError naming both types
    operators.data.check_data_types("data/tpch-sf0.1")         # every known column present

Accepted Arrow types per kind (what ``operators.data`` converts, dictionary-encoded
columns by their value type):

* ``int`` (Identifier, Integer): any signed or unsigned integer;
* ``decimal`` (Decimal): decimal128/256, or float32/64;
* ``date`` (Date): date32, date64;
* ``string`` (Text): string, large_string, string_view.
"""

from __future__ import annotations


import pyarrow as pa

from operators.errors import DataError

_I, _D, _T, _S = "int", "decimal", "date", "string"

# TPC-H 3.0.1, clause 1.4.1.
COLUMNS: dict[str, dict[str, str]] = {
    "part": {"p_partkey": _I, "p_name": _S, "p_mfgr": _S, "p_brand": _S, "p_type": _S, "p_size": _I,
             "p_container": _S, "p_retailprice": _D, "p_comment": _S},
    "supplier": {"s_suppkey": _I, "s_name": _S, "s_address": _S, "s_nationkey": _I, "s_phone": _S,
                 "s_acctbal": _D, "s_comment": _S},
    "partsupp": {"ps_partkey": _I, "ps_suppkey": _I, "ps_availqty": _I, "ps_supplycost": _D, "ps_comment": _S},
    "customer": {"c_custkey": _I, "c_name": _S, "c_address": _S, "c_nationkey": _I, "c_phone": _S,
                 "c_acctbal": _D, "c_mktsegment": _S, "c_comment": _S},
    "orders": {"o_orderkey": _I, "o_custkey": _I, "o_orderstatus": _S, "o_totalprice": _D, "o_orderdate": _T,
               "o_orderpriority": _S, "o_clerk": _S, "o_shippriority": _I, "o_comment": _S},
    "lineitem": {"l_orderkey": _I, "l_partkey": _I, "l_suppkey": _I, "l_linenumber": _I, "l_quantity": _D,
                 "l_extendedprice": _D, "l_discount": _D, "l_tax": _D, "l_returnflag": _S, "l_linestatus": _S,
                 "l_shipdate": _T, "l_commitdate": _T, "l_receiptdate": _T, "l_shipinstruct": _S,
                 "l_shipmode": _S, "l_comment": _S},
    "nation": {"n_nationkey": _I, "n_name": _S, "n_regionkey": _I, "n_comment": _S},
    "region": {"r_regionkey": _I, "r_name": _S, "r_comment": _S},
}

EXPECTED = {
    _I: "an integer (TPC-H Identifier/Integer)",
    _D: "a decimal or float (TPC-H Decimal)",
    _T: "a date (TPC-H Date)",
    _S: "a string (TPC-H Text)",
}

_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)


def kind_of(t: pa.DataType) -> str | None:
    """The kind (see the module doc) an Arrow type can stand for, or None."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return _I
    if pa.types.is_decimal(t) or pa.types.is_floating(t):
        return _D
    if pa.types.is_date(t):
        return _T
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return _S
    return None


def check_types(table: str, files, schemas, columns=None) -> None:
    """DataError (one line) for the first of `columns` (default: every column of `table`
    the TPC-H schema knows and the files hold) whose type in any file is not the TPC-H
    one. `files` and `schemas` (Arrow schemas) pair up; columns missing from a file and
    columns the schema does not know are left to the reader."""
    spec = COLUMNS.get(table)
    if spec is None:
        return
    for path, schema in zip(files, schemas):
        names = spec if columns is None else columns
        for name in names:
            want = spec.get(name)
            idx = schema.get_field_index(name)
            if want is None or idx < 0:
                continue
            t = schema.field(idx).type
            if kind_of(t) != want:
                raise DataError(f"table {table!r} column {name!r} in {path}: expected {EXPECTED[want]}, found {t}; "
                                "the TPC-H plans would give wrong answers on it")


__all__ = ["COLUMNS", "EXPECTED", "kind_of", "check_types"]
