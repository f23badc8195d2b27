"""Join order and the joins themselves (``Planner`` mixin).

Greedy operator ordering (Fegaras, "A New Heuristic for Optimizing Large Queries", DEXA
1998): repeatedly join the two connected relations whose join is estimated smallest
(``estimates.py``), the smaller side as the hash table's build side, so dimension chains
(region, nation, supplier) join among themselves before they meet the fact table. A
build side that gives no column to the rest of the query and whose key is unique becomes
a semi-join; the build side keeps only the columns still read after the join. Conditions
over several tables apply right after the join that brings their last table; an equality
that the keys and filters applied so far imply is dropped. Semi- and anti-joins from
subqueries apply once their outer columns are joined, unless a join still to come shrinks
that side (``shrinks``). ``LEFT [OUTER] JOIN`` keeps its left side's rows: the right
side's columns read 0 where nothing matched and a ``matched`` flag says which did;
``count(column of the right side)`` counts matches -- or, when that is all the query
reads of it, the right side is counted per key ahead of the join (``count_ahead``, Q13).
"""

from __future__ import annotations

from sqlglot import exp

from operators.expr import Col
from operators.sql.errors import error_at
from operators.sql.exprs import to_expr
from operators.sql.rel import Rel, conjuncts, own_nodes

# A build side above this many estimated rows is hash-partitioned with its probe side
# (strategy "shuffle") instead of broadcast to every probe partition, with parallel > 1:
# the hand-built TPC-H plans shuffle the orders side (1.5 M rows at SF 1) and broadcast
# the dimension tables (at most 200 k rows: part); 100 k lies between the two.
SHUFFLE_ROWS = 100_000


class JoinOrder:
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
                    self.apply_filters(t, [c])
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

    def join(self, a: Rel, b: Rel, edges, est, pending, semis, env, sel, trees) -> Rel:
        # the smaller side builds the hash table
        probe, build = (a, b) if a.rows >= b.rows else (b, a)
        if a.filters_others != b.filters_others:  # it stands for a semi-join's build side
            probe, build = (b, a) if a.filters_others else (a, b)
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


__all__ = ["JoinOrder"]
