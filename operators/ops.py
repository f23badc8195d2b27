"""The operator library: each operator is single-threaded (the scheduler guarantees it),
works packet by packet, and runs its heavy loops in numba ``nogil`` kernels
(``kernels.py``) or numpy calls that release the GIL.

Every operator knows its output :class:`~operators.expr.Schema` at construction, so the
plan builder can chain them and the sink can decode strings and dates. Output packets
are allocated with ``ctx.new_packet`` (node-local memory, the scheduler's packet size).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from bobox_sched import Operator, Source, StreamOperator
from bobox_sched.control import model as M
from bobox_sched.core.seq import SEQ

from operators import codegen, kernels, released
from operators.expr import Col, Compiled, Expr, Field, Schema

K = released.timed_namespace(kernels)  # every kernel call counts as GIL-released time

# ------------------------------------------------------------------------------------
# helpers


def _chunks(n: int, rows: int):
    for start in range(0, n, rows):
        yield start, min(n, start + rows)


def send_columns(ctx, port: str, schema: Schema, cols: dict, n: int) -> None:
    """Copy `n` rows of `cols` into packets of the target size and send them."""
    spec = schema.spec
    rows = ctx.rows_for(spec)
    for a, b in _chunks(n, rows):
        pkt = ctx.new_packet(spec, b - a)
        for name in spec.names:
            np.copyto(pkt.columns[name], cols[name][a:b], casting="unsafe")
        ctx.send(port, pkt)


def send_gather(ctx, port: str, schema: Schema, cols: dict, idx: np.ndarray, sources: dict | None = None) -> None:
    """Send rows ``cols[name][idx]`` (``sources[name]`` overrides which column and index
    array feed output column `name`) in packets of the target size; each packet is
    filled by one generated gather kernel."""
    spec = schema.spec
    rows = ctx.rows_for(spec)
    n = len(idx)
    srcs, ixs, which = [], [], []
    for name in spec.names:
        src, ix = sources[name] if sources and name in sources else (cols[name], idx)
        for k, known in enumerate(ixs):
            if known is ix:
                break
        else:
            k = len(ixs)
            ixs.append(ix)
        srcs.append(src)
        which.append(k)
    kernel = codegen.gather_kernel(tuple(which), len(ixs))
    for a, b in _chunks(n, rows):
        pkt = ctx.new_packet(spec, b - a)
        kernel(*ixs, *srcs, *[pkt.columns[nm] for nm in spec.names], a, b)
        ctx.send(port, pkt)


def key_matrix(values: list[np.ndarray], n: int) -> np.ndarray:
    """int64 key matrix [k, n]: integers/dates/codes widened, floats reinterpreted."""
    m = np.empty((len(values), n), np.int64)
    for i, v in enumerate(values):
        v = np.asarray(v)
        if v.dtype.kind == "f":
            m[i] = np.asarray(v, np.float64).view(np.int64)
        else:
            m[i] = v
    return m


class KeyEvaluator:
    """Builds the int64 key matrix [k, n] of a packet: one generated kernel when no key is
    a float (floats need their bits reinterpreted), numpy otherwise."""

    def __init__(self, keys: list[Compiled], schema: Schema):
        self.keys = keys
        self.fused = None
        if keys and all(k.kind != "float" for k in keys):
            self.fused = codegen.evaluate([k.expr for k in keys], schema)

    def __call__(self, cols: dict, n: int) -> np.ndarray:
        if self.fused is not None and n:
            m = np.empty((len(self.keys), n), np.int64)
            self.fused(cols, list(m))
            return m
        return key_matrix([k(cols, n) for k in self.keys], n)


def sort_matrix(values: list[np.ndarray], desc: list[bool], n: int) -> np.ndarray:
    """float64 matrix [k, n] whose lexicographic ascending order is the requested order."""
    m = np.empty((len(values), n), np.float64)
    for i, (v, d) in enumerate(zip(values, desc)):
        m[i] = v
        if d:
            np.negative(m[i], out=m[i])
    return m


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype)
    if len(parts) == 1:
        return parts[0]
    return released.call(np.concatenate, parts)  # large copies release the GIL


class _Columns:
    """Accumulates columns of many packets (copies, so input packets can be recycled)."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self.parts = {f.name: [] for f in schema.fields}
        self.n = 0

    def add(self, pkt) -> None:
        for name in self.parts:
            self.parts[name].append(released.call(np.array, pkt.columns[name]))  # (copies release the GIL)
        self.n += pkt.nrows

    def add_columns(self, cols: dict, n: int) -> None:
        for name in self.parts:
            self.parts[name].append(cols[name])
        self.n += n

    def take(self) -> dict:
        out = {f.name: _concat(self.parts[f.name], f.dtype) for f in self.schema.fields}
        self.parts = {name: [] for name in self.parts}
        self.n = 0
        return out


# ------------------------------------------------------------------------------------
# sources


class Scan(Source):
    """Reads rows [start, stop) of a table of a :class:`~operators.data.TableStore`,
    sliced into packets of the scheduler's packet size, optionally filtered (predicate
    pushed into the scan: only the selected rows are copied)."""

    def __init__(self, table, columns: list[str], start: int, stop: int, where: Expr | None = None):
        self.table = table.name
        self.cols = {c: table.column(c) for c in columns}
        self.schema = Schema([_field_of(c) for c in self.cols.values()])
        self.start = start
        self.stop = stop
        self.pos = start
        self.where = Compiled(where, self.schema, "where") if where is not None else None
        # the predicate and the copy of the selected rows in one nogil kernel
        self.fused = codegen.filter_gather(where, self.schema, self.schema.names) if where is not None else None

    def next_packet(self, ctx):
        spec = self.schema.spec
        rows = ctx.rows_for(spec)
        while self.pos < self.stop:
            a, b = self.pos, min(self.stop, self.pos + rows)
            self.pos = b
            view = {name: c.values[a:b] for name, c in self.cols.items()}
            if self.where is None:
                pkt = ctx.new_packet(spec, b - a)
                for name in view:
                    np.copyto(pkt.columns[name], view[name])
                return pkt
            if self.fused is not None:
                pkt = ctx.new_packet(spec, b - a)
                m = self.fused(view, [pkt.columns[name] for name in spec.names])
                if m == 0:
                    continue
                return pkt.head(m) if m < b - a else pkt
            idx = self.where(view, b - a).nonzero()[0]
            if len(idx) == 0:
                continue
            pkt = ctx.new_packet(spec, len(idx))
            for name in view:
                view[name].take(idx, out=pkt.columns[name])
            return pkt
        return None


class Values(Source):
    """Emits rows [start, stop) of in-memory columns (numpy arrays, already encoded:
    dates as int32 days, strings as codes of the schema's dictionaries)."""

    def __init__(self, schema: Schema, columns: dict, start: int, stop: int):
        self.schema = schema
        self.columns = columns
        self.pos = start
        self.stop = stop

    def next_packet(self, ctx):
        if self.pos >= self.stop:
            return None
        spec = self.schema.spec
        rows = ctx.rows_for(spec)
        a, b = self.pos, min(self.stop, self.pos + rows)
        self.pos = b
        pkt = ctx.new_packet(spec, b - a)
        for f in self.schema.fields:
            np.copyto(pkt.columns[f.name], self.columns[f.name][a:b], casting="unsafe")
        return pkt


def _field_of(column) -> Field:
    kind = column.kind
    dt = column.values.dtype
    return Field(column.name, kind, np.dtype(dt), column.dictionary if kind == "string" else None)


# ------------------------------------------------------------------------------------
# row-wise operators


class Filter(StreamOperator):
    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    selectivity = None
    # Inside a parallel region its input carries seqnos (``__seq``): the fused kernel
    # then copies them with the selected rows (bobox_sched.core.seq).
    seq_aware = True

    def __init__(self, schema: Schema, predicate: Expr):
        self.schema = schema
        self.predicate = predicate
        self.pred = Compiled(predicate, schema, "predicate")
        self.fused = codegen.filter_gather(predicate, schema, schema.names)
        self._seq = None  # (schema + __seq, its fused kernel), made on the first numbered packet

    def _on_numbered(self, ctx, pkt):
        if self._seq is None:
            sch = Schema(list(self.schema.fields) + [Field(SEQ, "int", np.dtype(np.int64))])
            self._seq = (sch, codegen.filter_gather(self.predicate, sch, sch.names))
        sch, fused = self._seq
        if fused is None:
            idx = self.pred(pkt.columns, pkt.nrows).nonzero()[0]
            if len(idx):
                send_gather(ctx, "out", sch, pkt.columns, idx)
            return
        out = ctx.new_packet(sch.spec, pkt.nrows)
        m = fused(pkt.columns, [out.columns[name] for name in sch.spec.names])
        if m:
            ctx.send("out", out.head(m) if m < pkt.nrows else out)

    def on_packet(self, ctx, port, pkt):
        if SEQ in pkt.columns:
            self._on_numbered(ctx, pkt)
            return
        if self.fused is not None:
            spec = self.schema.spec
            out = ctx.new_packet(spec, pkt.nrows)
            m = self.fused(pkt.columns, [out.columns[name] for name in spec.names])
            if m:
                ctx.send("out", out.head(m) if m < pkt.nrows else out)
            return
        mask = self.pred(pkt.columns, pkt.nrows)
        idx = mask.nonzero()[0]
        if len(idx) == pkt.nrows:
            ctx.send("out", pkt)  # nothing filtered: forward as is
        elif len(idx):
            send_gather(ctx, "out", self.schema, pkt.columns, idx)


class Project(StreamOperator):
    """Computes named expressions (the output columns, in order)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, schema: Schema, exprs: list[tuple[str, Expr]]):
        # Forwarded unchanged: an output column that is a plain reference to the input
        # column of the same name; every other input column is dropped or reassigned.
        kept = {name for name, e in exprs if isinstance(e, Col) and e.name == name}
        self.reassigns = frozenset(set(schema.names) | {name for name, _ in exprs}) - kept
        self.in_schema = schema
        self.exprs = [(name, Compiled(e, schema, name)) for name, e in exprs]
        self.schema = Schema([c.field(name) for name, c in self.exprs])
        self.fused = codegen.evaluate([e for _, e in exprs], schema)

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        out = ctx.new_packet(self.schema.spec, n)
        if self.fused is not None and n:
            self.fused(pkt.columns, [out.columns[name] for name, _ in self.exprs])
            ctx.send("out", out)
            return
        for name, c in self.exprs:
            np.copyto(out.columns[name], c(pkt.columns, n), casting="unsafe")
        ctx.send("out", out)


class Union(StreamOperator):
    """Forwards the packets of all its inputs (any interleaving)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, schema: Schema, n_inputs: int):
        self.schema = schema
        self.inputs = tuple(f"in{i}" for i in range(n_inputs))

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


class Broadcast(StreamOperator):
    """Sends every packet to all its outputs (task parallelism between branches)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, schema: Schema, n_outputs: int):
        self.schema = schema
        self.outputs = tuple(f"out{i}" for i in range(n_outputs))

    def on_packet(self, ctx, port, pkt):
        for o in self.outputs:
            ctx.send(o, pkt)


class Partition(StreamOperator):
    """Splits rows between its outputs by the hash of a key (a shuffle)."""

    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE  # per output: each row goes to exactly one of them
    forwarding = M.ALWAYS

    def __init__(self, schema: Schema, keys: list[Expr], n_outputs: int):
        self.schema = schema
        self.keys = [Compiled(k, schema) for k in keys]
        self._km = KeyEvaluator(self.keys, schema)
        self.outputs = tuple(f"out{i}" for i in range(n_outputs))

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        km = self._km(pkt.columns, n)
        part = K.partition_ids(km, len(self.outputs))
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(len(self.outputs) + 1))
        for i, o in enumerate(self.outputs):
            a, b = bounds[i], bounds[i + 1]
            if b > a:
                send_gather(ctx, o, self.schema, pkt.columns, order[a:b])


class Limit(StreamOperator):
    """The first `n` rows. Keeps a counter: its state is declared unknown (it must never
    be replicated: each copy would pass `n` rows)."""

    state = M.UNKNOWN
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS

    def __init__(self, schema: Schema, n: int):
        self.schema = schema
        self.left = n

    def on_packet(self, ctx, port, pkt):
        if self.left <= 0:
            return
        if pkt.nrows <= self.left:
            ctx.send("out", pkt)
            self.left -= pkt.nrows
        else:
            send_columns(ctx, "out", self.schema, pkt.columns, self.left)
            self.left = 0
        if self.left == 0:
            ctx.close()
            ctx.finish()


# ------------------------------------------------------------------------------------
# hash join


class HashJoin(Operator):
    """Hash join: consumes its ``build`` input to the end, builds a hash table on the
    build keys, then probes it with each ``probe`` packet. Probe packets arriving before
    the build side ended are stashed (consumed, so upstream never blocks on us).

    ``kind``: ``inner`` (probe columns then build columns), ``left`` (left outer: the
    inner join's rows, plus every probe row without a match once, its build columns
    zero -- numbers and dates; string build columns are refused, having no zero),
    ``semi`` / ``anti`` (probe rows with / without a match; probe columns only).

    No keys (empty key lists): every probe row pairs with every build row (a cross
    join; meant for a small build side, e.g. one row of an uncorrelated subquery).

    ``residual``: a condition over probe and build column names (each name on one side
    only) that a pair of rows with equal keys must also satisfy: it filters an inner or
    left join's pairs (a left join's probe row without a satisfying pair gets the zero
    row) and decides which build rows count as matches of a semi / anti join.

    ``matched`` (left joins): the name of an extra bool output column, True on rows that
    found a match (False on the zero-filled ones)."""

    kind = "stateful"
    inputs = ("build", "probe")
    outputs = ("out",)
    # Relational: no window semantics across the build and probe sides; aligning them
    # would hold probe packets that the join promises to take at once.
    punct_out = M.REMOVES

    KINDS = ("inner", "left", "semi", "anti")
    MATCHED = "$matched"  # the build-value array behind a left join's `matched` column

    def __init__(self, build_schema: Schema, probe_schema: Schema, build_keys: list[Expr],
                 probe_keys: list[Expr], join_kind: str = "inner",
                 build_out: list[tuple[str, str]] | None = None,
                 probe_out: list[tuple[str, str]] | None = None,
                 residual: Expr | None = None, matched: str | None = None):
        if join_kind not in self.KINDS:
            raise ValueError(f"unknown join kind {join_kind!r} (known: {', '.join(self.KINDS)})")
        if len(build_keys) != len(probe_keys):
            raise ValueError("join needs the same number of build and probe keys")
        if matched is not None and join_kind != "left":
            raise ValueError(f"matched={matched!r} is for left joins, not {join_kind} joins")
        self.join_kind = join_kind
        self.bkeys = [Compiled(k, build_schema) for k in build_keys]
        self.pkeys = [Compiled(k, probe_schema) for k in probe_keys]
        self._bkm = KeyEvaluator(self.bkeys, build_schema)
        self._pkm = KeyEvaluator(self.pkeys, probe_schema)
        for b, p in zip(self.bkeys, self.pkeys):
            if (b.kind == "string") != (p.kind == "string") or (
                b.kind == "string" and not b.dictionary.equals(p.dictionary)
            ):
                raise ValueError(f"join keys {b.expr} / {p.expr}: string keys need the same dictionary")
        probe_out = probe_out if probe_out is not None else [(n, n) for n in probe_schema.names]
        build_out = build_out if build_out is not None else [(n, n) for n in build_schema.names]
        if join_kind in ("semi", "anti"):
            build_out = []
        if join_kind == "left":
            for o, s_ in build_out:
                if build_schema[s_].kind == "string":
                    raise ValueError(f"left join: build column {s_!r} is a string, which has no zero to fill "
                                     f"unmatched rows with; leave it out of the join's columns")
        self.probe_out = probe_out
        self.build_out = build_out
        self.matched = matched
        self.build_schema = build_schema
        self.probe_schema = probe_schema
        out_fields = ([probe_schema[s_].renamed(o) for o, s_ in probe_out]
                      + [build_schema[s_].renamed(o) for o, s_ in build_out])
        if matched is not None:
            out_fields.append(Field(matched, "bool", np.dtype(np.bool_)))
        self.schema = Schema(out_fields)
        # the residual: compiled over the fields of both sides it reads
        self.residual = residual
        self._res_probe: list[str] = []
        self._res_build: list[str] = []
        if residual is not None:
            for c in sorted(residual.columns()):
                if c in probe_schema and c in build_schema:
                    raise ValueError(f"join residual {residual}: column {c!r} is on both sides (probe and build); "
                                     f"rename one side's column (project) before the join")
                if c in probe_schema:
                    self._res_probe.append(c)
                elif c in build_schema:
                    self._res_build.append(c)
                else:
                    raise KeyError(f"join residual {residual}: no column {c!r} on either side "
                                   f"(probe: {', '.join(probe_schema.names)}; build: {', '.join(build_schema.names)})")
            self.residual_schema = Schema([probe_schema[c] for c in self._res_probe]
                                          + [build_schema[c] for c in self._res_build])
            self._res = Compiled(residual, self.residual_schema, "residual")
            if self._res.kind != "bool":
                raise ValueError(f"join residual {residual} is not a condition (it is {self._res.kind})")
            self._res_fused = codegen.pair_filter(residual, self.residual_schema, self._res_probe)
        # build-side values kept: the output's build columns and the residual's
        self.build_value_names = sorted({s_ for _, s_ in build_out} | set(self._res_build))
        self._bcols = _Columns(build_schema.select(self.build_value_names))
        # output column <- build value array (a left join's `matched` among them)
        self.build_gather = list(build_out) + ([(matched, self.MATCHED)] if matched is not None else [])
        self._bkeyparts: list[np.ndarray] = []
        self._stash: list = []
        self._built = False
        self._probe_done = False

    def _add_build(self, pkt) -> None:
        n = pkt.nrows
        self._bkeyparts.append(self._bkm(pkt.columns, n))
        if self._bcols.parts:
            self._bcols.add(pkt)

    def _build(self) -> None:
        parts = self._bkeyparts
        if len(parts) == 1:
            self._bk = parts[0]
        elif parts:
            self._bk = released.call(np.concatenate, parts, axis=1)
        else:
            self._bk = np.empty((len(self.bkeys), 0), np.int64)
        self._bkeyparts = []
        self._bvals = self._bcols.take()
        n = self._bk.shape[1]
        if self.join_kind == "left":
            # one more build row, all zeros, at index n: what unmatched probe rows gather
            # (kernels.left_pairs, and the fused probe of pipeline.py)
            for name, v in list(self._bvals.items()):
                padded = np.zeros(n + 1, v.dtype)
                padded[:n] = v
                self._bvals[name] = padded
            m = np.ones(n + 1, np.bool_)
            m[n] = False
            self._bvals[self.MATCHED] = m
        cap = K.table_capacity(n)
        self._heads, self._nxt = K.join_build(self._bk, cap)
        # A key bitmap for fused probes (pipeline.py) when it is no larger than the bucket
        # array (one bit per key value vs 8 bytes per bucket: in cache when the buckets
        # are not) and keys are sparse in their range (under half of it present, else
        # few probes can miss). On TPC-H SF 1, one CPU: Q3 124 -> 49 ms, Q5 63 -> 38 ms.
        self._bits = K.key_bitmap(self._bk, 64 * cap)
        if self._bits[1] >= 0 and n * 2 > self._bits[1]:
            self._bits = (np.int64(0), np.int64(-1), self._bits[2][:0])
        self._built = True

    def _pairs(self, pk, cols):
        """The (probe row, build row) pairs with equal keys that satisfy the residual."""
        pidx, bidx = K.join_pairs(pk, self._bk, self._heads, self._nxt)
        if self.residual is None or len(pidx) == 0:
            return pidx, bidx
        if self._res_fused is not None:
            keep = self._res_fused(pidx, bidx, cols, self._bvals)
        else:  # the columns it reads, gathered by the pair indices, through numpy
            m = len(pidx)
            got = {c: cols[c].take(pidx) for c in self._res_probe}
            got.update({c: self._bvals[c].take(bidx) for c in self._res_build})
            keep = np.asarray(self._res(got, m), np.bool_)
        idx = keep.nonzero()[0]
        if len(idx) == len(pidx):
            return pidx, bidx
        return pidx[idx], bidx[idx]

    def _probe(self, ctx, pkt) -> None:
        n = pkt.nrows
        pk = self._pkm(pkt.columns, n)
        cols = pkt.columns
        if self.join_kind in ("inner", "left"):
            pidx, bidx = self._pairs(pk, cols)
            if self.join_kind == "left":
                pidx, bidx = K.left_pairs(pidx, bidx, n, self._bk.shape[1])
            if len(pidx) == 0:
                return
            sources = {o: (cols[s_], pidx) for o, s_ in self.probe_out}
            sources.update({o: (self._bvals[s_], bidx) for o, s_ in self.build_gather})
            send_gather(ctx, "out", self.schema, cols, pidx, sources)
        else:
            if self.residual is None:
                exists = K.join_exists(pk, self._bk, self._heads, self._nxt)
            else:
                exists = K.mark_rows(self._pairs(pk, cols)[0], n)
            if self.join_kind == "anti":
                exists = ~exists
            idx = exists.nonzero()[0]
            if len(idx) == n and all(o == s_ for o, s_ in self.probe_out) and len(self.probe_out) == len(cols):
                ctx.send("out", pkt)
            elif len(idx):
                sources = {o: (cols[s_], idx) for o, s_ in self.probe_out}
                send_gather(ctx, "out", self.schema, cols, idx, sources)

    def process(self, ctx):
        if not self._built:
            while True:
                p = ctx.recv("build")
                if p is None:
                    break
                self._add_build(p)
            while True:  # stash the probe side until the table exists
                p = ctx.recv("probe")
                if p is None:
                    break
                self._stash.append(p)
            if not ctx.at_eos("build"):
                return
            self._build()
        while self._stash:
            if ctx.blocked:
                return
            self._probe(ctx, self._stash.pop(0))
        if ctx.blocked:
            return
        p = ctx.recv("probe")
        if p is not None:
            self._probe(ctx, p)
        if ctx.at_eos("probe") and not ctx.blocked and not self._stash:
            ctx.close()
            ctx.finish()


# ------------------------------------------------------------------------------------
# hash aggregation

AGG_FUNCS = ("sum", "count", "avg", "min", "max")


class HashAggregate(StreamOperator):
    """GROUP BY keys with sum / count / avg / min / max.

    ``mode``: ``complete`` (input rows -> final values), ``partial`` (input rows ->
    per-group states, for a merge network) or ``final`` (partial states -> final values).
    Partial states of an aggregate ``x``: ``x$sum`` / ``x$count`` / ``x$min`` / ``x$max``.
    Without keys the result is one row; on empty input count is 0, float results NaN
    and integer results 0 (SQL would say NULL)."""

    kind = "partitioned"
    # Blocking: every output row is emitted at end of stream, caused by no input row
    # (R8: not parallelisable as an ordered region member); one row per group.
    selectivity_bound = M.UNKNOWN
    forwarding = M.UNKNOWN
    punct_out = M.REMOVES

    def __init__(self, schema: Schema, keys: list[tuple[str, Expr]], aggs: list[tuple[str, str, Expr | None]],
                 mode: str = "complete"):
        if mode not in ("complete", "partial", "final"):
            raise ValueError(f"unknown aggregation mode {mode!r}")
        self.mode = mode
        self.in_schema = schema
        self.keys = [(name, Compiled(e, schema, name)) for name, e in keys]
        self._km = KeyEvaluator([c for _, c in self.keys], schema)
        self.partition_key = [name for name, _ in keys]
        self.key_fields = [c.field(name) for name, c in self.keys]
        self.aggs = []
        state_fields = []  # (state column, func that updates it, value compiled or None, dtype)
        for name, func, e in aggs:
            if func not in AGG_FUNCS:
                raise ValueError(f"unknown aggregate {func!r} (known: {', '.join(AGG_FUNCS)})")
            self.aggs.append((name, func))
            if mode == "final":
                ins = {s: schema[f"{name}${s}"] for s in _states(func)}
                for s, f in ins.items():
                    upd = {"sum": "sum", "count": "sum", "min": "min", "max": "max"}[s]
                    state_fields.append((f"{name}${s}", upd, Compiled(_col(f"{name}${s}"), schema), f.dtype))
            else:
                c = Compiled(e, schema, name) if e is not None else None
                for s in _states(func):
                    if s == "count":
                        state_fields.append((f"{name}$count", "count", None, np.dtype(np.int64)))
                    else:
                        dt = np.dtype(np.float64) if c.kind == "float" else np.dtype(np.int64)
                        if s in ("min", "max") and c.kind in ("date", "string"):
                            dt = np.dtype(np.int64)
                        state_fields.append((f"{name}${s}", s, c, dt))
        if not self.keys:
            # A global aggregate always yields one row; on empty input count is 0 and
            # the others are NaN (SQL's NULL). This hidden count tells them apart.
            if mode == "final":
                state_fields.append(("$rows$count", "sum", Compiled(_col("$rows$count"), schema), np.dtype(np.int64)))
            else:
                state_fields.append(("$rows$count", "count", None, np.dtype(np.int64)))
        self.states = state_fields
        out = list(self.key_fields)
        if mode == "partial":
            for sname, upd, c, dt in state_fields:
                if upd in ("min", "max") and c is not None and c.kind in ("date", "string"):
                    out.append(Field(sname, c.kind, dt, c.dictionary))  # decodable later
                else:
                    out.append(Field(sname, "int" if dt.kind == "i" else "float", dt))
        else:
            for name, func in self.aggs:
                out.append(self._final_field(name, func, schema, aggs))
        self.schema = Schema(out)
        self._init_tables()

    def _final_field(self, name, func, schema, aggs):
        if func == "count":
            return Field(name, "int", np.dtype(np.int64))
        if func == "avg":
            return Field(name, "float", np.dtype(np.float64))
        if self.mode == "final":
            return schema[f"{name}${_states(func)[0]}"].renamed(name)
        e = [a for a in aggs if a[0] == name][0][2]
        c = Compiled(e, self.in_schema)
        if func in ("min", "max"):
            return Field(name, c.kind, c.dtype, c.dictionary)
        return Field(name, "float" if c.kind == "float" else "int", np.dtype(np.float64) if c.kind == "float" else np.dtype(np.int64))

    _OPS = {"sum": K.AGG_SUM, "min": K.AGG_MIN, "max": K.AGG_MAX, "count": K.AGG_COUNT}

    def _init_tables(self):
        # Each state lives in one row of a float64 or an int64 accumulator matrix
        # [states, groups]; one fused kernel call per packet updates all of them.
        self.nkeys = len(self.keys)
        self.cap = 16
        self.slots = np.full(self.cap, -1, np.int64)
        self.gkeys = np.empty((self.nkeys, self.cap // 2), np.int64)
        self.ngroups = 0
        self.frows = [st for st in self.states if st[3].kind == "f"]
        self.irows = [st for st in self.states if st[3].kind != "f"]
        # the value expressions of each matrix, evaluated by one generated kernel
        self._fused_values = {}
        for dt, rows in ((np.float64, self.frows), (np.int64, self.irows)):
            with_values = [r for r, st in enumerate(rows) if st[2] is not None]
            if with_values:
                k = codegen.evaluate([rows[r][2].expr for r in with_values], self.in_schema)
                if k is not None:
                    self._fused_values[dt] = (k, with_values)
        self.fops = np.array([self._OPS[u] for _, u, _, _ in self.frows], np.int64)
        self.iops = np.array([self._OPS[u] for _, u, _, _ in self.irows], np.int64)
        self.facc = self._fresh(self.frows, np.float64, self.cap // 2)
        self.iacc = self._fresh(self.irows, np.int64, self.cap // 2)

    @staticmethod
    def _fresh(rows, dt, n):
        acc = np.zeros((len(rows), n), dt)
        big = np.inf if dt == np.float64 else np.iinfo(np.int64).max
        for r, (_, upd, _, _) in enumerate(rows):
            if upd == "min":
                released.call(acc[r].fill, big)  # (fills of large arrays release the GIL)
            elif upd == "max":
                released.call(acc[r].fill, -big if dt == np.float64 else np.iinfo(np.int64).min)
        return acc

    def _grow(self, need: int):
        cap = K.table_capacity(need)
        if cap <= self.cap:
            return
        g = self.ngroups
        new_keys = np.empty((self.nkeys, cap // 2), np.int64)
        copy = np.copyto  # copies of large arrays release the GIL: counted as such
        released.call(copy, new_keys[:, :g], self.gkeys[:, :g])
        self.gkeys = new_keys
        self.slots = K.groupby_rehash(self.gkeys, g, cap)
        f = self._fresh(self.frows, np.float64, cap // 2)
        released.call(copy, f[:, :g], self.facc[:, :g])
        i = self._fresh(self.irows, np.int64, cap // 2)
        released.call(copy, i[:, :g], self.iacc[:, :g])
        self.facc, self.iacc = f, i
        self.cap = cap

    def _values(self, rows, dt, cols, n):
        v = np.empty((len(rows), n), dt)
        fused = self._fused_values.get(dt)
        if fused is not None:
            fused[0](cols, [v[r] for r in fused[1]])
            return v
        for r, (_, upd, c, _) in enumerate(rows):
            if c is not None:
                v[r] = c(cols, n)
        return v

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        if n == 0:
            return
        cols = pkt.columns
        km = self._km(cols, n)
        self._grow(self.ngroups + n)
        self.ngroups = K.groupby_aggregate(
            km, self.slots, self.gkeys, self.ngroups,
            self._values(self.frows, np.float64, cols, n), self.fops, self.facc,
            self._values(self.irows, np.int64, cols, n), self.iops, self.iacc)

    def _state_of(self, sname: str, g: int) -> np.ndarray:
        for r, st in enumerate(self.frows):
            if st[0] == sname:
                return self.facc[r, :g]
        for r, st in enumerate(self.irows):
            if st[0] == sname:
                return self.iacc[r, :g]
        raise KeyError(sname)

    def on_end(self, ctx):
        g = self.ngroups
        if self.nkeys == 0 and g == 0:
            g = self.ngroups = 1  # a global aggregate always has one row
        cols = {}
        for i, f in enumerate(self.key_fields):
            k = self.gkeys[i, :g]
            cols[f.name] = k.view(np.float64) if f.dtype.kind == "f" else k
        if self.mode == "partial":
            for sname, _, _, _ in self.states:
                cols[sname] = self._state_of(sname, g)
        else:
            for name, func in self.aggs:
                cols[name] = self._finalize(name, func, g)
        send_columns(ctx, "out", self.schema, cols, g)

    def _finalize(self, name, func, g):
        if func == "count":
            return self._state_of(f"{name}$count", g)
        if func == "avg":
            s = self._state_of(f"{name}$sum", g).astype(np.float64)
            c = self._state_of(f"{name}$count", g)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(c > 0, s / np.maximum(c, 1), np.nan)
        v = self._state_of(f"{name}${func}", g)
        if self.nkeys == 0 and self._state_of("$rows$count", 1)[0] == 0:
            # SQL's NULL over no rows: NaN where the column is float, 0 where it is an
            # integer (packets have no null masks)
            return np.full(g, np.nan) if self.schema[name].dtype.kind == "f" else np.zeros(g, self.schema[name].dtype)
        return v


def _states(func: str) -> list[str]:
    return {"sum": ["sum"], "count": ["count"], "avg": ["sum", "count"], "min": ["min"], "max": ["max"]}[func]


def _col(name):
    return Col(name)


# ------------------------------------------------------------------------------------
# sorting: sorted runs, a network of 2-way merges, top-k


class Sort(StreamOperator):
    """Sorts all its input (a sorted run) and emits it in order; with `limit`, keeps only
    the first `limit` rows (top-k), pruning as it goes so memory stays O(limit)."""

    kind = "stateful"
    punct_out = M.REMOVES  # emits everything at end of stream

    def __init__(self, schema: Schema, keys: list[tuple[Expr, bool]], limit: int | None = None):
        self.schema = schema
        self.keys = [(Compiled(e, schema), bool(desc)) for e, desc in keys]
        self.limit = limit
        self._acc = _Columns(schema)

    def _sorted(self, cols, n):
        m = sort_matrix([c(cols, n) for c, _ in self.keys], [d for _, d in self.keys], n)
        return np.lexsort(m[::-1]) if n else np.empty(0, np.int64)

    def on_packet(self, ctx, port, pkt):
        self._acc.add(pkt)
        if self.limit is not None and self._acc.n > max(4 * self.limit, 4096):
            cols = self._acc.take()
            n = len(next(iter(cols.values())))
            perm = self._sorted(cols, n)[: self.limit]
            self._acc.add_columns({k: v[perm] for k, v in cols.items()}, len(perm))

    def on_end(self, ctx):
        cols = self._acc.take()
        n = len(next(iter(cols.values()))) if cols else 0
        perm = self._sorted(cols, n)
        if self.limit is not None:
            perm = perm[: self.limit]
        send_gather(ctx, "out", self.schema, cols, perm)


class Merge(Operator):
    """Merges two sorted streams ``a`` and ``b`` into one sorted stream, packet by
    packet: rows up to the smaller of the two inputs' last keys can be emitted. Both
    inputs are always consumed (buffered), so a slow input never blocks the other's
    producer. With `limit`, stops after that many rows (merge network of a top-k)."""

    kind = "stateful"
    inputs = ("a", "b")
    outputs = ("out",)
    punct_out = M.REMOVES  # relational, like HashJoin: both inputs are always taken at once

    def __init__(self, schema: Schema, keys: list[tuple[Expr, bool]], limit: int | None = None):
        self.schema = schema
        self.keys = [(Compiled(e, schema), bool(desc)) for e, desc in keys]
        self.limit = limit
        self.emitted = 0
        self.buf = {"a": None, "b": None}  # (cols dict, key matrix, n)

    def _append(self, side, pkt):
        n = pkt.nrows
        cols = {k: np.array(v) for k, v in pkt.columns.items()}
        km = sort_matrix([c(cols, n) for c, _ in self.keys], [d for _, d in self.keys], n)
        cur = self.buf[side]
        if cur is None or cur[2] == 0:
            self.buf[side] = (cols, km, n)
        else:
            c0, k0, n0 = cur
            self.buf[side] = ({k: np.concatenate([c0[k], cols[k]]) for k in cols},
                              np.concatenate([k0, km], axis=1), n0 + n)

    def _emit(self, ctx, na, nb):
        a, b = self.buf["a"], self.buf["b"]
        ka = a[1] if a else np.empty((len(self.keys), 0))
        kb = b[1] if b else np.empty((len(self.keys), 0))
        from_b, idx = K.merge_two(ka, kb, na, nb)
        if self.limit is not None:
            room = self.limit - self.emitted
            from_b, idx = from_b[:room], idx[:room]
        n = len(idx)
        if n:
            out = {}
            for name in self.schema.names:
                col = np.empty(n, self.schema[name].dtype)
                if a is not None:
                    col[~from_b] = a[0][name][idx[~from_b]]
                if b is not None:
                    col[from_b] = b[0][name][idx[from_b]]
                out[name] = col
            send_columns(ctx, "out", self.schema, out, n)
            self.emitted += n
        for side, k in (("a", na), ("b", nb)):
            cur = self.buf[side]
            if cur is not None and k:
                c, km, m = cur
                self.buf[side] = ({x: v[k:] for x, v in c.items()}, km[:, k:], m - k)

    def process(self, ctx):
        for side in ("a", "b"):
            while True:
                p = ctx.recv(side)
                if p is None:
                    break
                if p.nrows:
                    self._append(side, p)
        if ctx.blocked:
            return
        a, b = self.buf["a"], self.buf["b"]
        na = a[2] if a else 0
        nb = b[2] if b else 0
        ea, eb = ctx.at_eos("a"), ctx.at_eos("b")
        if ea and eb:
            self._emit(ctx, na, nb)
        else:
            # Rows up to the smallest last key of the inputs still open can go out: no
            # later row of an open input can sort before it. An open input with nothing
            # buffered bounds everything: wait.
            bound = None
            for open_, buf, n in ((not ea, a, na), (not eb, b, nb)):
                if open_:
                    if n == 0:
                        bound = False
                        break
                    last = buf[1][:, n - 1 : n]
                    if bound is None or K.count_le(last, 1, bound, 0) == 1:
                        bound = last
            if bound is not False:
                ka = K.count_le(a[1], na, bound, 0) if na else 0
                kb = K.count_le(b[1], nb, bound, 0) if nb else 0
                if ka or kb:
                    self._emit(ctx, ka, kb)
        done_limit = self.limit is not None and self.emitted >= self.limit
        if done_limit or (ea and eb and not ctx.blocked):
            ctx.close()
            ctx.finish()


# ------------------------------------------------------------------------------------
# sink


class Collect(StreamOperator):
    """The sink: gathers every packet and publishes a ``pyarrow.Table`` (strings decoded
    from their dictionary, dates as date32), columns renamed/ordered by `output`."""

    outputs = ()

    def __init__(self, schema: Schema, output: list[tuple[str, str]] | None = None, nan_is_null: bool = False):
        self.schema = schema
        self.output = output or [(n, n) for n in schema.names]
        self.nan_is_null = nan_is_null
        self._acc = _Columns(schema)

    def on_packet(self, ctx, port, pkt):
        self._acc.add(pkt)

    def on_end(self, ctx):
        ctx.set_result(to_arrow(self.schema, self._acc.take(), self.output, self.nan_is_null))


def to_arrow(schema: Schema, cols: dict, output: list[tuple[str, str]], nan_is_null: bool = False) -> pa.Table:
    """`nan_is_null`: a float NaN becomes a null (SQL plans: the engine's floats stand
    for SQL's NULL with NaN -- an aggregate over no rows, a division by zero -- where
    SQL answers NULL)."""
    arrays, names = [], []
    for out_name, name in output:
        f = schema[name]
        v = cols[name]
        if f.kind == "string":
            arr = f.dictionary.take(pa.array(v.astype(np.int32)))
        elif f.kind == "date":
            arr = pa.array(v.astype(np.int32), pa.date32())
        elif f.kind == "bool":
            arr = pa.array(v.astype(np.bool_))
        else:
            arr = pa.array(v, from_pandas=nan_is_null and v.dtype.kind == "f")
        arrays.append(arr)
        names.append(out_name)
    return pa.table(arrays, names=names)
