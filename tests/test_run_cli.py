"""`bobox run` (the main job) and `bobox datagen` from the command line."""

import json
import shutil

import clirun
import pyarrow.parquet as pq
from operators.tpch_sql import compare_tables, duckdb_answer, output_columns


def bobox(*args, timeout=600):
    # forked from a process that imported the command once (tests/clirun.py)
    return clirun.bobox(*args, timeout=timeout)


def test_run_writes_answers_and_metrics(tpch, tmp_path):
    out = tmp_path / "out"
    r = bobox("run", "q1", "Q6", "q18", "--data", str(tpch), "--concurrency", "2", "--repeat", "2",
              "--output", str(out), "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    for q in ("q1", "q6", "q18"):
        got = pq.read_table(out / f"{q}.parquet")
        assert got.column_names == output_columns(q)
        compare_tables(got, duckdb_answer(q, tpch))
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["requests"] == 12 and set(summary["queries"]) == {"q1", "q6", "q18"}
    assert summary["scheduler"]["tasks"] > 0 and summary["mismatches"] == []
    assert 0 <= summary["serial_fraction"] < 1 and summary["predicted_speedup_64"] >= summary["predicted_speedup_16"]
    assert summary["peak_rss_bytes"] > 0 and "serial fraction" in r.stdout and "peak RSS" in r.stdout
    assert "tasks by locality step" in r.stdout and "q18" in r.stdout


def test_run_simple_policy_and_options(tpch):
    r = bobox("run", "q3", "--data", str(tpch), "--policy", "simple", "--packet-bytes", "16K",
              "--threads-per-node", "1", "--parallel", "3", "--concurrency", "1", "--repeat", "1", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "policy simple, 1 workers, packets of 16 KiB" in r.stdout


def test_run_in_domains(tpch, tmp_path):
    """The main job with the runtime in two domain processes: the same answers, the
    header says so, the metrics come from the domains."""
    out = tmp_path / "out"
    r = bobox("run", "q1", "q6", "--data", str(tpch), "--domains", "2", "--threads-per-node", "1",
              "--concurrency", "2", "--repeat", "1", "--output", str(out), "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "2 workers in 2 domains" in r.stderr
    for q in ("q1", "q6"):
        compare_tables(pq.read_table(out / f"{q}.parquet"), duckdb_answer(q, tpch))
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["requests"] == 4 and summary["mismatches"] == [] and summary["scheduler"]["tasks"] > 0
    assert summary["scheduler"]["workers"] == 2 and 0 <= summary["serial_fraction"] < 1
    # every process's PSS summed: the libraries the front and both domains map count once, not three times
    assert 0 < summary["peak_pss_bytes"] < summary["peak_rss_bytes"] and "peak PSS during the mix" in r.stdout
    r = bobox("run", "q1", "--data", str(tpch), "--domains", "zero")
    assert r.returncode == 2 and "--domains takes auto, off or 1 to" in r.stderr


def test_run_bad_input(tpch, tmp_path):
    r = bobox("run", "q1", "q99", "--data", str(tpch))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: unknown query 'q99'")
    r = bobox("run", "--data", str(tmp_path / "nope"))
    assert r.returncode == 2 and "data folder not found" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad"
    shutil.copytree(tpch, bad)
    (bad / "lineitem.parquet").write_text("not parquet")
    r = bobox("run", "q1", "--data", str(bad), "--no-progress")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "lineitem.parquet" in r.stderr
    r = bobox("run", "--concurrency", "0", "--data", str(tpch))
    assert r.returncode == 2 and "--concurrency must be positive" in r.stderr
    r = bobox("run", "--policy", "fifo")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_datagen_cached(tmp_path):
    out = tmp_path / "d"
    r = bobox("datagen", "--sf", "0.01", "--out", str(out))
    assert r.returncode == 0, r.stderr
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    r = bobox("datagen", "--sf", "0.01", "--out", str(out))
    assert r.returncode == 0 and {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes
    r = bobox("datagen", "--sf", "0.02", "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_every_subcommand_has_help():
    for sub in ("topology", "datagen", "run", "bench", "experiment", "spark"):
        r = bobox(sub, "--help")
        assert r.returncode == 0 and "usage: bobox" in r.stdout
