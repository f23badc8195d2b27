"""The Spark pipeline (the package ``experiments/spark/``), Spark tier.

Local mode: stage 1 writes SF 0.01 partitioned for 3 executors, and SF 1 in 4 partitions
(where tpchgen-cli's parts of orders and lineitem cover different orders); ``spark_run``
answers equal DuckDB's over the same files for every query with a distributed form, in
one fused task and as the two-stage job (partials, shuffle by query, combines), also over
``bobox datagen``'s single files and a Spark folder split into another partition count on
the fly; the CLI writes the same answers as Parquet. Faults: an injected failure is retried (the task ran twice,
seen through marker files the executors write) and the answer is unchanged; a failure on
every attempt is a one-line error naming the query. Stage 3 on synthetic CSVs. Last, a
standalone master and two workers on 127.0.0.1 run the same queries (and a retry), then a
parallel region's channels (``test_spark_regions.py``'s plans and check), on one cluster.

One SparkSession and one data set serve the whole module (~1-2 min on 2 cores).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import clirun
import pytest
from operators import tpch_partial
from operators.data import DataError, read_manifest
from operators.tpch_sql import compare_tables, duckdb_answer, output_columns

from experiments.cli import outputs
from bobox_sched.core.errors import BoboxError
from experiments.spark.datagen import spark_datagen
from experiments.spark.faults import TRACE_ENV
from experiments.spark.layout import PARTITIONED, REPLICATED, VIEWS, read_spark_manifest
from experiments.spark.report import REPORT_MANIFEST, SUMMARY_COLUMNS, spark_report
from experiments.spark.run import spark_run, spark_run_detailed
from experiments.spark.session import default_partitions, parse_master, slots, spark_session

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
QUERIES = list(tpch_partial.SUPPORTED)
PARTITIONS = 3
MASTER = "local[2]"  # one executor, one task at a time filling both cores


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-trace")


@pytest.fixture
def spark(trace_dir):
    """The module's local session (spark_session reuses it while the arguments match)."""
    return spark_session(MASTER, conf={f"spark.executorEnv.{TRACE_ENV}": str(trace_dir)})


@pytest.fixture(scope="module")
def sdata(tmp_path_factory, trace_dir):
    spark = spark_session(MASTER, conf={f"spark.executorEnv.{TRACE_ENV}": str(trace_dir)})
    return spark_datagen(0.01, tmp_path_factory.mktemp("spark-data") / "sf0.01", partitions=PARTITIONS,
                            spark=spark, progress=False)


@pytest.fixture(scope="module")
def answers(sdata):
    """DuckDB over the very files Spark wrote (find_tables reads the part folders)."""
    return {q: duckdb_answer(q, sdata) for q in QUERIES}


def check_all(tables, answers, queries=QUERIES):
    assert list(tables) == list(queries)
    for q in queries:
        assert tables[q].column_names == output_columns(q)
        compare_tables(tables[q], answers[q], rel_tol=1e-6)


# ---------------------------------------------------------------------------- stage 1


def test_datagen_layout_manifest_and_copartitioning(sdata, tpch):
    m = read_spark_manifest(sdata)
    assert m["partitions"] == PARTITIONS and m["sf"] == 0.01
    for t in PARTITIONED:
        assert [p.name for p in sorted((sdata / t).glob("*.parquet"))] == [f"part-{i}.parquet" for i in range(3)]
        assert len(m["tables"][t]["part_rows"]) == PARTITIONS
    for t in REPLICATED:
        assert (sdata / f"{t}.parquet").is_file()
    # The same data as the single-file generator's (tests/conftest.py `tpch`).
    single = read_manifest(tpch)["tables"]
    assert {t: m["tables"][t]["rows"] for t in single} == {t: single[t]["rows"] for t in single}
    # Co-partitioned: part i of lineitem holds exactly the order keys of part i of orders.
    for i in range(PARTITIONS):
        okeys = pq.read_table(sdata / "orders" / f"part-{i}.parquet", columns=["o_orderkey"]).column(0)
        lkeys = pq.read_table(sdata / "lineitem" / f"part-{i}.parquet", columns=["l_orderkey"]).column(0)
        assert pc.all(pc.is_in(lkeys, value_set=okeys)).as_py()
        assert len(pc.unique(lkeys)) == len(okeys)  # every order has line items
        view = sdata / VIEWS / f"part-{i}"
        assert (view / "lineitem.parquet").resolve() == (sdata / "lineitem" / f"part-{i}.parquet").resolve()
        assert (view / "customer.parquet").resolve() == (sdata / "customer.parquet").resolve()


def test_datagen_cached_and_refuses_other_data(sdata, tmp_path):
    t0 = time.perf_counter()
    assert spark_datagen(0.01, sdata, progress=False) == sdata  # no session needed: cached
    assert spark_datagen(0.01, sdata, partitions=PARTITIONS, progress=False) == sdata
    assert time.perf_counter() - t0 < 1
    with pytest.raises(DataError, match="holds 3 partitions, not 2"):
        spark_datagen(0.01, sdata, partitions=2, progress=False)
    with pytest.raises(DataError, match="not SF 0.02"):
        spark_datagen(0.02, sdata, progress=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="already holds other files"):
        spark_datagen(0.01, other, progress=False)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


# tpchgen-cli's row counts at SF 1 (the TPC-H specification's, lineitem's as generated)
SF1_ROWS = {"lineitem": 6_001_215, "orders": 1_500_000, "customer": 150_000, "part": 200_000,
            "partsupp": 800_000, "supplier": 10_000, "nation": 25, "region": 5}


def test_datagen_sf1_four_partitions_co_partitioned(spark, tmp_path):
    """SF 1 in 4 partitions: tpchgen-cli 4.0 cuts lineitem part i at other orders than
    orders part i there (it failed before stage 1 placed them by order key)."""
    data = spark_datagen(1, tmp_path / "sf1", partitions=4, spark=spark, progress=False)
    m = read_spark_manifest(data)
    assert m["partitions"] == 4 and {t: m["tables"][t]["rows"] for t in SF1_ROWS} == SF1_ROWS
    assert not (data / "_work").exists() and not list(data.glob(".*"))
    previous_max = 0
    for i in range(4):
        o = pq.read_table(data / "orders" / f"part-{i}.parquet", columns=["o_orderkey"]).column(0)
        li = pq.read_table(data / "lineitem" / f"part-{i}.parquet", columns=["l_orderkey"]).column(0)
        assert (len(o), len(li)) == (m["tables"]["orders"]["part_rows"][i], m["tables"]["lineitem"]["part_rows"][i])
        assert pc.all(pc.is_in(li, value_set=o)).as_py()
        assert len(pc.unique(li)) == len(o)  # every order has its line items here
        lo, hi = pc.min_max(o).values()
        assert lo.as_py() > previous_max  # disjoint ascending key ranges
        previous_max = hi.as_py()
        assert abs(len(o) - 375_000) < 1_000  # balanced
    # answers that need both sides of every order in one partition
    got = spark_run(["q3", "q18"], data, spark=spark)
    for q in ("q3", "q18"):
        compare_tables(got[q], duckdb_answer(q, data), rel_tol=1e-6)


def test_datagen_failing_generator_is_one_line_error(spark, tmp_path):
    with pytest.raises(DataError) as ei:
        spark_datagen(0.01, tmp_path / "d", partitions=2, spark=spark, progress=False, tool="no-such-tpchgen")
    assert str(ei.value).startswith("Spark datagen failed in all 4 attempts: TPC-H generator 'no-such-tpchgen' "
                                    "not found"), str(ei.value)
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone, nothing was written


# ---------------------------------------------------------------------------- stage 2


def test_local_answers_equal_duckdb(spark, sdata, answers):
    run = spark_run_detailed(QUERIES, sdata, spark=spark)
    assert run.fused  # local[2] runs one task at a time: partials and combines in one task
    check_all(run.tables, answers)
    assert set(run.attempts) == {(q, p) for q in QUERIES for p in range(PARTITIONS)}
    assert not run.retried
    # Executed by a Python worker of Spark's, not by this process.
    assert all(not h.endswith(f":{os.getpid()}") for _, h in run.attempts.values())


def test_local_two_stage_answers_equal_duckdb(spark, sdata, answers):
    run = spark_run_detailed(QUERIES, sdata, spark=spark, fuse=False)
    assert not run.fused
    check_all(run.tables, answers)


def test_output_files_like_bobox_run(spark, sdata, answers, tmp_path):
    tables = spark_run(["q3", "q6"], sdata, output=tmp_path / "out", spark=spark)
    for q in ("q3", "q6"):
        got = pq.read_table(tmp_path / "out" / f"{q}.parquet")
        assert got.schema == tables[q].schema
        compare_tables(got, answers[q])


def markers(trace_dir, run_id, part):
    return sorted(p.name.split(".")[2] for p in trace_dir.glob(f"{run_id}.part-{part}.attempt-*"))


@pytest.mark.parametrize("fuse", [False, True])
def test_injected_failure_is_retried_same_answer(spark, sdata, answers, trace_dir, fuse):
    run = spark_run_detailed(["q1", "q3", "q18"], sdata, spark=spark, inject_failure="q3:1", fuse=fuse)
    check_all(run.tables, answers, ["q1", "q3", "q18"])
    # The task of partition 1 really ran twice; its second attempt's partials were taken.
    assert markers(trace_dir, run.run_id, 1) == ["attempt-0", "attempt-1"]
    assert run.attempts[("q3", 1)][0] == 1
    if not fuse:  # other partitions' tasks ran once
        assert markers(trace_dir, run.run_id, 0) == ["attempt-0"]
        assert run.attempts[("q3", 0)][0] == 0


def test_failure_on_every_attempt_names_the_query(spark, sdata, trace_dir):
    with pytest.raises(BoboxError) as ei:
        spark_run(["q1", "q5"], sdata, spark=spark, inject_failure="q5:2:all", fuse=False)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith("query q5 failed on partition 2 in all 4 attempts: injected failure"), msg
    # The session is still usable afterwards.
    assert spark_run(["q6"], sdata, spark=spark)["q6"].num_rows == 1


def test_run_on_bobox_datagen_output(spark, tpch, tmp_path):
    """Single <table>.parquet files (no Spark manifest): split by order key on the fly."""
    want = {q: duckdb_answer(q, tpch) for q in QUERIES}
    views = tmp_path / "views"
    run = spark_run_detailed(QUERIES, tpch, spark=spark, partitions=3, view_cache=views)
    assert run.split and run.partitions == 3 and run.fused
    check_all(run.tables, want)
    (home,) = views.iterdir()
    assert sorted(p.name for p in home.glob("part-*")) == ["part-0", "part-1", "part-2"]
    stamps = {p: p.stat().st_mtime_ns for p in home.rglob("*.parquet") if not p.is_symlink()}
    run = spark_run_detailed(QUERIES, tpch, spark=spark, partitions=3, view_cache=views, fuse=False)
    assert not run.fused
    check_all(run.tables, want)
    assert {p: p.stat().st_mtime_ns for p in home.rglob("*.parquet") if not p.is_symlink()} == stamps  # reused
    # the default: one partition per executor and NUMA node
    run = spark_run_detailed(["q1", "q18"], tpch, spark=spark, view_cache=views)
    assert run.partitions == default_partitions(spark)
    check_all(run.tables, want, ["q1", "q18"])


def test_run_splits_a_spark_folder_into_another_count(spark, sdata, answers, tmp_path):
    run = spark_run_detailed(QUERIES, sdata, spark=spark, partitions=2, view_cache=tmp_path)
    assert run.split and run.partitions == 2
    check_all(run.tables, answers)
    # its own count: the stored partitions, nothing split
    run = spark_run_detailed(["q6"], sdata, spark=spark, partitions=PARTITIONS, view_cache=tmp_path / "x")
    assert not run.split and not (tmp_path / "x").exists()


def test_bad_arguments(sdata):
    with pytest.raises(BoboxError, match="unknown query 'q2'"):
        spark_run(["q2"], sdata)
    with pytest.raises(BoboxError, match="partition must be 0..2"):
        spark_run(["q3"], sdata, inject_failure="q3:7")
    with pytest.raises(BoboxError, match="not run"):
        spark_run(["q3"], sdata, inject_failure="q1:0")
    with pytest.raises(DataError, match="does not exist"):
        spark_run(["q3"], sdata / "missing")
    with pytest.raises(DataError, match="TPC-H table 'lineitem' not found"):
        spark_run(["q3"], sdata / "lineitem")
    with pytest.raises(BoboxError, match="partitions must be a positive integer"):
        spark_run(["q3"], sdata, partitions=0)
    with pytest.raises(BoboxError, match="bad Spark master URL"):
        parse_master("mesos://x")
    assert parse_master("local[3]") == ("local[3,4]", 3)
    assert parse_master("local[2,1]") == ("local[2,1]", 2)


# ---------------------------------------------------------------------------- CLI


def bobox(*args, timeout=240, env=None):
    return subprocess.run([sys.executable, "-m", "bobox_sched", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=dict(os.environ, **env) if env else None)


def test_cli_run_writes_parquet(sdata, answers, tmp_path):
    out = tmp_path / "answers"
    p = bobox("spark", "run", "q1", "q10", "q18", "--data", sdata, "--output", out, "--master", "local[2]",
              "--inject-failure", "q10:0", "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["partitions"] == PARTITIONS and summary["retried"]
    for q in ("q1", "q10", "q18"):
        compare_tables(pq.read_table(out / f"{q}.parquet"), answers[q])


def test_cli_run_on_bobox_datagen_output(tpch, tmp_path):
    out = tmp_path / "answers"
    p = bobox("spark", "run", "q3", "q18", "--data", tpch, "--partitions", 2, "--output", out, "--master", "local[2]",
              "--json", env={"BOBOX_SPARK_VIEWS": str(tmp_path / "views")})
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["partitions"] == 2 and summary["split_on_the_fly"]
    assert "split by order key on the fly" in p.stderr
    assert len(list((tmp_path / "views").glob("*/part-*"))) == 2
    for q in ("q3", "q18"):
        compare_tables(pq.read_table(out / f"{q}.parquet"), duckdb_answer(q, tpch))
    # the layout of bobox run --output: written atomically, a manifest marks the complete set
    assert outputs.complete(out)
    assert sorted(json.loads((out / outputs.RESULTS_MANIFEST).read_text())["files"]) == ["q18.parquet", "q3.parquet"]


@pytest.mark.parametrize("args,message", [
    (["spark", "run", "q99", "--data", "{data}"], "unknown query 'q99'"),
    (["spark", "run", "q1", "--data", "{data}/nope"], "does not exist"),
    (["spark", "run", "q1", "--data", "{data}/lineitem"], "TPC-H table 'lineitem' not found"),
    (["spark", "run", "q1", "--data", "{data}", "--partitions", "0"], "--partitions must be positive"),
    (["spark", "run", "q1", "--data", "{data}", "--inject-failure", "q1:x"], "partition must be 0..2"),
    (["spark", "run", "q1", "--data", "{data}", "--master", "bogus://x"], "bad Spark master URL"),
    (["spark", "run", "q1", "--data", "{data}", "--master", "spark://127.0.0.1:{port}"], "cannot reach Spark master"),
    (["spark", "run", "q1", "--data", "{data}", "--inject-failure", "q1"], "bad --inject-failure"),
    (["spark", "report", "{data}/nope"], "does not exist"),
    (["spark", "datagen", "--sf", "-1"], "--sf must be positive"),
    (["spark", "bench", "q1", "--repeat", "0"], "--repeat must be positive"),
    (["datagen", "--partitions", "2"], "need --spark"),
])
def test_cli_bad_input_one_line_exit_2(sdata, args, message):
    port = free_port()
    # refused before Spark starts: forked from a process that imported the command once
    p = clirun.bobox(*[a.format(data=sdata, port=port) for a in args], cwd=ROOT, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], p.stderr


def test_cli_help():
    for sub in ("datagen", "run", "report", "bench"):
        p = clirun.bobox("spark", sub, "--help", cwd=ROOT, timeout=60)
        assert p.returncode == 0 and "--master" in p.stdout


# ---------------------------------------------------------------------------- stage 3


def write_csv(path, rows, columns):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, columns)
        w.writeheader()
        w.writerows(rows)


def test_report_summarizes_runs_and_hosts(spark, tmp_path):
    cols = ["experiment", "host", "run_id", "series", "x", "metric", "value", "repeat"]
    a, b = tmp_path / "host-a", tmp_path / "host-b"
    a.mkdir()
    b.mkdir()
    rows = []
    for run, vals in (("r1", [1.0, 3.0]), ("r2", [2.0, 10.0])):
        for i, v in enumerate(vals):
            rows.append(dict(experiment="packet-size", host="a", run_id=run, series="bobox", x="65536",
                             metric="seconds", value=v, repeat=i))
            rows.append(dict(experiment="packet-size", host="a", run_id=run, series="bobox", x="4096",
                             metric="seconds", value=v * 2, repeat=i))
    write_csv(a / "packet-size.csv", rows, cols)
    # Another host: columns in another order plus an extra one.
    cols_b = ["value", "metric", "x", "series", "run_id", "host", "experiment", "repeat", "threads"]
    write_csv(b / "packet-size.csv", [dict(experiment="packet-size", host="b", run_id="r1", series="bobox",
                                           x="65536", metric="seconds", value=5.0, repeat=0, threads=2)], cols_b)
    write_csv(b / "schedulers.csv", [dict(experiment="schedulers", host="b", run_id="r1", series=s, x="q1",
                                          metric="seconds", value=v, repeat=0, threads=2)
                                     for s, v in (("bobox", 0.5), ("simple", 0.7))], cols_b)
    out = tmp_path / "report"
    res = spark_report([a, b], out, spark=spark, progress=False)
    assert (res["runs"], res["hosts"], res["files"], res["rows"]) == (3, 2, 3, 11)
    with open(out / "summary.csv", newline="") as fh:
        summary = list(csv.DictReader(fh))
    assert list(summary[0]) == list(SUMMARY_COLUMNS)
    by = {(r["experiment"], r["series"], r["x"]): r for r in summary}
    big = by[("packet-size", "bobox", "65536")]  # values 1, 3, 2, 10 (host a) and 5 (host b)
    assert (float(big["median"]), float(big["min"]), float(big["max"])) == (3.0, 1.0, 10.0)
    assert (big["n"], big["runs"], big["hosts"]) == ("5", "3", "2")
    small = by[("packet-size", "bobox", "4096")]
    assert (float(small["median"]), small["runs"], small["hosts"]) == (5.0, "2", "1")
    # x sorted numerically within a series: 4096 before 65536
    xs = [r["x"] for r in summary if r["experiment"] == "packet-size"]
    assert xs == ["4096", "65536"]
    text = (out / "report.md").read_text()
    assert text.count("## Summary of 3 runs on 2 hosts") == 1
    assert "### packet-size" in text and "### schedulers" in text
    assert outputs.complete(out, REPORT_MANIFEST)  # summary.csv and report.md: a complete set
    # A second report replaces its section, keeping what else is in report.md.
    (out / "report.md").write_text("# Experiments\n\nmine\n\n" + text.split("# Experiments\n", 1)[1]
                                   + "\n## Later section\n\nkept\n")
    spark_report([a], out, spark=spark, progress=False)
    text = (out / "report.md").read_text()
    assert "## Summary of 2 runs on 1 hosts" in text and "Summary of 3 runs" not in text
    assert "mine" in text and "## Later section\n\nkept" in text


def test_report_bad_input(tmp_path):
    with pytest.raises(DataError, match="no experiment CSV files"):
        spark_report([tmp_path], tmp_path / "out")
    (tmp_path / "x.csv").write_text("experiment,host\nA,b\n")
    with pytest.raises(DataError, match="lacks column 'run_id'"):
        spark_report([tmp_path], tmp_path / "out")


# ---------------------------------------------------------------------------- standalone cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def start(cmd, log: Path, env) -> subprocess.Popen:
    """A JVM in its own process group (killed as a group in the end)."""
    return subprocess.Popen([str(c) for c in cmd], stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def master_state(webui: int) -> dict:
    """The master's state from its web UI; OSError while it is not serving JSON yet (a
    starting master may answer /json/ with its HTML page for a moment)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as r:
        body = r.read()
    try:
        return json.loads(body)
    except ValueError:
        raise OSError(f"master web UI answered with no JSON yet: {body[:60]!r}") from None


@contextlib.contextmanager
def loopback_cluster(tmp_path):
    """A standalone Spark cluster on 127.0.0.1 -- a master and 2 workers of 1 core each --
    and a session on it once both executors registered; everything stopped on exit (the
    processes' groups killed if they linger). Logs in `tmp_path`."""
    import pyspark

    env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1")
    port, webui = free_port(), free_port()
    procs = []
    spark = None
    try:
        procs.append(start([spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                            "--port", port, "--webui-port", webui], tmp_path / "master.log", env))
        url = f"spark://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:  # the master listening
            try:
                master_state(webui)
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "master.log").read_text()[-2000:]
                time.sleep(0.5)
        for i in range(2):
            procs.append(start([spark_class(), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                "--cores", 1, "--memory", "1g", "--webui-port", 0, "--work-dir", tmp_path / f"w{i}"],
                               tmp_path / f"worker{i}.log", env))
        while True:
            try:
                if master_state(webui).get("aliveworkers", 0) >= 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "worker0.log").read_text()[-2000:]
            time.sleep(0.5)

        spark = spark_session(url, executor_cores=1, conf={"spark.executor.memory": "512m"})
        sc = spark.sparkContext
        while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # the driver and 2 executors
            assert time.monotonic() < deadline, "executors did not register"
            time.sleep(0.2)
        yield spark
    finally:
        if spark is not None:
            spark.stop()
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One standalone cluster for the module's last two tests: starting one (a master, two
    workers, two executors and the driver's session: JVMs) took about 70 CPU-s on the
    2-core CI machine (measurements/2026-11-27-test-time/README.md, eighth session)."""
    with loopback_cluster(tmp_path_factory.mktemp("cluster")) as spark:
        yield spark


def test_standalone_cluster_on_loopback(sdata, answers, cluster):
    """Master + 2 workers (1 core each) on 127.0.0.1: the two-stage job, then a retry."""
    spark = cluster
    assert slots(spark) == 2

    run = spark_run_detailed(QUERIES, sdata, spark=spark)
    assert not run.fused  # two slots: partial tasks, shuffle by query, 2 combine tasks
    check_all(run.tables, answers)
    executors = {h for _, h in run.attempts.values()}
    assert executors and all(not h.endswith(f":{os.getpid()}") for h in executors)

    run = spark_run_detailed(["q3", "q10"], sdata, spark=spark, inject_failure="q10:2")
    check_all(run.tables, answers, ["q3", "q10"])
    assert run.attempts[("q10", 2)][0] == 1 and run.attempts[("q10", 0)][0] == 0


def test_region_channels_on_the_standalone_cluster(cluster):
    """A parallel region's channels as Spark partitions (tests/test_spark_regions.py) on
    the same cluster: channels run in the executors' processes, 2 at a time; the driver's
    merger restores the order."""
    from test_spark_regions import check, sequential_outputs

    from bobox_sched import Scheduler

    with Scheduler(threads_per_node=2, pin=False) as sched:
        hosts = check(cluster, sched, sequential_outputs(sched), degrees=(2, 3))
    assert hosts and all(not h.endswith(f":{os.getpid()}") for h in hosts)
    assert len(hosts) == 2  # both executors ran channels
