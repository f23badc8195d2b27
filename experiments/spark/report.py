"""Stage 3, results (``spark_report``): experiment CSVs in long format from many runs and
hosts are read into one Spark DataFrame and summarized per (experiment, series, x,
metric) into ``summary.csv`` and a section of ``report.md``.

It shares only the session with stages 1 and 2: it reads what ``bobox experiment``
wrote, not TPC-H data, and runs no Scheduler.
"""

from __future__ import annotations

import csv
from pathlib import Path

from experiments.cli import procs
from experiments.spark.messages import first_line, say
from experiments.spark.session import DEFAULT_MASTER, spark_session

REPORT_COLUMNS = ("experiment", "host", "run_id", "series", "x", "metric", "value", "repeat")
REPORT_MANIFEST = "_bobox_report.json"
SUMMARY_COLUMNS = ("experiment", "series", "x", "metric", "median", "min", "max", "n", "runs", "hosts")


def _experiment_csvs(result_dirs) -> dict[tuple, list[Path]]:
    """{header: [files]}: every ``*.csv`` of the folders (``summary.csv`` excepted),
    grouped by their header line (CSV files are read by position, so each header is
    read with its own schema)."""
    from operators.data import DataError

    groups: dict[tuple, list[Path]] = {}
    dirs = [Path(d).expanduser().absolute() for d in result_dirs]
    if not dirs:
        raise DataError("no result folder given")
    for d in dirs:
        if not d.is_dir():
            raise DataError(f"result folder {d} does not exist" if not d.exists() else f"{d} is not a folder")
        for f in sorted(d.glob("*.csv")):
            if f.name == "summary.csv":
                continue
            with open(f, newline="") as fh:
                header = tuple(h.strip() for h in next(csv.reader(fh), []))
            missing = [c for c in REPORT_COLUMNS if c not in header]
            if missing:
                raise DataError(f"{f} lacks column {missing[0]!r} (expected at least: {', '.join(REPORT_COLUMNS)})")
            groups.setdefault(header, []).append(f)
    if not groups:
        raise DataError(f"no experiment CSV files in {', '.join(str(d) for d in dirs)}")
    return groups


def spark_report(result_dirs, out, master: str = DEFAULT_MASTER, spark=None, progress: bool = True) -> dict:
    """Summarize experiment results of many runs and hosts with Spark.

    Reads every ``<experiment>.csv`` of `result_dirs` (long format: at least
    experiment, host, run_id, series, x, metric, value, repeat) into one DataFrame;
    per (experiment, series, x, metric): median, min, max of value, n values, distinct
    runs ((host, run_id) pairs) and hosts. Writes ``out/summary.csv`` and puts the
    section "## Summary of N runs on M hosts" (one table per experiment) into
    ``out/report.md``, replacing that section where an earlier report left one.
    Returns {"runs", "hosts", "files", "rows", "experiments", "summary_csv", "report"}.
    """
    from operators.data import DataError
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from experiments.cli.outputs import ResultSet, check_output_dir

    groups = _experiment_csvs(result_dirs)
    out = check_output_dir(out, "report output")  # before the job, not after it
    spark = spark or spark_session(master)
    frames = []
    for header, files in groups.items():
        schema = StructType([StructField(h, StringType()) for h in header])
        df = spark.read.csv([str(f) for f in files], header=True, schema=schema, mode="FAILFAST")
        frames.append(df.select(
            F.col("experiment"), F.col("host"), F.col("run_id"), F.col("series"), F.col("x"), F.col("metric"),
            F.expr("try_cast(value AS double)").alias("value"),  # ANSI mode: NULL, not an error
        ))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    median = F.median("value") if hasattr(F, "median") else F.percentile_approx("value", 0.5)
    summary = (
        df.where(F.col("value").isNotNull())
        .groupBy("experiment", "series", "x", "metric")
        .agg(median.alias("median"), F.min("value").alias("min"), F.max("value").alias("max"),
             F.count("value").alias("n"), F.countDistinct("host", "run_id").alias("runs"),
             F.countDistinct("host").alias("hosts"))
        .orderBy("experiment", "series", "metric", F.expr("try_cast(x AS double)"), "x")
    )
    totals = df.agg(F.countDistinct("host", "run_id").alias("runs"), F.countDistinct("host").alias("hosts"),
                    F.count(F.lit(1)).alias("rows"), F.sum(F.col("value").isNull().cast("int")).alias("bad"))
    spark.sparkContext.setJobDescription("bobox spark report")
    try:
        rows = [r.asDict() for r in summary.collect()]
        tot = totals.collect()[0].asDict()
    except Exception as e:
        procs.reraise_interrupt(e)
        raise DataError(f"cannot read the experiment CSVs: {first_line(e)}") from None
    if tot["bad"]:
        say(progress, f"{tot['bad']} rows without a numeric value left out")

    def write_summary(tmp):
        with open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(SUMMARY_COLUMNS)
            for r in rows:
                w.writerow([r[c] for c in SUMMARY_COLUMNS])

    n_files = sum(len(v) for v in groups.values())
    section = _report_section(rows, tot, n_files, result_dirs)
    report = out / "report.md"
    old = report.read_text() if report.is_file() else "# Experiments\n"
    # Each file atomically, then a manifest: a full disk never leaves a set that looks
    # complete (experiments.cli.outputs.ResultSet).
    with ResultSet(out, REPORT_MANIFEST, what="report output") as rs:
        summary_csv = rs.write("summary.csv", write_summary)
        rs.write_text("report.md", _replace_section(old, section))
    experiments = sorted({r["experiment"] for r in rows})
    say(progress, f"summarized {tot['rows']} measurements of {len(experiments)} experiment(s) from "
                   f"{tot['runs']} runs on {tot['hosts']} hosts into {summary_csv} and {report}")
    return {"runs": tot["runs"], "hosts": tot["hosts"], "files": n_files, "rows": tot["rows"],
            "experiments": experiments, "summary_csv": str(summary_csv), "report": str(report)}


def _num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _report_section(rows: list[dict], tot: dict, n_files: int, result_dirs) -> str:
    heading = f"## Summary of {tot['runs']} runs on {tot['hosts']} hosts"
    lines = [heading, "",
             f"Collected by `bobox spark report` from {n_files} CSV files ({tot['rows']} measurements) in "
             + ", ".join(f"`{d}`" for d in result_dirs) + ". Per point: median, min and max over every "
             "repeat of every run; n = measurements, runs = distinct (host, run id), hosts = distinct hosts.", ""]
    by_exp: dict[str, list[dict]] = {}
    for r in rows:
        by_exp.setdefault(r["experiment"], []).append(r)
    for exp, rs in by_exp.items():
        lines += [f"### {exp}", "", "| series | x | metric | median | min | max | n | runs | hosts |",
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in rs:
            lines.append(f"| {r['series']} | {r['x']} | {r['metric']} | {_num(r['median'])} | {_num(r['min'])} | "
                         f"{_num(r['max'])} | {r['n']} | {r['runs']} | {r['hosts']} |")
        lines.append("")
    return "\n".join(lines)


def _replace_section(text: str, section: str) -> str:
    """`text` with its "## Summary of ..." section (up to the next "## " heading)
    replaced by `section`, or `section` appended."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("## Summary of ")), None)
    if start is None:
        body = text.rstrip("\n")
        return (body + "\n\n" if body else "") + section.rstrip("\n") + "\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    new = lines[:start] + section.rstrip("\n").splitlines() + ([""] + lines[end:] if end < len(lines) else [])
    return "\n".join(new) + "\n"
