"""Filter: the rows that satisfy a predicate; at most one output row per input row."""

from __future__ import annotations

import numpy as np

from bobox_sched import StreamOperator
from bobox_sched.core.packet import PacketSpec
from bobox_sched.control import model as M

from operators import codegen
from operators.expr import Compiled, Expr, Schema
from operators.stream.derive import send_derived
from operators.stream.kernels import mask_index
from operators.stream.schemas import as_schema
from operators.stream.userkernel import check_kernel


class _FilterIndex:
    """A generated kernel ``m = kernel(cols..., params..., outs..., parents)``: copies the
    rows where `predicate` holds into ``outs`` and their input row numbers into
    ``parents`` (what a parallel region needs to carry ``__seq``), in one nogil pass.
    Built on ``operators.codegen``'s expression generator and kernel cache."""

    def __init__(self, predicate: Expr, schema: Schema):
        g = codegen._Gen(schema)
        cond = g.emit(predicate)
        for c in schema.names:
            g.col(c)
        self.cols = g.cols
        self.params = g.params
        idx = [g.cols.index(c) for c in schema.names]
        copies = "\n".join(f"            o{j}[m] = c{k}[i]" for j, k in enumerate(idx))
        sig = ", ".join(x for x in (codegen._args(g.cols, "c"), codegen._args(g.params, "p"),
                                    codegen._args(schema.names, "o")) if x)
        src = codegen._PRELUDE + f'''
@njit(nogil=True, cache=True)
def kernel({sig}, parents):
    n = c0.shape[0]
    m = 0
    for i in range(n):
        if {cond}:
{copies}
            parents[m] = i
            m += 1
    return m
'''
        self.fn = codegen._load(src).kernel

    def __call__(self, cols: dict, outs: list, parents: np.ndarray) -> int:
        return self.fn(*[cols[c] for c in self.cols], *self.params, *outs, parents)


class Filter(StreamOperator):
    """Keeps the rows where ``predicate`` (an expression) holds, or where ``kernel`` (a
    numba ``@njit(nogil=True)`` function called once per packet as ``kernel(*args,
    keep)``) set ``keep``.

    Every output packet is sent with its *parents* (``derive.send_derived``): output
    row j is input row ``parents[j]``, so hidden columns (``__seq``) follow their rows.
    A packet whose rows all pass is forwarded as it is; one whose rows all fail sends
    nothing.

    Model: stateless, at most one, forwards every column, preserves punctuations.
    """

    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    seq_aware = True  # outputs go through derive.send_derived: a parallel region may rely on __seq

    def __init__(self, schema, predicate: Expr | None = None, *, kernel=None, args=()):
        schema = as_schema(schema)
        self.schema = schema
        if (predicate is None) == (kernel is None):
            raise ValueError("Filter takes either a predicate or a kernel (with args)")
        self.kernel = check_kernel(kernel, "Filter kernel") if kernel is not None else None
        for c in args:
            schema[c]
        self.args = tuple(args)
        self.pred = Compiled(predicate, schema, "predicate") if predicate is not None else None
        self.fused = None
        if predicate is not None:
            try:
                self.fused = _FilterIndex(predicate, schema)
            except codegen.Unsupported:
                pass
        self._gather = codegen.gather_kernel((0,) * len(schema.names), 1)

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        if n == 0:
            return
        spec = self.schema.spec
        cols = pkt.columns
        if self.fused is not None:
            out = ctx.new_packet(spec, n)
            parents = ctx.new_packet(_PARENTS, n).columns["p"]
            m = self.fused(cols, [out.columns[c] for c in spec.names], parents)
            if m == n:
                ctx.send("out", pkt)  # everything passed: the input as it is
            elif m:
                send_derived(ctx, "out", out.head(m), pkt, parents[:m])
            return
        if self.kernel is not None:
            keep = np.empty(n, np.bool_)
            self.kernel(*[cols[a] for a in self.args], keep)
        else:
            keep = np.asarray(self.pred(cols, n), np.bool_)
        parents = mask_index(keep)
        m = len(parents)
        if m == n:
            ctx.send("out", pkt)
        elif m:
            out = ctx.new_packet(spec, m)
            self._gather(parents, *[cols[c] for c in spec.names], *[out.columns[c] for c in spec.names], 0, m)
            send_derived(ctx, "out", out, pkt, parents)


_PARENTS = PacketSpec({"p": np.int64})

__all__ = ["Filter"]
