"""Semi-join reducers (``Planner`` mixin): a large relation keeps only the rows whose key a
small one has, before the work its size would cost (a shuffle, a hash build, an
aggregation). Each is a probe of the large side against a small hash table, fused into
its scan, on a copy of the small side's keys (its stream teed).

* into a correlated subquery (magic sets: Bancilhon et al. 1986; Seshadri et al., SIGMOD
  1996): its table keeps the keys of the reduced outer table it correlates with, before
  it aggregates (Q17's per-part average over the 0.1 % of parts of one brand and
  container, Q2, Q20);
* into an EXISTS / IN side four times larger than what it filters (Bernstein and Chiu
  1981): Q4's late line items of the quarter's orders, Q21's of the failed orders of the
  Saudi suppliers;
* sideways (``reduce_by``): a tree that kept few values of a join key reduces the large
  tables not joined yet that share the key (Q5's customers of ASIA before their orders).
"""

from __future__ import annotations

from sqlglot import exp

from operators.builder import Stream
from operators.expr import Col, col
from operators.sql.exprs import to_expr
from operators.sql.joins import SHUFFLE_ROWS
from operators.sql.rel import Rel

# A correlated subquery's table is reduced by the keys of an outer table its filters kept
# at most this share of (REDUCE_SHARE), and a semi- or anti-join's subquery side by the
# keys of the side it filters when it is this many times larger (REDUCE_RATIO). Chosen so
# that Q2, Q4, Q17, Q20, Q21 (reduced to 0.1-10 %) qualify and the unfiltered sides of Q18
# and Q22 do not (bobox bench sql, SF 1, 2026-12-02).
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


class Reducers:
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


__all__ = ["Reducers"]
