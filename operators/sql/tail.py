"""A SELECT after its FROM and WHERE (``Planner`` mixin): GROUP BY keys (columns or
expressions; the columns a grouped unique key determines carried as MIN, not hashed), the
aggregates of SELECT, HAVING and ORDER BY (``sum count avg min max``; ``count(DISTINCT
x)`` as a grouping by the keys and x, then a count), HAVING as a filter (a scalar subquery
in it crossed in first), the SELECT list as a projection, DISTINCT, ORDER BY (names,
positions, expressions) and LIMIT as a sort or a top-k.
"""

from __future__ import annotations

from sqlglot import exp

from operators.expr import Col, case, col
from operators.sql.errors import error_at
from operators.sql.estimates import SEL_OTHER
from operators.sql.exprs import to_expr
from operators.sql.rel import Rel, conjuncts, has_subquery, own_nodes

AGGS = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


class SelectTail:
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


__all__ = ["SelectTail"]
