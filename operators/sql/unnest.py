"""Subqueries unnested into joins (``Planner`` mixin), the rewrites of Neumann and Kemper
("Unnesting Arbitrary Queries", BTW 2015) for the shapes TPC-H uses:

* ``EXISTS`` / ``NOT EXISTS`` and ``IN`` / ``NOT IN (subquery)``: semi- and anti-joins,
  equality correlations as keys, other correlated conditions as the join's residual
  (Q21); applied by ``joins.py`` / ``reducers.py`` once their outer columns are joined;
* a scalar subquery compared with a value: a relation of its own, grouped by its
  correlation columns when correlated (Q2, Q17, Q20; its tables first reduced by the
  outer table's keys, ``reducers.py``), one row otherwise (Q11, Q15, Q22), joined like
  any table, the comparison a filter.

sqlglot's own ``unnest_subqueries`` is not used: it writes non-equality correlations as
array aggregates and lambdas (``LIST_FILTER``) and anti-joins as ``LEFT JOIN ... IS
NULL``, which the kernels do not run. Each subquery is planned as a copy of its SELECT
whose WHERE lost the correlated conjuncts and whose SELECT list holds what the join needs.
"""

from __future__ import annotations

from sqlglot import exp

from operators.sql.errors import error_at
from operators.sql.rel import and_all, conjuncts, own_nodes, sources_of


class Unnesting:
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


__all__ = ["Unnesting"]
