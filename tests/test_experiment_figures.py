"""The experiments' figures have exactly the panels that have data
(``experiments/framework.py``: ``panel_grid``, ``panel_rows``): a run of a subset of
an experiment's figures (``--figures``, ``--shapes``, a cost set per shape) leaves no
empty axes in its PNG. The plotting functions get made-up summaries: no measurement."""

from __future__ import annotations

import pytest
from test_experiments import check_png

from experiments import ordered, streams_exp
from experiments.framework import Ctx, Recorder, panel_grid, panel_rows


def _ctx(out):
    return Ctx(out=out, repeat=1, quick=True, data_arg=None, sf=None, threads_per_node=None, virtual_nodes=None,
               progress=False, command="bobox experiment (test)")


def _panels(fig) -> list[tuple]:
    """One entry per grid cell that holds an axes (a twin drawn over a panel shares it)."""
    return sorted({ax.get_subplotspec().get_geometry() for ax in fig.axes})


def _titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def test_panel_grid_has_exactly_n_axes_in_reading_order():
    fig, axes = panel_grid(5, ncols=3)
    assert len(axes) == len(fig.axes) == 5
    assert [ax.get_subplotspec().get_geometry() for ax in axes] == [(2, 3, k, k) for k in range(5)]
    fig, axes = panel_grid(2, ncols=3)  # fewer panels than columns: one row of two
    assert [ax.get_subplotspec().get_geometry() for ax in axes] == [(1, 2, 0, 0), (1, 2, 1, 1)]


def test_panel_rows_holds_each_rows_count_from_the_left():
    fig, rows = panel_rows([1, 3, 2])
    assert [len(r) for r in rows] == [1, 3, 2] and len(fig.axes) == 6
    assert [[ax.get_subplotspec().get_geometry()[2] for ax in r] for r in rows] == [[0], [3, 4, 5], [6, 7]]


@pytest.mark.parametrize("counts", [[], [2, 0]])
def test_panel_rows_refuses_an_empty_row(counts):
    with pytest.raises(ValueError, match="at least one panel"):
        panel_rows(counts)


def test_ordered_figure_has_only_the_figures_that_ran(tmp_path):
    """``bobox experiment ordered --figures 10,11,12``: three panels (figure 12's twin
    axis drawn over its panel), not the nine cells of every figure."""
    queries, workers = ["q1", "q2"], [1, 2]
    per_query = {"throughput": 2e5, "latency_ms": 1.0}
    light = {"speedup_nonblocking": 1.0, "speedup_lock": 0.9, "cost_us_nonblocking": 3.0, "cost_us_lock": 3.2}
    s = {"operator_latency_ms": {"10": {"hybrid": 0.4, "partitioned": 0.6}, "100": {"hybrid": 1.5, "partitioned": 2.0}},
         "hybrid_vs_partitioned_queries": {q: {"hybrid": per_query, "hybrid_auto": per_query,
                                               "partitioned": per_query, "ratio": 1.0} for q in queries},
         "light_operator": {"1": light, "2": light}}
    ctx = _ctx(tmp_path)
    fig = ordered.plot(ctx, Recorder(ctx, ordered.NAME), s, workers, queries)
    assert _titles(fig) == ["Fig 10: latency vs per-tuple cost", "Fig 11: schemes per query (CT)",
                            "Fig 12: light stateless operator"]
    assert len(_panels(fig)) == 3
    check_png(tmp_path / "ordered.png")


def test_streams_figures_have_a_panel_per_cost_of_each_shape(tmp_path):
    """One cost for the pipeline, two for the data-parallel graph: three panels in
    ``streams.png`` (not a 2 x 2 grid), one elastic trace per shape in
    ``streams-elastic.png``."""
    costs = {"pipeline": (1,), "dp": (1, 10_000)}
    static = ["dynamic-1", "dynamic-2"]
    trace = [(0.0, 100.0, 1), (1.0, 120.0, 2)]
    res = {(shape, c, name): {"value": 100.0, "level": 2, "trace": trace}
           for shape, cs in costs.items() for c in cs for name in static + ["manual", "dedicated", "elastic",
                                                                               "elastic-nocap"]}
    cfg = {"costs": costs, "tuple_rows": 1, "ops": 10, "elastic_s": 2.0}
    fig, elastic = streams_exp._plot(_ctx(tmp_path), res, None, static, {}, cfg, shapes=("pipeline", "dp"))
    assert _titles(fig) == ["pipeline, 1 FLOP/tuple", "dp, 1 FLOP/tuple", "dp, 10000 FLOP/tuple"]
    assert len(_panels(fig)) == 3
    assert len(_panels(elastic)) == 2
    check_png(tmp_path / "streams.png")
    check_png(tmp_path / "streams-elastic.png")
