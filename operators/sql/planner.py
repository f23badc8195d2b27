"""SQL to plans: a qualified, simplified sqlglot tree (``frontend.py``) to the plan
builder's operators (``operators/builder.py``). One SELECT (``Planner.select``):

1. **Sources** (here): each FROM item gets an *instance* (a unique name: the same table
   may be read twice, as ``nation n1, nation n2``, or inside and outside a subquery). A
   base table is a scan of the columns the query uses, with the conjuncts of WHERE that
   use only it pushed into the scan, most selective first (``estimates.py``); a derived
   table or a CTE is planned recursively (a CTE read twice is planned once and teed, so
   both readers see the same values: Q15 compares a sum with the max of the same sums).
2. **Rewrites** (``rewrite.py``): of the WHERE -- common conjuncts out of ORs, per-table
   filters an OR implies, equalities implied by others -- and, before anything is
   planned, of whole SELECTs: an IN subquery's aggregate reused (Q18), eager aggregation
   through a key join (Q10).
3. **Subqueries unnested** into semi-/anti-joins and joined relations (``unnest.py``).
4. **Joins** in a greedy order from statistics (``joins.py``), with semi-join reducers
   (``reducers.py``); LEFT JOINs after the inner ones.
5. **The SELECT's tail**: aggregation, HAVING, projection, ORDER BY, LIMIT (``tail.py``).

Each step is a mixin of :class:`Planner`, one module each, sharing the Planner's state:
the catalog, the builder's Query, fresh names, the base instances' tables. The builder
then decomposes each operator with ``parallel=k`` and fuses row-wise chains, exactly as
for the hand-written plans.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from operators.builder import Query
from operators.expr import col
from operators.sql.catalog import Catalog
from operators.sql.errors import error_at
from operators.sql.estimates import Estimates
from operators.sql.exprs import to_expr
from operators.sql.joins import JoinOrder
from operators.sql.reducers import Reducers
from operators.sql.rel import Rel, conjuncts, has_subquery, own_nodes, sources_of
from operators.sql.rewrite import Rewrites
from operators.sql.tail import SelectTail
from operators.sql.unnest import Unnesting


class Planner(Estimates, Rewrites, Unnesting, JoinOrder, Reducers, SelectTail):
    """Plans one statement (module doc). ``plan()`` returns the builder's Plan; the steps
    are its mixins, one module each."""

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

    def plan(self, stmt: exp.Expression):
        if not isinstance(stmt, exp.Select):
            raise error_at(stmt, f"unsupported: {stmt.key.upper()} statements (SELECT is)")
        for sel in list(stmt.find_all(exp.Select)):
            self.reuse_in_aggregate(sel)
            self.eager_group_by(sel)
        for t in stmt.find_all(exp.Table):
            self.instance_count[t.name] = self.instance_count.get(t.name, 0) + 1
        rel, outs = self.select(stmt, env=[], top=True)
        names = self.output_names or [o for o, _ in outs]
        if len(names) != len(outs):
            names = [o for o, _ in outs]
        return self.q.collect(rel.stream, [(n, c) for n, (_, c) in zip(names, outs)], nan_is_null=True), rel

    @staticmethod
    def lookup(env, alias):
        for frame in reversed(env):
            if alias in frame:
                return frame[alias]
        return None

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

    def instances_of(self, node, env) -> set:
        out = set()
        for n in own_nodes(node):
            if isinstance(n, exp.Column) and n.table:
                inst = self.lookup(env, n.table)
                if inst is None:
                    raise error_at(n, f"unknown table or alias {n.table!r}")
                out.add(inst)
        return out

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
            rel.filters_others = bool(node.meta.get("filters_others"))
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

    def apply_filters(self, rel: Rel, filters, env=None) -> Rel:
        """`rel` filtered by the conjuncts `filters` (each a condition over its columns)."""
        for f in filters:
            e, k = to_expr(f, rel.resolver())
            if k != "bool":
                raise error_at(f, f"type error: WHERE of {k}")
            rel.stream = rel.stream.filter(e)
            rel.rows = max(1.0, rel.rows * self.selectivity(f))
            rel.steps.append(f"filter {e}  ~{rel.rows:,.0f} rows")
        return rel


__all__ = ["Planner"]
