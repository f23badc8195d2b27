"""``bobox sql``: one SQL query over a TPC-H (or any Parquet) data folder, on the
scheduler; prints the result table, or writes it (``--output FILE.parquet``, atomically),
or prints the plan (``--explain``). Errors in the text are one line naming the construct
and its position, exit status 2, before any work (``operators/sql``)."""

from __future__ import annotations

import sys
from pathlib import Path

from bobox_sched.core import limits
from experiments.cli.argtypes import count, path, scale_factor
from experiments.cli.run import add_scheduler_arguments

DEFAULT_MAX_ROWS = 40


def add_arguments(p) -> None:
    p.add_argument("query", nargs="?", metavar="SQL", help="the query text (or --file)")
    p.add_argument("--file", type=path, metavar="FILE", help="read the query from FILE ('-': standard input)")
    p.add_argument("--data", type=path, metavar="DIR",
                   help="Parquet folder, one <table>.parquet (or folder of parts) per table (default: "
                   "data/tpch-sf<SF>, generated if missing)")
    p.add_argument("--sf", type=scale_factor, metavar="X", help="scale factor to generate if the data is missing "
                   "(default 0.1)")
    p.add_argument("--parallel", type=count(limits.MAX_PARALLEL), metavar="K",
                   help="decompose the query K ways (default: one per worker)")
    p.add_argument("--explain", action="store_true",
                   help="print the plan (logical steps with estimated rows, the operators with their fused "
                   "pipelines, the parallel regions) and do not run it")
    p.add_argument("--output", type=path, metavar="FILE.parquet",
                   help="write the result to FILE.parquet (atomically) instead of printing it")
    p.add_argument("--max-rows", type=count(10**9), default=DEFAULT_MAX_ROWS, metavar="N",
                   help=f"rows printed (default {DEFAULT_MAX_ROWS}; the count of the rest is said)")
    add_scheduler_arguments(p)


def read_text(args) -> str:
    from bobox_sched.core.errors import BoboxError

    if (args.query is None) == (args.file is None):
        raise BoboxError("give the query as an argument or with --file, not both" if args.query is not None
                         else "no query: give SQL as an argument or with --file")
    if args.file is None:
        return args.query
    if args.file == "-":
        return sys.stdin.read()
    try:
        return Path(args.file).read_text()
    except OSError as e:
        raise BoboxError(f"--file: cannot read {args.file}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise BoboxError(f"--file: {args.file} is not UTF-8 text") from None


def syntax_check(text: str) -> None:
    """The text parses (before data is generated or loaded): SqlError, one line, if not."""
    from operators.sql.frontend import statements

    statements(text)


def format_table(table, max_rows: int) -> str:
    """A pyarrow Table as aligned text: a header, a rule, at most `max_rows` rows."""
    import datetime

    def cell(v):
        if v is None:
            return "NULL"
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 1e15 else repr(v)
        if isinstance(v, datetime.date):
            return v.isoformat()
        return str(v)

    shown = table.slice(0, max_rows)
    cols = [[cell(v) for v in shown.column(i).to_pylist()] for i in range(shown.num_columns)]
    heads = list(table.column_names)
    widths = [max([len(h)] + [len(c) for c in cs]) for h, cs in zip(heads, cols)]
    right = [str(t).startswith(("int", "uint", "double", "float", "decimal")) for t in table.schema.types]

    def line(vals):
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(vals, widths, right)).rstrip()

    out = [line(heads), "  ".join("-" * w for w in widths)]
    for r in range(shown.num_rows):
        out.append(line([c[r] for c in cols]))
    more = table.num_rows - shown.num_rows
    out.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''}"
               + (f", {more} not shown: --max-rows" if more > 0 else "") + ")")
    return "\n".join(out)


def run(args) -> int:
    import time

    text = read_text(args)
    syntax_check(text)
    if args.output is not None:
        from experiments.cli.outputs import OutputError, check_creatable

        if not str(args.output).endswith(".parquet"):
            raise OutputError(f"--output: {args.output}: the file name must end in .parquet")
        check_creatable(args.output, "--output")
    from experiments.workload import check_data, ensure_data

    data = ensure_data(args.data, args.sf, progress=True)
    check_data(data)
    from bobox_sched import Scheduler

    from operators.sql import explain, sql_plan

    with Scheduler(policy=args.policy, threads_per_node=args.threads_per_node, packet_bytes=args.packet_bytes) as s:
        parallel = args.parallel or len(s.workers)
        if args.explain:
            print(explain(text, data, parallel))
            return 0
        plan = sql_plan(text, data, parallel)  # every error in the text, before any work
        t0 = time.perf_counter()
        table = s.submit(plan).result()
        wall = time.perf_counter() - t0
    if args.output is not None:
        import pyarrow.parquet as pq

        from experiments.cli.outputs import write_atomic

        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(args.output), lambda tmp: pq.write_table(table, tmp))
        print(f"wrote {table.num_rows} rows to {args.output} in {wall:.3f} s", file=sys.stderr)
        return 0
    print(format_table(table, args.max_rows))
    print(f"{wall:.3f} s, parallel={parallel}, {len(plan)} operators", file=sys.stderr)
    return 0
