"""Timestamp merge: two inputs, each ordered by a timestamp column, into one ordered output."""

from __future__ import annotations

import numpy as np

from bobox_sched import Operator
from bobox_sched.control import model as M

from operators.stream.kernels import count_sorted, gather2, is_sorted, merge_ts
from operators.stream.schemas import as_schema


class TimeMerge(Operator):
    """Merges inputs ``a`` and ``b``, both ordered by column ``time`` (non-decreasing) and
    holding the columns of ``schema``, into one output ordered by ``time``; rows with
    equal timestamps come ``a`` first, then in input order. The output is therefore the
    same whatever the arrival timing of the two inputs.

    Both inputs are always consumed (buffered), so a slow input never blocks the other's
    producer. A row of ``a`` can go out once ``b`` has shown a timestamp at least as
    large (or ended), a row of ``b`` once ``a`` has shown a strictly larger one (or
    ended): nothing that arrives later can come before them. Per packet, one nogil
    kernel merges the two ready prefixes and one gathers each output column. An input
    out of order fails the request (``ValueError`` naming it). Hidden columns are
    dropped.

    Model: state unknown (the merge's buffers and its order across inputs: not
    parallelisable), exactly one output row per input row, forwards every column;
    with two inputs its output carries no punctuation (fan-in of punctuated streams is
    not punctuated).
    """

    inputs = ("a", "b")
    outputs = ("out",)
    state = M.UNKNOWN
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    punct_out = M.REMOVES

    def __init__(self, schema, time: str):
        self.schema = as_schema(schema)
        self.time = time
        self.schema[time]
        self.names = self.schema.names
        self.buf = {"a": None, "b": None}  # pending rows: {column: array}
        self.pending = {"a": 0, "b": 0}
        self.last = {"a": None, "b": None}  # the last timestamp received on each input

    def _append(self, side: str, pkt) -> None:
        n = pkt.nrows
        if n == 0:
            return
        t = pkt.columns[self.time]
        if not is_sorted(t) or (self.last[side] is not None and t[0] < self.last[side]):
            raise ValueError(f"TimeMerge input {side!r} is not ordered by {self.time!r}")
        self.last[side] = t[n - 1]
        cur = self.buf[side]
        cols = {c: pkt.columns[c] for c in self.names}  # views: the packet stays alive until merged
        if cur is None or self.pending[side] == 0:
            self.buf[side] = cols
        else:
            self.buf[side] = {c: np.concatenate([cur[c], cols[c]]) for c in self.names}
        self.pending[side] += n

    def process(self, ctx):
        for side in ("a", "b"):
            while True:
                p = ctx.recv(side)
                if p is None:
                    break
                self._append(side, p)
        if ctx.blocked:
            return  # the output is full: merge when we are run again
        ea, eb = ctx.at_eos("a"), ctx.at_eos("b")
        na, nb = self.pending["a"], self.pending["b"]
        a, b = self.buf["a"], self.buf["b"]
        ka = na
        if na and not eb:
            lb = self.last["b"]
            ka = 0 if lb is None else count_sorted(a[self.time], na, lb, True)
        kb = nb
        if nb and not ea:
            la = self.last["a"]
            kb = 0 if la is None else count_sorted(b[self.time], nb, la, False)
        if ka or kb:
            self._emit(ctx, ka, kb)
        if ea and eb and not ctx.blocked and not self.pending["a"] and not self.pending["b"]:
            ctx.close()
            ctx.finish()

    def _emit(self, ctx, ka: int, kb: int) -> None:
        a, b = self.buf["a"], self.buf["b"]
        ta = a[self.time] if a is not None else np.empty(0, self.schema[self.time].dtype)
        tb = b[self.time] if b is not None else np.empty(0, self.schema[self.time].dtype)
        from_b, idx = merge_ts(ta, tb, ka, kb)
        spec = self.schema.spec
        n = ka + kb
        step = ctx.rows_for(spec)
        for s in range(0, n, step):
            e = min(n, s + step)
            out = ctx.new_packet(spec, e - s)
            fb, ix = from_b[s:e], idx[s:e]
            for c in self.names:
                src_a = a[c] if a is not None else out.columns[c]
                src_b = b[c] if b is not None else out.columns[c]
                gather2(src_a, src_b, fb, ix, out.columns[c])
            ctx.send("out", out)
        for side, k in (("a", ka), ("b", kb)):
            if k:
                self.pending[side] -= k
                cur = self.buf[side]
                self.buf[side] = {c: v[k:] for c, v in cur.items()} if self.pending[side] else None


__all__ = ["TimeMerge"]
