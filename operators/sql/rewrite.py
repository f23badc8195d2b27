"""Rewrites before planning (``Planner`` mixin): conjuncts common to every branch of an OR
pulled out of it, per-table filters implied by an OR (an OR of ranges on one column as its
hull), equalities implied by others (a = b = c), and one aggregate computed once where the
text asks for it twice (``reuse_in_aggregate``, Q18).
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


__all__ = ["Rewrites"]
