"""What the planner knows about the tables of a data folder, from their Parquet
metadata only (nothing is read): column types for sqlglot's qualification, row counts,
and per-column distinct-count estimates for join ordering.

Distinct counts: Parquet rarely stores them (``distinct_count`` is None in the files
tpchgen and DuckDB write), so an integer column's estimate is its value range
(``max - min + 1`` over the row groups' statistics), capped by the row count -- exact for
the dense keys TPC-H and most generated data use; other columns get a tenth of the rows.
Conditions on one string column of a table of at most ``EXACT_ROWS`` rows (``=``, ``IN``,
``LIKE``, negated or not) are counted exactly over its dictionary: Q9's ``p_name like
'%green%'`` keeps 5.4 % of parts, not the default guess's 25 %.

A column whose estimate equals the table's row count is taken as a key (unique), which
lets the planner turn a join whose build side contributes no column into a semi-join.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow as pa

from operators.data import TableStore, _parquet_file


def sql_type(t: pa.DataType) -> str:
    """The SQL type name sqlglot is told for an Arrow type."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return "BIGINT"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "DOUBLE"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    return "VARCHAR"


@dataclass
class TableStats:
    name: str
    rows: int
    types: dict[str, str]  # column -> SQL type
    _ndv: dict[str, float] = field(default_factory=dict)
    _minmax: dict = field(default_factory=dict)
    _counts: dict = field(default_factory=dict)
    store: object = None
    files: list = field(default_factory=list)

    def ndv(self, column: str) -> float:
        """Estimated distinct values of `column` (module doc)."""
        got = self._ndv.get(column)
        if got is None:
            got = self._estimate(column)
            self._ndv[column] = got
        return got

    def minmax(self, column: str) -> tuple[float, float] | None:
        """(min, max) of a numeric or date column over every row group's statistics
        (dates as days since 1970-01-01, the engine's date values), or None."""
        if column in self._minmax:
            return self._minmax[column]
        import datetime
        import decimal

        lo = hi = None
        for path in self.files:
            meta = _parquet_file(path).metadata
            idx = meta.schema.to_arrow_schema().get_field_index(column)
            for g in range(meta.num_row_groups) if idx >= 0 else ():
                st = meta.row_group(g).column(idx).statistics
                if st is None or not st.has_min_max:
                    lo = hi = None
                    break
                a, b = st.min, st.max
                if isinstance(a, datetime.date):
                    a, b = (a - datetime.date(1970, 1, 1)).days, (b - datetime.date(1970, 1, 1)).days
                elif isinstance(a, (int, float, decimal.Decimal)) and not isinstance(a, bool):
                    a, b = float(a), float(b)
                else:
                    lo = hi = None
                    break
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
            else:
                continue
            break
        out = (float(lo), float(hi)) if lo is not None and idx >= 0 else None
        self._minmax[column] = out
        return out

    def code_counts(self, column: str):
        """(dictionary, rows per code) of a string column of a table of at most
        EXACT_ROWS rows (loaded: the scan loads it anyway), else None."""
        if self.rows > EXACT_ROWS or self.types.get(column) != "VARCHAR" or self.store is None:
            return None
        if column not in self._counts:
            import numpy as np

            c = self.store.table(self.name).column(column)
            self._counts[column] = (c.dictionary, np.bincount(c.values, minlength=len(c.dictionary)))
        return self._counts[column]

    def unique(self, column: str) -> bool:
        return self.rows > 0 and self.ndv(column) >= self.rows

    def _estimate(self, column: str) -> float:
        rows = max(1, self.rows)
        if self.types.get(column) != "BIGINT":
            return max(1.0, rows / 10)
        lo = hi = None
        for path in self.files:
            meta = _parquet_file(path).metadata
            idx = meta.schema.to_arrow_schema().get_field_index(column)
            if idx < 0:
                return max(1.0, rows / 10)
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(idx).statistics
                if st is None or not st.has_min_max:
                    return max(1.0, rows / 10)
                lo = st.min if lo is None else min(lo, st.min)
                hi = st.max if hi is None else max(hi, st.max)
        if lo is None:
            return 1.0
        return float(min(rows, hi - lo + 1))


# Conditions on a string column of a table of at most this many rows are estimated exactly,
# over the column's dictionary and its codes' counts: dimension tables (part has 200 k rows
# per SF 1, p_name 200 k distinct strings: LIKE over them takes milliseconds); the fact
# tables' comment columns (millions of distinct strings) keep the guesses.
EXACT_ROWS = 1_000_000


class Catalog:
    """The tables of one data folder (``TableStore``'s), as the planner sees them."""

    def __init__(self, data_dir: str | os.PathLike):
        self.store = TableStore.open(data_dir)
        self.data_dir = data_dir
        self.tables: dict[str, TableStats] = {}
        for name, paths in self.store.files.items():
            t = self.store.table(name)
            types = {f.name: sql_type(f.type) for f in t.schema}
            self.tables[name] = TableStats(name, t.num_rows, types, files=list(t.files), store=self.store)

    def schema(self) -> dict:
        """``{table: {column: SQL type}}``, sqlglot's schema mapping."""
        return {n: dict(t.types) for n, t in self.tables.items()}


__all__ = ["Catalog", "TableStats", "sql_type"]
