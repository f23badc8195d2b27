"""SQL in: ``sql_plan(text, data_dir)`` returns a :class:`bobox_sched.Plan` whose result
is a pyarrow Table, like the hand-built plans of ``operators.tpch``.

    plan = sql_plan("select l_returnflag, count(*) as n from lineitem group by 1", "data/sf1")
    print(explain("select ...", "data/sf1"))      # the operator graph, estimated rows

Modules: ``frontend.py`` (parse, qualify, simplify: sqlglot), ``catalog.py`` (tables,
types and statistics from Parquet metadata), ``exprs.py`` (expressions and their types),
``planner.py`` (unnesting, join order, aggregation: to the plan builder), ``errors.py``
(:class:`SqlError`: one line, with the position in the text).
"""

from __future__ import annotations

from operators.sql.errors import SqlError

__all__ = ["SqlError", "explain", "sql_plan"]


def _plan(text: str, data_dir, parallel: int = 1, fuse: bool = True, name: str = "sql"):
    from operators.builder import Query
    from operators.data import DataError
    from operators.sql.catalog import Catalog
    from operators.sql.frontend import parse
    from operators.sql.planner import Planner

    catalog = Catalog(data_dir)
    stmt, names = parse(text, catalog)
    q = Query(data_dir, name, parallel, fuse=fuse)
    planner = Planner(catalog, q, names)
    try:
        plan, rel = planner.plan(stmt)
    except DataError as e:
        raise SqlError(str(e)) from None
    return plan, rel, q


def sql_plan(text: str, data_dir, parallel: int = 1, fuse: bool = True, name: str = "sql"):
    """The plan of SQL `text` over the tables of `data_dir` (module doc); `parallel` and
    `fuse` as ``operators.builder.Query``'s. Raises :class:`SqlError` (one line) before
    any work for an error in the text."""
    return _plan(text, data_dir, parallel, fuse, name)[0]


def explain(text: str, data_dir, parallel: int = 1, fuse: bool = True) -> str:
    """The plan of `text` in words: the logical steps with estimated rows, then the
    operators the scheduler runs (fused pipelines named) and the parallel regions."""
    plan, rel, q = _plan(text, data_dir, parallel, fuse)
    lines = ["logical plan (estimated rows from Parquet metadata):"]
    lines += [f"  {i + 1:2d}. {s}" for i, s in enumerate(rel.steps)]
    ops = list(plan.operator_names)
    lines.append(f"operators ({len(ops)}, parallel={parallel}, {'fused' if fuse else 'unfused'}):")
    lines.append("  " + ", ".join(ops))
    try:
        lines.append(plan.explain_regions())
    except (ValueError, TypeError) as e:  # regions are an analysis: a plan without any still runs
        lines.append(f"regions: none ({e})")
    return "\n".join(lines)
