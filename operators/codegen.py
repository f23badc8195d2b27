"""Fused numba kernels generated from expressions.

Evaluating ``(l_shipdate >= d) & (l_discount <= x) & ...`` with numpy costs one call,
one temporary array and one GIL round trip per tree node, and then one ``take`` per
output column. A generated kernel does the whole packet in one ``nogil`` loop: test the
predicate row by row and copy the selected row's columns at once (or compute every
projected column of the row). Python work per packet drops to one call.

Kernels are specialised on the expression's *shape*, not its constants: literals become
arguments, so ``x > 5`` and ``x > 7`` share a kernel. Each kernel's source is written
to a cache folder (``$BOBOX_KERNEL_CACHE``, default ``~/.cache/bobox-sched/kernels``)
named by its hash and imported from there, so numba's ``cache=True`` keeps the machine
code across processes: a kernel compiles once per machine (about half a second).

Protocol: ``kernel_for`` may be called from any thread (operators are built in the
submitting thread); a lock guards the in-memory table and the file writes, and the
numba compilation itself happens at the first call, inside numba's own lock.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from operators.expr import (Arith, Case, Cmp, Col, Expr, IsIn, Like, Lit, Logic, Not, Schema, Substr, Year, _codes_of,
                            compile_expr, string_remap, substr_lookup)
from operators.released import timed

_LOCK = threading.Lock()
_KERNELS: dict[str, object] = {}


class Unsupported(Exception):
    """The expression uses something the generator does not handle: use numpy."""


def cache_dir() -> Path:
    d = os.environ.get("BOBOX_KERNEL_CACHE")
    return Path(d) if d else Path.home() / ".cache" / "bobox-sched" / "kernels"


class _Gen:
    """Turns an expression into a per-row Python expression string over ``i``,
    collecting the columns and parameters it needs."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self.cols: list[str] = []  # column names, in argument order
        self.params: list = []  # parameter values (scalars or numpy arrays)

    def col(self, name: str) -> str:
        if name not in self.cols:
            self.cols.append(name)
        return f"c{self.cols.index(name)}[i]"

    def param(self, value) -> str:
        self.params.append(value)
        return f"p{len(self.params) - 1}"

    def emit(self, e: Expr) -> str:
        if isinstance(e, Col):
            self.schema[e.name]
            return self.col(e.name)
        if isinstance(e, Lit):
            if e.kind == "string":
                raise Unsupported("string literal outside a comparison")
            return self.param(e.value)
        if isinstance(e, Arith):
            a, b = self.emit(e.a), self.emit(e.b)
            if e.op == "/":
                return f"(np.float64({a}) / {b})"
            return f"({a} {e.op} {b})"
        if isinstance(e, Logic):
            return f"({self.emit(e.a)} {e.op} {self.emit(e.b)})"
        if isinstance(e, Not):
            return f"(not {self.emit(e.a)})"
        if isinstance(e, IsIn):
            _, kind, dic = compile_expr(e.a, self.schema)
            a = self.emit(e.a)
            if kind == "string":
                table = np.zeros(len(dic) + 1, np.bool_)
                table[_codes_of(dic, e.values)] = True
                return f"{self.param(table)}[{a}]"
            vals = np.array(e.values)
            return f"_isin({a}, {self.param(vals)})"
        if isinstance(e, Like):
            _, kind, dic = compile_expr(e.a, self.schema)
            if kind != "string":
                raise Unsupported("LIKE on a non-string")
            # the pattern is matched once per distinct string; rows look up their code
            table = np.asarray(pc.match_like(dic, e.pattern).to_numpy(zero_copy_only=False), np.bool_)
            return f"{self.param(table)}[{self.emit(e.a)}]"
        if isinstance(e, Year):
            return f"_year({self.emit(e.a)})"
        if isinstance(e, Substr):
            _, kind, dic = compile_expr(e.a, self.schema)
            if kind != "string":
                raise Unsupported("substr of a non-string")
            # the substring of every dictionary entry is computed once; rows map their code
            lookup, _ = substr_lookup(dic, e.start, e.length)
            return f"{self.param(lookup)}[{self.emit(e.a)}]"
        if isinstance(e, Case):
            out = self.emit(e.otherwise)
            for c, v in reversed(e.whens):
                out = f"({self.emit(v)} if {self.emit(c)} else {out})"
            return out
        if isinstance(e, Cmp):
            return self._cmp(e)
        raise Unsupported(type(e).__name__)

    def _cmp(self, e) -> str:
        # string comparisons against literals go through the numpy compiler, which knows
        # the dictionary; it yields (ufunc, code) closures we cannot inline, so redo the
        # code arithmetic here
        a, b, op = e.a, e.b, e.op
        if isinstance(a, Lit) and a.kind == "string":
            a, b = b, a
            op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
        if isinstance(b, Lit) and b.kind == "string":
            _, kind, dic = compile_expr(a, self.schema)
            if kind != "string":
                raise Unsupported("string literal against a non-string")
            idx = pc.index(dic, b.value).as_py()
            present = idx >= 0
            ins = idx if present else int(np.searchsorted(np.asarray(dic.to_numpy(zero_copy_only=False), dtype=object),
                                                           b.value))
            x = self.emit(a)
            if op in ("==", "!="):
                if not present:
                    return "True" if op == "!=" else "False"
                return f"({x} {op} {self.param(np.int64(idx))})"
            if op == "<":
                return f"({x} < {self.param(np.int64(ins))})"
            if op == ">=":
                return f"({x} >= {self.param(np.int64(ins))})"
            if op == "<=":
                return f"({x} {'<=' if present else '<'} {self.param(np.int64(ins))})"
            return f"({x} {'>' if present else '>='} {self.param(np.int64(ins))})"
        _, ka, da = compile_expr(a, self.schema)
        _, kb, db = compile_expr(b, self.schema)
        remap = string_remap(e, ka, da, kb, db)
        if remap is not None:  # strings of two dictionaries: compare in their union's codes
            return f"({self.param(remap[0])}[{self.emit(a)}] {op} {self.param(remap[1])}[{self.emit(b)}])"
        return f"({self.emit(a)} {op} {self.emit(b)})"


_PRELUDE = '''import numpy as np
from numba import njit


@njit(nogil=True, cache=True, inline="always")
def _isin(x, vals):
    for v in vals:
        if x == v:
            return True
    return False


@njit(nogil=True, cache=True, inline="always")
def _year(days):
    # civil-from-days (Howard Hinnant's algorithm), days since 1970-01-01
    z = np.int64(days) + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    m = mp + 3 if mp < 10 else mp - 9
    return y + 1 if m <= 2 else y

'''


def _load(source: str):
    """Compile-once loader: write `source` under the cache folder and import it."""
    key = hashlib.sha1(source.encode()).hexdigest()[:20]
    with _LOCK:
        mod = _KERNELS.get(key)
        if mod is not None:
            return mod
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"bk_{key}.py"
        if not path.exists() or path.read_text() != source:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        name = f"bobox_kernel_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mod.timed = timed(mod.kernel)  # what callers use: counts as GIL-released time
        _KERNELS[key] = mod
        return mod


def _args(names, prefix):
    return ", ".join(f"{prefix}{k}" for k in range(len(names)))


class FilterGather:
    """``m = kernel(cols..., params..., outs...)``: copies the rows where `predicate`
    holds into the output columns (``outs[j]`` for ``out_cols[j]``) and returns how many."""

    def __init__(self, predicate: Expr, schema: Schema, out_cols: list[str]):
        g = _Gen(schema)
        cond = g.emit(predicate)
        for c in out_cols:
            g.col(c)
        self.cols = g.cols
        self.params = g.params
        self.out_idx = [g.cols.index(c) for c in out_cols]
        ca = _args(g.cols, "c")
        pa_ = _args(g.params, "p")
        oa = _args(out_cols, "o")
        copies = "\n".join(f"            o{j}[m] = c{k}[i]" for j, k in enumerate(self.out_idx))
        sig = ", ".join(x for x in (ca, pa_, oa) if x)
        src = _PRELUDE + f'''
@njit(nogil=True, cache=True)
def kernel({sig}):
    n = c0.shape[0]
    m = 0
    for i in range(n):
        if {cond}:
{copies}
            m += 1
    return m
'''
        self.fn = _load(src).timed

    def __call__(self, cols: dict, outs: list) -> int:
        return self.fn(*[cols[c] for c in self.cols], *self.params, *outs)


class Evaluate:
    """``kernel(cols..., params..., outs...)``: computes every expression of `exprs` for
    every row in one pass (``outs[j]`` receives ``exprs[j]``)."""

    def __init__(self, exprs: list[Expr], schema: Schema):
        if not exprs:
            raise Unsupported("nothing to evaluate")
        g = _Gen(schema)
        bodies = [g.emit(e) for e in exprs]
        if not g.cols:
            raise Unsupported("no column: the row count is unknown to the kernel")
        self.cols = g.cols
        self.params = g.params
        ca = _args(g.cols, "c")
        pa_ = _args(g.params, "p")
        oa = _args(exprs, "o")
        sets = "\n".join(f"        o{j}[i] = {b}" for j, b in enumerate(bodies))
        sig = ", ".join(x for x in (ca, pa_, oa) if x)
        src = _PRELUDE + f'''
@njit(nogil=True, cache=True)
def kernel({sig}):
    n = c0.shape[0]
    for i in range(n):
{sets}
'''
        self.fn = _load(src).timed

    def __call__(self, cols: dict, outs: list) -> None:
        self.fn(*[cols[c] for c in self.cols], *self.params, *outs)


def filter_gather(predicate: Expr, schema: Schema, out_cols: list[str]) -> FilterGather | None:
    try:
        return FilterGather(predicate, schema, out_cols)
    except Unsupported:
        return None


def evaluate(exprs: list[Expr], schema: Schema) -> Evaluate | None:
    try:
        return Evaluate(exprs, schema)
    except Unsupported:
        return None


class _PairGen(_Gen):
    """Columns of a join's two sides, read through the pair index arrays: a probe column
    at ``px[t]``, a build column at ``bx[t]``."""

    def __init__(self, schema: Schema, probe_names):
        super().__init__(schema)
        self.probe_names = set(probe_names)

    def col(self, name: str) -> str:
        if name not in self.cols:
            self.cols.append(name)
        side = "px" if name in self.probe_names else "bx"
        return f"c{self.cols.index(name)}[{side}[t]]"


class PairFilter:
    """``keep = kernel(px, bx, cols..., params...)``: a join's residual condition over the
    candidate pairs (probe row ``px[t]``, build row ``bx[t]``) in one pass, without
    gathering the columns. `schema`: the fields of both sides the condition may read;
    ``cols`` lists the ones it does (probe columns read by ``px``, build columns by
    ``bx``)."""

    def __init__(self, condition: Expr, schema: Schema, probe_names):
        g = _PairGen(schema, probe_names)
        cond = g.emit(condition)
        self.cols = g.cols
        self.params = g.params
        self.probe_side = [c in g.probe_names for c in g.cols]
        sig = ", ".join(["px", "bx"] + [f"c{k}" for k in range(len(g.cols))] + [f"p{k}" for k in range(len(g.params))])
        src = _PRELUDE + f'''
@njit(nogil=True, cache=True)
def kernel({sig}):
    n = px.shape[0]
    out = np.empty(n, np.bool_)
    for t in range(n):
        out[t] = {cond}
    return out
'''
        self.fn = _load(src).timed

    def __call__(self, px, bx, probe_cols: dict, build_cols: dict) -> np.ndarray:
        cols = [probe_cols[c] if p else build_cols[c] for c, p in zip(self.cols, self.probe_side)]
        return self.fn(px, bx, *cols, *self.params)


def pair_filter(condition: Expr, schema: Schema, probe_names) -> PairFilter | None:
    try:
        return PairFilter(condition, schema, probe_names)
    except Unsupported:
        return None


_GATHERS: dict[tuple, object] = {}


def gather_kernel(which: tuple[int, ...], n_index: int):
    """``kernel(ix0.., src0.., out0.., a, b)``: ``out_j[t - a] = src_j[ix_{which[j]}[t]]``
    for t in [a, b) -- every output column of a packet gathered in one nogil call, from
    one of `n_index` index arrays (a join gathers probe and build columns with different
    ones)."""
    key = (which, n_index)
    fn = _GATHERS.get(key)
    if fn is None:
        ix = ", ".join(f"x{k}" for k in range(n_index))
        src = ", ".join(f"s{j}" for j in range(len(which)))
        out = ", ".join(f"o{j}" for j in range(len(which)))
        body = "\n".join(f"        o{j}[t - a] = s{j}[x{w}[t]]" for j, w in enumerate(which))
        text = _PRELUDE + f'''
@njit(nogil=True, cache=True)
def kernel({ix}, {src}, {out}, a, b):
    for t in range(a, b):
{body}
'''
        fn = _GATHERS[key] = _load(text).timed
    return fn
