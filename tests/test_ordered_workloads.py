"""The ordered-processing workloads: the synthetic TPCx-BB streams (seedable, with the
properties the queries rely on), the five query chains and the parametric operators,
each under the ordered policy against the sequential run (egress digests)."""

from __future__ import annotations

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler
from operators.stream.ordered_gen import HOT_ITEM, N_CATEGORIES, clickstream, skewed_keys, store_sales
from operators.stream.ordered_micro import DigestSink, ParamPartitioned, ParamStateless, Replay
from operators.stream.ordered_queries import QUERIES, query_plan, stream_for

NO_COST = {"first": 0.0, "partitioned": 0.0, "other": 0.0}


def test_clickstream_is_seedable_and_shaped():
    a = clickstream(30_000, seed=5)
    b = clickstream(30_000, seed=5)
    c = clickstream(30_000, seed=6)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["item"], c["item"])
    assert np.all(np.diff(a["ts"]) >= 0)  # time order
    items = a["item"][a["item"] >= 0]
    top = np.bincount(items).argsort()[::-1][:3]
    assert HOT_ITEM in top  # Zipf: item 10001 is the third most popular rank
    assert set(np.unique(a["category"][a["item"] >= 0])) == set(range(N_CATEGORIES))
    assert 0.005 < (a["user"] < 0).mean() < 0.02 and 0.03 < (a["sales"] >= 0).mean() < 0.07
    # sessions: a user's clicks come in bursts separated by gaps beyond the timeout
    few = clickstream(30_000, seed=5, n_users=50)
    u = few["user"]
    one = few["ts"][u == np.bincount(u[u >= 0]).argmax()]
    gaps = np.diff(one)
    assert (gaps > 3600).any() and (gaps < 600).mean() > 0.5


def test_store_sales_tickets():
    s = store_sales(20_000, seed=3)
    assert np.all(np.diff(s["ticket"]) >= 0) and np.all(np.diff(s["ts"]) >= 0)
    sizes = np.bincount(s["ticket"])
    assert 2.5 < sizes.mean() < 6 and sizes.max() <= 32
    assert set(np.unique(s["store"])) <= set(range(1, 51))
    assert np.array_equal(s["date"], s["ts"] // 86400)


def test_skewed_keys():
    k = skewed_keys(20_000, 0.05, 1000, seed=1)
    assert k.min() >= 0 and k.max() < 1000
    assert np.abs(k - 500).mean() < 40  # concentrated in the middle
    u = skewed_keys(20_000, None, 1000, seed=1)
    assert np.abs(u - 500).mean() > 200


def _run(plan, policy, workers, **opts):
    with Scheduler(policy=policy, threads_per_node=workers, pin=False, **opts) as s:
        return s.submit(plan).result(300)


@pytest.fixture(scope="module")
def streams():
    return {q: stream_for(q, 24_000, seed=2) for q in QUERIES}


@pytest.mark.parametrize("query", QUERIES)
def test_query_chains_are_ordered(streams, query):
    """Each query under the ordered policy (several heuristics, schemes, p) gives the
    sequential run's egress, byte for byte."""
    ref = _run(query_plan(query, streams[query], 1024, costs=NO_COST), "simple", 1)
    assert ref["rows"] > 0
    for heuristic, scheme, p, workers in (("ct", "hybrid", None, 2), ("lp", "partitioned", 2, 2),
                                          ("qst", "hybrid", 7, 3), ("et", "shared", None, 2)):
        got = _run(query_plan(query, streams[query], 1024, costs=NO_COST, partitions=p), "ordered", workers,
                   heuristic=heuristic, scheme=scheme)
        assert got == ref, f"{query} {heuristic} {scheme} p={p}"


def test_query_plans_run_under_bobox_too(streams):
    ref = _run(query_plan("q4", streams["q4"], 1024, costs=NO_COST), "simple", 1)
    assert _run(query_plan("q4", streams["q4"], 1024, costs=NO_COST), "bobox", 2) == ref


def _micro(keys, sel, ps, partitions=100, rows=64):
    plan = Plan("micro")
    plan.add("source", Replay, {"k": keys, "v": keys / 100.0}, rows, 3)
    plan.add("sl", ParamStateless, cost_us=0.5, selectivity=sel)
    names = ["source", "sl"]
    if ps:
        plan.add("ps", ParamPartitioned, cost_us=0.5, state_size=8, partitions=partitions)
        names.append("ps")
    plan.add("egress", DigestSink)
    plan.chain(*(names + ["egress"]))
    return plan


@pytest.mark.parametrize("sel", [0.3, 1.0, 2.5])
def test_parametric_operators(sel):
    keys = np.random.default_rng(1).integers(0, 500, 5000).astype(np.int64)
    ref = _run(_micro(keys, sel, True), "simple", 1)
    assert abs(ref["rows"] - sel * len(keys)) < 0.1 * sel * len(keys) + 10
    for p in (100, 3):  # the output does not depend on the bucketing
        assert _run(_micro(keys, sel, True, partitions=p), "ordered", 3) == ref


def test_replay_sends_views_and_markers():
    cols = {"k": np.arange(10, dtype=np.int64), "v": np.arange(10.0)}
    plan = Plan("r")
    plan.add("source", Replay, cols, 3, 2)
    plan.add("egress", DigestSink)
    plan.chain("source", "egress")
    with Scheduler(policy="ordered", threads_per_node=1, pin=False) as s:
        h = s.submit(plan)
        res = h.result(60)
    assert res["rows"] == 10 and h.stats["latency"]["markers"] == 2
