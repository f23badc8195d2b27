"""``bobox experiment streams`` in a tiny configuration (10 operators, one cost per shape,
sub-second runs): the CSV in the documented long format, both PNGs, the report section and
the JSON keys of issue 13; the graph shapes; bad input. No timing assertions."""

from __future__ import annotations

import json
import threading

import numpy as np
import clirun
import pytest

from experiments.framework import CSV_COLUMNS, Ctx
from experiments.streams_exp import exp_streams, queue_for, run_once
from experiments.streams_ops import (MIXED_WIDTH, RELEASE_FLOPS, SHAPES, Cost, Meter, build, burn, burn_for, burn_held,
                                     burn_rows, burn_rows_for, burn_rows_held, n_workers, row_ids)
from test_experiments import check_png, read_csv


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Every kernel of the runs compiled (or loaded from numba's cache) before any run's
    clock, as the experiment does: row_ids too -- in a fresh clone its first load made a
    0.6 s manual pipeline run deliver no tuple (fresh-check, 2026-12-02)."""
    burn(1.0, 10)
    burn_held(1.0, 10)
    one = np.zeros(1, np.int64)
    burn_rows(one, 10)
    burn_rows_held(one, 10)
    row_ids(0, 1)


def test_kernels_release_the_gil_only_for_costly_tuples():
    """Below RELEASE_FLOPS a tuple's kernel keeps the GIL (a release hands it to a
    waiting thread on another core, which costs more than the kernel), from it on it
    releases it, counting every row of the tuple; both compute the same value, the sum
    of the rows' own."""
    for k in (burn, burn_rows):
        assert k.targetoptions.get("nogil") is True
    for k in (burn_held, burn_rows_held):
        assert not k.targetoptions.get("nogil")
    assert burn_for(1) is burn_held and burn_for(RELEASE_FLOPS - 1) is burn_held
    assert burn_for(RELEASE_FLOPS) is burn and burn_for(100_000) is burn
    assert burn_rows_for(RELEASE_FLOPS // 64 - 1, 64) is burn_rows_held
    assert burn_rows_for(RELEASE_FLOPS // 64 + 1, 64) is burn_rows
    x = np.array([3, 7, 11], np.int64)
    for flops in (1, 1000, RELEASE_FLOPS):
        assert burn(3.0, flops) == burn_held(3.0, flops)
        assert burn_rows(x, flops) == burn_rows_held(x, flops)
        # a tuple's rows cost what the same rows cost as one-row tuples
        assert burn_rows(x, flops) == pytest.approx(sum(burn(float(v), flops) for v in x))
        assert burn(3.0, flops) != burn(7.0, flops)  # each row seeded by its value


def test_shapes_have_the_documented_operators():
    for shape, n, ops in (("pipeline", 30, 32), ("dp", 30, 33), ("mixed", 30, 33)):
        plan = build(shape, n, Cost(1), Meter(), threading.Event())
        assert len(plan) == ops and n_workers(shape, n) == 30
    assert [queue_for(s, 1000) for s in SHAPES] == [1, 1, 1]
    assert [queue_for(s, 100) for s in SHAPES] == [9, 4, 9]


@pytest.mark.parametrize("model", [{"model": "manual"}, {"model": "dedicated"}, {"threads": 2},
                                   {"elastic": True, "min_level": 1, "max_level": 2, "period_s": 0.1}])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_model_runs_every_shape_in_order(shape, model):
    """Tuples reach the sink in order on every edge, under the model asked for: manual
    has no thread of its own (the source's thread runs the graph), dedicated one per
    input port besides the source's, dynamic its scheduler threads (all of them running
    when static, at most max_level when elastic)."""
    r = run_once(shape, 20, 100, {"queue_capacity": queue_for(shape, 20), **model}, 0.6, 0.2)
    assert r["violations"] == 0 and r["tuples"] > 0 and len(r["samples"]) == 3
    ports = {"pipeline": 20 + 1, "dp": 1 + 20 + 20, "mixed": 1 + 20 + MIXED_WIDTH}[shape]  # split, workers, sink
    ran = (r["model"], r["elastic"], r["threads"])
    if "elastic" in model:
        assert ran == ("dynamic", True, 2) and r["level"] in (1, 2)
    elif "threads" in model:
        assert ran == ("dynamic", False, 2) and r["level"] == 2
    else:
        assert ran == (model["model"], False, {"manual": None, "dedicated": ports + 1}[model["model"]])
        assert r["level"] is None


@pytest.mark.parametrize("shape", SHAPES)
def test_tuples_of_several_rows_arrive_whole_and_in_order(shape, monkeypatch):
    """rows=5: the source numbers rows 0, 1, 2, ... in tuples of 5; the workers see whole
    tuples of 5 consecutive rows (each tuple once per worker on its path), and the sink
    counts rows, in order."""
    from experiments.streams_ops import WorkRows

    seen = []
    orig = WorkRows.on_packet

    def spy(self, ctx, port, pkt):
        seen.append(pkt.columns["x"].copy())
        orig(self, ctx, port, pkt)

    monkeypatch.setattr(WorkRows, "on_packet", spy)
    r = run_once(shape, 20, 10, {"queue_capacity": queue_for(shape, 20), "threads": 2}, 0.6, 0.2, rows=5)
    assert r["violations"] == 0 and r["tuples"] > 0 and seen
    assert all(len(x) == 5 and x[0] % 5 == 0 and (np.diff(x) == 1).all() for x in seen)


def test_rows_per_tuple_must_be_positive():
    with pytest.raises(ValueError):
        build("mixed", 20, Cost(1), Meter(), threading.Event(), rows=0)


@pytest.mark.parametrize("ncpu", [2, 16, 64])
def test_elastic_settings_leave_the_minimum_at_one_thread(ncpu):
    """The experiment's elastic settings keep ``min_level`` at 1 on any machine: the
    deadlock rule (1 + the most input ports) would raise it to 11 on the mixed graph (its
    Snk has 10 ports), which on 16 CPUs pinned elastic far above the best static point
    (the module doc). No adaptation happens in this run (one period is an hour)."""
    from experiments.streams_exp import settings_for

    cfg = settings_for(True, ncpu, 20)
    kw = {"elastic": True, "min_level": cfg["min_level"], "max_level": min(cfg["max_level"], 12), "period_s": 3600}
    r = run_once("mixed", 20, 100, {"queue_capacity": queue_for("mixed", 20), **kw}, 0.3, 0.1)
    assert cfg["min_level"] == 1 and r["level"] == 1 and r["violations"] == 0


@pytest.mark.slow
def test_tiny_experiment_writes_csv_png_report_and_json(tmp_path):
    import topology as T

    ctx = Ctx(out=tmp_path, repeat=1, quick=True, data_arg=None, sf=None, threads_per_node=None, virtual_nodes=None,
              progress=False, command="bobox experiment streams (test)")
    ctx.topo = T.probe()
    costs = {"pipeline": (1,), "dp": (10_000,), "mixed": (100,)}
    out = exp_streams(ctx, 10, {"sample_s": 0.2, "static_s": 0.4, "period_s": 0.2, "elastic_s": 1.2,
                                "sweep": [1, 2], "costs": costs})
    assert out["fifo_ok"] is True
    for shape, (c,) in costs.items():
        assert set(out["static"][shape][str(c)]) == {"1", "2"}
        e = out["elastic"][shape][str(c)]
        assert set(e) == {"level", "throughput"} and 1 <= e["level"] <= out["settings"]["max_level"]
        best = max(out["static"][shape][str(c)].values())
        ratio = out["elastic_vs_best_static"][shape][str(c)]
        assert best > 0 and ratio == pytest.approx(e["throughput"] / best, abs=1e-3)  # (all three rounded)
    assert set(out["dynamic_vs_dedicated"]) == set(out["dynamic_vs_manual"]) == {"100"}
    json.dumps(out)
    header, rows = read_csv(tmp_path / "streams.csv")
    assert header == CSV_COLUMNS and rows and all(r["experiment"] == "streams" for r in rows)
    series = {r["series"] for r in rows}
    assert {"manual", "dedicated", "dynamic-1", "dynamic-2", "elastic", "elastic-nocap"} <= series
    check_png(tmp_path / "streams.png")
    check_png(tmp_path / "streams-elastic.png")
    report = (tmp_path / "report.md").read_text()
    assert report.count("<!-- bobox:streams -->") == 1 and "Known deviation" in report and "placement `fill`" in report
    assert out["handoff"]["median_us"] > 0
    assert f"Waking a sleeping thread costs {out['handoff']['median_us']:.1f} us here" in report


@pytest.mark.slow
def test_one_shape_runs_alone(tmp_path):
    """shapes=["mixed"]: only the mixed graph runs (its goal and the load-change runs
    included); the figures and the report cover it alone."""
    import topology as T

    ctx = Ctx(out=tmp_path, repeat=1, quick=True, data_arg=None, sf=None, threads_per_node=None, virtual_nodes=None,
              progress=False, command="bobox experiment streams --shapes mixed (test)")
    ctx.topo = T.probe()
    costs = {"pipeline": (1,), "dp": (10_000,), "mixed": (100,)}
    out = exp_streams(ctx, 10, {"sample_s": 0.2, "static_s": 0.4, "period_s": 0.2, "elastic_s": 1.2,
                                "sweep": [1, 2], "costs": costs}, shapes=["mixed"])
    assert out["shapes"] == ["mixed"] and out["fifo_ok"] is True
    for key in ("static", "elastic", "elastic_uncapped", "manual", "dedicated", "elastic_vs_best_static"):
        assert set(out[key]) == {"mixed"}, key
    assert set(out["static"]["mixed"]["100"]) == {"1", "2"}
    assert set(out["dynamic_vs_dedicated"]) == set(out["dynamic_vs_manual"]) == {"100"}
    assert set(out["load_change"]) == {"oss", "paper"}
    assert set(out["settings"]["queue_capacity"]) == {"mixed"}
    json.dumps(out)
    _header, rows = read_csv(tmp_path / "streams.csv")
    assert {r["x"].split(":")[0] for r in rows} == {"mixed"}
    check_png(tmp_path / "streams.png")
    check_png(tmp_path / "streams-elastic.png")
    report = (tmp_path / "report.md").read_text()
    assert "mixed only (`--shapes`)" in report and "mixed graph, dynamic" in report
    assert "data parallel at cost" not in report and "| pipeline |" not in report


@pytest.mark.slow
def test_shapes_without_mixed_skip_its_goal_and_the_load_change(tmp_path):
    import topology as T

    ctx = Ctx(out=tmp_path, repeat=1, quick=True, data_arg=None, sf=None, threads_per_node=None, virtual_nodes=None,
              progress=False, command="bobox experiment streams --shapes dp (test)")
    ctx.topo = T.probe()
    out = exp_streams(ctx, 10, {"sample_s": 0.2, "static_s": 0.4, "period_s": 0.2, "elastic_s": 0.6,
                                "sweep": [1], "costs": {"dp": (1,)}}, shapes=("dp",), rows=4)
    assert out["shapes"] == ["dp"] and set(out["static"]) == {"dp"} and out["settings"]["tuple_rows"] == 4
    assert "dynamic_vs_manual" not in out and "load_change" not in out
    check_png(tmp_path / "streams.png")
    check_png(tmp_path / "streams-elastic.png")
    report = (tmp_path / "report.md").read_text()
    assert "data parallel at cost 1" in report and "mixed graph, dynamic" not in report and "load change" not in report
    assert "tuples of 4 rows" in report and "| FLOP/row |" in report
    assert "the goals, are for one-row tuples" in report
    _header, rows = read_csv(tmp_path / "streams.csv")
    assert {r["unit"] for r in rows if r["metric"] == "tuples_per_s"} == {"rows/s"}
    assert {r["unit"] for r in rows if r["metric"] == "tuples_per_cpu_s"} == {"rows/CPU-s"}


def test_shapes_are_taken_in_their_order_and_checked():
    from experiments.streams_exp import parse_shapes
    from experiments.streams_exp import chosen_shapes

    assert parse_shapes(None) is None and chosen_shapes(None) == SHAPES
    assert parse_shapes("mixed,pipeline") == chosen_shapes(["mixed", "pipeline"]) == ("pipeline", "mixed")
    for bad in ([], ["dp", "dp"], ["star"]):
        with pytest.raises(ValueError):
            chosen_shapes(bad)


@pytest.mark.parametrize("value,msg", [
    ("star", "'star' is not a graph shape"),
    ("", "'' is not a graph shape"),
    ("dp,", "'' is not a graph shape"),
    ("mixed,Pipeline", "'Pipeline' is not a graph shape"),
    ("dp,mixed,dp", "'dp' is named twice"),
])
def test_bad_shapes(tmp_path, value, msg):
    r = clirun.bobox("experiment", "streams", "--quick", "--shapes", value, "--out", tmp_path / "x", timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --shapes") and msg in lines[0]
    assert not (tmp_path / "x").exists()


def test_bad_input():
    for args, msg in ((["--ops", "5"], "--ops must be"), (["--ops", "10001"], "--ops must be"),
                      (["--repeat", "3"], "--repeat does not apply"), (["--tuple-rows", "0"], "--tuple-rows must be"),
                      (["--tuple-rows", "16385"], "--tuple-rows must be"),
                      (["--tuple-rows", "x"], "not an integer")):
        r = clirun.bobox("experiment", "streams", *args, timeout=120)
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error:") and msg in r.stderr
    for args in (["balancer", "--ops", "100"], ["ordered", "--shapes", "mixed"], ["tstream", "--tuple-rows", "8"]):
        r = clirun.bobox("experiment", *args, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1
        assert lines[0] == f"error: {args[1]} applies to 'bobox experiment streams' only"
