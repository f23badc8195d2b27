"""Pipeline compilation: a chain of operators with no pipeline breaker between them runs
as ONE generated ``nogil`` kernel per morsel (HyPer-style, Neumann 2011).

A *pipeline* is a source, row-wise stages and a sink:

* source: a table scan (``Scan`` or ``Values``, with its pushed-down predicate) or an
  input port (packets of an upstream operator);
* stages: filters, projections, and hash-join probes (inner, left outer, semi, anti;
  with or without a residual condition, which joins the key test; with no keys: a
  cross join, every build row in one chain) whose hash tables are built from other
  inputs of the pipeline operator (ports ``build0``, ...);
* sink: packets of the target size on ``out``, or a hash aggregation (complete or
  partial) that sends its groups at the end.

The generated kernel walks the morsel's rows once: each row goes through every stage
(a join level loops over the row's matches in the build chain) and ends in an output
row or an aggregate update, so nothing between the source and the sink is ever
materialised: no intermediate packet, no task, no per-packet Python. Operator
boundaries stay where the scheduler needs them: at breakers (join builds, aggregations,
sorts), exchanges (partition, union, broadcast) and sinks, i.e. wherever a packet
changes hands.

:func:`fuse` rewrites a plan of the builder (``Query``, whose operators it knows with
their arguments) into one with pipeline operators; ``Query(fuse=False)`` keeps the
operator-by-operator plan, which gives the same rows in the same order (tested).

Resumable kernels: a kernel stops *before* writing an output row that does not fit in
the output packet, or before adding a group to a full aggregation table, and saves
where it was in ``st``: ``st[0]`` the input row, ``st[1]`` a resume flag, ``st[2 + l]``
the build row of the l-th inner or left join's chain (for a left join, the number of
build rows when the row goes on with the zero-filled build row, having no match).
Python sends the full packet (or grows the table) and calls again; the kernel
re-enters the row at the saved chain positions.
Filters are re-evaluated on the way back in, which is harmless (they are pure).

Protocol: a :class:`Program` (the generated kernel and how to call it) is made once per
plan node by the submitting thread and shared, read-only, by every request; per-request
state (join tables, aggregation tables, the current output packet, ``st``) lives in the
:class:`Pipeline` operator, which the scheduler runs on one thread at a time.
"""

from __future__ import annotations

import inspect
import re
from collections import deque
from functools import partial

import numpy as np

from bobox_sched import Operator, Plan

from operators import codegen, kernels
from operators.codegen import Unsupported
from operators.expr import Col, Schema
from operators.ops import HashAggregate, HashJoin, Project, Scan, Values
from operators.ops import Filter as FilterOp

# Input rows a table-source pipeline processes per task, in packets of its source
# columns (a packet is half the L2 by default). Nothing is materialised between the
# source and the sink, so a morsel can be larger than a packet; larger morsels mean
# fewer tasks (each costs Python under the GIL) and fewer kernel calls. Measured on
# the TPC-H mix at SF 1, one worker (2 copies, medians of 3-5): 1 -> 4 packets cut the
# tasks from 6838 to 2970 and the serial fraction from 0.091 to 0.072; 16 and 64 gave
# 0.069-0.072 and 0.065 (within noise) with tasks of several milliseconds.
MORSEL_PACKETS = 4

_SEED = "np.uint64(0x243F6A8885A308D3)"  # kernels._hash_row's starting value
_PAIR_KINDS = ("inner", "left")  # join levels that walk their matches (a resume slot each)


def _value_names(join) -> list[str]:
    """The build-side value arrays of a join level, in argument order (``b{lvl}_{k}``)."""
    return join.build_value_names + ([HashJoin.MATCHED] if join.join_kind == "left" else [])


def _hash_prelude() -> str:
    # The join and group tables are built by kernels.py; the generated probes must hash
    # keys exactly as kernels._hash_row does, so its mixing function is copied in (and
    # its text is part of the kernel's cache key).
    return inspect.getsource(kernels._mix.py_func)


def _np_type(dtype: np.dtype) -> str:
    return {"b": "np.bool_"}.get(dtype.kind, f"np.{dtype.name}")


class _PipeGen(codegen._Gen):
    """The expression generator of ``codegen`` with columns resolved through an
    environment: column name -> the code that reads it in the current row."""

    def __init__(self):
        super().__init__(None)
        self.env: dict[str, str] = {}

    def col(self, name: str) -> str:
        return self.env[name]

    def expr(self, e, schema: Schema, env: dict) -> str:
        self.schema, self.env = schema, env
        return self.emit(e)


class Program:
    """The generated kernel of one pipeline and the layout of its arguments.

    ``source``: ``("table", schema, columns, start, stop, where)`` or ``("port", schema)``;
    ``stages``: ``("filter", schema, predicate)``, ``("project", schema, [(name, expr)],
    out_schema)``, ``("probe", join prototype, (args, kwargs))``; ``sink``:
    ``("emit", schema)`` or ``("aggregate", aggregate prototype, (args, kwargs))``.
    Raises :class:`codegen.Unsupported` when a step cannot be generated."""

    def __init__(self, source, stages, sink):
        self.source = source
        self.stages = stages
        self.sink = sink
        self.src_schema = source[1]
        g = _PipeGen()
        lines: list[str] = []
        self._inner = 0  # inner-join levels so far (resume slots)
        self._nlevels = sum(1 for s in stages if s[0] == "probe" and s[1].join_kind in _PAIR_KINDS)
        self._vars = 0
        env = {name: f"s{k}[i]" for k, name in enumerate(self.src_schema.names)}
        schema = self.src_schema
        steps = list(stages)
        if source[0] == "table" and source[5] is not None:
            steps.insert(0, ("filter", schema, source[5]))
        self._probes = [s for s in stages if s[0] == "probe"]
        self._bitmaps: list[bool] = []  # per probe level: tested against a key bitmap
        self._steps = steps
        self._body(g, lines, 0, 2, env, schema)
        body = "\n".join(lines)
        self.params = g.params
        self.out_schema = self._out_schema()

        # arguments actually read by the body, in a fixed order
        used = set(re.findall(r"\b([sb]\d+(?:_\d+)?)\[", body))
        self.src_cols = [k for k in range(len(self.src_schema.names)) if f"s{k}" in used]
        self.build_cols = []  # per probe level: [(k, build column name)]
        for lvl, (_, join, _) in enumerate(self._probes):
            names = _value_names(join)
            self.build_cols.append([(k, nm) for k, nm in enumerate(names) if f"b{lvl}_{k}" in used])
        sig = [f"s{k}" for k in self.src_cols] + ["n", "st"]
        for lvl in range(len(self._probes)):
            sig += [f"bk{lvl}", f"hd{lvl}", f"nx{lvl}"] + [f"b{lvl}_{k}" for k, _ in self.build_cols[lvl]]
            if self._bitmaps[lvl]:
                sig += [f"bm{lvl}", f"lo{lvl}", f"nb{lvl}"]
        sig += [f"p{k}" for k in range(len(self.params))]
        head = ["    i = st[0]", "    res = st[1] != 0"]
        for lvl in range(len(self._probes)):
            head.append(f"    msk{lvl} = np.uint64(hd{lvl}.shape[0] - 1)")
        if sink[0] == "emit":
            sig += [f"o{k}" for k in range(len(self.out_schema.names))] + ["m", "cap"]
            result = "m"
        else:
            sig += ["slots", "gkeys", "ng", "limit", "facc", "iacc"]
            result = "ng"
            head.append("    smask = np.uint64(slots.shape[0] - 1)")
            if not sink[1].keys:
                head.append("    if ng == 0:\n        ng = 1")
            else:  # the group of the previous row (none yet) and its key
                head.append("    lg = -1")
                head += [f"    lk{c} = np.int64(0)" for c in range(len(sink[1].keys))]
        self.signature = sig
        self.source_text = codegen._PRELUDE + _hash_prelude() + f'''

@njit(nogil=True, cache=True, error_model="numpy")
def kernel({", ".join(sig)}):
{chr(10).join(head)}
    while i < n:
{body}
        res = False
        i += 1
    st[0] = i
    st[1] = 0
    return {result}
'''
        self.kernel = codegen._load(self.source_text).timed

    def __reduce__(self):
        """Pickled as what built it (a plan travels to a domain process by cloudpickle;
        the compiled kernel and the operator prototypes' kernels do not pickle): a probe
        or aggregate step keeps its prototype's class and arguments, rebuilt on load."""
        return (_rebuild_program, (self.source, [_portable(s) for s in self.stages], _portable(self.sink)))

    # -- code generation --------------------------------------------------------------------
    def _var(self, prefix: str) -> str:
        self._vars += 1
        return f"{prefix}{self._vars}"

    def _body(self, g, lines, idx, depth, env, schema):
        pad = "    " * depth
        if idx == len(self._steps):
            return self._sink(g, lines, depth, env, schema)
        step = self._steps[idx]
        kind = step[0]
        if kind == "filter":
            lines.append(f"{pad}if {g.expr(step[2], step[1], env)}:")
            return self._body(g, lines, idx + 1, depth + 1, env, schema)
        if kind == "project":
            _, in_schema, exprs, out_schema = step
            new = {}
            for name, e in exprs:
                if isinstance(e, Col) and in_schema[e.name].dtype == out_schema[name].dtype:
                    # a column passed on (or renamed: SQL's per-instance names) is read where it
                    # is used, not copied for every row before the filters and probes after it
                    # (on Q18's two renamed lineitem passes the difference was within noise at
                    # SF 1: 174.0 / 34.7 ms against 178.5 / 34.7 ms, operator_times.py)
                    new[name] = g.expr(e, in_schema, env)
                    continue
                v = self._var("v")
                lines.append(f"{pad}{v} = {_np_type(out_schema[name].dtype)}({g.expr(e, in_schema, env)})")
                new[name] = v
            return self._body(g, lines, idx + 1, depth, new, out_schema)
        # a probe: level = its position among the probes
        join = step[1]
        lvl = [s[1] for s in self._probes].index(join)
        keys = []
        for c, pk in enumerate(join.pkeys):
            if pk.kind == "float":
                raise Unsupported("float join key (hashed by its bits)")
            k = f"k{lvl}_{c}"
            lines.append(f"{pad}{k} = np.int64({g.expr(pk.expr, join.probe_schema, env)})")
            keys.append(k)
        j = f"j{lvl}"
        f = f"f{lvl}"
        names = _value_names(join)
        bval = {nm: f"b{lvl}_{names.index(nm)}[{j}]" for nm in names}
        conds = [f"bk{lvl}[{c}, {j}] == {k}" for c, k in enumerate(keys)]
        if join.residual is not None:
            # the residual over the current probe row and build row j
            renv = {c: env[c] for c in join._res_probe}
            renv.update({c: bval[c] for c in join._res_build})
            conds.append(g.expr(join.residual, join.residual_schema, renv))
        eq = " and ".join(conds) or "True"  # (no keys, no residual: a cross join)
        new = {o: env[s] for o, s in join.probe_out}
        for o, s in join.build_gather:
            new[o] = bval[s]
        bitmap = len(keys) == 1
        self._bitmaps.append(bitmap)
        hashing = [f"h = {_SEED}"] + [f"h = _mix(h, np.uint64({k}))" for k in keys]
        bit_test = (f"nb{lvl} < 0 or (kd{lvl} >= 0 and kd{lvl} < nb{lvl} and "
                    f"(bm{lvl}[kd{lvl} >> 6] >> np.uint64(kd{lvl} & 63)) & np.uint64(1) != 0)")
        if join.join_kind == "left":
            # Build row NB (= the number of build rows) is the all-zero row the build
            # side appends: a probe row whose chain held no match goes through the rest
            # of the pipeline once with j = NB. Resuming at a saved j means the row had a
            # match (j < NB) or is being emitted with the zero row (j == NB).
            slot = self._inner
            self._inner += 1
            lines.append(f"{pad}if res:")
            lines.append(f"{pad}    {j} = st[{2 + slot}]")
            lines.append(f"{pad}    {f} = True")
            lines.append(f"{pad}else:")
            lines.append(f"{pad}    {f} = False")
            lines.append(f"{pad}    {j} = -1")
            hp = pad + "    "
            if bitmap:
                lines.append(f"{hp}kd{lvl} = {keys[0]} - lo{lvl}")
                lines.append(f"{hp}if {bit_test}:")
                hp += "    "
            lines += [f"{hp}{x}" for x in hashing]
            lines.append(f"{hp}{j} = hd{lvl}[np.int64(h & msk{lvl})]")
            if slot == self._nlevels - 1:
                lines.append(f"{pad}res = False")
            nbr = f"bk{lvl}.shape[1]"
            lines.append(f"{pad}while True:")
            lines.append(f"{pad}    if {j} == -1:")
            lines.append(f"{pad}        if {f}:")
            lines.append(f"{pad}            break")
            lines.append(f"{pad}        {j} = {nbr}")
            lines.append(f"{pad}    if {j} == {nbr} or ({eq}):")
            lines.append(f"{pad}        {f} = True")
            self._body(g, lines, idx + 1, depth + 2, new, join.schema)
            lines.append(f"{pad}    if {j} == {nbr}:")
            lines.append(f"{pad}        break")
            lines.append(f"{pad}    {j} = nx{lvl}[{j}]")
            return
        if join.join_kind != "inner":
            lines.append(f"{pad}{f} = False")
        ip = pad  # the probe itself, under the bitmap test if there is one
        if bitmap:
            # the build side's key bitmap first, when it has one (nb < 0: none)
            lines.append(f"{pad}kd{lvl} = {keys[0]} - lo{lvl}")
            lines.append(f"{pad}if {bit_test}:")
            ip = pad + "    "
        lines += [f"{ip}{x}" for x in hashing]
        if join.join_kind == "inner":
            slot = self._inner
            self._inner += 1
            lines.append(f"{ip}if res:")
            lines.append(f"{ip}    {j} = st[{2 + slot}]")
            lines.append(f"{ip}else:")
            lines.append(f"{ip}    {j} = hd{lvl}[np.int64(h & msk{lvl})]")
            if slot == self._nlevels - 1:
                lines.append(f"{ip}res = False")
            lines.append(f"{ip}while {j} != -1:")
            lines.append(f"{ip}    if {eq}:")
            self._body(g, lines, idx + 1, len(ip) // 4 + 2, new, join.schema)
            lines.append(f"{ip}    {j} = nx{lvl}[{j}]")
            return
        lines.append(f"{ip}{j} = hd{lvl}[np.int64(h & msk{lvl})]")
        lines.append(f"{ip}while {j} != -1:")
        lines.append(f"{ip}    if {eq}:")
        lines.append(f"{ip}        {f} = True")
        lines.append(f"{ip}        break")
        lines.append(f"{ip}    {j} = nx{lvl}[{j}]")
        lines.append(f"{pad}if {'' if join.join_kind == 'semi' else 'not '}{f}:")
        return self._body(g, lines, idx + 1, depth + 1, new, join.schema)

    def _save(self, pad: str) -> list[str]:
        out = [f"{pad}st[0] = i", f"{pad}st[1] = 1"]
        levels = [s[1] for s in self._probes if s[1].join_kind in _PAIR_KINDS]
        for slot, join in enumerate(levels):
            out.append(f"{pad}st[{2 + slot}] = j{[s[1] for s in self._probes].index(join)}")
        return out

    def _sink(self, gen, lines, depth, env, schema):
        pad = "    " * depth
        if self.sink[0] == "emit":
            lines.append(f"{pad}if m >= cap:")
            lines += self._save(pad + "    ")
            lines.append(f"{pad}    return m")
            for k, name in enumerate(schema.names):
                lines.append(f"{pad}o{k}[m] = {env[name]}")
            lines.append(f"{pad}m += 1")
            return
        agg = self.sink[1]
        keys = []
        for name, c in agg.keys:
            if c.kind == "float":
                raise Unsupported("float group key (hashed by its bits)")
            k = self._var("kk")
            lines.append(f"{pad}{k} = np.int64({gen.expr(c.expr, agg.in_schema, env)})")
            keys.append(k)
        if keys:
            eq = " and ".join(f"gkeys[{c}, g] == {k}" for c, k in enumerate(keys))
            same = " and ".join(f"{k} == lk{c}" for c, k in enumerate(keys))
            # Rows of one group often come in runs (tables clustered by a key, joins
            # emitting a probe row's matches together): the previous row's group is
            # checked before hashing.
            lines += [
                f"{pad}if lg >= 0 and {same}:",
                f"{pad}    g = lg",
                f"{pad}else:",
            ]
            lines += [f"{pad}    {line}" for line in self._group_lookup(keys, eq)]
            lines += [f"{pad}    lg = g"] + [f"{pad}    lk{c} = {k}" for c, k in enumerate(keys)]
        else:
            lines.append(f"{pad}g = 0")
        self._updates(gen, lines, pad, agg, env)

    def _group_lookup(self, keys, eq) -> list[str]:
        pad = ""
        lines = [f"h = {_SEED}"] + [f"h = _mix(h, np.uint64({k}))" for k in keys]
        lines += [
                f"{pad}sl = np.int64(h & smask)",
                f"{pad}while True:",
                f"{pad}    g = slots[sl]",
                f"{pad}    if g == -1:",
                f"{pad}        if ng >= limit:",
                *self._save(pad + "            "),
                f"{pad}            return ng",
                f"{pad}        g = ng",
                f"{pad}        slots[sl] = g",
                *[f"{pad}        gkeys[{c}, g] = {k}" for c, k in enumerate(keys)],
                f"{pad}        ng += 1",
                f"{pad}        break",
                f"{pad}    if {eq}:",
                f"{pad}        break",
                f"{pad}    sl = (sl + 1) & np.int64(smask)",
            ]
        return lines

    def _updates(self, gen, lines, pad, agg, env):
        for acc, rows, cast in (("facc", agg.frows, "np.float64"), ("iacc", agg.irows, "np.int64")):
            for r, (_, upd, c, _) in enumerate(rows):
                if upd == "count":
                    lines.append(f"{pad}{acc}[{r}, g] += 1")
                    continue
                x = self._var("x")
                lines.append(f"{pad}{x} = {cast}({gen.expr(c.expr, agg.in_schema, env)})")
                if upd == "sum":
                    lines.append(f"{pad}{acc}[{r}, g] += {x}")
                else:
                    op = "<" if upd == "min" else ">"
                    lines.append(f"{pad}if {x} {op} {acc}[{r}, g]:")
                    lines.append(f"{pad}    {acc}[{r}, g] = {x}")

    def _out_schema(self) -> Schema:
        if self.sink[0] == "emit":
            return self.sink[1]
        return self.sink[1].schema

    # -- what the plan shows --------------------------------------------------------------------
    @property
    def build_ports(self) -> tuple:
        return tuple(f"build{lvl}" for lvl in range(len(self._probes)))


class Pipeline(Operator):
    """Runs a :class:`Program`: ports ``in`` (port sources only), ``build0``.. (one per
    join probe, consumed to the end before any row is probed) and ``out``."""

    kind = "stateful"
    outputs = ("out",)

    def __init__(self, program: Program):
        self.program = program
        self.table = program.source[0] == "table"
        self.inputs = (() if self.table else ("in",)) + program.build_ports
        self.schema = program.out_schema
        self.joins = [HashJoin(*a, **kw) for _, _, (a, kw) in program._probes]
        self.agg = None
        if program.sink[0] == "aggregate":
            a, kw = program.sink[2]
            self.agg = HashAggregate(*a, **kw)
        self.st = np.zeros(2 + len(self.joins), np.int64)
        self._built = not self.joins
        self._stash: deque = deque()
        self._cur = None  # the input packet being worked through (port source)
        self._out = None  # the output packet being filled (emit sink)
        self._m = 0
        self._fixed = None  # build-side and parameter arguments, once the tables exist
        if self.table:
            _, _, columns, start, stop, _ = program.source
            self._src = [columns[program.src_schema.names[k]] for k in program.src_cols]
            self.st[0] = start
            self.stop = stop

    # -- running ------------------------------------------------------------------------------
    def _prepare(self) -> None:
        p = self.program
        fixed = []
        for join, cols, bitmap in zip(self.joins, p.build_cols, p._bitmaps):
            join._build()
            fixed += [join._bk, join._heads, join._nxt] + [join._bvals[name] for _, name in cols]
            if bitmap:
                lo, nbits, bits = join._bits
                fixed += [bits, lo, nbits]
        self._fixed = fixed + list(p.params)
        self._built = True

    def _run(self, ctx, src: list, n: int) -> bool:
        """Run the kernel over rows st[0]..n of `src`; False if it stopped because a send
        blocked (the state to resume from is in ``st``)."""
        fn = self.program.kernel
        st = self.st
        if self.agg is None:
            spec = self.schema.spec
            while True:
                if self._out is None:
                    self._out = ctx.new_packet(spec, ctx.rows_for(spec))
                    self._outcols = [self._out.columns[nm] for nm in spec.names]
                    self._m = 0
                out = self._out
                self._m = fn(*src, n, st, *self._fixed, *self._outcols, self._m, out.nrows)
                if st[0] >= n:
                    return True
                self._out = None  # full: send it and go on in a fresh one
                if not ctx.send("out", out):
                    return False
        agg = self.agg
        while True:
            agg.ngroups = fn(*src, n, st, *self._fixed, agg.slots, agg.gkeys, agg.ngroups, agg.gkeys.shape[1],
                             agg.facc, agg.iacc)
            if st[0] >= n:
                return True
            agg._grow(agg.ngroups + 1)  # the table was full: double it, go on

    def _finish(self, ctx) -> None:
        if self.agg is not None:
            self.agg.on_end(ctx)
        elif self._out is not None and self._m:
            ctx.send("out", self._out.head(self._m))
        self._out = None
        ctx.close()
        ctx.finish()

    def process(self, ctx):
        if not self._built:
            for k, port in enumerate(self.program.build_ports):
                while True:
                    p = ctx.recv(port)
                    if p is None:
                        break
                    self.joins[k]._add_build(p)
            if not self.table:
                while True:  # stash the stream until the tables exist
                    p = ctx.recv("in")
                    if p is None:
                        break
                    self._stash.append(p)
            if not all(ctx.at_eos(port) for port in self.program.build_ports):
                return
            self._prepare()
        elif self._fixed is None:
            self._prepare()
        if ctx.blocked:
            return
        if self.table:
            end = min(self.stop, int(self.st[0]) + MORSEL_PACKETS * ctx.rows_for(self.program.src_schema.spec))
            if end > self.st[0] and not self._run(ctx, self._src, end):
                return
            if self.st[0] >= self.stop:
                self._finish(ctx)
            else:
                ctx.reschedule()
            return
        names = self.program.src_schema.names
        while not ctx.blocked:
            if self._cur is None:
                p = self._stash.popleft() if self._stash else ctx.recv("in")
                if p is None:
                    break
                if not p.nrows:
                    continue
                self._cur = p
                self._cur_src = [p.columns[names[k]] for k in self.program.src_cols]
                self.st[:] = 0
            if not self._run(ctx, self._cur_src, self._cur.nrows):
                return
            self._cur = self._cur_src = None
        if ctx.at_eos("in") and not self._stash and self._cur is None and not ctx.blocked:
            self._finish(ctx)


# ------------------------------------------------------------------------------------------
# the plan rewrite


def _portable(step):
    if step[0] in ("probe", "aggregate"):
        return (step[0], type(step[1]), step[2])
    return step


def _rebuild_program(source, stages, sink) -> Program:
    def built(step):
        if step[0] in ("probe", "aggregate"):
            args, kwargs = step[2]
            return (step[0], step[1](*args, **kwargs), step[2])
        return step

    return Program(source, [built(s) for s in stages], built(sink))


def _is_table(proto) -> bool:
    return isinstance(proto, (Scan, Values))


def _source_of(proto):
    if isinstance(proto, Scan):
        cols = {name: c.values for name, c in proto.cols.items()}
        return ("table", proto.schema, cols, proto.start, proto.stop, proto.where.expr if proto.where else None)
    return ("table", proto.schema, proto.columns, proto.pos, proto.stop, None)


def _stage_of(proto, args, kwargs):
    if isinstance(proto, FilterOp):
        return ("filter", proto.schema, proto.pred.expr)
    if isinstance(proto, Project):
        return ("project", proto.in_schema, [(name, c.expr) for name, c in proto.exprs], proto.schema)
    return ("probe", proto, (args, kwargs))


def _program(q, chain: list[str], port_source: bool) -> Program:
    nodes = q.nodes
    members = [nodes[n] for n in chain]
    if port_source:
        first = members[0][3]
        src_schema = first.probe_schema if isinstance(first, HashJoin) else getattr(first, "in_schema", first.schema)
        source = ("port", src_schema)
        rest = members
    else:
        source = _source_of(members[0][3])
        rest = members[1:]
    stages, sink = [], None
    for factory, args, kwargs, proto in rest:
        if isinstance(proto, HashAggregate):
            sink = ("aggregate", proto, (args, kwargs))
        else:
            stages.append(_stage_of(proto, args, kwargs))
    if sink is None:
        sink = ("emit", (rest[-1][3] if rest else members[0][3]).schema)
    return Program(source, stages, sink)


def _next_in_chain(q, name, outs) -> tuple[str, str] | None:
    """The operator that may join `name`'s pipeline: the only consumer of its only
    output, if it is a row-wise step, a probe side, or an aggregation (the sink)."""
    ports = [e for e in outs.get(name, [])]
    if len(ports) != 1 or ports[0][0] != "out":
        return None
    _, dst, dport = ports[0]
    proto = q.nodes[dst][3]
    if isinstance(proto, (FilterOp, Project)) and dport == "in":
        return dst, dport
    if isinstance(proto, HashJoin) and dport == "probe":
        return dst, dport
    if isinstance(proto, HashAggregate) and dport == "in" and proto.mode in ("complete", "partial"):
        return dst, dport
    return None


def fuse(q) -> Plan:
    """The plan of builder `q` with every fusible chain replaced by a :class:`Pipeline`
    operator; chains a kernel cannot be generated for are shortened until it can (or
    left alone)."""
    outs: dict[str, list] = {}
    ins: dict[str, list] = {}
    for s, sp, d, dp in q.edges:
        outs.setdefault(s, []).append((sp, d, dp))
        ins.setdefault(d, []).append((dp, s, sp))
    member_of: dict[str, int] = {}
    pipes: list[tuple[list[str], bool, Program]] = []
    for name, (_, _, _, proto) in q.nodes.items():
        if name in member_of:
            continue
        if _is_table(proto):
            port_source = False
        elif isinstance(proto, (FilterOp, Project)) or isinstance(proto, HashJoin):
            port_source = True  # a stream from an operator that is not fused with it
        else:
            continue
        chain = [name]
        while not isinstance(q.nodes[chain[-1]][3], HashAggregate):
            nxt = _next_in_chain(q, chain[-1], outs)
            if nxt is None or nxt[0] in member_of:
                break
            chain.append(nxt[0])
        program = None
        # A table scan alone is worth a pipeline too: it fills its output packets across
        # morsels instead of sending one short packet per morsel (Q12's 0.5 % of line
        # items: 4 packets instead of 366 per SF), runs MORSEL_PACKETS packets per task,
        # and copies rows in its (GIL-free) kernel instead of numpy calls per column.
        shortest = 1 if not port_source else 2
        while len(chain) >= shortest:
            try:
                program = _program(q, chain, port_source)
                break
            except Unsupported:
                chain.pop()
        if program is None:
            continue
        for n in chain:
            member_of[n] = len(pipes)
        pipes.append((chain, port_source, program))
    if not pipes:
        return q.mark_lanes(q.plan)
    plan = Plan(q.plan.name)
    pipe_names = []
    for name, (factory, args, kwargs, _) in q.nodes.items():
        k = member_of.get(name)
        if k is None:
            plan.add(name, factory, *args, **kwargs)
            if q.lane_of(name) is not None:
                plan.lane(name, q.lane_of(name))
        elif pipes[k][0][0] == name:
            pname = "+".join(pipes[k][0])
            plan.add(pname, partial(Pipeline, pipes[k][2]))
            pipe_names.append(pname)
            lanes = {q.lane_of(n) for n in pipes[k][0]} - {None}
            if len(lanes) == 1:  # a chain inside one partition (always, by how chains are cut)
                plan.lane(pname, lanes.pop())
    for s, sp, d, dp in q.edges:
        ks, kd = member_of.get(s), member_of.get(d)
        if ks is not None and ks == kd:
            continue  # inside a pipeline
        if ks is not None:
            s, sp = "+".join(pipes[ks][0]), "out"
        if kd is not None:
            chain, port_source, program = pipes[kd]
            if d == chain[0] and port_source and dp in ("in", "probe"):
                dp = "in"  # the stream the pipeline starts from
            elif dp == "build":
                probes = [n for n in chain if isinstance(q.nodes[n][3], HashJoin)]
                dp = f"build{probes.index(d)}"
            d = "+".join(chain)
        plan.connect(f"{s}.{sp}", f"{d}.{dp}")
    return plan
