"""A small, readable API to write execution plans, with ``parallel=k`` decomposition.

    q = Query(data_dir, "q6", parallel=4)
    li = q.scan("lineitem", ["l_extendedprice", "l_discount", "l_shipdate", "l_quantity"],
                where=(col("l_shipdate") >= date("1994-01-01")) & (col("l_quantity") < 24))
    rev = li.aggregate([], [("revenue", "sum", col("l_extendedprice") * col("l_discount"))])
    plan = q.collect(rev)                      # a bobox_sched.Plan; result: a pyarrow Table

A :class:`Stream` is a relation split into partitions (one operator output each). Row-wise
operations (filter, project) apply per partition, so a scan with ``parallel=k`` becomes
k pipelines. Operations that need all rows decompose into single-threaded operators plus a
merge network: an aggregation into k partial aggregations, a shuffle and k final ones; a
sort into k sorted runs and a tree of 2-way merges; a join into k joins fed by a broadcast
of the build side (or a shuffle of both sides). So one query becomes tens to hundreds of
operators, each run by the scheduler on one thread at a time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bobox_sched import Plan

from operators import ops as O
from operators.expr import Expr, Schema, as_expr


class Query:
    """`fuse`: compile chains of row-wise operators between pipeline breakers into one
    operator running one generated kernel per morsel (``operators.pipeline``); False
    keeps one operator per step (the reference the fused plans are tested against)."""

    def __init__(self, data_dir, name: str = "query", parallel: int = 1, fuse: bool = True):
        if parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {parallel}")
        self.data_dir = data_dir
        self.name = name
        self.parallel = parallel
        self.fuse = fuse
        self.plan = Plan(name)
        # what the pipeline pass rewrites: name -> (factory, args, kwargs, prototype), and
        # (src, src port, dst, dst port) in the order connected
        self.nodes: dict[str, tuple] = {}
        self.edges: list[tuple[str, str, str, str]] = []
        self._counter: dict[str, int] = {}
        self._consumed: set = set()  # operator outputs already connected
        self.output_schema: Schema | None = None
        # Partitions (Plan.lane): a per-partition operator's index, set where partitions
        # start (scans, values, a shuffle's outputs) and inherited along edges; an
        # operator fed by several partitions (a union, a merge) has none.
        self._lane_of: dict[str, int | None] = {}
        self._lane_fixed: set = set()
        self._port_lane: dict[tuple[str, str], int] = {}

    def _set_lane(self, name: str, index: int) -> None:
        self._lane_of[name] = index
        self._lane_fixed.add(name)

    def lane_of(self, name: str) -> int | None:
        """The partition operator `name` belongs to, or None (Plan.lane)."""
        return self._lane_of.get(name)

    def mark_lanes(self, plan: Plan) -> Plan:
        """`plan` (this builder's, unfused) with each operator's partition said (Plan.lane)."""
        for n in self.nodes:
            if self.lane_of(n) is not None:
                plan.lane(n, self.lane_of(n))
        return plan

    def _add(self, prefix: str, factory, *args, **kwargs):
        """Add an operator; returns (name, prototype instance) -- the prototype tells its
        schema and ports, each request gets fresh instances from the same arguments."""
        k = self._counter.get(prefix, 0)
        self._counter[prefix] = k + 1
        name = f"{prefix}{k}"
        proto = factory(*args, **kwargs)
        self.plan.add(name, factory, *args, **kwargs)
        self.nodes[name] = (factory, args, kwargs, proto)
        return name, proto

    def _edge(self, src: str, src_port: str, dst: str, dst_port: str) -> None:
        self.edges.append((src, src_port, dst, dst_port))
        self.plan.connect(f"{src}.{src_port}", f"{dst}.{dst_port}")
        lane = self._port_lane.get((src, src_port), self._lane_of.get(src))
        if lane is not None and dst not in self._lane_fixed:
            if dst not in self._lane_of:
                self._lane_of[dst] = lane
            elif self._lane_of[dst] != lane:  # fed by two partitions: none
                self._set_lane(dst, None)

    # -- sources ----------------------------------------------------------------------------
    def scan(self, table: str, columns: list[str], where: Expr | None = None,
             parallel: int | None = None) -> "Stream":
        from operators.data import TableStore

        k = parallel or self.parallel
        t = TableStore.open(self.data_dir).table(table)
        # Every scanned column exists and has its TPC-H type (l_shipdate as text gave wrong
        # answers): checked on the files' metadata before any column is loaded.
        t.check_columns(list(columns))
        n = t.num_rows
        parts = []
        schema = None
        for i in range(k):
            a, b = n * i // k, n * (i + 1) // k
            name, proto = self._add(f"scan_{table}_", O.Scan, t, list(columns), a, b, where)
            if k > 1:
                self._set_lane(name, i)
            parts.append((name, "out"))
            schema = proto.schema
        return Stream(self, parts, schema)

    def values(self, table, parallel: int | None = None) -> "Stream":
        """A source over an in-memory ``pyarrow.Table`` (strings are dictionary-encoded
        with a sorted dictionary, dates become int32 days, decimals float64)."""
        from operators.expr import field_from_arrow

        k = parallel or self.parallel
        fields, cols = [], {}
        for name in table.column_names:
            arr = table.column(name).combine_chunks()
            typ = arr.type
            if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
                arr = arr.cast(pa.string())
                uniq = pc.unique(arr)
                dic = uniq.take(pc.array_sort_indices(uniq))
                cols[name] = np.asarray(pc.index_in(arr, value_set=dic).to_numpy(zero_copy_only=False), np.int32)
                fields.append(field_from_arrow(name, typ, dic))
            else:
                f = field_from_arrow(name, typ)
                if f.kind == "date":
                    cols[name] = arr.cast(pa.int32()).to_numpy(zero_copy_only=False)
                elif pa.types.is_decimal(typ):
                    cols[name] = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
                else:
                    cols[name] = np.asarray(arr.to_numpy(zero_copy_only=False), f.dtype)
                fields.append(f)
        schema = Schema(fields)
        n = table.num_rows
        parts = []
        for i in range(k):
            name, _ = self._add("values", O.Values, schema, cols, n * i // k, n * (i + 1) // k)
            if k > 1:
                self._set_lane(name, i)
            parts.append((name, "out"))
        return Stream(self, parts, schema)

    # -- sink -------------------------------------------------------------------------------
    def collect(self, stream: "Stream", output: list | None = None, nan_is_null: bool = False) -> Plan:
        """Finish the plan with a sink publishing a pyarrow Table. `output`: column names,
        or (output name, column) pairs, in result order (default: the stream's columns).
        `nan_is_null`: float NaNs become nulls (SQL's NULL: ``ops.to_arrow``)."""
        s = stream.union()
        out = []
        for o in output or s.schema.names:
            out.append((o, o) if isinstance(o, str) else tuple(o))
        for _, c in out:
            s.schema[c]  # KeyError naming the column
        name, _ = self._add("collect", O.Collect, s.schema, out, nan_is_null)
        s._connect(s.parts[0], name, "in")
        self.output_schema = s.schema
        if self.fuse:
            from operators.pipeline import fuse

            return fuse(self)
        return self.mark_lanes(self.plan)


class Stream:
    def __init__(self, q: Query, parts: list[tuple[str, str]], schema: Schema):
        self.q = q
        self.parts = parts
        self.schema = schema

    @property
    def k(self) -> int:
        return len(self.parts)

    def _connect(self, src: tuple[str, str], dst_name: str, dst_port: str) -> None:
        if src in self.q._consumed:
            raise ValueError(f"{src[0]}.{src[1]} is already consumed: use Stream.tee(n) to read a stream twice")
        self.q._consumed.add(src)
        self.q._edge(src[0], src[1], dst_name, dst_port)

    def tee(self, n: int) -> list["Stream"]:
        """`n` streams with the same rows (a broadcast per partition)."""
        if n == 1:
            return [self]
        outs = [[] for _ in range(n)]
        for p in self.parts:
            name, _ = self.q._add("tee", O.Broadcast, self.schema, n)
            self._connect(p, name, "in")
            for i in range(n):
                outs[i].append((name, f"out{i}"))
        return [Stream(self.q, parts, self.schema) for parts in outs]

    def _map(self, prefix, factory, *args, **kwargs) -> "Stream":
        parts = []
        schema = None
        for p in self.parts:
            name, proto = self.q._add(prefix, factory, *args, **kwargs)
            self._connect(p, name, "in")
            parts.append((name, "out"))
            schema = proto.schema
        return Stream(self.q, parts, schema)

    # -- row-wise ---------------------------------------------------------------------------
    def filter(self, predicate: Expr) -> "Stream":
        return self._map("filter", O.Filter, self.schema, predicate)

    def project(self, *columns, **exprs) -> "Stream":
        """Keep `columns` (names) and add named expressions, in that order."""
        pairs = [(c, as_expr(c)) for c in columns] + [(n, as_expr(e)) for n, e in exprs.items()]
        return self._map("project", O.Project, self.schema, pairs)

    def limit(self, n: int) -> "Stream":
        return self.union()._map("limit", O.Limit, self.schema, n)

    # -- repartitioning -------------------------------------------------------------------
    def union(self) -> "Stream":
        """All partitions into one (any interleaving)."""
        if self.k == 1:
            return self
        name, proto = self.q._add("union", O.Union, self.schema, self.k)
        for i, p in enumerate(self.parts):
            self._connect(p, name, f"in{i}")
        return Stream(self.q, [(name, "out")], self.schema)

    def shuffle(self, keys: list, k: int) -> "Stream":
        """Rows with equal keys into the same of `k` partitions (hash partitioning)."""
        keys = [as_expr(x) for x in keys]
        splits = []
        for p in self.parts:
            name, _ = self.q._add("partition", O.Partition, self.schema, keys, k)
            self._connect(p, name, "in")
            splits.append(name)
        parts = []
        for j in range(k):
            if len(splits) == 1:
                parts.append((splits[0], f"out{j}"))
                if k > 1:
                    self.q._port_lane[(splits[0], f"out{j}")] = j
                continue
            name, _ = self.q._add("union", O.Union, self.schema, len(splits))
            if k > 1:
                self.q._set_lane(name, j)
            for i, s in enumerate(splits):
                self.q._edge(s, f"out{j}", name, f"in{i}")
            parts.append((name, "out"))
        return Stream(self.q, parts, self.schema)

    def broadcast(self, k: int) -> list[tuple[str, str]]:
        """One copy of the whole stream per consumer: `k` output ports."""
        s = self.union()
        if k == 1:
            return [s.parts[0]]
        name, _ = self.q._add("broadcast", O.Broadcast, s.schema, k)
        s._connect(s.parts[0], name, "in")
        return [(name, f"out{i}") for i in range(k)]

    # -- join -------------------------------------------------------------------------------
    def join(self, build: "Stream", on: list[tuple], kind: str = "inner",
             columns: list | None = None, strategy: str = "broadcast",
             residual: Expr | None = None, matched: str | None = None) -> "Stream":
        """Join this stream (probe side) with `build` (hashed side) on
        ``[(probe key, build key), ...]``. `columns`: build-side columns to keep (names or
        (output, build column) pairs; default all). ``strategy``: ``broadcast`` (the whole
        build side to every probe partition) or ``shuffle`` (both sides hash-partitioned).

        ``kind``: ``inner``, ``left`` (left outer: unmatched probe rows once, their build
        columns 0; string build columns are refused), ``semi`` or ``anti``.
        ``residual``: a further condition on a pair, over probe and build column names
        (names it reads must be on one side only), e.g. ``col("l_suppkey") !=
        col("l2_suppkey")``; for semi / anti, a probe row matches when a build row with
        equal keys satisfies it. ``matched`` (left joins): name of an extra bool column,
        True on the rows that found a match."""
        if not on:
            raise ValueError("a join needs at least one (probe key, build key) pair; use Stream.cross for a cross join")
        pkeys = [as_expr(p) for p, _ in on]
        bkeys = [as_expr(b) for _, b in on]
        build_out = None
        if columns is not None:
            build_out = [(c, c) if isinstance(c, str) else tuple(c) for c in columns]
        probe = self
        if strategy == "shuffle" and self.k > 1:
            probe = self.shuffle(pkeys, self.k)
            feeds = build.shuffle(bkeys, self.k).parts
        elif strategy in ("broadcast", "shuffle"):
            feeds = build.broadcast(probe.k)
        else:
            raise ValueError(f"unknown join strategy {strategy!r}")
        return probe._join_parts(build, feeds, bkeys, pkeys, kind, build_out, residual, matched)

    def cross(self, build: "Stream", columns: list | None = None, residual: Expr | None = None) -> "Stream":
        """Every row of this stream paired with every row of `build` (broadcast to each
        partition; meant for a small build side, such as the one row of an uncorrelated
        scalar subquery). `columns`: build columns to keep, as in :meth:`join`;
        `residual`: a condition a pair must satisfy (a non-equi join)."""
        build_out = None
        if columns is not None:
            build_out = [(c, c) if isinstance(c, str) else tuple(c) for c in columns]
        feeds = build.broadcast(self.k)
        return self._join_parts(build, feeds, [], [], "inner", build_out, residual, None)

    def _join_parts(self, build, feeds, bkeys, pkeys, kind, build_out, residual, matched) -> "Stream":
        parts = []
        schema = None
        for p, b in zip(self.parts, feeds):
            name, proto = self.q._add("join", O.HashJoin, build.schema, self.schema, bkeys, pkeys, kind,
                                      build_out, None, residual, matched)
            self._connect(b, name, "build")
            self._connect(p, name, "probe")
            parts.append((name, "out"))
            schema = proto.schema
        return Stream(self.q, parts, schema)

    # -- aggregation --------------------------------------------------------------------------
    def aggregate(self, keys: list, aggs: list[tuple[str, str, Expr | None]]) -> "Stream":
        """GROUP BY `keys` (names or (name, expr)) computing `aggs` = [(name, func, expr)],
        func in sum/count/avg/min/max (expr None for count(*)). With several partitions:
        partial aggregations, a shuffle by key, final aggregations (one partition per
        input partition); without keys: partials, a union, one final."""
        keys = [(k, as_expr(k)) if isinstance(k, str) else (k[0], as_expr(k[1])) for k in keys]
        aggs = [(n, f, as_expr(e) if e is not None else None) for n, f, e in aggs]
        if self.k == 1:
            return self._map("agg", O.HashAggregate, self.schema, keys, aggs, "complete")
        partial = self._map("pagg", O.HashAggregate, self.schema, keys, aggs, "partial")
        key_refs = [(n, as_expr(n)) for n, _ in keys]
        if keys:
            moved = partial.shuffle([e for _, e in key_refs], self.k)
        else:
            moved = partial.union()
        return moved._map("fagg", O.HashAggregate, partial.schema, key_refs, aggs, "final")

    # -- ordering -----------------------------------------------------------------------------
    def sort(self, keys: list, limit: int | None = None) -> "Stream":
        """ORDER BY `keys` = [name or expr, or (name/expr, "desc"|"asc")] [LIMIT n]: a sorted
        run (or top-k) per partition, then a tree of 2-way merges. One partition out."""
        ks = []
        for k in keys:
            if isinstance(k, tuple):
                e, d = k
                ks.append((as_expr(e), d == "desc" or d is True))
            else:
                ks.append((as_expr(k), False))
        runs = self._map("sort", O.Sort, self.schema, ks, limit).parts
        while len(runs) > 1:
            nxt = []
            for i in range(0, len(runs) - 1, 2):
                name, _ = self.q._add("merge", O.Merge, self.schema, ks, limit)
                self._connect(runs[i], name, "a")
                self._connect(runs[i + 1], name, "b")
                nxt.append((name, "out"))
            if len(runs) % 2:
                nxt.append(runs[-1])
            runs = nxt
        return Stream(self.q, runs, self.schema)
