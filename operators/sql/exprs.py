"""sqlglot expressions to the operator library's expressions (``operators.expr``), with
their kinds (int, float, date, string, bool) checked as SQL would: a type error is a
:class:`~operators.sql.errors.SqlError` placed at the expression, before any work.

    e, kind = to_expr(node, resolve)    # resolve(node) -> (Expr, kind) | None

`resolve` answers for the nodes the caller knows (columns, and after an aggregation the
aggregates and grouping expressions); everything else is translated here.
"""

from __future__ import annotations

from sqlglot import exp

from operators.expr import Expr, Lit, case, date
from operators.sql.errors import error_at

NUMERIC = ("int", "float")

# sqlglot comparison classes -> the Python operator building the library's Cmp
_CMP = {exp.EQ: "__eq__", exp.NEQ: "__ne__", exp.LT: "__lt__", exp.LTE: "__le__", exp.GT: "__gt__",
        exp.GTE: "__ge__"}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}


def literal(node: exp.Literal) -> tuple[Expr, str]:
    if node.is_string:
        return Lit(node.this), "string"
    text = node.this
    try:
        if any(ch in text for ch in ".eE"):
            return Lit(float(text)), "float"
        return Lit(int(text)), "int"
    except ValueError:
        raise error_at(node, f"cannot read the number {text!r}") from None


def _comparable(a: str, b: str) -> bool:
    return a == b or (a in NUMERIC and b in NUMERIC)


def _coerce_date(node, e: Expr, kind: str, other: str) -> tuple[Expr, str]:
    """A string literal compared with a date becomes a date (SQL's implicit cast)."""
    if kind == "string" and other == "date" and isinstance(e, Lit):
        try:
            return date(e.value), "date"
        except ValueError:
            raise error_at(node, f"cannot read {e.value!r} as a date") from None
    return e, kind


def to_expr(node, resolve) -> tuple[Expr, str]:
    """(Expr, kind) of sqlglot `node` (module doc)."""
    if node.args.get("negate"):  # sqlglot writes x NOT LIKE y as Like(negate=True), likewise IN, BETWEEN
        plain = node.copy()
        plain.set("negate", None)
        e, k = to_expr(plain, resolve)
        return ~e, k
    got = resolve(node)
    if got is not None:
        return got
    t = type(node)
    if t is exp.Paren:
        return to_expr(node.this, resolve)
    if t is exp.Column:
        raise error_at(node, f"unknown column {node.sql()!r}")
    if t is exp.Literal:
        return literal(node)
    if t is exp.Boolean:
        return Lit(bool(node.this)), "bool"
    if t is exp.Null:
        raise error_at(node, "unsupported: NULL literals (the engine's columns have no nulls)")
    if t is exp.Cast:
        to = node.to.this
        if to == exp.DataType.Type.DATE and isinstance(node.this, exp.Literal) and node.this.is_string:
            try:
                return date(node.this.this), "date"
            except ValueError:
                raise error_at(node, f"cannot read {node.this.this!r} as a date") from None
        e, kind = to_expr(node.this, resolve)
        if to in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL) and kind in NUMERIC:
            return e * 1.0, "float"
        if to in (exp.DataType.Type.BIGINT, exp.DataType.Type.INT) and kind == "int":
            return e, "int"
        raise error_at(node, f"unsupported: CAST of {kind} to {node.to.sql()}")
    if t in _ARITH:
        a, ka = to_expr(node.this, resolve)
        b, kb = to_expr(node.expression, resolve)
        op = _ARITH[t]
        if ka not in NUMERIC or kb not in NUMERIC:
            raise error_at(node, f"type error: {ka} {op} {kb} (arithmetic needs numbers)")
        out = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
        kind = "float" if "float" in (ka, kb) or op == "/" else "int"
        return out, kind
    if t is exp.Neg:
        a, ka = to_expr(node.this, resolve)
        if ka not in NUMERIC:
            raise error_at(node, f"type error: -{ka} (negation needs a number)")
        return -a, ka
    if t in _CMP:
        a, ka = to_expr(node.this, resolve)
        b, kb = to_expr(node.expression, resolve)
        a, ka = _coerce_date(node, a, ka, kb)
        b, kb = _coerce_date(node, b, kb, ka)
        if not _comparable(ka, kb):
            raise error_at(node, f"type error: cannot compare {ka} with {kb}")
        return getattr(a, _CMP[t])(b), "bool"
    if t in (exp.And, exp.Or):
        a, ka = to_expr(node.this, resolve)
        b, kb = to_expr(node.expression, resolve)
        if ka != "bool" or kb != "bool":
            raise error_at(node, f"type error: {t.__name__.upper()} of {ka} and {kb}")
        return (a & b if t is exp.And else a | b), "bool"
    if t is exp.Not:
        a, ka = to_expr(node.this, resolve)
        if ka != "bool":
            raise error_at(node, f"type error: NOT of {ka}")
        return ~a, "bool"
    if t is exp.Between:
        a, ka = to_expr(node.this, resolve)
        lo, kl = to_expr(node.args["low"], resolve)
        hi, kh = to_expr(node.args["high"], resolve)
        lo, kl = _coerce_date(node, lo, kl, ka)
        hi, kh = _coerce_date(node, hi, kh, ka)
        if not (_comparable(ka, kl) and _comparable(ka, kh)):
            raise error_at(node, f"type error: {ka} BETWEEN {kl} AND {kh}")
        return a.between(lo, hi), "bool"
    if t is exp.In:
        if node.args.get("query") is not None:
            raise error_at(node, "unsupported here: IN (subquery) outside a WHERE conjunct")
        a, ka = to_expr(node.this, resolve)
        vals = []
        for v in node.expressions:
            e, kv = to_expr(v, resolve)
            e, kv = _coerce_date(v, e, kv, ka)
            if not isinstance(e, Lit):
                raise error_at(v, "unsupported: IN lists of anything but constants")
            if not _comparable(ka, kv):
                raise error_at(v, f"type error: {ka} IN a list holding {kv}")
            vals.append(e.value)
        return a.isin(vals), "bool"
    if t in (exp.Like, exp.ILike):
        if t is exp.ILike:
            raise error_at(node, "unsupported: ILIKE")
        a, ka = to_expr(node.this, resolve)
        pat = node.expression
        if not (isinstance(pat, exp.Literal) and pat.is_string):
            raise error_at(node, "unsupported: LIKE with a pattern that is not a string constant")
        if ka != "string":
            raise error_at(node, f"type error: {ka} LIKE a string")
        return a.like(pat.this), "bool"
    if t is exp.Extract:
        unit = node.this.name.lower() if isinstance(node.this, (exp.Var, exp.Identifier)) else str(node.this).lower()
        a, ka = to_expr(node.expression, resolve)
        if unit != "year":
            raise error_at(node, f"unsupported: EXTRACT({unit.upper()} ...) (YEAR is)")
        if ka != "date":
            raise error_at(node, f"type error: EXTRACT(YEAR FROM {ka})")
        return a.year(), "int"
    if t is exp.Year:
        a, ka = to_expr(node.this, resolve)
        if ka != "date":
            raise error_at(node, f"type error: YEAR({ka})")
        return a.year(), "int"
    if t is exp.Substring:
        a, ka = to_expr(node.this, resolve)
        if ka != "string":
            raise error_at(node, f"type error: SUBSTRING of {ka}")
        start, length = node.args.get("start"), node.args.get("length")
        vals = []
        for v in (start, length):
            if v is None:
                vals.append(None)
                continue
            e, kv = to_expr(v, resolve)
            if not (isinstance(e, Lit) and kv == "int"):
                raise error_at(v, "unsupported: SUBSTRING with a start or length that is not an integer constant")
            vals.append(int(e.value))
        if not hasattr(a, "substr"):
            raise error_at(node, "unsupported: SUBSTRING (this build's expressions lack it)")
        return a.substr(vals[0] or 1, vals[1]), "string"
    if t is exp.Case:
        subject = node.this
        whens = []
        kinds = set()
        for iff in node.args.get("ifs") or []:
            cond_node = iff.this if subject is None else exp.EQ(this=subject.copy(), expression=iff.this.copy())
            c, kc = to_expr(cond_node, resolve)
            if kc != "bool":
                raise error_at(iff, f"type error: CASE WHEN {kc}")
            v, kv = to_expr(iff.args["true"], resolve)
            kinds.add(kv)
            whens.append((c, v))
        default = node.args.get("default")
        if default is None:
            raise error_at(node, "unsupported: CASE without ELSE (it would give NULL)")
        d, kd = to_expr(default, resolve)
        kinds.add(kd)
        if not kinds <= set(NUMERIC):
            raise error_at(node, f"unsupported: CASE results of kind {', '.join(sorted(kinds - set(NUMERIC)))} "
                           "(numbers are)")
        return case(whens, d), ("float" if "float" in kinds else "int")
    if isinstance(node, exp.AggFunc):
        raise error_at(node, f"aggregate {node.sql()} where no aggregate may be")
    if isinstance(node, (exp.Subquery, exp.Exists, exp.Select)):
        raise error_at(node, "unsupported: a subquery here (WHERE and HAVING conjuncts may hold them)")
    raise error_at(node, f"unsupported: {node.key.upper()} ({node.sql()[:60]})")


__all__ = ["NUMERIC", "literal", "to_expr"]
