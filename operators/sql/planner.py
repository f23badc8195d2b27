"""SQL to plans: a qualified, simplified sqlglot tree (``frontend.py``) to the plan
builder's operators (``operators/builder.py``).

How one SELECT becomes a plan (``Planner.select``):

1. **Sources.** Each FROM item gets an *instance* (a unique name: the same table may be
   read twice, as ``nation n1, nation n2``, or inside and outside a subquery). A base
   table is a scan of the columns the query uses, with the conjuncts of WHERE that use
   only it pushed into the scan (and the single-table parts implied by an OR of ANDs,
   e.g. Q19's per-branch brand/size ranges: each branch's conjuncts on that table,
   OR-ed); a derived table or a CTE is planned recursively (a CTE read twice is planned
   once and teed, so both readers see the same values -- Q15 compares a sum with the max
   of the same sums).
2. **Subqueries are unnested into joins** (the rewrites of Neumann and Kemper, "Unnesting
   Arbitrary Queries", BTW 2015, for the shapes TPC-H uses):
   ``EXISTS`` / ``NOT EXISTS`` and ``IN`` / ``NOT IN (subquery)`` become semi- and
   anti-joins (equality correlations as keys, other correlated conditions as the join's
   residual, Q21); a scalar subquery compared with a value becomes a relation of its own
   -- grouped by its correlation columns when correlated (Q2, Q17, Q20), one row
   otherwise (Q11, Q15, Q22) -- joined like any table and the comparison a filter.
   sqlglot's own ``unnest_subqueries`` is not used: it writes non-equality correlations
   as array aggregates and lambdas (``LIST_FILTER``) and anti-joins as ``LEFT JOIN ...
   IS NULL``, which the kernels do not run.
3. **Join order** from statistics (``catalog.py``), not from the text: greedy operator
   ordering (Fegaras, "A New Heuristic for Optimizing Large Queries", DEXA 1998) --
   repeatedly join the two connected relations whose join is estimated smallest, the
   smaller side as the hash table's build side, so dimension chains (region, nation,
   supplier) join among themselves before they meet the fact table. A build side that
   gives no column to the rest of the query and whose key is unique becomes a semi-join.
   Semi- and anti-joins from subqueries apply as soon as their outer columns are joined
   when their build side is smaller than the relation they filter, otherwise after the
   inner joins (Q21's build side is all of lineitem: it waits until the nation,
   supplier and order filters have shrunk its probe side). Conditions over several
   tables apply right after the join that brings their last table.
4. **Aggregation**: GROUP BY keys (columns or expressions), the aggregates of SELECT,
   HAVING and ORDER BY (``sum count avg min max``; ``count(DISTINCT x)`` as a grouping by
   the keys and x, then a count), HAVING as a filter (a scalar subquery in it crossed in
   first), then the SELECT list as a projection, ORDER BY and LIMIT as a sort (a top-k).
5. ``LEFT [OUTER] JOIN`` keeps its left side's rows: the right side's columns read 0 where
   nothing matched, and ``count(column of the right side)`` counts matches (Q13).

The builder then decomposes each operator with ``parallel=k`` and fuses row-wise chains,
exactly as for the hand-written plans.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from sqlglot import exp

from operators.builder import Query, Stream
from operators.expr import Col, case, col
from operators.sql.catalog import Catalog
from operators.sql.errors import error_at
from operators.sql.exprs import to_expr

# A build side above this many estimated rows is hash-partitioned with its probe side
# (strategy "shuffle") instead of broadcast to every probe partition, with parallel > 1:
# the hand-built TPC-H plans shuffle the orders side (1.5 M rows at SF 1) and broadcast
# the dimension tables (at most 200 k rows: part); 100 k lies between the two.
SHUFFLE_ROWS = 100_000

# Semi-join reducers (planner doc): a correlated subquery's table is reduced by the keys of
# an outer table its filters kept at most this share of (REDUCE_SHARE), and a semi- or
# anti-join's subquery side by the keys of the side it filters when it is this many times
# larger (REDUCE_RATIO). Each costs a probe of the large side against a small hash table,
# fused into its scan; what it saves is the large side's shuffle, hash build or
# aggregation. Chosen so that Q2, Q4, Q17, Q20, Q21 (reduced to 0.1-10 %) qualify and the
# unfiltered sides of Q18 and Q22 do not (bobox bench sql, SF 1, 2026-12-02).
REDUCE_SHARE = 0.5
REDUCE_RATIO = 4.0
# ... and sideways (``reduce_by``) only tables of at least this many rows: each reducer is
# three more operators (a tee, a projection, a join), tens of microseconds of scheduling,
# which a few thousand rows do not repay (nation, region, supplier at SF 0.1).
REDUCE_MIN_ROWS = 10_000
# ... and the largest tree only by at most this many rows: a hash table that stays in the
# L2 (100 k keys of 8 bytes plus links, about 2 MB) -- Q9's 11 k green parts, not Q5's
# 228 k orders of the year (bobox bench sql, SF 1, 2026-12-02: see reduce_by).
REDUCE_LARGEST_ROWS = 100_000

# Selectivity guesses for join ordering where no statistics say better (the classic
# System R defaults, Selinger et al. 1979: 1/10 an equality, 1/3 a range).
SEL_EQ, SEL_RANGE, SEL_LIKE, SEL_OTHER = 0.1, 1 / 3, 0.25, 0.5

AGGS = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


@dataclass
class Rel:
    """A relation being planned: a builder stream and what its columns are."""

    stream: Stream
    cols: dict  # (instance, column) -> stream column name
    kinds: dict  # stream column name -> kind
    instances: set
    rows: float
    ndv: dict = field(default_factory=dict)  # stream column name -> distinct estimate
    unique: set = field(default_factory=set)  # stream columns known unique
    nulled: dict = field(default_factory=dict)  # instance -> its "matched" flag column (left join)
    counted: dict = field(default_factory=dict)  # instance -> its rows counted per key ahead (count_ahead)
    links: list = field(default_factory=list)  # join keys used: ((alias, column), (alias, column))
    base: str | None = None  # the one base instance it is, unjoined
    table: str | None = None  # and that instance's table
    steps: list = field(default_factory=list)  # explain lines

    def resolver(self, extra=None):
        def resolve(node):
            if extra is not None:
                got = extra(node)
                if got is not None:
                    return got
            if isinstance(node, exp.Column):
                key = (node.table, node.name)
                name = self.cols.get(key)
                if name is not None:
                    return col(name), self.kinds[name]
            return None

        return resolve


def conjuncts(node) -> list:
    if node is None:
        return []
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def disjuncts(node) -> list:
    if isinstance(node, exp.Paren):
        return disjuncts(node.this)
    if isinstance(node, exp.Or):
        return disjuncts(node.this) + disjuncts(node.expression)
    return [node]


def and_all(nodes):
    nodes = [n.copy() for n in nodes]
    out = nodes[0]
    for n in nodes[1:]:
        out = exp.And(this=out, expression=n)
    return out


def or_all(nodes):
    nodes = [n.copy() for n in nodes]
    out = nodes[0]
    for n in nodes[1:]:
        out = exp.Or(this=out, expression=n)
    return out


def own_nodes(node):
    """`node` and its descendants, not entering subqueries (yielded, not entered)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if n is not node and isinstance(n, (exp.Select, exp.Subquery, exp.Union)):
            continue
        stack.extend(n.iter_expressions())


def has_subquery(node) -> bool:
    return any(isinstance(n, (exp.Subquery, exp.Select, exp.Exists)) for n in own_nodes(node))


def sources_of(sel: exp.Select) -> list:
    """[(alias, node, join)] of a SELECT's FROM items (join None for the first/comma)."""
    out = []
    frm = sel.args.get("from_") or sel.args.get("from")
    if frm is not None:
        out.append((frm.this.alias_or_name, frm.this, None))
    for j in sel.args.get("joins") or []:
        out.append((j.this.alias_or_name, j.this, j))
    return out


class Planner:
    """Plans one statement (module doc). ``plan()`` returns the builder's Plan."""

    def __init__(self, catalog: Catalog, query: Query, output_names: list[str] | None = None):
        self.catalog = catalog
        self.q = query
        self.output_names = output_names
        self._ids = itertools.count()
        self.instance_count: dict = {}  # table name -> times it is read in the statement
        self.explain: list[str] = []
        self.ctes: dict = {}  # id(CTE node) -> [streams teed, Rel proto]
        self._reduced: set = set()  # (base instance, column) reduced sideways (reduce_by)
        self.table_of: dict = {}  # base instance -> its table

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # -- the statement --------------------------------------------------------------------
    def plan(self, stmt: exp.Expression):
        if not isinstance(stmt, exp.Select):
            raise error_at(stmt, f"unsupported: {stmt.key.upper()} statements (SELECT is)")
        for t in stmt.find_all(exp.Table):
            self.instance_count[t.name] = self.instance_count.get(t.name, 0) + 1
        rel, outs = self.select(stmt, env=[], top=True)
        names = self.output_names or [o for o, _ in outs]
        if len(names) != len(outs):
            names = [o for o, _ in outs]
        return self.q.collect(rel.stream, [(n, c) for n, (_, c) in zip(names, outs)], nan_is_null=True), rel

    # -- environments: a list of frames, innermost last; a frame maps alias -> instance ------
    @staticmethod
    def lookup(env, alias):
        for frame in reversed(env):
            if alias in frame:
                return frame[alias]
        return None

    # -- one SELECT ------------------------------------------------------------------------
    def select(self, sel: exp.Select, env: list, top: bool = False, prefix: str = "",
               reducers=None) -> tuple[Rel, list]:
        """Plan `sel`: a Rel and its outputs [(output name, stream column)]."""
        for key in ("windows", "qualify", "laterals", "pivots", "connect", "match"):
            if sel.args.get(key):
                raise error_at(sel, f"unsupported: {key.upper()}")
        frame: dict = {}
        env = env + [frame]
        with_ = sel.args.get("with_") or sel.args.get("with")
        cte_defs = {}
        if with_ is not None:
            if with_.args.get("recursive"):
                raise error_at(with_, "unsupported: WITH RECURSIVE")
            for cte in with_.expressions:
                cte_defs[cte.alias_or_name] = cte
        frame["__ctes__"] = {**(self.lookup(env[:-1], "__ctes__") or {}), **cte_defs}
        rel = self.from_where(sel, env, reducers)
        return self.finish_select(sel, env, rel, top, prefix)

    def from_where(self, sel: exp.Select, env: list, reducers=None) -> Rel:
        """FROM and WHERE of `sel`: one Rel. `reducers`: {alias: [(inner columns, stream,
        its key columns)]} semi-joins an enclosing query asks its correlated subquery's
        tables to take first (``reduce``)."""
        frame = env[-1]
        items = []  # (instance, Rel or None, join node)
        srcs = sources_of(sel)
        if not srcs:
            raise error_at(sel, "unsupported: SELECT without FROM")
        for alias, node, join in srcs:
            inst = alias if self.instance_count.get(getattr(node, "name", None), 0) <= 1 and \
                not self.lookup(env[:-1], alias) else self.fresh(alias + "#")
            frame[alias] = inst
            items.append((alias, inst, node, join))
        where = conjuncts(sel.args.get("where").this if sel.args.get("where") else None)
        left_joins = []
        for alias, inst, node, join in items:
            if join is None:
                continue
            side = (join.args.get("side") or "").upper()
            kind = (join.args.get("kind") or "").upper()
            if join.args.get("using"):
                raise error_at(join, "unsupported: JOIN ... USING (write ON)")
            if side == "LEFT":
                left_joins.append((alias, inst, node, join))
            elif side in ("RIGHT", "FULL") or kind in ("SEMI", "ANTI", "NATURAL"):
                raise error_at(join, f"unsupported: {side or kind} JOIN")
            elif join.args.get("on") is not None:
                where += conjuncts(join.args["on"])
        left_insts = {inst for _, inst, _, _ in left_joins}
        # factor common conjuncts out of ORs, and imply per-table filters from them
        where = self.factor(where, env)
        # single-instance conjuncts go into the sources
        plain = [c for c in where if not has_subquery(c)]
        per_inst: dict = {}
        multi = []
        for c in plain:
            insts = self.instances_of(c, env)
            if len(insts) == 1 and next(iter(insts)) not in left_insts:
                per_inst.setdefault(next(iter(insts)), []).append(c)
            elif len(insts) == 0:
                multi.append((c, set()))
            else:
                multi.append((c, insts))
        trees = []
        for alias, inst, node, join in items:
            if inst in left_insts:
                continue
            t = self.source(sel, env, alias, inst, node, per_inst.pop(inst, []))
            for red in (reducers or {}).get(alias, ()):
                self.reduce(t, red, alias)
            trees.append(t)
        # subqueries: EXISTS and IN become semi-joins (those on one table applied to it now,
        # when their build side is no larger: they may shrink what a scalar subquery's
        # reducer carries, Q20); scalar subqueries relations of their own, compared in plain
        # conjuncts
        semis, extra_rels, scalars = [], [], []
        for c in where:
            if has_subquery(c):
                if self.is_scalar_conjunct(c):
                    scalars.append(c)
                else:
                    self.unnest(c, env, multi, semis, extra_rels, trees)
        by_inst = {next(iter(t.instances)): t for t in trees if t.base is not None}
        for sj in list(semis):
            if len(sj["outer"]) == 1:
                t = by_inst.get(next(iter(sj["outer"])))
                if t is not None and sj["rel"].rows <= t.rows and not self.shrinks(t, trees, multi):
                    self.semi_join(t, sj, env)
                    semis.remove(sj)
        for c in scalars:
            plain_out = []
            self.unnest(c, env, plain_out, semis, extra_rels, trees)
            for pc in plain_out:
                multi.append((pc, self.instances_of(pc, env)))
        trees += extra_rels
        multi += self.implied_equalities(multi, env)
        tree = self.join_all(trees, multi, semis, env, sel)
        for alias, inst, node, join in left_joins:
            tree = self.left_join(sel, env, tree, alias, inst, node, join, per_inst.pop(inst, []))
        return tree

    def implied_equalities(self, multi, env) -> list:
        """Equalities between columns of different instances that follow from the others
        (a = b and b = c: a = c), so that join order may use them: Q5 joins customer with
        supplier's nation only through c_nationkey = s_nationkey = n_nationkey. Marked
        implied: used as join keys, never applied as filters (the others imply them)."""
        parent: dict = {}

        def find(k):
            while parent.setdefault(k, k) != k:
                k = parent[k]
            return k

        direct = set()
        for c, insts in multi:
            if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column) \
                    and len(insts) == 2:
                a, b = (c.this.table, c.this.name), (c.expression.table, c.expression.name)
                parent[find(a)] = find(b)
                direct.add(frozenset((a, b)))
        classes: dict = {}
        for k in list(parent):
            classes.setdefault(find(k), []).append(k)
        out = []
        for members in classes.values():
            for i, a in enumerate(members):
                for b in members[i + 1:]:
                    ia, ib = self.lookup(env, a[0]), self.lookup(env, b[0])
                    if ia == ib or frozenset((a, b)) in direct:
                        continue
                    eq = exp.EQ(this=exp.column(a[1], table=a[0]), expression=exp.column(b[1], table=b[0]))
                    eq.meta["implied"] = True
                    out.append((eq, {ia, ib}))
        return out

    # -- OR factoring ------------------------------------------------------------------------
    def factor(self, where, env):
        """Conjuncts common to every branch of an OR pulled out of it (Q19's join key),
        and per instance the OR of each branch's conjuncts on it alone, added as an
        implied filter for that instance's scan (the OR itself stays)."""
        out = []
        for c in where:
            ds = disjuncts(c)
            if len(ds) < 2 or has_subquery(c):
                out.append(c)
                continue
            parts = [conjuncts(d) for d in ds]
            common = set.intersection(*[{p.sql() for p in ps} for ps in parts])
            if common:
                seen = set()
                for p in parts[0]:
                    if p.sql() in common and p.sql() not in seen:
                        seen.add(p.sql())
                        out.append(p)
                parts = [[p for p in ps if p.sql() not in common] for ps in parts]
                if any(not ps for ps in parts):
                    continue  # a branch was the common part alone: the OR holds
                c = or_all(and_all(ps) for ps in parts)
            out.append(c)
            insts = [[self.instances_of(p, env) for p in ps] for ps in parts]
            if all(len(s) == 1 for ss in insts for s in ss) and len({next(iter(s)) for ss in insts for s in ss}) == 1:
                continue  # the OR is on one instance: it is pushed down as it is
            shared = set.intersection(*[{next(iter(s)) for s in ss if len(s) == 1} for ss in insts])
            for inst in sorted(shared):
                branches = [[p for p, s in zip(ps, ss) if s == {inst}] for ps, ss in zip(parts, insts)]
                hull = self.hull(branches)
                out.extend(hull if hull else [or_all(and_all(b) for b in branches)])
        return out

    def hull(self, branches):
        """An implied filter's OR of ranges on one column (Q19's l_quantity in [1, 11] or
        [10, 20] or [20, 30]) as the one range covering them (1 <= l_quantity <= 30): it
        only needs to keep a superset (the OR itself stays), for two tests a row, not six.
        Its two bounds, or None when the branches are anything else."""
        lows, highs, column = [], [], None
        for b in branches:
            lo = hi = None
            for p in b:
                c = self._range_column(p, None)
                if c is None or (column is not None and c != column) or isinstance(p, (exp.EQ, exp.Between)):
                    return None
                column = c
                t, a, v = type(p), p.this, p.expression
                if isinstance(v, exp.Column):
                    t, a, v = self._FLIP.get(t, t), v, a
                val = self._const(v)
                if t in (exp.LT, exp.LTE):
                    hi = (val, p, t is exp.LT) if hi is None or val < hi[0] else hi
                else:
                    lo = (val, p, t is exp.GT) if lo is None or val > lo[0] else lo
            if lo is None or hi is None:
                return None
            lows.append(lo)
            highs.append(hi)
        low = min(lows, key=lambda x: (x[0], not x[2]))
        high = max(highs, key=lambda x: (x[0], not x[2]))
        return [low[1].copy(), high[1].copy()]  # two conjuncts: one range group for order_filters

    # -- which instances a conjunct uses -----------------------------------------------------
    def instances_of(self, node, env) -> set:
        out = set()
        for n in own_nodes(node):
            if isinstance(n, exp.Column) and n.table:
                inst = self.lookup(env, n.table)
                if inst is None:
                    raise error_at(n, f"unknown table or alias {n.table!r}")
                out.add(inst)
        return out

    # -- sources --------------------------------------------------------------------------------
    def needed_columns(self, sel, alias) -> list:
        """Columns of `alias` (a source of `sel`) used anywhere in `sel`, nested subqueries
        included unless they define `alias` themselves."""
        names = []
        for c in sel.find_all(exp.Column):
            if c.table != alias:
                continue
            a, shadowed = c.parent, False
            while a is not None and a is not sel:
                if isinstance(a, exp.Select) and any(al == alias for al, _, _ in sources_of(a)):
                    shadowed = True
                    break
                a = a.parent
            if not shadowed and c.name not in names:
                names.append(c.name)
        return names

    def source(self, sel, env, alias, inst, node, filters) -> Rel:
        if isinstance(node, exp.Subquery):
            inner = node.this
            if not isinstance(inner, exp.Select):
                raise error_at(node, f"unsupported: {inner.key.upper()} in FROM")
            rel, outs = self.select(inner, env[:-1], prefix=inst + ".")
            rel = self.rename_outputs(rel, inst, outs)
            return self.apply_filters(rel, filters, env)
        if not isinstance(node, exp.Table):
            raise error_at(node, f"unsupported: {node.key.upper()} in FROM")
        ctes = self.lookup(env, "__ctes__") or {}
        if node.name in ctes and not node.args.get("db"):
            rel = self.cte(ctes[node.name], env, inst)
            return self.apply_filters(rel, filters, env)
        stats = self.catalog.tables.get(node.name)
        if stats is None:
            raise error_at(node, f"unknown table {node.name!r} (known: {', '.join(sorted(self.catalog.tables))})")
        cols = self.needed_columns(sel, alias) or [next(iter(stats.types))]
        for c in cols:
            if c not in stats.types:
                raise error_at(node, f"table {node.name!r} has no column {c!r}")
        rename = self.instance_count.get(node.name, 0) > 1
        names = {c: (f"{c}@{inst}" if rename else c) for c in cols}
        self.table_of[inst] = node.name
        probe = Rel(None, {(alias, c): names[c] for c in cols}, {}, {inst}, stats.rows, base=inst, table=node.name)
        kinds = {}
        for c in cols:
            k = stats.types[c]
            kinds[names[c]] = {"BIGINT": "int", "DOUBLE": "float", "DATE": "date", "BOOLEAN": "bool"}.get(k, "string")
        probe.kinds = kinds
        # the scan reads bare column names; filters are translated against those
        bare = Rel(None, {(alias, c): c for c in cols}, {c: kinds[names[c]] for c in cols}, {inst}, stats.rows)
        where = None
        filters, sel_f = self.order_filters(filters, stats, alias)
        for f in filters:
            e, k = to_expr(f, bare.resolver())
            if k != "bool":
                raise error_at(f, f"type error: WHERE of {k}")
            where = e if where is None else where & e
        stream = self.q.scan(node.name, cols, where=where)
        if rename:
            stream = stream.project(**{names[c]: col(c) for c in cols})
        probe.stream = stream
        probe.rows = max(1.0, stats.rows * sel_f)
        for c in cols:
            if stats.types[c] == "BIGINT":
                probe.ndv[names[c]] = min(stats.ndv(c), probe.rows)
                if stats.unique(c):
                    probe.unique.add(names[c])
        probe.steps.append(f"scan {node.name}{' as ' + alias if alias != node.name else ''} "
                           f"[{', '.join(cols)}]" + (f" where {where}" if where is not None else "")
                           + f"  ~{probe.rows:,.0f} rows")
        return probe

    def rename_outputs(self, rel: Rel, inst: str, outs) -> Rel:
        """A derived table's outputs as columns of `inst` (their stream names already are
        ``inst.name``)."""
        alias = inst.split("#")[0]
        cols = {(alias, o): c for o, c in outs}
        return Rel(rel.stream, cols, {c: rel.kinds[c] for _, c in outs}, {inst}, rel.rows,
                   {c: rel.ndv[c] for _, c in outs if c in rel.ndv}, {c for _, c in outs if c in rel.unique},
                   steps=rel.steps)

    def cte(self, cte_node, env, inst) -> Rel:
        key = id(cte_node)
        if key not in self.ctes:
            uses = sum(1 for t in cte_node.root().find_all(exp.Table) if t.name == cte_node.alias_or_name)
            rel, outs = self.select(cte_node.this, env[:1] if env else [], prefix=f"{cte_node.alias_or_name}.")
            streams = rel.stream.tee(uses) if uses > 1 else [rel.stream]
            self.ctes[key] = (streams, rel, outs)
            rel.steps.append(f"CTE {cte_node.alias_or_name} read {uses} times")
        streams, proto, outs = self.ctes[key]
        if not streams:
            raise error_at(cte_node, "internal: a CTE read more times than counted")
        stream = streams.pop(0)
        alias = inst.split("#")[0]
        rel = Rel(stream, {}, {}, {inst}, proto.rows, dict(proto.ndv), set(proto.unique), steps=list(proto.steps))
        renames = {}
        for o, c in outs:
            name = f"{o}@{inst}" if inst != alias or alias != cte_node.alias_or_name else c
            renames[name] = c
            rel.cols[(alias, o)] = name
            rel.kinds[name] = proto.kinds[c]
        if any(n != c for n, c in renames.items()):
            rel.stream = stream.project(**{n: col(c) for n, c in renames.items()})
            rel.ndv = {n: proto.ndv[c] for n, c in renames.items() if c in proto.ndv}
            rel.unique = {n for n, c in renames.items() if c in proto.unique}
        return rel

    def apply_filters(self, rel: Rel, filters, env) -> Rel:
        for f in filters:
            e, k = to_expr(f, rel.resolver())
            if k != "bool":
                raise error_at(f, f"type error: WHERE of {k}")
            rel.stream = rel.stream.filter(e)
            rel.rows = max(1.0, rel.rows * self.selectivity(f))
            rel.steps.append(f"filter {e}  ~{rel.rows:,.0f} rows")
        return rel

    def order_filters(self, filters, stats, alias) -> tuple[list, float]:
        """A scan's conjuncts, most selective first (the fused scan tests them in this order
        and stops at the first false), and their estimated selectivity. Range conditions on
        one column are one group (``a >= x and a < y``), estimated from the column's
        min/max in the Parquet statistics, values taken as uniform; the rest by
        ``selectivity``. Q6: the one-year ship-date range (14 % of rows) is tested before
        the discount and quantity ranges."""
        groups: dict = {}
        for f in filters:
            column = self._range_column(f, alias)
            groups.setdefault(column if column else id(f), []).append(f)
        scored = []
        for n, (key, fs) in enumerate(groups.items()):
            sel = self._range_selectivity(key, fs, stats) if isinstance(key, str) else None
            if sel is None and len(fs) == 1:
                sel = self._string_selectivity(fs[0], stats)
            if sel is None:
                sel = math.prod(self.selectivity(f) for f in fs)
            scored.append((sel, n, fs))
        scored.sort(key=lambda x: (x[0], x[1]))
        return [f for _, _, fs in scored for f in fs], math.prod(x[0] for x in scored)

    _FLIP = {exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE}

    @staticmethod
    def _const(node):
        if isinstance(node, exp.Paren):
            return Planner._const(node.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            return float(node.this)
        if isinstance(node, exp.Neg):
            v = Planner._const(node.this)
            return None if v is None else -v
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
            try:
                from operators.expr import date_days

                return float(date_days(node.this.this))
            except ValueError:
                return None
        return None

    def _range_column(self, f, alias):
        """The column `f` bounds (``col op constant``, ``constant op col``, ``col BETWEEN
        constants``), or None."""
        if isinstance(f, exp.Between) and not f.args.get("negate") and isinstance(f.this, exp.Column):
            if self._const(f.args["low"]) is not None and self._const(f.args["high"]) is not None:
                return f.this.name
        if type(f) in self._FLIP or isinstance(f, exp.EQ):
            a, b = f.this, f.expression
            if isinstance(a, exp.Column) and self._const(b) is not None:
                return a.name
            if isinstance(b, exp.Column) and self._const(a) is not None:
                return b.name
        return None

    @staticmethod
    def _string_selectivity(f, stats):
        """The exact share of rows `f` keeps when it tests one string column of a small
        table against constants (``catalog.TableStats.code_counts``), else None."""
        import pyarrow as pa
        import pyarrow.compute as pc

        negate = bool(f.args.get("negate"))
        node = f
        if isinstance(node, exp.Not):
            negate, node = not negate, node.this
            negate ^= bool(node.args.get("negate"))
        a = node.this if isinstance(node, (exp.Like, exp.EQ, exp.NEQ, exp.In)) else None
        if not isinstance(a, exp.Column):
            return None
        counts = stats.code_counts(a.name)
        if counts is None or not stats.rows:
            return None
        dic, n = counts
        if isinstance(node, exp.Like) and isinstance(node.expression, exp.Literal) and node.expression.is_string:
            mask = pc.match_like(dic, node.expression.this)
        elif isinstance(node, (exp.EQ, exp.NEQ)) and isinstance(node.expression, exp.Literal) \
                and node.expression.is_string:
            mask = pc.equal(dic, pa.scalar(node.expression.this))
            negate ^= isinstance(node, exp.NEQ)
        elif isinstance(node, exp.In) and not node.args.get("query") and all(
                isinstance(v, exp.Literal) and v.is_string for v in node.expressions):
            mask = pc.is_in(dic, value_set=pa.array([v.this for v in node.expressions], pa.string()))
        else:
            return None
        keep = float(n[mask.to_numpy(zero_copy_only=False)].sum()) / stats.rows
        return max(0.0, min(1.0, 1.0 - keep if negate else keep))

    def _range_selectivity(self, column, fs, stats):
        mm = stats.minmax(column)
        if mm is None or mm[1] <= mm[0]:
            return None
        lo, hi = mm
        lower, upper, eq = lo, hi, None
        for f in fs:
            if isinstance(f, exp.Between):
                lower = max(lower, self._const(f.args["low"]))
                upper = min(upper, self._const(f.args["high"]))
                continue
            t, a, b = type(f), f.this, f.expression
            if isinstance(b, exp.Column):  # constant op column: column flipped-op constant
                t, a, b = self._FLIP.get(t, t), b, a
            v = self._const(b)
            if t is exp.EQ:
                eq = v
            elif t in (exp.LT, exp.LTE):
                upper = min(upper, v)
            else:
                lower = max(lower, v)
        if eq is not None:
            inside = lower <= eq <= upper
            return (1.0 / max(1.0, stats.ndv(column))) if inside else 0.0
        return max(0.0, min(1.0, (upper - lower) / (hi - lo)))

    @staticmethod
    def selectivity(node) -> float:
        if isinstance(node, exp.Paren):
            return Planner.selectivity(node.this)
        if isinstance(node, exp.EQ):
            return SEL_EQ
        if isinstance(node, (exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between)):
            return SEL_RANGE
        if isinstance(node, exp.Like):
            return SEL_LIKE if not node.args.get("negate") else 0.9
        if isinstance(node, exp.In):
            return min(SEL_OTHER, SEL_EQ * max(1, len(node.expressions)))
        if isinstance(node, exp.Or):
            return min(1.0, Planner.selectivity(node.this) + Planner.selectivity(node.expression))
        if isinstance(node, exp.And):
            return Planner.selectivity(node.this) * Planner.selectivity(node.expression)
        if isinstance(node, exp.Not):
            return 1 - Planner.selectivity(node.this) if not isinstance(node.this, exp.Like) else 0.9
        return SEL_OTHER if not node.args.get("negate") else 0.9

    # -- subqueries ------------------------------------------------------------------------------
    @staticmethod
    def is_scalar_conjunct(c) -> bool:
        node = c
        while isinstance(node, (exp.Not, exp.Paren)):
            node = node.this
        return not (isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query") is not None))

    def unnest(self, c, env, plain, semis, extra_rels, trees=()) -> None:
        neg = False
        node = c
        while isinstance(node, (exp.Not, exp.Paren)):
            if isinstance(node, exp.Not):
                neg = not neg
            node = node.this
        if node.args.get("negate"):  # x NOT IN (...): In(negate=True)
            neg = not neg
        if isinstance(node, exp.Exists):
            self.unnest_exists(node.this, env, neg, semis, node)
            return
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            self.unnest_in(node, env, neg, semis)
            return
        # a comparison with scalar subqueries
        nested = [n for n in own_nodes(c) if isinstance(n, exp.Exists)
                  or (isinstance(n, exp.In) and n.args.get("query") is not None)]
        subs = [n for n in own_nodes(c) if isinstance(n, exp.Subquery)]
        if nested or not subs:
            raise error_at(nested[0] if nested else c, "unsupported: a subquery inside OR or an expression "
                           "(EXISTS, IN and scalar subqueries compared with a value are, as WHERE conjuncts)")
        c = c.copy()
        subs = [n for n in own_nodes(c) if isinstance(n, exp.Subquery)]
        for sq in subs:
            rel, value_col = self.scalar(sq.this, env, sq, trees)
            extra_rels.append(rel)
            inst = next(iter(rel.instances))
            env[-1][inst] = inst
            rel.cols[(inst, "v")] = value_col
            for (o, i) in rel.corr:  # correlation equalities: join edges
                plain.append(exp.EQ(this=o.copy(), expression=exp.column(i, table=inst)))
                rel.cols[(inst, i)] = i
            sq.replace(exp.column("v", table=inst))
        plain.append(c)

    def split_correlated(self, sub: exp.Select, env):
        """Conjuncts of `sub`'s WHERE that use columns of the enclosing query, and the
        rest. `env` is the enclosing environment."""
        own = {al for al, _, _ in sources_of(sub)}
        corr, local = [], []
        for c in conjuncts(sub.args.get("where").this if sub.args.get("where") else None):
            (corr if self.outer_refs(c, own) else local).append(c)
        return own, corr, local

    @staticmethod
    def outer_refs(node, own) -> set:
        """Aliases `node` reads that neither `own` nor a subquery inside `node` defines."""
        out = set()
        for n in node.find_all(exp.Column):
            if not n.table or n.table in own:
                continue
            a, inner = n.parent, False
            while a is not None and a is not node:
                if isinstance(a, exp.Select) and any(al == n.table for al, _, _ in sources_of(a)):
                    inner = True
                    break
                a = a.parent
            if not inner:
                out.add(n.table)
        return out

    def correlation_pairs(self, corr, own, sub_node):
        """(outer expression, inner expression) per equality correlation; the rest."""
        pairs, rest = [], []
        for c in corr:
            if isinstance(c, exp.EQ):
                a, b = c.this, c.expression
                ta = {n.table for n in a.find_all(exp.Column)}
                tb = {n.table for n in b.find_all(exp.Column)}
                if ta and tb and ta <= own and not (tb & own):
                    pairs.append((b, a))
                    continue
                if ta and tb and tb <= own and not (ta & own):
                    pairs.append((a, b))
                    continue
            rest.append(c)
        return pairs, rest

    def inner_select(self, sub: exp.Select, keep_where, outputs) -> exp.Select:
        """A copy of `sub` with WHERE = `keep_where` and SELECT = `outputs` [(alias, node)]."""
        s = sub.copy()
        s.set("where", exp.Where(this=and_all(k.copy() for k in keep_where)) if keep_where else None)
        # ORDER BY may name the SELECT list's aliases, which the new list does not have
        named = {it.alias: it.this for it in s.expressions if isinstance(it, exp.Alias)}
        for o in (s.args.get("order").expressions if s.args.get("order") else []):
            for c in list(o.find_all(exp.Column)):
                if not c.table and c.name in named:
                    c.replace(named[c.name].copy())
        s.set("expressions", [exp.alias_(n.copy(), a) for a, n in outputs])
        return s

    def unnest_exists(self, sub, env, neg, semis, node) -> None:
        if not isinstance(sub, exp.Select):
            raise error_at(node, "unsupported: EXISTS over anything but a SELECT")
        if sub.args.get("group") or sub.args.get("having") or sub.args.get("limit"):
            raise error_at(node, "unsupported: EXISTS over a grouped or limited subquery")
        own, corr, local = self.split_correlated(sub, env)
        if not corr:
            raise error_at(node, "unsupported: an uncorrelated EXISTS")
        pairs, rest = self.correlation_pairs(corr, own, node)
        if not pairs:
            raise error_at(node, "unsupported: EXISTS without an equality with the outer query")
        outputs = [(f"_k{i}", inner) for i, (_, inner) in enumerate(pairs)]
        inner_cols = []
        for r in rest:
            for n in r.find_all(exp.Column):
                if n.table in own and n.sql() not in [x.sql() for x in inner_cols]:
                    inner_cols.append(n)
        outputs += [(f"_r{i}", n) for i, n in enumerate(inner_cols)]
        s = self.inner_select(sub, local, outputs)
        rel, outs = self.select(s, env, prefix=self.fresh("_x") + ".")
        semis.append(dict(rel=rel, outs=dict(outs), pairs=pairs, residual=rest, inner_cols=inner_cols,
                          kind="anti" if neg else "semi", node=node, own=own,
                          outer=self.outer_instances([o for o, _ in pairs] + rest, own, env)))

    def unnest_in(self, node, env, neg, semis) -> None:
        sub = node.args["query"].this if isinstance(node.args["query"], exp.Subquery) else node.args["query"]
        if not isinstance(sub, exp.Select) or len(sub.expressions) != 1:
            raise error_at(node, "unsupported: IN over a subquery that does not select one column")
        own, corr, local = self.split_correlated(sub, env)
        if corr:
            raise error_at(node, "unsupported: a correlated IN subquery (write EXISTS)")
        inner_expr = sub.expressions[0]
        inner_expr = inner_expr.this if isinstance(inner_expr, exp.Alias) else inner_expr
        s = sub.copy()
        s.set("expressions", [exp.alias_(inner_expr.copy(), "_k0")])
        rel, outs = self.select(s, env, prefix=self.fresh("_x") + ".")
        semis.append(dict(rel=rel, outs=dict(outs), pairs=[(node.this, None)], residual=[], inner_cols=[],
                          kind="anti" if neg else "semi", node=node, own=own,
                          outer=self.outer_instances([node.this], own, env)))

    def outer_instances(self, nodes, own, env) -> set:
        """Instances of the enclosing query that `nodes` read (their own tables' aside)."""
        out = set()
        for n in nodes:
            for c in ([n] if isinstance(n, exp.Column) else n.find_all(exp.Column)):
                if c.table and c.table not in own:
                    inst = self.lookup(env, c.table)
                    if inst is None:
                        raise error_at(c, f"unknown table or alias {c.table!r}")
                    out.add(inst)
        return out

    def scalar(self, sub, env, node, trees=()):
        """A scalar subquery as a relation: one row, or one per correlation key."""
        if not isinstance(sub, exp.Select) or len(sub.expressions) != 1:
            raise error_at(node, "unsupported: a scalar subquery must select one value")
        own, corr, local = self.split_correlated(sub, env)
        pairs, rest = self.correlation_pairs(corr, own, node)
        if rest:
            raise error_at(rest[0], "unsupported: a scalar subquery correlated by anything but equalities")
        value = sub.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        if pairs and not any(isinstance(n, exp.AggFunc) for n in value.walk()):
            raise error_at(node, "unsupported: a correlated scalar subquery without an aggregate")
        if pairs and any(isinstance(n, exp.Count) for n in value.walk()):
            raise error_at(node, "unsupported: COUNT in a correlated scalar subquery")
        one_row = (any(isinstance(n, exp.AggFunc) for n in value.walk()) and not sub.args.get("group")) or (
            sub.args.get("limit") is not None and sub.args["limit"].expression is not None
            and sub.args["limit"].expression.sql() == "1")
        if not pairs and not one_row:
            raise error_at(node, "unsupported: a scalar subquery that may return several rows (aggregate it, or "
                           "LIMIT 1)")
        if pairs and sub.args.get("group"):
            raise error_at(node, "unsupported: a correlated scalar subquery with its own GROUP BY")
        inst = self.fresh("_sq")
        s = self.inner_select(sub, local, [("v", value)] + [(f"k{i}", inner) for i, (_, inner) in enumerate(pairs)])
        if pairs:
            s.set("group", exp.Group(expressions=[inner.copy() for _, inner in pairs]))
        rel, outs = self.select(s, env, prefix=inst + ".", reducers=self.reducers_for(pairs, env, trees))
        outs = dict(outs)
        rel.instances = {inst}
        rel.cols = {}
        rel.corr = [(outer, outs[f"k{i}"]) for i, (outer, _) in enumerate(pairs)]
        if not pairs:
            rel.rows = 1.0
        else:
            if len(pairs) == 1:
                rel.unique.add(outs["k0"])
        rel.steps.append(f"{'correlated ' if pairs else ''}scalar subquery {inst}")
        return rel, outs["v"]

    # -- joins -----------------------------------------------------------------------------------
    def join_all(self, trees, multi, semis, env, sel) -> Rel:
        trees = list(trees)
        pending = list(multi)  # (conjunct, instances)
        semis = list(semis)
        # columns known equal by the joins' keys and the filters applied so far: an
        # equality between two of one class is redundant (Q9's ps_partkey = l_partkey once
        # lineitem joined part on l_partkey and part partsupp on ps_partkey)
        parent: dict = {}

        def find(k):
            while parent.setdefault(k, k) != k:
                k = parent[k]
            return k

        def col_key(n):
            return (n.table, n.name) if isinstance(n, exp.Column) else None

        def same(c) -> bool:
            a, b = col_key(c.this), col_key(c.expression)
            return isinstance(c, exp.EQ) and a is not None and b is not None and find(a) == find(b)

        def unite(a, b):
            a, b = col_key(a), col_key(b)
            if a is not None and b is not None:
                parent[find(a)] = find(b)

        def apply_ready(t: Rel, final=False):
            nonlocal pending, semis
            keep = []
            for c, insts in pending:
                if c.meta.get("implied"):
                    if not (insts <= t.instances):
                        keep.append((c, insts))
                    continue
                if insts <= t.instances and same(c):
                    continue  # implied by the keys and filters applied
                if insts <= t.instances and (insts or final or len(trees) == 1):
                    if isinstance(c, exp.EQ):
                        unite(c.this, c.expression)
                    e, k = to_expr(c, t.resolver())
                    if k != "bool":
                        raise error_at(c, f"type error: WHERE of {k}")
                    t.stream = t.stream.filter(e)
                    t.rows = max(1.0, t.rows * self.selectivity(c))
                    t.steps.append(f"filter {e}  ~{t.rows:,.0f} rows")
                else:
                    keep.append((c, insts))
            pending = keep
            rest = []
            for s in semis:
                if s["outer"] <= t.instances and (final or not self.shrinks(t, trees, pending)):
                    self.semi_join(t, s, env)
                else:
                    rest.append(s)
            semis = rest

        for t in trees:
            apply_ready(t)
        for t in list(trees):
            self.reduce_by(t, trees, pending)
        while len(trees) > 1:
            best = None
            for i, a in enumerate(trees):
                for j, b in enumerate(trees):
                    if j <= i:
                        continue
                    edges = self.edges(a, b, pending)
                    cross = not edges and (a.rows <= 1.0 or b.rows <= 1.0) and self.needs_pair(a, b, pending)
                    if not edges and not cross:
                        continue
                    est = self.join_estimate(a, b, edges)
                    if best is None or est < best[0]:
                        best = (est, i, j, edges)
            if best is None:
                raise error_at(sel, "unsupported: a join without an equality condition between "
                               f"{', '.join(sorted(trees[0].instances))} and {', '.join(sorted(trees[1].instances))}")
            est, i, j, edges = best
            a, b = trees[i], trees[j]
            t = self.join(a, b, edges, est, pending, semis, env, sel, trees)
            for _, (ka, kb) in edges:
                unite(ka, kb)
            pending = [(c, insts) for c, insts in pending if not any(c is e for e, _ in edges)]
            trees = [x for k, x in enumerate(trees) if k not in (i, j)] + [t]
            apply_ready(t)
            self.reduce_by(t, trees, pending)
        t = trees[0]
        apply_ready(t, final=True)
        if pending:
            c = pending[0][0]
            raise error_at(c, "internal: a condition left unapplied")
        if semis:
            raise error_at(semis[0]["node"], "internal: a subquery left unapplied")
        return t

    def reduce_by(self, t: Rel, trees, pending) -> None:
        """Sideways information passing: a tree that kept few values of a join key (Q5's
        nations of ASIA) reduces the large base tables not joined yet that share the key
        through an equality -- implied ones included (customer's c_nationkey) -- with a
        semi-join on a copy of its keys, before they meet other tables (customer 150 k ->
        30 k rows before its join with orders). Only tables of at least REDUCE_MIN_ROWS
        rows, not joining `t` next anyway (the greedy's next pair), once per table and key;
        the largest tree, which probes every join, only by a small key set
        (REDUCE_LARGEST_ROWS) that keeps a smaller share of it than any join it has to
        make: a first filter in its scan, on a small hash table (Q9's 5 % green parts before partsupp's 43 k rows: 249 -> 152 ms at SF
        1), not a second one after a more selective join (Q5's ASIA suppliers, 20 %, after
        the year's orders of ASIA customers, 1 %: 59 -> 47 ms without; nor by those 228 k
        orders themselves, which the join with them repeats: 79 -> 47 ms)."""
        largest = max(trees, key=lambda x: x.rows)
        best, next_pair = None, set()
        for i, x in enumerate(trees):
            for y in trees[i + 1:]:
                e = self.edges(x, y, pending)
                if e and (best is None or self.join_estimate(x, y, e) < best):
                    best, next_pair = self.join_estimate(x, y, e), {id(x), id(y)}
        for b in trees:
            if b is t or b.base is None or b.rows < REDUCE_MIN_ROWS or b.rows <= t.rows:
                continue
            edges = self.edges(t, b, pending)
            if not edges:
                continue
            if next_pair == {id(t), id(b)}:
                continue
            _, (kt, kb) = edges[0]
            if not (isinstance(kt, exp.Column) and isinstance(kb, exp.Column)):
                continue
            nt, nb = self.key_ndv(t, kt), self.key_ndv(b, kb)
            key = (b.base, kb.name)
            if nt > REDUCE_SHARE * nb or key in self._reduced:
                continue
            if b is largest:  # it probes every join: worth it only as its most selective filter
                others = [self.join_estimate(b, x, e) / b.rows for x in trees if x is not b and x is not t
                          for e in [self.edges(b, x, pending)] if e]
                if t.rows > REDUCE_LARGEST_ROWS or not others or nt / nb > min(others):
                    continue  # (no other join: its next one is with t, or a tree holding t)
            self._reduced.add(key)
            name_t = t.cols[(kt.table, kt.name)]
            copy = self.key_copy(t, [name_t])
            t.steps.append(f"teed to reduce {b.base} on {kb.name}")
            self.reduce(b, ([kb.name], copy, [name_t], t.rows), kb.table)
            b.ndv[b.cols[(kb.table, kb.name)]] = nt

    def shrinks(self, t, trees, pending) -> bool:
        """Whether a join still to come is estimated to make `t` smaller: a semi-join
        waits for it (Q21's exists over all of lineitem waits for the nation, supplier
        and order filters), else applies now, before joins that grow `t` (Q18's IN)."""
        for x in trees:
            if x is not t:
                edges = self.edges(t, x, pending)
                if edges and self.join_estimate(t, x, edges) < t.rows:
                    return True
        return False

    def needs_pair(self, a, b, pending) -> bool:
        both = a.instances | b.instances
        return any(insts <= both and insts & a.instances and insts & b.instances for _, insts in pending)

    def edges(self, a: Rel, b: Rel, pending):
        out = []
        for c, insts in pending:
            if not isinstance(c, exp.EQ):
                continue
            l, r = c.this, c.expression
            try:
                li = self.instances_in(l, a, b)
                ri = self.instances_in(r, a, b)
            except KeyError:
                continue
            if li == "a" and ri == "b":
                out.append((c, (l, r)))
            elif li == "b" and ri == "a":
                out.append((c, (r, l)))
        # one key per column: an implied equality repeats a direct one's key (the
        # columns of one side are equal already)
        out.sort(key=lambda e: bool(e[0].meta.get("implied")))
        seen, kept = set(), []
        for c, (ka, kb) in out:
            if ka.sql() in seen or kb.sql() in seen:
                continue
            seen.update((ka.sql(), kb.sql()))
            kept.append((c, (ka, kb)))
        return kept

    @staticmethod
    def instances_in(node, a, b):
        cols = list(node.find_all(exp.Column)) if not isinstance(node, exp.Column) else [node]
        if not cols:
            raise KeyError
        sides = set()
        for n in cols:
            key = (n.table, n.name)
            if key in a.cols:
                sides.add("a")
            elif key in b.cols:
                sides.add("b")
            else:
                raise KeyError
        if len(sides) != 1:
            raise KeyError
        return sides.pop()

    def key_ndv(self, rel: Rel, node) -> float:
        if isinstance(node, exp.Column):
            name = rel.cols.get((node.table, node.name))
            if name in rel.ndv:
                return max(1.0, min(rel.ndv[name], rel.rows))
        return max(1.0, rel.rows)

    def join_estimate(self, a: Rel, b: Rel, edges) -> float:
        if not edges:
            return a.rows * b.rows
        # distinct values of the key (several columns: the product of theirs, at most the
        # rows), the larger side's: |a join b| = |a| |b| / max(ndv_a(K), ndv_b(K))
        da = min(a.rows, math.prod(self.key_ndv(a, ka) for _, (ka, _) in edges))
        db = min(b.rows, math.prod(self.key_ndv(b, kb) for _, (_, kb) in edges))
        return max(1.0, a.rows * b.rows / max(1.0, da, db))

    def join(self, a: Rel, b: Rel, edges, est, pending, semis, env, sel, trees) -> Rel:
        # the smaller side builds the hash table
        probe, build = (a, b) if a.rows >= b.rows else (b, a)
        if edges:
            pairs = []
            for _, (ka, kb) in edges:
                pk, bk = (ka, kb) if probe is a else (kb, ka)
                pe, _ = to_expr(pk, probe.resolver())
                be, _ = to_expr(bk, build.resolver())
                pairs.append((pe, be))
        live = self.live(sel, env, pending, semis, trees, exclude_edges=[c for c, _ in edges], probe=probe, build=build)
        keep = [c for c in build.kinds if c in live]
        strategy = "shuffle" if build.rows > SHUFFLE_ROWS else "broadcast"
        if not edges:
            stream = probe.stream.cross(build.stream, columns=keep)
            kind = "cross"
        elif not keep and build.base is not None and len(pairs) == 1 and \
                isinstance(pairs[0][1], Col) and pairs[0][1].name in build.unique:
            stream = probe.stream.join(build.stream, pairs, kind="semi", strategy=strategy)
            kind = "semi"
        else:
            stream = probe.stream.join(build.stream, pairs, kind="inner", columns=keep, strategy=strategy)
            kind = "inner"
        cols = {k: v for k, v in probe.cols.items()}
        cols.update({k: v for k, v in build.cols.items() if v in keep})
        kinds = dict(probe.kinds)
        kinds.update({c: build.kinds[c] for c in keep})
        out = Rel(stream, cols, kinds, probe.instances | build.instances, est if kind != "semi" else
                  min(probe.rows, est), {**build.ndv, **probe.ndv}, set(probe.unique) if kind in ("semi", "cross")
                  else set(), steps=probe.steps + build.steps)
        out.nulled = {**probe.nulled, **build.nulled}
        out.links = probe.links + build.links + [((ka.table, ka.name), (kb.table, kb.name)) for _, (ka, kb) in edges
                                                 if isinstance(ka, exp.Column) and isinstance(kb, exp.Column)]
        out.steps.append(f"{kind} join {'+'.join(sorted(probe.instances))} (probe) with "
                         f"{'+'.join(sorted(build.instances))} (build{', ' + strategy if kind != 'cross' else ''})"
                         + (f" on {', '.join(f'{p}={b}' for p, b in pairs)}" if edges else "")
                         + f"  ~{out.rows:,.0f} rows")
        if kind == "inner":
            # a key of the build side unique there keeps the probe side's unique columns unique
            if len(pairs) == 1 and isinstance(pairs[0][1], Col) and pairs[0][1].name in build.unique:
                out.unique = set(probe.unique)
        return out

    def live(self, sel, env, pending, semis, trees, exclude_edges, probe, build) -> set:
        """Stream columns of `build` still needed after joining it to `probe`."""
        need = set()
        nodes = [c for c, _ in pending if not any(c is e for e in exclude_edges)]
        for s in semis:
            nodes += [o for o, _ in s["pairs"]] + list(s["residual"])
        for n in nodes:
            for c in n.find_all(exp.Column) if not isinstance(n, exp.Column) else [n]:
                name = build.cols.get((c.table, c.name))
                if name is not None:
                    need.add(name)
        # everything after FROM/WHERE, and what enclosing queries read of this one's tables
        for key, name in build.cols.items():
            if name in need:
                continue
            alias, column = key
            for c in sel.find_all(exp.Column):
                if c.table == alias and c.name == column and not self._in_where_or_from(c, sel):
                    need.add(name)
                    break
        for inst, flag in build.nulled.items():
            need.add(flag)
        return need

    @staticmethod
    def _in_where_or_from(c, sel) -> bool:
        """Whether `c` sits in `sel`'s own WHERE or JOIN ... ON (used by then) rather than
        in its SELECT, GROUP BY, HAVING, ORDER BY or a subquery of those."""
        a = c
        while a is not None and a.parent is not sel:
            if isinstance(a, (exp.Select,)) and a is not sel:
                return False  # inside a subquery: a correlation, needed after the join
            a = a.parent
        if a is None:
            return False
        return a.arg_key in ("where", "joins", "from_", "from")

    def key_copy(self, t: Rel, names: list) -> Stream:
        """A copy of `t`'s columns `names` (its stream teed: `t` keeps the other copy)."""
        t.stream, copy = t.stream.tee(2)
        return copy.project(*names)

    def reducers_for(self, pairs, env, trees) -> dict:
        """Semi-join reducers for a correlated subquery (magic sets: Bancilhon et al. 1986;
        Seshadri et al., SIGMOD 1996): where the correlation's outer columns belong to one
        table of this query that its filters or semi-joins reduced, the subquery's table
        keeps only rows whose correlated columns appear there, before it aggregates --
        Q17's per-part average over the 0.1 % of parts of one brand and container instead
        of all of lineitem, Q2's minimum cost, Q20's per-(part, supplier) sum."""
        by_tree: dict = {}
        for outer, inner in pairs:
            if not (isinstance(outer, exp.Column) and isinstance(inner, exp.Column)):
                continue
            inst = self.lookup(env, outer.table)
            t = next((x for x in trees if x.base == inst), None)
            stats = self.catalog.tables.get(getattr(t, "table", None)) if t is not None else None
            if t is None or stats is None or t.rows > REDUCE_SHARE * stats.rows:
                continue
            by_tree.setdefault(id(t), (t, []))[1].append((inner, t.cols[(outer.table, outer.name)]))
        out: dict = {}
        for t, ks in by_tree.values():
            inner_alias = {i.table for i, _ in ks}
            if len(inner_alias) != 1:
                continue
            copy = self.key_copy(t, [k for _, k in ks])
            out.setdefault(inner_alias.pop(), []).append(([i.name for i, _ in ks], copy, [k for _, k in ks], t.rows))
            t.steps.append(f"teed to reduce a correlated subquery on {', '.join(k for _, k in ks)}")
        return out

    def reduce(self, t: Rel, red, alias: str) -> None:
        """`t` semi-joined with a reducer's key copy (``reducers_for``)."""
        inner_cols, stream, keys, rows = red
        pairs = [(col(t.cols[(alias, name)]), col(k)) for name, k in zip(inner_cols, keys)]
        strategy = "shuffle" if rows > SHUFFLE_ROWS else "broadcast"
        t.stream = t.stream.join(stream, pairs, kind="semi", strategy=strategy)
        t.rows = max(1.0, min(t.rows, rows * max(1.0, t.rows / max(1.0, self.key_ndv_name(t, pairs[0][0].name)))))
        t.steps.append(f"semi join (reducer) on {', '.join(f'{p}={b}' for p, b in pairs)}  ~{t.rows:,.0f} rows")

    def key_ndv_name(self, t: Rel, name: str) -> float:
        return max(1.0, min(t.ndv.get(name, t.rows), t.rows))

    def semi_join(self, t: Rel, s, env) -> None:
        rel = s["rel"]
        outs = s["outs"]
        pairs = []
        for i, (outer, _) in enumerate(s["pairs"]):
            pe, _ = to_expr(outer, t.resolver())
            pairs.append((pe, col(outs[f"_k{i}"])))
        if rel.rows > REDUCE_RATIO * t.rows and all(isinstance(p, Col) for p, _ in pairs):
            # the subquery's side is much larger: it keeps only the keys this side has first
            # (a semi-join reducer, Bernstein and Chiu 1981: Q4's late line items of the
            # quarter's orders, Q21's of the Saudi suppliers' failed orders)
            copy = self.key_copy(t, [p.name for p, _ in pairs])
            strategy = "shuffle" if t.rows > SHUFFLE_ROWS else "broadcast"
            rel.stream = rel.stream.join(copy, [(b, p) for p, b in pairs], kind="semi", strategy=strategy)
            rel.rows = max(1.0, min(rel.rows, t.rows * 4))
            rel.steps.append(f"semi join (reducer) with the keys of {'+'.join(sorted(t.instances))}")
        residual = None
        if s["residual"]:
            inner_map = {n.sql(): outs[f"_r{i}"] for i, n in enumerate(s["inner_cols"])}

            def extra(node):
                if isinstance(node, exp.Column) and node.sql() in inner_map and node.table in s["own"]:
                    name = inner_map[node.sql()]
                    return col(name), rel.kinds[name]
                return None

            for r in s["residual"]:
                e, k = to_expr(r, t.resolver(extra))
                residual = e if residual is None else residual & e
        strategy = "shuffle" if rel.rows > SHUFFLE_ROWS else "broadcast"
        kw = {"residual": residual} if residual is not None else {}
        t.stream = t.stream.join(rel.stream, pairs, kind=s["kind"], strategy=strategy, **kw)
        t.rows = max(1.0, t.rows * 0.5)
        t.steps += rel.steps
        t.steps.append(f"{s['kind']} join with subquery on {', '.join(f'{p}={b}' for p, b in pairs)}"
                       + (f" where {residual}" if residual is not None else "") + f"  ~{t.rows:,.0f} rows")

    def left_join(self, sel, env, tree, alias, inst, node, join, filters) -> Rel:
        on = conjuncts(join.args.get("on"))
        right_only = [c for c in on if self.instances_of(c, env) == {inst}]
        both = [c for c in on if c not in right_only]
        right = self.source(sel, env, alias, inst, node, filters + right_only)
        pairs, residual = [], []
        for c in both:
            if isinstance(c, exp.EQ):
                try:
                    li = self.instances_in(c.this, tree, right)
                    ri = self.instances_in(c.expression, tree, right)
                except KeyError:
                    li = ri = None
                if {li, ri} == {"a", "b"}:
                    pk, bk = (c.this, c.expression) if li == "a" else (c.expression, c.this)
                    pairs.append((to_expr(pk, tree.resolver())[0], to_expr(bk, right.resolver())[0]))
                    continue
            residual.append(c)
        if not pairs:
            raise error_at(join, "unsupported: LEFT JOIN without an equality in ON")
        res = None
        for r in residual:
            e, _ = to_expr(r, Rel(None, {**tree.cols, **right.cols}, {**tree.kinds, **right.kinds}, set(), 0).resolver())
            res = e if res is None else res & e
        cnt = self.count_ahead(sel, tree, alias, pairs, res)
        if cnt is not None:  # eager aggregation (below)
            right.stream = right.stream.aggregate([pairs[0][1].name], [(cnt, "count", None)])
            right.steps.append(f"aggregate by [{pairs[0][1].name}]: {cnt}=count (ahead of the left join)")
            stream = tree.stream.join(right.stream, pairs, kind="left", columns=[cnt],
                                      strategy="shuffle" if right.rows > SHUFFLE_ROWS else "broadcast")
            out = Rel(stream, dict(tree.cols), {**tree.kinds, cnt: "int"}, tree.instances | {inst}, tree.rows,
                      dict(tree.ndv), set(tree.unique), steps=tree.steps + right.steps)
            out.nulled, out.counted = dict(tree.nulled), {**tree.counted, inst: cnt}
            out.steps.append(f"left join {'+'.join(sorted(tree.instances))} (kept) with the counts of {inst} "
                             f"on {pairs[0][0]}={pairs[0][1]}  ~{out.rows:,.0f} rows")
            return out
        flag = self.fresh("_matched")
        keep = []
        for (al, column), c in right.cols.items():
            if any(n.table == al and n.name == column and not self._in_where_or_from(n, sel)
                   for n in sel.find_all(exp.Column)):
                keep.append(c)
        for c in keep:
            if right.kinds[c] == "string":
                raise error_at(join, f"unsupported: reading the text column {c!r} of a LEFT JOIN's right side")
        strategy = "shuffle" if right.rows > SHUFFLE_ROWS else "broadcast"
        kw = {"residual": res} if res is not None else {}
        stream = tree.stream.join(right.stream, pairs, kind="left", columns=keep, matched=flag,
                                  strategy=strategy, **kw)
        kinds = {**tree.kinds, **{c: right.kinds[c] for c in keep}, flag: "bool"}
        out = Rel(stream, {**tree.cols, **{k: v for k, v in right.cols.items() if v in keep}}, kinds,
                  tree.instances | {inst},
                  max(tree.rows, right.rows),
                  {}, set(), steps=tree.steps + right.steps)
        out.nulled = {**tree.nulled, inst: flag}
        out.steps.append(f"left join {'+'.join(sorted(tree.instances))} (kept) with {inst} "
                         f"on {', '.join(f'{p}={b}' for p, b in pairs)}" + (f" and {res}" if res is not None else "")
                         + f"  ~{out.rows:,.0f} rows")
        return out

    def count_ahead(self, sel, tree: Rel, alias: str, pairs, residual):
        """Eager aggregation (Yan and Larson, "Eager Aggregation and Lazy Aggregation",
        VLDB 1995) for the shape of Q13: the query groups by the LEFT JOIN's left key,
        unique in its table, and reads the right side only in COUNT(column): the right
        side is counted per join key first and the left join brings one count per row,
        0 where nothing matched -- a join with 100 k counts instead of 1.35 M orders.
        The count column's name, or None when the shape is another."""
        p, b = pairs[0]
        group = sel.args.get("group")
        if residual is not None or len(pairs) != 1 or not isinstance(p, Col) or not isinstance(b, Col) \
                or p.name not in tree.unique or group is None or len(group.expressions) != 1:
            return None
        g = group.expressions[0]
        if not (isinstance(g, exp.Column) and tree.cols.get((g.table, g.name)) == p.name):
            return None
        parts = list(sel.expressions) + ([sel.args["having"].this] if sel.args.get("having") else []) + \
            (list(sel.args["order"].expressions) if sel.args.get("order") else [])
        for part in parts:
            for n in own_nodes(part):
                if isinstance(n, exp.Column) and n.table == alias:
                    a = n.parent
                    while a is not None and not isinstance(a, exp.AggFunc):
                        a = a.parent
                    if not isinstance(a, exp.Count) or a.this is not n:
                        return None
        return self.fresh("_cnt")

    # -- after FROM/WHERE: aggregation, projection, order, limit ------------------------------------
    def finish_select(self, sel, env, rel: Rel, top, prefix) -> tuple[Rel, list]:
        items = list(sel.expressions)
        group = sel.args.get("group")
        having = sel.args.get("having")
        order = sel.args.get("order")
        distinct = sel.args.get("distinct")
        aggs_nodes = []
        for part in items + ([having.this] if having else []) + (list(order.expressions) if order else []):
            for n in own_nodes(part):
                if isinstance(n, exp.AggFunc):
                    if type(n) not in AGGS:
                        raise error_at(n, f"unsupported: the aggregate {n.key.upper()}")
                    if n.sql() not in [x.sql() for x in aggs_nodes]:
                        aggs_nodes.append(n)
        stream = rel.stream
        out_kinds = {}
        names_of: dict = {}  # sql text -> (stream column, kind), after aggregation
        if group is not None or aggs_nodes:
            keys = []
            for g in group.expressions if group is not None else []:
                if isinstance(g, exp.Literal):
                    raise error_at(g, "unsupported: GROUP BY a position")
                e, k = to_expr(g, rel.resolver())
                name = e.name if isinstance(e, Col) else self.fresh("_g")
                keys.append((name, e, k, g))
                names_of[g.sql()] = (name, k)
            dependent = self.dependent_keys(keys, rel, env)
            aggs = []
            distinct_of = None
            for a in aggs_nodes:
                name = self.fresh("_a")
                func = AGGS[type(a)]
                arg = a.this
                if isinstance(arg, exp.Distinct):
                    if func != "count" or len(arg.expressions) != 1:
                        raise error_at(a, "unsupported: DISTINCT in an aggregate other than COUNT(DISTINCT x)")
                    if distinct_of is not None and distinct_of.sql() != arg.expressions[0].sql():
                        raise error_at(a, "unsupported: COUNT(DISTINCT) of two different expressions")
                    distinct_of = arg.expressions[0]
                    aggs.append((name, "count_distinct", None, "int", a))
                elif isinstance(arg, exp.Star) or arg is None:
                    aggs.append((name, "count", None, "int", a))
                else:
                    counted = rel.counted.get(self.lookup(env, arg.table)) if isinstance(arg, exp.Column) else None
                    if counted is None:
                        e, k = to_expr(arg, rel.resolver())
                    if func == "count" and counted is not None:
                        aggs.append((name, "sum", col(counted), "int", a))
                        names_of[a.sql()] = (name, "int")
                        continue
                    if func == "count":
                        flag = self.nulled_flag(arg, rel)
                        if flag is not None:
                            aggs.append((name, "sum", case([(col(flag), 1)], 0), "int", a))
                        else:
                            aggs.append((name, "count", None, "int", a))
                        names_of[a.sql()] = (name, "int")
                        continue
                    if func in ("sum", "avg") and k not in ("int", "float"):
                        raise error_at(a, f"type error: {func.upper()} of {k}")
                    kind = "float" if func == "avg" else k
                    aggs.append((name, func, e, kind, a))
                names_of[a.sql()] = (name, aggs[-1][3])
            key_spec = [(n, e) for n, e, _, _ in keys if n not in dependent]
            if distinct_of is None:
                aggs += [(n, "min", e, k, None) for n, e, k, _ in keys if n in dependent]
            if distinct_of is not None:
                if any(f != "count_distinct" for _, f, _, _, _ in aggs):
                    raise error_at(distinct_of, "unsupported: COUNT(DISTINCT) beside other aggregates")
                de, dk = to_expr(distinct_of, rel.resolver())
                dname = self.fresh("_d")
                stream = stream.aggregate(key_spec + [(dname, de)], [])
                stream = stream.aggregate([n for n, _ in key_spec],
                                          [(n, "count", None) for n, _, _, _, _ in aggs])
            else:
                stream = stream.aggregate(key_spec, [(n, f, e) for n, f, e, _, _ in aggs])
            for n, _, k, _ in keys:
                out_kinds[n] = k
            for n, _, _, k, _ in aggs:
                out_kinds[n] = k
            rows = 1.0
            for n, e, _, _ in keys:
                rows *= rel.ndv.get(n, max(1.0, rel.rows / 10))
            rows = max(1.0, min(rel.rows, rows)) if keys else 1.0
            rel.steps.append(f"aggregate by [{', '.join(n for n, _ in key_spec)}]: "
                             f"{', '.join(f'{n}={f}' for n, f, *_ in aggs)}  ~{rows:,.0f} rows")
            post_cols = {}
            ndv = {n: rel.ndv[n] for n, *_ in keys if n in rel.ndv}
            unique = {keys[0][0]} if len(keys) == 1 else set()
            # grouped columns stay readable by their table's name
            for g_name, e, k, g in keys:
                if isinstance(g, exp.Column):
                    post_cols[(g.table, g.name)] = g_name
            rel = Rel(stream, post_cols, dict(out_kinds), rel.instances, rows, ndv, unique, steps=rel.steps)

            def after(node):
                got = names_of.get(node.sql()) if not isinstance(node, exp.Literal) else None
                if got is not None:
                    return col(got[0]), got[1]
                if isinstance(node, exp.Column) and (node.table, node.name) not in rel.cols:
                    raise error_at(node, f"column {node.sql()} must be grouped or aggregated")
                return None

            resolve = rel.resolver(after)
        else:
            resolve = rel.resolver()
        if having is not None:
            hs = conjuncts(having.this)
            for h in hs:
                if has_subquery(h):
                    h = h.copy()
                    for sq in [n for n in own_nodes(h) if isinstance(n, exp.Subquery)]:
                        srel, vcol = self.scalar(sq.this, env, sq)
                        if srel.corr:
                            raise error_at(sq, "unsupported: a correlated subquery in HAVING")
                        rel.stream = rel.stream.cross(srel.stream, columns=[vcol])
                        rel.kinds[vcol] = srel.kinds[vcol]
                        rel.steps += srel.steps
                        rel.steps.append(f"cross join with {next(iter(srel.instances))} (one row)")
                        inst = next(iter(srel.instances))
                        rel.cols[(inst, "v")] = vcol
                        sq.replace(exp.column("v", table=inst))
                    resolve = rel.resolver(after) if (group is not None or aggs_nodes) else rel.resolver()
                e, k = to_expr(h, resolve)
                if k != "bool":
                    raise error_at(h, f"type error: HAVING of {k}")
                rel.stream = rel.stream.filter(e)
                rel.rows = max(1.0, rel.rows * SEL_OTHER)
                rel.steps.append(f"having {e}")
        # the SELECT list
        outs, exprs = [], {}
        kinds = {}
        for i, it in enumerate(items):
            node = it.this if isinstance(it, exp.Alias) else it
            oname = it.alias_or_name
            if isinstance(node, exp.Star):
                raise error_at(it, "unsupported: * that could not be expanded")
            e, k = to_expr(node, resolve)
            sname = f"{prefix}{oname}" if prefix else self.fresh("_o")
            exprs[sname] = e
            kinds[sname] = k
            outs.append((oname, sname))
        sort_keys = []
        if order is not None:
            by_name = {o: s for o, s in outs}
            for o in order.expressions:
                node = o.this
                desc = bool(o.args.get("desc"))
                if isinstance(node, exp.Column) and not node.table and node.name in by_name:
                    sname = by_name[node.name]
                elif isinstance(node, exp.Literal) and not node.is_string:
                    pos = int(node.this)
                    if not 1 <= pos <= len(outs):
                        raise error_at(node, f"ORDER BY position {pos} is not in the SELECT list")
                    sname = outs[pos - 1][1]
                else:
                    match = [s for (o2, s), it in zip(outs, items)
                             if (it.this if isinstance(it, exp.Alias) else it).sql() == node.sql()]
                    if match:
                        sname = match[0]
                    else:
                        e, k = to_expr(node, resolve)
                        sname = self.fresh("_ord")
                        exprs[sname] = e
                        kinds[sname] = k
                sort_keys.append((sname, "desc" if desc else "asc"))
        stream = rel.stream.project(**exprs)
        if distinct:
            stream = stream.aggregate(list(exprs), [])
        limit = sel.args.get("limit")
        n = None
        if limit is not None:
            lim = limit.expression if limit.expression is not None else limit.this
            if not (isinstance(lim, exp.Literal) and not lim.is_string and lim.this.isdigit()):
                raise error_at(limit, "unsupported: LIMIT of anything but a whole number")
            n = int(lim.this)
        if sel.args.get("offset") is not None:
            raise error_at(sel.args["offset"], "unsupported: OFFSET")
        if sort_keys:
            stream = stream.sort(sort_keys, limit=n)
            rel.steps.append(f"sort by {', '.join(f'{s} {d}' for s, d in sort_keys)}"
                             + (f" limit {n}" if n is not None else ""))
        elif n is not None:
            stream = stream.limit(n)
            rel.steps.append(f"limit {n}")
        out = Rel(stream, {}, kinds, rel.instances, rel.rows if n is None else min(rel.rows, n),
                  {s: rel.ndv[e.name] for s, e in exprs.items() if isinstance(e, Col) and e.name in rel.ndv},
                  {s for s, e in exprs.items() if isinstance(e, Col) and e.name in rel.unique}, steps=rel.steps)
        return out, outs

    def dependent_keys(self, keys, rel: Rel, env) -> set:
        """Grouping columns another grouping column determines (a functional dependency):
        the other columns of a table whose unique key is grouped, and of tables joined to
        it on their own unique key (Q10 groups by c_custkey and six columns of customer and
        nation: it hashes one key, the six are carried as MIN). Their stream names."""
        by_name = {c: key for key, c in rel.cols.items()}
        grouped = {n for n, *_ in keys}
        det: set = set()  # aliases whose rows the grouping determines
        for n in grouped:
            key = by_name.get(n)
            if key is None:
                continue
            inst = self.lookup(env, key[0])
            stats = self.catalog.tables.get(self.table_of.get(inst, ""))
            if stats is not None and key[1] in stats.types and stats.unique(key[1]):
                det.add(key[0])
        grew = True
        while grew and det:
            grew = False
            for a, b in rel.links:
                for x, y in ((a, b), (b, a)):
                    stats = self.catalog.tables.get(self.table_of.get(self.lookup(env, y[0]), ""))
                    if x[0] in det and y[0] not in det and stats is not None and y[1] in stats.types \
                            and stats.unique(y[1]):
                        det.add(y[0])
                        grew = True
        out = set()
        for n in grouped:
            key = by_name.get(n)
            if key is not None and key[0] in det and not (self.catalog.tables.get(
                    self.table_of.get(self.lookup(env, key[0]), "")) and
                    self.catalog.tables[self.table_of[self.lookup(env, key[0])]].unique(key[1])):
                out.add(n)
        if len(out) == len(grouped):
            return set()
        return out

    @staticmethod
    def nulled_flag(arg, rel: Rel):
        """The 'matched' flag when `arg` is a column of a LEFT JOIN's right side."""
        if not isinstance(arg, exp.Column):
            if any(rel.cols.get((c.table, c.name)) for c in arg.find_all(exp.Column)) and rel.nulled:
                raise error_at(arg, "unsupported: COUNT of an expression over a LEFT JOIN")
            return None
        for inst, flag in rel.nulled.items():
            if arg.table == inst.split("#")[0]:
                return flag
        return None


__all__ = ["Planner", "Rel", "SHUFFLE_ROWS"]
