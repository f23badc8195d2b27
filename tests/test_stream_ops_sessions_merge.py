"""Sessionization and the timestamp merge against numpy/pyarrow references: sessions
spanning packets (skewed keys, empty packets), emitted in order of their end; the merge's
output ordered whatever the arrival timing, ties from ``a`` first. Under both policies."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bobox_sched import Plan
from bobox_sched.control import model as M
from bobox_sched.control.punct import Window
from bobox_sched.core.sources import QueueSource, StreamChannel
from operators.stream import Sessionize, TimeMerge
from stream_ops_support import POLICIES, Feed, Record, chain_plan, cut, puncts, rows, scheds, skewed_keys  # noqa: F401

SETTINGS = settings(max_examples=25, deadline=None)
DT = {"ts": np.int64, "k": np.int64, "v": np.float64}
AGGS = [("n", "count", None), ("total", "sum", "v"), ("top", "max", "v")]


@st.composite
def keyed_stream(draw, max_rows=600):
    n = draw(st.integers(0, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    gaps = rng.exponential(draw(st.sampled_from([0.5, 3.0, 20.0])), n).astype(np.int64)
    cols = {"ts": np.cumsum(gaps).astype(np.int64),
            "k": skewed_keys(rng, n, draw(st.integers(1, 40)), draw(st.sampled_from([0.0, 1.2, 3.0]))),
            "v": rng.normal(size=n)}
    return cols, cut(cols, draw(st.lists(st.integers(0, 90), max_size=15)))


def reference_sessions(cols, timeout):
    n = len(cols["ts"])
    order = np.lexsort((np.arange(n), cols["k"]))  # by key, arrival order inside
    k, ts = cols["k"][order], cols["ts"][order]
    new = np.ones(n, np.bool_)
    new[1:] = (k[1:] != k[:-1]) | (ts[1:] - ts[:-1] > timeout)
    sid = np.cumsum(new)
    t = pa.table({"sid": sid, "k": k, "ts": ts, "v": cols["v"][order]})
    g = t.group_by("sid").aggregate([("k", "min"), ("ts", "min"), ("ts", "max"), ("v", "count"), ("v", "sum"),
                                     ("v", "max")])
    out = {"k": g["k_min"].to_numpy(), "session_start": g["ts_min"].to_numpy(), "session_end": g["ts_max"].to_numpy(),
           "n": g["v_count"].to_numpy(), "total": g["v_sum"].to_numpy(), "top": g["v_max"].to_numpy()}
    o = np.lexsort((out["k"], out["session_end"]))
    return {c: v[o] for c, v in out.items()}


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=keyed_stream(), timeout=st.integers(0, 60))
def test_sessions_match_reference_in_end_order(scheds, policy, data, timeout):
    cols, packets = data
    items = list(packets)
    items.insert(len(items) // 2, Window("dropped"))  # removes punctuations
    plan = chain_plan("sess", items, DT, (Sessionize, (DT, ["k"], "ts", timeout, AGGS), {}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    assert puncts(seen) == []
    got = rows(seen, ["k", "session_start", "session_end", "n", "total", "top"])
    want = reference_sessions(cols, timeout)
    assert len(got["k"]) == len(want["k"])
    for c in ("k", "session_start", "session_end", "n"):
        np.testing.assert_array_equal(got[c], want[c], err_msg=c)  # exact order: end, then key
    np.testing.assert_allclose(got["total"], want["total"], rtol=1e-9)
    np.testing.assert_allclose(got["top"], want["top"])


class Watch(Record):
    """Records into a shared list and sets `event` once `threshold` rows arrived."""

    def __init__(self, seen, event, threshold):
        self.seen, self.event, self.threshold, self.n = seen, event, threshold, 0

    def on_packet(self, ctx, port, pkt):
        super().on_packet(ctx, port, pkt)
        self.n += pkt.nrows
        if self.n >= self.threshold:
            self.event.set()


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "domains"])  # fed and watched from here
def test_sessions_close_while_the_stream_runs_and_many_keys_compact(scheds, policy):
    """50 000 keys seen once each: their sessions close on the watermark while the stream
    is still open (the test waits for them before ending the stream), and the table of
    keys is compacted on the way (it does not keep 50 000 closed keys)."""
    n = 50_000
    ch = StreamChannel(capacity=4)
    seen, event, made = [], threading.Event(), []
    plan = Plan("many")
    plan.add("src", QueueSource, ch)
    plan.add("sess", lambda: made.append(Sessionize(DT, ["k"], "ts", 5, AGGS)) or made[-1])
    plan.add("sink", Watch, seen, event, n - 10)
    plan.chain("src", "sess", "sink")
    h = scheds[policy].submit(plan)
    try:
        for p in cut({"ts": np.arange(n, dtype=np.int64), "k": np.arange(n, dtype=np.int64), "v": np.ones(n)},
                     [5000] * 10):
            ch.put(p, timeout=30)
        assert event.wait(30), "sessions closed only at end of stream"
        ch.put({"ts": np.array([10 * n], np.int64), "k": np.array([7], np.int64), "v": np.array([2.0])})
        ch.close()
        h.result(timeout=60)
    finally:
        h.cancel()  # never leave the shared scheduler with a request waiting on the channel
    assert made[0].cap < 8192  # compacted: 50 000 keys would need a 131 072-slot table
    got = rows(seen, ["k", "session_end", "n"])
    assert len(got["k"]) == n + 1 and (got["n"] == 1).all()
    np.testing.assert_array_equal(got["k"][:n], np.arange(n))
    assert got["k"][-1] == 7 and got["session_end"][-1] == 10 * n


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=keyed_stream(max_rows=300), timeout=st.integers(0, 30), jitter=st.integers(1, 20))
def test_sessions_out_of_order_count_every_row_once(scheds, policy, data, timeout, jitter):
    cols, packets = data
    rng = np.random.default_rng(len(cols["ts"]))
    for p in packets:
        p["ts"] = p["ts"] - rng.integers(0, jitter, len(p["ts"]))
    plan = chain_plan("ooo", packets, DT, (Sessionize, (DT, ["k"], "ts", timeout, AGGS), {}))
    got = rows(scheds[policy].submit(plan).result(timeout=60), ["k", "n", "session_start", "session_end"])
    assert int(got["n"].sum()) == len(cols["ts"])
    assert (got["session_start"] <= got["session_end"]).all()


@st.composite
def two_ordered(draw):
    out = []
    for _ in range(2):
        n = draw(st.integers(0, 300))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        ts = np.cumsum(rng.integers(0, draw(st.sampled_from([1, 3, 10])), n)).astype(np.int64)
        cols = {"ts": ts, "k": rng.integers(0, 9, n).astype(np.int64), "v": rng.normal(size=n)}
        out.append((cols, cut(cols, draw(st.lists(st.integers(0, 50), max_size=12)))))
    delays = draw(st.sampled_from([(0.0, 0.0), (0.002, 0.0), (0.0, 0.002)]))
    return out, delays


def merge_plan(a_items, b_items, delays=(0.0, 0.0)):
    plan = Plan("merge")
    plan.add("a", Feed, a_items, DT, delays[0])
    plan.add("b", Feed, b_items, DT, delays[1])
    plan.add("m", TimeMerge, DT, "ts")
    plan.add("sink", Record)
    plan.connect("a", "m.a")
    plan.connect("b", "m.b")
    plan.connect("m", "sink")
    return plan


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=two_ordered())
def test_timestamp_merge_order(scheds, policy, data):
    ((ca, pa_), (cb, pb)), delays = data
    items_a = list(pa_) + [Window("a")]  # fan-in: punctuations do not pass
    seen = scheds[policy].submit(merge_plan(items_a, pb, delays)).result(timeout=60)
    assert puncts(seen) == []
    got = rows(seen, ["ts", "k", "v"])
    ts = np.concatenate([ca["ts"], cb["ts"]])
    side = np.concatenate([np.zeros(len(ca["ts"]), np.int64), np.ones(len(cb["ts"]), np.int64)])
    idx = np.concatenate([np.arange(len(ca["ts"])), np.arange(len(cb["ts"]))])
    order = np.lexsort((idx, side, ts))  # by time; ties: a first, then input order
    for c in ("ts", "k", "v"):
        np.testing.assert_array_equal(got[c], np.concatenate([ca[c], cb[c]])[order], err_msg=c)


@pytest.mark.parametrize("policy", POLICIES)
def test_timestamp_merge_refuses_unordered_input(scheds, policy):
    a = [{"ts": np.array([1, 5], np.int64), "k": np.zeros(2, np.int64), "v": np.zeros(2)},
         {"ts": np.array([4], np.int64), "k": np.zeros(1, np.int64), "v": np.zeros(1)}]
    h = scheds[policy].submit(merge_plan(a, []))
    with pytest.raises(ValueError, match="input 'a' is not ordered by 'ts'"):
        h.result(timeout=60)
    assert h.failed_operator == "m"


def test_models():
    s = M.model_of(Sessionize(DT, ["k"], "ts", 10, AGGS))
    assert s.key == ("k",) and s.selectivity == M.UNKNOWN and s.forwards("k") and s.punct_out == {"out": M.REMOVES}
    m = M.model_of(TimeMerge(DT, "ts"))
    assert m.state == M.UNKNOWN and m.selectivity == M.EXACTLY_ONE and m.punct_out == {"out": M.REMOVES}
    with pytest.raises(ValueError, match="timeout"):
        Sessionize(DT, ["k"], "ts", -1)
    with pytest.raises(ValueError, match="key"):
        Sessionize(DT, [], "ts", 1)
