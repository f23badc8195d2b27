"""The one error a SQL text can raise before any work: :class:`SqlError`.

Its message is one line naming what is wrong and where (``line L, column C``), e.g.
``line 3, column 12: unknown column 'l_foo'`` or ``line 1, column 8: unsupported: window
functions``. ``bobox sql`` prints it and exits with status 2.
"""

from __future__ import annotations


class SqlError(ValueError):
    """A SQL text this front end cannot plan: a syntax error, an unsupported construct,
    an unknown table or column, a type error. ``line`` and ``col`` are 1-based (None when
    the position is unknown)."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None):
        self.reason, self.line, self.col = message, line, col
        where = f"line {line}, column {col}: " if line is not None else ""
        super().__init__(where + message)


def _start(meta: dict) -> tuple[int, int]:
    """sqlglot's token position is its last character's: the first's is `end - start`
    columns before (a token does not span lines: identifiers, literals, keywords)."""
    col = meta.get("col")
    if col is not None and "start" in meta and "end" in meta:
        col = max(1, col - (meta["end"] - meta["start"]))
    return meta["line"], col


def position(node) -> tuple[int | None, int | None]:
    """(line, column) of a sqlglot node's first character: its own token's, else its
    first descendant's with one (sqlglot keeps positions on identifiers and literals)."""
    if node is None:
        return None, None
    for n in node.walk():
        meta = getattr(n, "meta", None) or {}
        if "line" in meta:
            return _start(meta)
        this = n.args.get("this") if hasattr(n, "args") else None
        meta = getattr(this, "meta", None) or {}
        if "line" in meta:
            return _start(meta)
    return position(node.parent) if node.parent is not None else (None, None)  # e.g. NULL: its context


def error_at(node, message: str) -> SqlError:
    """A SqlError placed at `node`."""
    line, col = position(node)
    return SqlError(message, line, col)


__all__ = ["SqlError", "error_at", "position"]
