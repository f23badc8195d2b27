"""How many rows a plan step keeps: the estimates the planner orders scans' conditions and
joins by (``Planner`` mixin).

* A scan's conditions: range conditions on one column are one group, estimated from the
  column's min/max in the Parquet statistics with values taken as uniform; conditions on
  one string column of a small table are counted exactly over its dictionary
  (``catalog.TableStats.code_counts``); the rest get the classic guesses (``SEL_*``).
  The most selective group is tested first (the fused scan stops at the first false).
* A join: ``|a join b| = |a| |b| / max(ndv_a(K), ndv_b(K))``, the key's distinct values
  on each side (several columns: the product of theirs, at most the side's rows).
"""

from __future__ import annotations

import math

from sqlglot import exp

from operators.sql.rel import Rel

# Selectivity guesses where no statistics say better (the classic System R defaults,
# Selinger et al. 1979: 1/10 an equality, 1/3 a range).
SEL_EQ, SEL_RANGE, SEL_LIKE, SEL_OTHER = 0.1, 1 / 3, 0.25, 0.5


class Estimates:
    def order_filters(self, filters, stats, alias) -> tuple[list, float]:
        """A scan's conjuncts, most selective first (the fused scan tests them in this order
        and stops at the first false), and their estimated selectivity. Range conditions on
        one column are one group (``a >= x and a < y``), estimated from the column's
        min/max in the Parquet statistics, values taken as uniform; the rest by
        ``selectivity``. Q6: the one-year ship-date range (14 % of rows) is tested before
        the discount and quantity ranges."""
        groups: dict = {}
        for f in filters:
            column = self._range_column(f, alias)
            groups.setdefault(column if column else id(f), []).append(f)
        scored = []
        for n, (key, fs) in enumerate(groups.items()):
            sel = self._range_selectivity(key, fs, stats) if isinstance(key, str) else None
            if sel is None and len(fs) == 1:
                sel = self._string_selectivity(fs[0], stats)
            if sel is None:
                sel = math.prod(self.selectivity(f) for f in fs)
            scored.append((sel, n, fs))
        scored.sort(key=lambda x: (x[0], x[1]))
        return [f for _, _, fs in scored for f in fs], math.prod(x[0] for x in scored)

    _FLIP = {exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE}

    @staticmethod
    def _const(node):
        if isinstance(node, exp.Paren):
            return Estimates._const(node.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            return float(node.this)
        if isinstance(node, exp.Neg):
            v = Estimates._const(node.this)
            return None if v is None else -v
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
            try:
                from operators.expr import date_days

                return float(date_days(node.this.this))
            except ValueError:
                return None
        return None

    def _range_column(self, f, alias):
        """The column `f` bounds (``col op constant``, ``constant op col``, ``col BETWEEN
        constants``), or None."""
        if isinstance(f, exp.Between) and not f.args.get("negate") and isinstance(f.this, exp.Column):
            if self._const(f.args["low"]) is not None and self._const(f.args["high"]) is not None:
                return f.this.name
        if type(f) in self._FLIP or isinstance(f, exp.EQ):
            a, b = f.this, f.expression
            if isinstance(a, exp.Column) and self._const(b) is not None:
                return a.name
            if isinstance(b, exp.Column) and self._const(a) is not None:
                return b.name
        return None

    @staticmethod
    def _string_selectivity(f, stats):
        """The exact share of rows `f` keeps when it tests one string column of a small
        table against constants (``catalog.TableStats.code_counts``), else None."""
        import pyarrow as pa
        import pyarrow.compute as pc

        negate = bool(f.args.get("negate"))
        node = f
        if isinstance(node, exp.Not):
            negate, node = not negate, node.this
            negate ^= bool(node.args.get("negate"))
        a = node.this if isinstance(node, (exp.Like, exp.EQ, exp.NEQ, exp.In)) else None
        if not isinstance(a, exp.Column):
            return None
        counts = stats.code_counts(a.name)
        if counts is None or not stats.rows:
            return None
        dic, n = counts
        if isinstance(node, exp.Like) and isinstance(node.expression, exp.Literal) and node.expression.is_string:
            mask = pc.match_like(dic, node.expression.this)
        elif isinstance(node, (exp.EQ, exp.NEQ)) and isinstance(node.expression, exp.Literal) \
                and node.expression.is_string:
            mask = pc.equal(dic, pa.scalar(node.expression.this))
            negate ^= isinstance(node, exp.NEQ)
        elif isinstance(node, exp.In) and not node.args.get("query") and all(
                isinstance(v, exp.Literal) and v.is_string for v in node.expressions):
            mask = pc.is_in(dic, value_set=pa.array([v.this for v in node.expressions], pa.string()))
        else:
            return None
        keep = float(n[mask.to_numpy(zero_copy_only=False)].sum()) / stats.rows
        return max(0.0, min(1.0, 1.0 - keep if negate else keep))

    def _range_selectivity(self, column, fs, stats):
        mm = stats.minmax(column)
        if mm is None or mm[1] <= mm[0]:
            return None
        lo, hi = mm
        lower, upper, eq = lo, hi, None
        for f in fs:
            if isinstance(f, exp.Between):
                lower = max(lower, self._const(f.args["low"]))
                upper = min(upper, self._const(f.args["high"]))
                continue
            t, a, b = type(f), f.this, f.expression
            if isinstance(b, exp.Column):  # constant op column: column flipped-op constant
                t, a, b = self._FLIP.get(t, t), b, a
            v = self._const(b)
            if t is exp.EQ:
                eq = v
            elif t in (exp.LT, exp.LTE):
                upper = min(upper, v)
            else:
                lower = max(lower, v)
        if eq is not None:
            inside = lower <= eq <= upper
            return (1.0 / max(1.0, stats.ndv(column))) if inside else 0.0
        return max(0.0, min(1.0, (upper - lower) / (hi - lo)))

    @staticmethod
    def selectivity(node) -> float:
        if isinstance(node, exp.Paren):
            return Estimates.selectivity(node.this)
        if isinstance(node, exp.EQ):
            return SEL_EQ
        if isinstance(node, (exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between)):
            return SEL_RANGE
        if isinstance(node, exp.Like):
            return SEL_LIKE if not node.args.get("negate") else 0.9
        if isinstance(node, exp.In):
            return min(SEL_OTHER, SEL_EQ * max(1, len(node.expressions)))
        if isinstance(node, exp.Or):
            return min(1.0, Estimates.selectivity(node.this) + Estimates.selectivity(node.expression))
        if isinstance(node, exp.And):
            return Estimates.selectivity(node.this) * Estimates.selectivity(node.expression)
        if isinstance(node, exp.Not):
            return 1 - Estimates.selectivity(node.this) if not isinstance(node.this, exp.Like) else 0.9
        return SEL_OTHER if not node.args.get("negate") else 0.9

    def key_ndv(self, rel: Rel, node) -> float:
        if isinstance(node, exp.Column):
            name = rel.cols.get((node.table, node.name))
            if name in rel.ndv:
                return max(1.0, min(rel.ndv[name], rel.rows))
        return max(1.0, rel.rows)

    def key_ndv_name(self, t: Rel, name: str) -> float:
        return max(1.0, min(t.ndv.get(name, t.rows), t.rows))

    def join_estimate(self, a: Rel, b: Rel, edges) -> float:
        if not edges:
            return a.rows * b.rows
        # distinct values of the key (several columns: the product of theirs, at most the
        # rows), the larger side's: |a join b| = |a| |b| / max(ndv_a(K), ndv_b(K))
        da = min(a.rows, math.prod(self.key_ndv(a, ka) for _, (ka, _) in edges))
        db = min(b.rows, math.prod(self.key_ndv(b, kb) for _, (_, kb) in edges))
        est = max(1.0, a.rows * b.rows / max(1.0, da, db))
        for x, y in ((a, b), (b, a)):
            if x.filters_others and not y.filters_others:  # as the semi-join it replaces estimates
                est = min(est, y.rows * 0.5)
        return est


__all__ = ["Estimates"]
