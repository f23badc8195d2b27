"""The relation being planned (:class:`Rel`: a builder stream and what its columns are)
and the helpers over sqlglot trees every planning step uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from operators.builder import Stream
from operators.expr import col


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
    # a filter of the query's other tables (an IN subquery rewritten to a join,
    # rewrite.reuse_in_aggregate): it builds, and it is joined as early as a semi-join
    filters_others: bool = False

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


__all__ = ["Rel", "and_all", "conjuncts", "disjuncts", "has_subquery", "or_all", "own_nodes", "sources_of"]
