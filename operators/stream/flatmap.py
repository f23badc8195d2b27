"""Flat-map: k output rows per input row, k computed per row (0 drops the row)."""

from __future__ import annotations

import numpy as np

from bobox_sched import StreamOperator
from bobox_sched.control import model as M

from operators import codegen
from operators.expr import Compiled, Expr, Field, Schema, as_expr
from operators.stream.derive import send_derived
from operators.stream.kernels import expand_parents
from operators.stream.schemas import as_schema
from operators.stream.userkernel import check_kernel, out_fields


class FlatMap(StreamOperator):
    """Emits ``k`` rows for each input row, ``k`` given per row by ``count``: an
    expression (evaluated by a generated fused kernel) or a numba ``@njit(nogil=True)``
    function ``count(*args, counts)`` filling an int64 array.

    Each output row repeats its input row's columns. ``rank`` names an optional int64
    column numbering a row's outputs 0..k-1; ``expand``, an optional numba function
    ``expand(parents, rank, *args, *outs)``, fills the new columns ``out`` (``(name,
    dtype)`` pairs) of a packet of output rows, where output row t comes from input row
    ``parents[t]`` and is its ``rank[t]``-th output.

    The parents are computed by one nogil kernel per packet and sent with each output
    packet (``derive.send_derived``): every output row of an input row carries that
    row's hidden columns (``__seq`` duplicates, as a prolific operator in a parallel
    region needs). Output is cut into packets of the scheduler's size.

    Model: stateless, selectivity unknown (1:[0, inf)), forwards every input column,
    preserves punctuations.
    """

    state = M.STATELESS
    selectivity_bound = M.UNKNOWN
    forwarding = M.ALWAYS
    seq_aware = True  # outputs go through derive.send_derived: a parallel region may rely on __seq

    def __init__(self, schema, count, *, args=(), expand=None, out=(), rank: str | None = None):
        schema = as_schema(schema)
        self.in_schema = schema
        for c in args:
            schema[c]
        self.args = tuple(args)
        if isinstance(count, (Expr, str, int)):
            e = as_expr(count)
            self.count_kernel = None
            self.count_expr = Compiled(e, schema, "count")
            if self.count_expr.kind not in ("int", "bool"):
                raise ValueError(f"FlatMap count must be an integer expression, got {self.count_expr.kind} {e}")
            self.count_fused = codegen.evaluate([e], schema)
        else:
            self.count_kernel = check_kernel(count, "FlatMap count")
            self.count_expr = self.count_fused = None
        self.expand = check_kernel(expand, "FlatMap expand") if expand is not None else None
        new = out_fields(out)
        if new and self.expand is None:
            raise ValueError("FlatMap out columns need an expand kernel to fill them")
        if rank is not None:
            new = [Field(rank, "int", np.dtype(np.int64))] + new
        self.rank = rank
        self.new_names = [f.name for f in new if f.name != rank]
        self.reassigns = frozenset(f.name for f in new)  # made here: not forwarded
        self.schema = Schema(list(schema.fields) + new)  # duplicates raise ValueError
        self._gather = codegen.gather_kernel((0,) * len(schema.names), 1)

    def _counts(self, cols, n):
        counts = np.empty(n, np.int64)
        if self.count_kernel is not None:
            self.count_kernel(*[cols[a] for a in self.args], counts)
        elif self.count_fused is not None:
            self.count_fused(cols, [counts])
        else:
            np.copyto(counts, self.count_expr(cols, n), casting="unsafe")
        return counts

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        if n == 0:
            return
        cols = pkt.columns
        parents, rank = expand_parents(self._counts(cols, n))
        total = len(parents)
        spec = self.schema.spec
        names = self.in_schema.names
        step = ctx.rows_for(spec)
        srcs = [cols[c] for c in names]
        args = [cols[a] for a in self.args]
        for a in range(0, total, step):
            b = min(total, a + step)
            out = ctx.new_packet(spec, b - a)
            oc = out.columns
            self._gather(parents, *srcs, *[oc[c] for c in names], a, b)
            if self.rank is not None:
                oc[self.rank][:] = rank[a:b]
            if self.expand is not None:
                self.expand(parents[a:b], rank[a:b], *args, *[oc[c] for c in self.new_names])
            send_derived(ctx, "out", out, pkt, parents[a:b])


__all__ = ["FlatMap"]
