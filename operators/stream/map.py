"""Map: new columns computed row by row; exactly one output row per input row."""

from __future__ import annotations

import numpy as np

from bobox_sched import Packet, StreamOperator
from bobox_sched.control import model as M

from operators import codegen
from operators.expr import Compiled, Schema, as_expr
from operators.stream.derive import send_derived
from operators.stream.schemas import as_schema
from operators.stream.userkernel import check_kernel, out_fields


class Map(StreamOperator):
    """Adds (or replaces) columns computed from each row and forwards the others.

    Either ``exprs``, a list of ``(name, expression)`` evaluated for every row by one
    generated fused kernel (``operators.codegen``), or ``kernel``, a numba
    ``@njit(nogil=True)`` function called once per packet as ``kernel(*args, *outs)``
    with the input columns named by ``args`` and the new columns ``out`` (``(name,
    dtype)`` pairs) to fill. Input columns listed in ``drop`` are not forwarded.

    Forwarded columns are the input packet's own arrays (no copy); the output packet's
    new columns come from the worker's node-local pool. Rows are derived 1:1, so hidden
    columns (``derive.SEQ``) pass unchanged.

    Model: stateless, exactly one, forwards every input column it does not replace or
    drop (those are its ``reassigns``), preserves punctuations.
    """

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    seq_aware = True  # outputs go through derive.send_derived: a parallel region may rely on __seq
    selectivity = 1.0

    def __init__(self, schema, exprs=(), *, kernel=None, args=(), out=(), drop=()):
        schema = as_schema(schema)
        self.in_schema = schema
        exprs = [(name, as_expr(e)) for name, e in exprs]
        if bool(exprs) == (kernel is not None):
            raise ValueError("Map takes either exprs or a kernel (with args and out)")
        for c in list(args) + list(drop):
            schema[c]  # KeyError naming the column
        if kernel is not None:
            self.kernel = check_kernel(kernel, "Map kernel")
            self.args = tuple(args)
            new = out_fields(out)
            if not new:
                raise ValueError("Map kernel needs the columns it writes (out=[(name, dtype), ...])")
            self.exprs = None
            self.fused = None
        else:
            self.kernel = None
            self.args = ()
            self.exprs = [(name, Compiled(e, schema, name)) for name, e in exprs]
            new = [c.field(name) for name, c in self.exprs]
            self.fused = codegen.evaluate([e for _, e in exprs], schema)
        names = [f.name for f in new]
        if len(set(names)) != len(names):
            raise ValueError(f"Map computes a column twice: {names}")
        gone = set(drop) | set(names)
        self.forward = [f.name for f in schema.fields if f.name not in gone]
        self.new_schema = Schema(new)
        self.schema = Schema([schema[n] for n in self.forward] + new)
        self.reassigns = frozenset(gone)  # replaced, dropped and new columns: none passes unchanged

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        if n == 0:
            return
        spec = self.new_schema.spec
        new = ctx.new_packet(spec, n)
        outs = [new.columns[c] for c in spec.names]
        cols = pkt.columns
        if self.kernel is not None:
            self.kernel(*[cols[a] for a in self.args], *outs)
        elif self.fused is not None:
            self.fused(cols, outs)
        else:  # an expression the generator does not handle: numpy, still no per-row Python
            for (name, c), o in zip(self.exprs, outs):
                np.copyto(o, c(cols, n), casting="unsafe")
        out = {c: cols[c] for c in self.forward}
        out.update(new.columns)
        send_derived(ctx, "out", Packet(out, n, new.node), pkt)


__all__ = ["Map"]
