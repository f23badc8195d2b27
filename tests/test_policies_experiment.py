"""``bobox experiment policies`` (quick, one round, few rows): the CSV in the experiments'
long format, a valid PNG, its report section (replacing an older one, keeping the other
experiments'), the printed table and the JSON keys; every policy's output equal to the
reference; a configuration that fails is excluded with its reason; the digest sink's
equality; bad input. No timing assertions: the figures are whatever this machine
measured."""

import json

import numpy as np
import clirun
import pytest

from experiments.framework import CSV_COLUMNS
from test_experiments import check_png, read_csv

pytestmark = pytest.mark.slow

CONFIGS = ["bobox", "simple", "bobox+regions", "ordered-ct", "ordered-lp", "ordered-et", "ordered-qst",
           "streams-dynamic", "streams-dynamic-1t", "streams-elastic", "streams-manual"]
KEYS = {"configs", "throughput", "latency_p50_ms", "latency_p99_ms", "equal_to_reference", "ratio_to_bobox",
        "load_avg"}
OLD = ("<!-- bobox:regions -->\n## Parallel regions\n\nkept\n<!-- /bobox:regions -->\n\n"
       "<!-- bobox:policies -->\n## old policies section\n<!-- /bobox:policies -->\n")


def bobox(*args, timeout=300):
    # forked from a process that imported the command once (tests/clirun.py)
    return clirun.bobox(*args, timeout=timeout)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("policies")
    head = "# bobox-sched locality experiments\n\n## Machine\n\nx\n\nMeasurements: y\n\n"
    (out / "report.md").write_text(head + OLD)
    r = bobox("experiment", "policies", "--quick", "--repeat", "1", "--rows", "40000", "--out", out, "--json",
              "--no-progress", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r.stdout, json.loads(r.stdout.strip().splitlines()[-1])


def test_files(quick):
    out, _, _ = quick
    header, rows = read_csv(out / "policies.csv")
    assert header == CSV_COLUMNS and all(r["experiment"] == "policies" for r in rows)
    assert {r["metric"] for r in rows} >= {"rows_per_s", "rows_per_cpu_s", "latency_p50_ms", "latency_p99_ms",
                                           "equal_to_reference", "throughput_ratio_to_bobox", "loadavg_1min"}
    assert {r["series"] for r in rows} == set(CONFIGS) | {"machine", "ceiling", "bobox (cc=lock)"}
    workers = {r["x"] for r in rows if r["series"] == "bobox" and r["x"].isdigit()}
    assert len(workers) == 1  # the first part's x: the worker count
    assert {r["x"] for r in rows if r["series"] == "simple"} == workers | {"chain-1", "chain-64", "tstream-gs"}
    check_png(out / "policies.png")
    check_png(out / "policies-sweep.png")
    report = (out / "report.md").read_text()
    assert report.count("<!-- bobox:policies -->") == 1 and report.count("<!-- /bobox:policies -->") == 1
    assert "old policies section" not in report and "kept" in report  # replaced; the others' sections stay
    assert "Command: `bobox experiment policies --quick" in report and "(policies.png)" in report
    assert "TStream" in report and "Waking a sleeping thread costs" in report
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]


def test_table_and_summary(quick):
    _, stdout, s = quick
    assert KEYS <= set(s)
    assert s["configs"] == CONFIGS and s["excluded"] == {}
    assert s["equal_to_reference"] == {n: True for n in CONFIGS}
    for key in ("throughput", "latency_p50_ms", "latency_p99_ms", "ratio_to_bobox"):
        assert set(s[key]) == set(CONFIGS)
        assert all(v is not None and v > 0 for v in s[key].values()), key
    assert s["ratio_to_bobox"]["bobox"] == 1.0
    assert len(s["load_avg"]["before"]) == len(s["load_avg"]["after"]) == 3
    assert len(s["ceiling_before_after"]) == 2 and all(x > 0 for x in s["ceiling_before_after"])
    assert s["handoff"]["median_us"] > 0 and s["handoff"]["round_trips"] > 0
    assert s["rows"] == 40000 and s["repeat"] == 1 and s["workers"] >= 1
    lines = stdout.splitlines()
    assert lines[1].split()[:4] == ["config", "threads", "rows/s", "x"]
    assert [ln.split()[0] for ln in lines[2:2 + len(CONFIGS)]] == CONFIGS
    assert lines[-2].startswith("report: ")


def test_where_each_policy_wins(quick):
    """The second part: every configuration on the chain at 1, 64 and 4,096 rows per
    tuple, each equal to its size's reference; TStream's GS under every policy that can
    run it, serially equivalent, the others excluded with their reason; the printed
    table and the report's section."""
    out, stdout, s = quick
    sw, gs = s["sweep"], s["gs"]
    assert sw["sizes"] == [1, 64, 4096] and sw["excluded"] == {}
    assert sw["rows"] == {"1": 2000, "64": 40000, "4096": 40000}
    assert set(sw["throughput"]) == set(CONFIGS)
    assert all(sw["equal"][n] == {"1": True, "64": True, "4096": True} for n in CONFIGS), sw["equal"]
    assert all(sw["throughput"][n][k] > 0 for n in CONFIGS for k in ("1", "64", "4096"))
    assert all(sw["ratio_to_bobox"]["bobox"][k] == 1.0 for k in ("1", "64"))
    assert {sw["best"][k] for k in ("1", "64", "4096")} <= set(CONFIGS)
    assert gs["configs"] == ["bobox", "simple", "bobox+regions", "bobox (cc=lock)"]
    assert gs["cc"]["bobox (cc=lock)"] == "lock" and gs["cc"]["simple"] == "tstream"
    assert gs["serial_equivalent"] == {n: True for n in gs["configs"]}
    assert all(gs["throughput"][n] > 0 and gs["latency_p99_ms"][n] > 0 for n in gs["configs"])
    assert set(gs["excluded"]) == set(CONFIGS) - set(gs["configs"])
    assert "linear chains only" in gs["excluded"]["ordered-ct"]
    assert "state-access tasks" in gs["excluded"]["streams-manual"]
    assert gs["best"] in gs["configs"] and gs["events"] == 50_000
    lines = stdout.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("where each policy wins"))
    assert lines[i + 1].split()[:2] == ["config", "1-row"]
    assert [ln.split()[0] for ln in lines[i + 2:i + 2 + len(CONFIGS)]] == CONFIGS
    assert any(ln.startswith("best: 1-row: ") for ln in lines)
    report = (out / "report.md").read_text()
    assert "### Where each policy wins" in report and "(policies-sweep.png)" in report
    assert "TStream's grep-and-sum" in report


def test_sweep_sizes():
    from experiments.policies_sweep import PACKETS, size_rows

    assert size_rows(1, 300_000, True) == PACKETS[True] and size_rows(64, 10**6, False) == 64 * PACKETS[False]
    assert size_rows(4096, 300_000, True) == 300_000 and size_rows(64, 1000, True) == 1000


def test_failing_configuration_is_excluded_with_its_reason(tmp_path, monkeypatch):
    """`ordered` runs linear chains only: with parallel regions (splitter, merger) it must
    refuse at submit, and the experiment reports that instead of failing."""
    import topology as T
    from experiments import policies as P
    from experiments.framework import Ctx

    base = P.configs(2, None)
    broken = P.Config("ordered+regions", "ordered with parallelism=2", {"policy": "ordered"}, parallelism=2,
                      threads="2")
    monkeypatch.setattr(P, "configs", lambda w, pn: [base[0], broken])
    ctx = Ctx(out=tmp_path, repeat=1, quick=True, data_arg=None, sf=None, threads_per_node=None, virtual_nodes=None,
              progress=False, command="bobox experiment policies (test)")
    ctx.topo = T.probe()
    s = P.exp_policies(ctx, 2, None, 20000)
    assert s["configs"] == ["bobox"] and s["equal_to_reference"] == {"bobox": True}
    assert "ordered+regions" in s["excluded"] and "linear chain" in s["excluded"]["ordered+regions"]
    assert "ordered+regions" in (tmp_path / "report.md").read_text()


class _Ctx:
    def set_result(self, v):
        self.result = v


def _digest(parts, wids):
    from bobox_sched.core.packet import Packet
    from bobox_sched.control.punct import Window
    from experiments.policies import DigestSink

    sink, ctx = DigestSink(), _Ctx()
    for cols, wid in zip(parts, wids):
        sink.on_packet(ctx, "in", Packet({k: np.asarray(v) for k, v in cols.items()}))
        sink.on_punct(ctx, "in", Window(wid))
    sink.on_end(ctx)
    return ctx.result


def _window(start, keys, totals):
    n = len(keys)
    return {"window_start": [start] * n, "window_end": [start + 10] * n, "key": keys, "n": [1] * n,
            "total": totals}


def test_digest_sink_equality():
    """Rows of a window are a multiset (order within a window free); anything else counts."""
    a = _digest([_window(0, [1, 2, 3], [0.5, 1.5, 2.5]), _window(10, [1, 2], [1.0, 2.0])], [10, 20])
    within = _digest([_window(0, [3, 1, 2], [2.5, 0.5, 1.5]), _window(10, [2, 1], [2.0, 1.0])], [10, 20])
    assert a == within and a["rows"] == 5 and a["windows"] == 2
    value = _digest([_window(0, [1, 2, 3], [0.5, 1.5, 2.5 + 1e-12]), _window(10, [1, 2], [1.0, 2.0])], [10, 20])
    moved = _digest([_window(0, [1, 2, 3], [0.5, 1.5, 2.5]), _window(10, [1, 2], [1.0, 2.0])], [10, 30])
    assert value["digest"] != a["digest"] and moved["digest"] != a["digest"]


@pytest.mark.parametrize("args, words", [
    (["--sf", "1"], "--sf does not apply to the policies experiment"),
    (["--threads-per-node", "2"], "--threads-per-node does not apply"),
    (["--ops", "10"], "--ops applies to"),
    (["--bytes", "1M"], "--bytes applies to 'bobox experiment numa-factor / all' only"),
    (["--workers", "0"], "--workers"),
    (["--workers", "1,2"], "--workers takes one positive integer"),
    (["--rows", "0"], "--rows"),
    (["--repeat", "0"], "--repeat"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, words):
    r = bobox("experiment", "policies", "--out", tmp_path / "o", *args, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert words in r.stderr and r.stdout == ""
    assert not (tmp_path / "o").exists()
