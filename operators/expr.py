"""Column schemas and scalar expressions over columnar packets.

Packets hold numbers only: dates are ``int32`` days since 1970-01-01 and strings are
``int32`` codes into a *sorted* dictionary (so code order is string order). A
:class:`Field` remembers the kind and the dictionary, so expressions can compare string
columns with string literals (the literal becomes a code, or a code range), evaluate
``LIKE`` once over the dictionary instead of once per row, and the sink can decode.

Expressions are small trees (``col("l_discount") * lit(2)``, ``col("d") >= date("1994-01-01")``)
compiled against a schema into plain numpy closures: every numpy ufunc loop releases the
GIL for numeric arrays, so expression evaluation runs in parallel across workers.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bobox_sched.core.packet import PacketSpec

EPOCH = _dt.date(1970, 1, 1)


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "int" | "float" | "date" | "string" | "bool"
    dtype: np.dtype
    dictionary: object = None  # pa.Array of sorted strings for kind "string"

    def renamed(self, name: str) -> "Field":
        return Field(name, self.kind, self.dtype, self.dictionary)


class Schema:
    """Ordered fields by name."""

    def __init__(self, fields):
        self.fields = tuple(fields)
        self._by = {f.name: f for f in self.fields}
        if len(self._by) != len(self.fields):
            dup = [f.name for f in self.fields if sum(g.name == f.name for g in self.fields) > 1]
            raise ValueError(f"duplicate column {dup[0]!r}")

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def __getitem__(self, name: str) -> Field:
        try:
            return self._by[name]
        except KeyError:
            raise KeyError(f"no column {name!r} (have: {', '.join(self.names)})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by

    def dtypes(self) -> dict:
        return {f.name: f.dtype for f in self.fields}

    @property
    def spec(self) -> PacketSpec:
        """The packet layout of this schema (made once; what ``ctx.new_packet`` takes)."""
        s = self.__dict__.get("_spec")
        if s is None:
            s = self._spec = PacketSpec(self.dtypes())
        return s

    def select(self, names) -> "Schema":
        return Schema([self[n] for n in names])

    def row_bytes(self) -> int:
        return sum(f.dtype.itemsize for f in self.fields) or 1

    def __repr__(self) -> str:
        return "Schema(" + ", ".join(f"{f.name}:{f.kind}" for f in self.fields) + ")"


def date_days(value) -> int:
    if isinstance(value, str):
        value = _dt.date.fromisoformat(value)
    return (value - EPOCH).days


# ------------------------------------------------------------------------------------
# expression trees


class Expr:
    def _wrap(self, other):
        return other if isinstance(other, Expr) else Lit(other)

    def __add__(self, o):
        return Arith("+", self, self._wrap(o))

    def __radd__(self, o):
        return Arith("+", self._wrap(o), self)

    def __sub__(self, o):
        return Arith("-", self, self._wrap(o))

    def __rsub__(self, o):
        return Arith("-", self._wrap(o), self)

    def __mul__(self, o):
        return Arith("*", self, self._wrap(o))

    def __rmul__(self, o):
        return Arith("*", self._wrap(o), self)

    def __truediv__(self, o):
        return Arith("/", self, self._wrap(o))

    def __rtruediv__(self, o):
        return Arith("/", self._wrap(o), self)

    def __neg__(self):
        return Arith("-", Lit(0), self)

    def __eq__(self, o):  # noqa: D105 - builds an expression, as in every dataframe API
        return Cmp("==", self, self._wrap(o))

    def __ne__(self, o):
        return Cmp("!=", self, self._wrap(o))

    def __lt__(self, o):
        return Cmp("<", self, self._wrap(o))

    def __le__(self, o):
        return Cmp("<=", self, self._wrap(o))

    def __gt__(self, o):
        return Cmp(">", self, self._wrap(o))

    def __ge__(self, o):
        return Cmp(">=", self, self._wrap(o))

    def __and__(self, o):
        return Logic("and", self, self._wrap(o))

    def __or__(self, o):
        return Logic("or", self, self._wrap(o))

    def __invert__(self):
        return Not(self)

    __hash__ = object.__hash__

    def between(self, lo, hi):
        return (self >= lo) & (self <= hi)

    def isin(self, values):
        return IsIn(self, tuple(values))

    def like(self, pattern: str):
        return Like(self, pattern)

    def year(self):
        return Year(self)

    def substr(self, start: int, length: int):
        """SQL ``substring(self from start for length)`` of a string expression."""
        return Substr(self, start, length)

    def columns(self) -> set[str]:
        out: set[str] = set()
        self._cols(out)
        return out

    def _cols(self, out):
        for c in self.children():
            c._cols(out)

    def children(self):
        return ()


class Col(Expr):
    def __init__(self, name: str):
        self.name = name

    def _cols(self, out):
        out.add(self.name)

    def __repr__(self):
        return self.name


class Lit(Expr):
    def __init__(self, value, kind: str | None = None):
        self.value = value
        if kind is None:
            if isinstance(value, bool):
                kind = "bool"
            elif isinstance(value, (int, np.integer)):
                kind = "int"
            elif isinstance(value, (float, np.floating)):
                kind = "float"
            elif isinstance(value, str):
                kind = "string"
            else:
                raise TypeError(f"unsupported literal {value!r}")
        self.kind = kind

    def __repr__(self):
        return repr(self.value)


class _Binary(Expr):
    """An operator `op` with two operands."""

    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b

    def children(self):
        return (self.a, self.b)

    def __repr__(self):
        return f"({self.a} {self.op} {self.b})"


class Arith(_Binary):
    """+ - * / (division always gives floats)."""


class Cmp(_Binary):
    """== != < <= > >= (strings compare by dictionary code, which is string order)."""


class Logic(_Binary):
    """and / or."""


class Not(Expr):
    def __init__(self, a):
        self.a = a

    def children(self):
        return (self.a,)

    def __repr__(self):
        return f"not {self.a}"


class IsIn(Expr):
    def __init__(self, a, values):
        self.a, self.values = a, values

    def children(self):
        return (self.a,)

    def __repr__(self):
        return f"{self.a} in {self.values}"


class Like(Expr):
    def __init__(self, a, pattern):
        self.a, self.pattern = a, pattern

    def children(self):
        return (self.a,)

    def __repr__(self):
        return f"{self.a} like {self.pattern!r}"


class Year(Expr):
    def __init__(self, a):
        self.a = a

    def children(self):
        return (self.a,)

    def __repr__(self):
        return f"year({self.a})"


class Substr(Expr):
    """SQL ``substring(a from start for length)``: 1-based `start` (>= 1), `length` in
    characters (>= 0), of a string expression. The result is a string expression with a
    dictionary of its own (the sorted distinct substrings of `a`'s dictionary): each
    dictionary entry is cut once, rows map their code through a lookup array."""

    def __init__(self, a, start, length):
        for what, v, least in (("start", start, 1), ("length", length, 0)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"substr {what} must be an integer constant, got {v!r}")
            if v < least:
                raise ValueError(f"substr {what} must be >= {least}, got {v}")
        self.a, self.start, self.length = a, int(start), int(length)

    def children(self):
        return (self.a,)

    def __repr__(self):
        return f"substr({self.a}, {self.start}, {self.length})"


class Case(Expr):
    """CASE WHEN c1 THEN v1 [WHEN ...] ELSE e END (numeric results)."""

    def __init__(self, whens, otherwise):
        self.whens = [(c, v if isinstance(v, Expr) else Lit(v)) for c, v in whens]
        self.otherwise = otherwise if isinstance(otherwise, Expr) else Lit(otherwise)

    def children(self):
        out = []
        for c, v in self.whens:
            out += [c, v]
        return tuple(out) + (self.otherwise,)

    def __repr__(self):
        return "case " + " ".join(f"when {c} then {v}" for c, v in self.whens) + f" else {self.otherwise} end"


def col(name: str) -> Col:
    return Col(name)


def lit(value) -> Lit:
    return Lit(value)


def date(text: str) -> Lit:
    """A date literal ('1994-01-01'): int32 days, comparable with date columns."""
    return Lit(date_days(text), "date")


def case(whens, otherwise=0) -> Case:
    return Case(whens, otherwise)


# ------------------------------------------------------------------------------------
# compilation against a schema


def _result_kind(a: str, b: str, op: str) -> str:
    if op == "/":
        return "float"
    if "float" in (a, b):
        return "float"
    if a == "date" and b == "int" or b == "date" and a == "int":
        return "date" if op in "+-" else "int"
    if a == b == "date":
        return "int"
    return "int"


_DTYPE = {"int": np.dtype(np.int64), "float": np.dtype(np.float64), "date": np.dtype(np.int32),
          "bool": np.dtype(np.bool_), "string": np.dtype(np.int32)}


def compile_expr(e: Expr, schema: Schema):
    """(fn(columns dict) -> ndarray or scalar, kind, dictionary)."""
    if isinstance(e, Col):
        f = schema[e.name]
        name = e.name
        return (lambda cols: cols[name]), f.kind, f.dictionary
    if isinstance(e, Lit):
        v = e.value
        if e.kind == "string":
            raise ValueError(f"string literal {v!r} can only be compared with a string column")
        return (lambda cols: v), e.kind, None
    if isinstance(e, Arith):
        fa, ka, _ = compile_expr(e.a, schema)
        fb, kb, _ = compile_expr(e.b, schema)
        if "string" in (ka, kb):
            raise ValueError(f"arithmetic on a string column: {e}")
        ufunc = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}[e.op]
        kind = _result_kind(ka, kb, e.op)  # numpy promotes the arrays the same way
        return (lambda cols: ufunc(fa(cols), fb(cols))), kind, None
    if isinstance(e, Cmp):
        return _compile_cmp(e, schema)
    if isinstance(e, Logic):
        fa, ka, _ = compile_expr(e.a, schema)
        fb, kb, _ = compile_expr(e.b, schema)
        uf = np.logical_and if e.op == "and" else np.logical_or
        return (lambda cols: uf(fa(cols), fb(cols))), "bool", None
    if isinstance(e, Not):
        fa, _, _ = compile_expr(e.a, schema)
        return (lambda cols: np.logical_not(fa(cols))), "bool", None
    if isinstance(e, IsIn):
        fa, ka, dic = compile_expr(e.a, schema)
        if ka == "string":
            codes = _codes_of(dic, e.values)
            table = np.zeros(len(dic) + 1, np.bool_)
            table[codes] = True
            return (lambda cols: table[fa(cols)]), "bool", None
        vals = np.array(e.values)
        return (lambda cols: np.isin(fa(cols), vals)), "bool", None
    if isinstance(e, Like):
        fa, ka, dic = compile_expr(e.a, schema)
        if ka != "string":
            raise ValueError(f"LIKE on a non-string expression: {e}")
        # Evaluate the pattern once per distinct string, then index by code.
        mask = np.asarray(pc.match_like(dic, e.pattern).to_numpy(zero_copy_only=False), np.bool_)
        return (lambda cols: mask[fa(cols)]), "bool", None
    if isinstance(e, Year):
        fa, ka, _ = compile_expr(e.a, schema)
        if ka != "date":
            raise ValueError(f"year() of a non-date expression: {e}")

        def year(cols, fa=fa):
            d = np.asarray(fa(cols)).astype("datetime64[D]")
            return d.astype("datetime64[Y]").astype(np.int64) + 1970

        return year, "int", None
    if isinstance(e, Substr):
        fa, ka, dic = compile_expr(e.a, schema)
        if ka != "string":
            raise ValueError(f"substr of a non-string expression: {e}")
        lookup, new = substr_lookup(dic, e.start, e.length)
        return (lambda cols: lookup[fa(cols)]), "string", new
    if isinstance(e, Case):
        parts = [(compile_expr(c, schema)[0], compile_expr(v, schema)) for c, v in e.whens]
        fo, ko, _ = compile_expr(e.otherwise, schema)
        kinds = [k for _, (_, k, _) in parts] + [ko]
        kind = "float" if "float" in kinds else "int"
        dt = _DTYPE[kind]

        def fcase(cols, parts=parts, fo=fo, dt=dt):
            # evaluated last WHEN first, so that earlier WHENs take precedence
            out = np.asarray(fo(cols), dt)
            for fc, (fv, _, _) in reversed(parts):
                out = np.where(fc(cols), np.asarray(fv(cols), dt), out)
            return out

        return fcase, kind, None
    raise TypeError(f"not an expression: {e!r}")


_SUBSTR_CACHE: dict = {}


def substr_lookup(dictionary, start: int, length: int):
    """(lookup, new dictionary) of ``substr(x, start, length)`` over a sorted string
    `dictionary`: ``new_dictionary[lookup[code]] == substr(dictionary[code])``, the new
    dictionary sorted and distinct. Computed once per (dictionary, start, length)."""
    key = (id(dictionary), start, length)
    hit = _SUBSTR_CACHE.get(key)
    if hit is not None and hit[0] is dictionary:
        return hit[1], hit[2]
    cut = pc.utf8_slice_codeunits(dictionary, start - 1, start - 1 + length)
    uniq = pc.unique(cut)
    new = uniq.take(pc.array_sort_indices(uniq))
    lookup = np.asarray(pc.index_in(cut, value_set=new).to_numpy(zero_copy_only=False), np.int32)
    if len(_SUBSTR_CACHE) > 256:
        _SUBSTR_CACHE.clear()
    _SUBSTR_CACHE[key] = (dictionary, lookup, new)  # (keeps the dictionary alive: its id stays valid)
    return lookup, new


def _codes_of(dictionary, values):
    """Codes of `values` in a sorted dictionary; values not present map to len(dict)."""
    out = []
    for v in values:
        i = pc.index(dictionary, v).as_py()
        out.append(i if i >= 0 else len(dictionary))
    return np.array(out, np.int64)


def _compile_cmp(e: Cmp, schema: Schema):
    ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}
    a, b, op = e.a, e.b, e.op
    # put a string literal on the right
    if isinstance(a, Lit) and a.kind == "string":
        a, b = b, a
        op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    if isinstance(b, Lit) and b.kind == "string":
        fa, ka, dic = compile_expr(a, schema)
        if ka != "string":
            raise ValueError(f"comparing a {ka} expression with a string: {e}")
        s = b.value
        # position of s in the sorted dictionary: exact code or insertion point
        idx = pc.index(dic, s).as_py()
        present = idx >= 0
        ins = int(np.searchsorted(np.asarray(dic.to_numpy(zero_copy_only=False), dtype=object), s)) if not present else idx
        if op in ("==", "!="):
            if not present:
                const = op == "!="
                return (lambda cols: np.full(np.shape(fa(cols)), const)), "bool", None
            code = idx
            uf = ops[op]
            return (lambda cols: uf(fa(cols), code)), "bool", None
        # order comparisons through the order-preserving codes
        if op == "<":
            uf, c = np.less, ins
        elif op == ">=":
            uf, c = np.greater_equal, ins
        elif op == "<=":
            uf, c = (np.less_equal, ins) if present else (np.less, ins)
        else:  # ">"
            uf, c = (np.greater, ins) if present else (np.greater_equal, ins)
        return (lambda cols: uf(fa(cols), c)), "bool", None
    fa, ka, da = compile_expr(a, schema)
    fb, kb, db = compile_expr(b, schema)
    uf = ops[op]
    remap = string_remap(e, ka, da, kb, db)
    if remap is not None:
        la, lb = remap
        return (lambda cols: uf(la[fa(cols)], lb[fb(cols)])), "bool", None
    return (lambda cols: uf(fa(cols), fb(cols))), "bool", None


_MERGE_CACHE: dict = {}


def string_remap(e, ka, da, kb, db):
    """For a comparison `e` of two expressions of kinds `ka`, `kb` (dictionaries `da`,
    `db`): None when their codes compare directly (not strings, or the same
    dictionary), else lookups ``(la, lb)`` of both sides' codes into the sorted union of
    the two dictionaries (so code order is string order on both sides). Raises
    ValueError when only one side is a string."""
    if ka != "string" and kb != "string":
        return None
    if ka != kb:
        raise ValueError(f"comparing a {ka} expression with a {kb} expression: {e}")
    if da is db or da.equals(db):
        return None
    key = (id(da), id(db))
    hit = _MERGE_CACHE.get(key)
    if hit is not None and hit[0] is da and hit[1] is db:
        return hit[2]
    both = pa.concat_arrays([da.cast(pa.string()), db.cast(pa.string())])
    uniq = pc.unique(both)
    merged = uniq.take(pc.array_sort_indices(uniq))
    out = tuple(np.asarray(pc.index_in(d.cast(pa.string()), value_set=merged).to_numpy(zero_copy_only=False), np.int32)
                for d in (da, db))
    if len(_MERGE_CACHE) > 256:
        _MERGE_CACHE.clear()
    _MERGE_CACHE[key] = (da, db, out)
    return out


class Compiled:
    """An expression compiled once against a schema: call it with a columns dict."""

    def __init__(self, e: Expr, schema: Schema, name: str = "expr"):
        self.expr = e
        self.fn, self.kind, self.dictionary = compile_expr(e, schema)
        self.name = name
        self.dtype = _DTYPE[self.kind]

    def field(self, name: str | None = None) -> Field:
        return Field(name or self.name, self.kind, self.dtype, self.dictionary)

    def __call__(self, cols: dict, n: int):
        v = self.fn(cols)
        if not isinstance(v, np.ndarray) or v.shape != (n,):
            v = np.broadcast_to(np.asarray(v, self.dtype), (n,))
        return v


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Col(x)
    return Lit(x)


def field_from_arrow(name: str, typ: pa.DataType, dictionary=None) -> Field:
    if pa.types.is_date(typ):
        return Field(name, "date", np.dtype(np.int32))
    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return Field(name, "float", np.dtype(np.float64))
    if pa.types.is_integer(typ):
        return Field(name, "int", np.dtype(typ.to_pandas_dtype()))
    if pa.types.is_boolean(typ):
        return Field(name, "bool", np.dtype(np.bool_))
    return Field(name, "string", np.dtype(np.int32), dictionary)
