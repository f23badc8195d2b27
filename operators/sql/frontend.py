"""SQL text to a qualified, simplified sqlglot tree, or a one-line :class:`SqlError`.

* **parse** (sqlglot, DuckDB's dialect: TPC-H's texts as the specification writes
  them, ``interval '90' day``, ``extract(year from ...)``, ``substring(x from 1 for 2)``);
* **qualify** (sqlglot's ``qualify``): every column gets its table's alias, ``*`` is
  expanded, names are checked against the data folder's tables (``catalog.py``) -- an
  unknown table or column is an error here, with its position;
* **simplify** (sqlglot's ``simplify``): constants folded, ``date '1998-12-01' -
  interval '90' day`` becomes the date ``1998-09-02``, double negations and boolean
  identities removed.

The SELECT list's output names are taken before qualification, as DuckDB names them: an
alias, a column's name, or the expression's text (``sum(l_quantity)``, Q18).
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.simplify import simplify

from operators.sql.catalog import Catalog
from operators.sql.errors import SqlError, error_at

DIALECT = "duckdb"


def _output_names(stmt) -> list[str] | None:
    if not isinstance(stmt, exp.Select):
        return None
    names = []
    for it in stmt.expressions:
        if isinstance(it, exp.Alias):
            names.append(it.alias)
        elif isinstance(it, exp.Column):
            names.append(it.name)
        elif isinstance(it, exp.Star):
            return None  # expanded by qualify: its names then
        else:
            names.append(it.sql(dialect=DIALECT, normalize_functions="lower"))
    return names


_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: \d+.*?>")


def _token_words(msg: str) -> str:
    """sqlglot names tokens by their repr: '... got <Token token_type: ..., text: from, ...>'."""
    return _TOKEN.sub(lambda m: "the end of the text" if m.group(1) == "SENTINEL" else repr(m.group(2)), msg)


def statements(text: str) -> list:
    """The statements of `text`, parsed: SqlError (one line, with the position) on a
    syntax error. Needs no data: ``bobox sql`` and ``bobox run --sql`` check texts
    before any data is generated or loaded."""
    if not text or not text.strip():
        raise SqlError("empty SQL text")
    try:
        return sqlglot.parse(text, read=DIALECT)
    except ParseError as e:
        err = (e.errors or [{}])[0]
        msg = (err.get("description") or str(e).splitlines()[0]).split(". Line")[0]
        col = err.get("col")
        if col is not None and err.get("highlight"):  # sqlglot gives the token's last column
            col = max(1, col - len(err["highlight"]) + 1)
        raise SqlError(f"syntax error: {_token_words(msg)}", err.get("line"), col) from None
    except TokenError as e:
        raise SqlError(f"syntax error: {str(e).splitlines()[0]}") from None


def parse(text: str, catalog: Catalog) -> tuple[exp.Expression, list[str] | None]:
    """(qualified and simplified statement, output names) of `text` (module doc)."""
    stmts = statements(text)
    stmts = [s for s in stmts if s is not None]
    if len(stmts) != 1:
        raise SqlError(f"expected one statement, got {len(stmts)}")
    stmt = stmts[0]
    if not isinstance(stmt, exp.Query):
        raise error_at(stmt, "syntax error: not a query (expected SELECT ...)")
    if not isinstance(stmt, exp.Select):
        raise error_at(stmt, f"unsupported: {stmt.key.upper()} (one SELECT, with subqueries and CTEs, is)")
    ctes = {c.alias_or_name for c in stmt.find_all(exp.CTE)}
    for t in stmt.find_all(exp.Table):
        if t.name not in catalog.tables and t.name not in ctes:
            raise error_at(t, f"unknown table {t.name!r} (known: {', '.join(sorted(catalog.tables))})")
    names = _output_names(stmt)
    try:
        stmt = qualify(stmt, schema=catalog.schema(), dialect=DIALECT, validate_qualify_columns=True,
                       quote_identifiers=False)
    except OptimizeError as e:
        text1 = str(e).splitlines()[0]
        line = col = None
        if ". Line: " in text1:
            text1, _, where = text1.partition(". Line: ")
            try:
                line, col = (int(x) for x in where.replace("Col: ", "").split(", ")[:2])
            except ValueError:
                line = col = None
        name = text1.split("'")[1] if text1.count("'") >= 2 else ""
        if col is not None and name:  # the column's last character: its first
            col = max(1, col - len(name) + 1)
        raise SqlError(_reword(text1), line, col) from None
    stmt = simplify(stmt, dialect=DIALECT)
    return stmt, names


def _reword(msg: str) -> str:
    """sqlglot's qualification messages in this project's words."""
    if msg.startswith("Column '") and "could not be resolved" in msg:
        name = msg.split("'")[1]
        return f"unknown column {name!r}"
    if msg.startswith("Unknown table"):
        return "unknown table " + msg.split(":", 1)[-1].strip()
    return msg[0].lower() + msg[1:] if msg else msg


__all__ = ["DIALECT", "parse"]
