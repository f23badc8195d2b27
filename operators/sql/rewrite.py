"""Rewrites of a WHERE's conjuncts before planning (``Planner`` mixin): conjuncts common to
every branch of an OR pulled out of it, per-table filters implied by an OR (an OR of
ranges on one column as its hull), and equalities implied by others (a = b = c).
"""

from __future__ import annotations

from sqlglot import exp

from operators.sql.rel import and_all, conjuncts, disjuncts, has_subquery, or_all


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


__all__ = ["Rewrites"]
