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


def _flat(node, kind) -> list:
    if isinstance(node, exp.Paren):
        return _flat(node.this, kind)
    if isinstance(node, kind):
        return _flat(node.this, kind) + _flat(node.expression, kind)
    return [node]


def conjuncts(node) -> list:
    """The operands of a tree of ANDs (none for None)."""
    return [] if node is None else _flat(node, exp.And)


def disjuncts(node) -> list:
    """The operands of a tree of ORs."""
    return _flat(node, exp.Or)


def _join(nodes, kind):
    nodes = [n.copy() for n in nodes]
    out = nodes[0]
    for n in nodes[1:]:
        out = kind(this=out, expression=n)
    return out


def and_all(nodes):
    """Copies of `nodes` ANDed (a new tree: the originals stay where they are)."""
    return _join(nodes, exp.And)


def or_all(nodes):
    """Copies of `nodes` ORed."""
    return _join(nodes, exp.Or)


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
