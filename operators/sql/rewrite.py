"""Rewrites before planning (``Planner`` mixin): conjuncts common to every branch of an OR
pulled out of it, per-table filters implied by an OR (an OR of ranges on one column as its
hull), equalities implied by others (a = b = c); and two rewrites of a whole SELECT,
each for a shape it checks before it acts: one aggregate computed once where the text asks
for it twice (``reuse_in_aggregate``, Q18), aggregation before a join with the tables a
grouped key determines (``eager_group_by``, Q10).
"""

from __future__ import annotations

from sqlglot import exp

from operators.sql.rel import and_all, conjuncts, disjuncts, has_subquery, or_all, own_nodes, sources_of

_REAGG = {exp.Sum: exp.Sum, exp.Count: exp.Sum, exp.Min: exp.Min, exp.Max: exp.Max}


class Rewrites:
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

    def reuse_in_aggregate(self, sel: exp.Select) -> bool:
        """``x IN (SELECT k FROM t GROUP BY k HAVING ...)`` where the query also joins a
        table ``t`` on ``t.k = x``, groups by ``x`` and reads that ``t`` only in
        ``sum count min max`` of its columns (Q18: the orders whose line items sum to more
        than 300, and the sum of their line items' quantities): the subquery computes those
        aggregates too, per k, and becomes a derived table joined on ``k = x`` in place of
        ``t`` -- one pass over t instead of two (the second was 35 of Q18's 228 ms at SF 1,
        measurements/2026-12-02-sql/operator_times.txt). Each group of the query holds one
        k, so its aggregate of t is the subquery's, re-aggregated (a count summed). The
        shape checked here only; True when rewritten. A standard rewrite: the "group-by
        view merging" of Yan and Larson's eager aggregation."""
        where, group = sel.args.get("where"), sel.args.get("group")
        if where is None or group is None or sel.args.get("joins") and any(
                j.args.get("on") is not None or j.args.get("side") or j.args.get("kind") for j in sel.args["joins"]):
            return False
        conds = conjuncts(where.this)
        for c in conds:
            q = c.args.get("query") if isinstance(c, exp.In) and not c.args.get("negate") else None
            q = q.this if isinstance(q, exp.Subquery) else q
            if not isinstance(q, exp.Select) or q.args.get("where") or q.args.get("joins") or not q.args.get("group") \
                    or len(q.expressions) != 1 or not isinstance(c.this, exp.Column):
                continue
            (qalias, qtable, _), = sources_of(q)
            key = q.expressions[0].this if isinstance(q.expressions[0], exp.Alias) else q.expressions[0]
            gk = q.args["group"].expressions
            if not isinstance(qtable, exp.Table) or not isinstance(key, exp.Column) or len(gk) != 1 \
                    or gk[0].sql() != key.sql():
                continue
            x = c.this
            for alias, node, _ in sources_of(sel):
                if not isinstance(node, exp.Table) or node.name != qtable.name:
                    continue
                uses = [d for d in conds if any(isinstance(n, exp.Column) and n.table == alias for n in own_nodes(d))]
                if len(uses) != 1 or not isinstance(uses[0], exp.EQ):
                    continue
                d = uses[0]
                mine, other = (d.this, d.expression) if getattr(d.this, "table", None) == alias else (d.expression, d.this)
                if not (isinstance(mine, exp.Column) and mine.table == alias and mine.name == key.name
                        and isinstance(other, exp.Column) and other.table != alias):
                    continue
                same = other.sql() == x.sql() or any(
                    isinstance(e, exp.EQ) and {e.this.sql(), e.expression.sql()} == {other.sql(), x.sql()} for e in conds)
                if not same or not any(g.sql() in (x.sql(), other.sql()) for g in group.expressions):
                    continue
                aggs, ok = [], True
                for part in list(sel.expressions) + [sel.args["having"].this if sel.args.get("having") else exp.true()] \
                        + (list(sel.args["order"].expressions) if sel.args.get("order") else []) + list(group.expressions):
                    for n in own_nodes(part):
                        if not isinstance(n, exp.Column) or n.table != alias:
                            continue
                        a = n.parent
                        if type(a) not in _REAGG or a.this is not n:
                            ok = False
                        elif all(a is not b for b in aggs):
                            aggs.append(a)
                if not ok or not aggs:
                    continue
                new_alias = self.fresh("_reused")
                inner = q.copy()
                outs = [exp.alias_(key.copy(), "k")]
                for i, a in enumerate(aggs):
                    arg = a.this.copy()
                    arg.set("table", exp.to_identifier(qalias))
                    outs.append(exp.alias_(type(a)(this=arg), f"a{i}"))
                inner.set("expressions", outs)
                for i, a in enumerate(aggs):
                    a.replace(_REAGG[type(a)](this=exp.column(f"a{i}", table=new_alias)))
                derived = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(new_alias)))
                derived.meta["filters_others"] = True  # planned as the IN's semi-join was: it builds
                node.replace(derived)
                rest = [e for e in conds if e is not c and e is not d]
                rest.append(exp.EQ(this=x.copy(), expression=exp.column("k", table=new_alias)))
                sel.set("where", exp.Where(this=and_all(rest)))
                return True
        return False

    def eager_group_by(self, sel: exp.Select) -> bool:
        """Eager aggregation through a key join (Yan and Larson, "Eager Aggregation and
        Lazy Aggregation", VLDB 1995) for the shape of Q10: the query groups by a unique
        key P.k of one table and by columns of P and of the tables joined to P on their
        own unique keys (the dimension side D, functionally dependent on P.k); its
        aggregates read only the other tables (the fact side F), which meet D in one
        equality F.fk = P.k. F is aggregated per fk first, in a derived table, and D joins
        its groups (Q10: 38 k customers' revenues, not the 115 k line items carrying six
        customer columns and a nation probe each); each group of the query holds one
        derived row, re-aggregated (a count summed). True when rewritten."""
        group = sel.args.get("group")
        where = sel.args.get("where")
        if group is None or where is None or sel.args.get("having") or has_subquery(where.this) \
                or sel.args.get("with_") or sel.args.get("with") or sel.args.get("distinct"):
            return False
        if sel.args.get("joins") and any(j.args.get("on") is not None or j.args.get("side") or j.args.get("kind")
                                         for j in sel.args["joins"]):
            return False
        srcs = {alias: node for alias, node, _ in sources_of(sel)}
        if not all(isinstance(n, exp.Table) for n in srcs.values()) or len(srcs) < 2:
            return False
        conds = conjuncts(where.this)

        def tables(node):
            return {n.table for n in own_nodes(node) if isinstance(n, exp.Column)}

        def unique(alias, column):
            stats = self.catalog.tables.get(srcs[alias].name)
            return stats is not None and column in stats.types and stats.unique(column)

        aggs = []
        for part in list(sel.expressions) + (list(sel.args["order"].expressions) if sel.args.get("order") else []):
            for n in own_nodes(part):
                if isinstance(n, exp.AggFunc):
                    if type(n) not in _REAGG or isinstance(n.this, exp.Distinct):
                        return False
                    aggs.append(n)
        if not aggs:
            return False
        for g in group.expressions:
            if not isinstance(g, exp.Column):
                return False
            pivot, pk = g.table, g.name
            if not unique(pivot, pk):
                continue
            # D: the pivot and the tables joined to D on their own unique keys
            dim = {pivot}
            grew = True
            while grew:
                grew = False
                for c in conds:
                    if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column):
                        for a, b in ((c.this, c.expression), (c.expression, c.this)):
                            if a.table in dim and b.table not in dim and unique(b.table, b.name):
                                dim.add(b.table)
                                grew = True
            fact = set(srcs) - dim
            links = [c for c in conds if tables(c) & dim and tables(c) & fact]
            if not fact or len(links) != 1 or not isinstance(links[0], exp.EQ):
                continue
            link = links[0]
            fk = link.this if link.this.table in fact else link.expression
            dk = link.expression if fk is link.this else link.this
            if not (isinstance(fk, exp.Column) and isinstance(dk, exp.Column) and dk.table == pivot and dk.name == pk):
                continue
            if any(not (tables(a.this) <= fact) for a in aggs) or any(
                    tables(g2) - dim for g2 in group.expressions):
                continue
            outside = [n for part in sel.expressions for n in own_nodes(part)
                       if isinstance(n, exp.Column) and n.table in fact
                       and not any(isinstance(p, exp.AggFunc) for p in _ancestors(n, part))]
            if outside:
                continue
            name = self.fresh("_eager")
            inner = exp.Select(expressions=[exp.alias_(fk.copy(), "k")] + [
                exp.alias_(type(a)(this=a.this.copy()), f"a{i}") for i, a in enumerate(aggs)])
            fact_nodes = [srcs[a].copy() for a in srcs if a in fact]
            inner.set("from_", exp.From(this=fact_nodes[0]))
            if len(fact_nodes) > 1:
                inner.set("joins", [exp.Join(this=n) for n in fact_nodes[1:]])
            fact_conds = [c for c in conds if tables(c) and tables(c) <= fact]
            if fact_conds:
                inner.set("where", exp.Where(this=and_all(fact_conds)))
            inner.set("group", exp.Group(expressions=[fk.copy()]))
            for i, a in enumerate(aggs):
                a.replace(_REAGG[type(a)](this=exp.column(f"a{i}", table=name)))
            derived = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(name)))
            dim_nodes = [srcs[a].copy() for a in srcs if a in dim]
            sel.set("from_", exp.From(this=derived))
            sel.set("joins", [exp.Join(this=n) for n in dim_nodes])
            rest = [c for c in conds if c is not link and not (tables(c) and tables(c) <= fact)]
            rest.append(exp.EQ(this=exp.column("k", table=name), expression=dk.copy()))
            sel.set("where", exp.Where(this=and_all(rest)))
            return True
        return False


def _ancestors(node, top):
    a = node.parent
    while a is not None and a is not top.parent:
        yield a
        a = a.parent


__all__ = ["Rewrites"]
