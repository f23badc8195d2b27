"""Aggregate state of the stream operators: what ``sum / count / avg / min / max`` keep
per group, and a growable hash table of groups whose one fused kernel call per packet
(``operators.kernels.groupby_aggregate``) finds every row's group and folds every
aggregate.

States live in two accumulator matrices, float64 and int64, one row per state and one
column per group (the layout of ``ops.HashAggregate``): ``avg`` keeps a sum and a count,
``min`` / ``max`` of dates and strings are int64 (codes keep string order).
"""

from __future__ import annotations

import numpy as np

from operators import codegen
from operators import kernels as K
from operators.expr import Compiled, Field, Schema, as_expr

AGG_FUNCS = ("sum", "count", "avg", "min", "max")
_OPS = {"sum": K.AGG_SUM, "min": K.AGG_MIN, "max": K.AGG_MAX, "count": K.AGG_COUNT}
_STATES = {"sum": ("sum",), "count": ("count",), "avg": ("sum", "count"), "min": ("min",), "max": ("max",)}
_IMAX = np.iinfo(np.int64).max
_IMIN = np.iinfo(np.int64).min


class AggSpec:
    """The aggregates ``[(name, func, expression or column or None), ...]`` over rows of
    `schema`: their states, how to compute the values to fold (one generated kernel per
    accumulator matrix), and their final columns."""

    def __init__(self, schema: Schema, aggs):
        self.schema = schema
        self.aggs = []
        states = []  # (state name, update, Compiled or None, accumulator dtype)
        out = []
        for name, func, e in aggs:
            if func not in AGG_FUNCS:
                raise ValueError(f"unknown aggregate {func!r} (known: {', '.join(AGG_FUNCS)})")
            c = Compiled(as_expr(e), schema, name) if e is not None else None
            if c is None and func != "count":
                raise ValueError(f"aggregate {name!r}: {func} needs a value")
            if c is not None and c.kind == "string" and func in ("sum", "avg"):
                raise ValueError(f"aggregate {name!r}: {func} of a string")
            self.aggs.append((name, func))
            for s in _STATES[func]:
                if s == "count":
                    states.append((f"{name}$count", "count", None, np.dtype(np.int64)))
                else:
                    dt = np.dtype(np.float64) if c.kind == "float" else np.dtype(np.int64)
                    states.append((f"{name}${s}", s, c, dt))
            if func == "count":
                out.append(Field(name, "int", np.dtype(np.int64)))
            elif func == "avg":
                out.append(Field(name, "float", np.dtype(np.float64)))
            elif func in ("min", "max"):
                out.append(Field(name, c.kind, c.dtype, c.dictionary))
            else:
                out.append(Field(name, "float" if c.kind == "float" else "int",
                                 np.dtype(np.float64) if c.kind == "float" else np.dtype(np.int64)))
        self.fields = out
        self.frows = [s for s in states if s[3].kind == "f"]
        self.irows = [s for s in states if s[3].kind != "f"]
        self.fops = np.array([_OPS[s[1]] for s in self.frows], np.int64)
        self.iops = np.array([_OPS[s[1]] for s in self.irows], np.int64)
        self.finit = np.array([_init(s[1], True) for s in self.frows], np.float64)
        self.iinit = np.array([_init(s[1], False) for s in self.irows], np.int64)
        self._fused = {}
        for dt, rows in ((np.float64, self.frows), (np.int64, self.irows)):
            with_values = [r for r, s in enumerate(rows) if s[2] is not None]
            if with_values:
                k = codegen.evaluate([rows[r][2].expr for r in with_values], schema)
                if k is not None:
                    self._fused[dt] = (k, with_values)

    def values(self, cols: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The float64 [nf, n] and int64 [ni, n] values to fold (count rows unset)."""
        return self._values(self.frows, np.float64, cols, n), self._values(self.irows, np.int64, cols, n)

    def _values(self, rows, dt, cols, n):
        v = np.empty((len(rows), n), dt)
        fused = self._fused.get(dt)
        if fused is not None and n:
            fused[0](cols, [v[r] for r in fused[1]])
            return v
        for r, (_, _, c, _) in enumerate(rows):
            if c is not None:
                np.copyto(v[r], c(cols, n), casting="unsafe")
        return v

    def fresh(self, groups: int) -> tuple[np.ndarray, np.ndarray]:
        """Accumulators for `groups` groups, at their initial values."""
        f = np.empty((len(self.frows), groups), np.float64)
        f[:] = self.finit[:, None]
        i = np.empty((len(self.irows), groups), np.int64)
        i[:] = self.iinit[:, None]
        return f, i

    def finalize(self, facc: np.ndarray, iacc: np.ndarray) -> dict:
        """``{aggregate name: column}`` from accumulators [states, groups]."""
        rows = {s[0]: facc[r] for r, s in enumerate(self.frows)}
        rows.update({s[0]: iacc[r] for r, s in enumerate(self.irows)})
        out = {}
        for (name, func), f in zip(self.aggs, self.fields):
            if func == "avg":
                s = rows[f"{name}$sum"].astype(np.float64)
                c = rows[f"{name}$count"]
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[name] = np.where(c > 0, s / np.maximum(c, 1), np.nan)
            else:
                out[name] = np.asarray(rows[f"{name}${_STATES[func][0]}"], f.dtype)
        return out


def _init(update: str, is_float: bool):
    if update in ("sum", "count"):
        return 0
    if update == "min":
        return np.inf if is_float else _IMAX
    return -np.inf if is_float else _IMIN


class GroupTable:
    """Groups by an int64 key matrix with the accumulators of an :class:`AggSpec`.

    ``add(keys, fv, iv)`` folds rows (one kernel call); ``take(ids)`` returns the keys
    and accumulators of groups `ids`; ``keep(ids)`` drops every other group (compacts
    and rehashes). Group ids are assigned in order of first appearance."""

    def __init__(self, nkeys: int, spec: AggSpec):
        self.nkeys = nkeys
        self.spec = spec
        self.clear()

    def clear(self) -> None:
        self.cap = 16
        self.slots = np.full(self.cap, -1, np.int64)
        self.gkeys = np.empty((self.nkeys, self.cap // 2), np.int64)
        self.facc, self.iacc = self.spec.fresh(self.cap // 2)
        self.ngroups = 0

    def _grow(self, need: int) -> None:
        cap = K.table_capacity(need)
        if cap <= self.cap:
            return
        g = self.ngroups
        keys = np.empty((self.nkeys, cap // 2), np.int64)
        keys[:, :g] = self.gkeys[:, :g]
        f, i = self.spec.fresh(cap // 2)
        f[:, :g] = self.facc[:, :g]
        i[:, :g] = self.iacc[:, :g]
        self.gkeys, self.facc, self.iacc, self.cap = keys, f, i, cap
        self.slots = K.groupby_rehash(self.gkeys, g, cap)

    def add(self, keys: np.ndarray, fv: np.ndarray, iv: np.ndarray) -> None:
        m = keys.shape[1] if keys.shape[0] else (fv.shape[1] if fv.shape[0] else iv.shape[1])
        if m == 0:
            return
        self._grow(self.ngroups + m)
        self.ngroups = K.groupby_aggregate(keys, self.slots, self.gkeys, self.ngroups, fv, self.spec.fops,
                                           self.facc, iv, self.spec.iops, self.iacc)

    def take(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.gkeys[:, ids], self.facc[:, ids], self.iacc[:, ids]

    def keep(self, ids: np.ndarray) -> None:
        """Keep only groups `ids` (in that order: they become 0..len(ids)-1)."""
        g = len(ids)
        if g == 0:
            self.clear()
            return
        cap = max(16, K.table_capacity(g))
        keys = np.empty((self.nkeys, cap // 2), np.int64)
        keys[:, :g] = self.gkeys[:, ids]
        f, i = self.spec.fresh(cap // 2)
        f[:, :g] = self.facc[:, ids]
        i[:, :g] = self.iacc[:, ids]
        self.gkeys, self.facc, self.iacc, self.cap, self.ngroups = keys, f, i, cap, g
        self.slots = K.groupby_rehash(self.gkeys, g, cap)


def decode_keys(gkeys: np.ndarray, fields: list[Field]) -> dict:
    """Key columns from an int64 key matrix (floats reinterpreted back)."""
    out = {}
    for r, f in enumerate(fields):
        k = gkeys[r]
        out[f.name] = k.view(np.float64) if f.dtype.kind == "f" else k.astype(f.dtype, copy=False)
    return out


__all__ = ["AGG_FUNCS", "AggSpec", "GroupTable", "decode_keys"]
