"""Keyed window aggregates against a numpy/pyarrow reference: tumbling and sliding
event-time windows (across packet boundaries, skewed keys, empty packets, out-of-order
rows with lateness) and punctuation-delimited windows; window punctuations in order
after their window's rows. Under both policies."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bobox_sched.control import model as M
from bobox_sched.control.punct import Batch, Window
from operators.expr import col
from operators.stream import Punctuated, Sliding, Tumbling, WindowAggregate
from stream_ops_support import POLICIES, chain_plan, cut, puncts, rows, scheds, skewed_keys  # noqa: F401

SETTINGS = settings(max_examples=25, deadline=None)
DT = {"ts": np.int64, "k": np.int64, "v": np.float64, "q": np.int64}
AGGS = [("n", "count", None), ("sv", "sum", "v"), ("sq", "sum", col("q") * 2), ("av", "avg", "v"),
        ("mn", "min", "ts"), ("mx", "max", "v")]
NAMES = ["n", "sv", "sq", "av", "mn", "mx"]


def reference(keys: dict, vals: dict, group_cols: list[str]) -> dict:
    """Aggregates of AGGS per group, by pyarrow, sorted by the group columns."""
    t = pa.table({**keys, **vals})
    g = t.group_by(group_cols).aggregate([("v", "count"), ("v", "sum"), ("q2", "sum"), ("v", "mean"),
                                          ("ts", "min"), ("v", "max")])
    g = g.sort_by([(c, "ascending") for c in group_cols])
    out = {c: g[c].to_numpy() for c in group_cols}
    for name, src in zip(NAMES, ["v_count", "v_sum", "q2_sum", "v_mean", "ts_min", "v_max"]):
        out[name] = g[src].to_numpy()
    return out


def sort_rows(got: dict, group_cols: list[str]) -> dict:
    order = np.lexsort(tuple(got[c] for c in reversed(group_cols)))
    return {c: v[order] for c, v in got.items()}


def assert_same(got: dict, want: dict, group_cols: list[str]):
    got = sort_rows(got, group_cols)
    assert len(got[group_cols[0]]) == len(want[group_cols[0]])
    for c in group_cols + ["n", "sq", "mn"]:
        np.testing.assert_array_equal(got[c], want[c], err_msg=c)
    for c in ("sv", "av", "mx"):
        np.testing.assert_allclose(got[c], want[c], rtol=1e-9, err_msg=c)


def window_pairs(ts, size, slide, lateness):
    """(row, window start) pairs of every row, without the late ones (reference)."""
    n = len(ts)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    wm = np.maximum.accumulate(ts)
    first = (ts - size) // slide + 1
    cnt = ts // slide - first + 1
    r = np.repeat(np.arange(n), cnt)
    off = np.arange(len(r)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    s = (first[r] + off) * slide
    keep = s + size + lateness > wm[r]
    return r[keep], s[keep]


@st.composite
def event_streams(draw, disorder=False):
    n = draw(st.integers(0, 500))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    gaps = rng.exponential(draw(st.sampled_from([1.0, 5.0, 30.0])), n).astype(np.int64)
    ts = np.cumsum(gaps) + draw(st.integers(-50, 50))
    if disorder and n:
        ts = ts - rng.integers(0, draw(st.integers(1, 40)), n)
    skew = draw(st.sampled_from([0.0, 1.0, 2.5]))
    cols = {"ts": ts.astype(np.int64), "k": skewed_keys(rng, n, draw(st.integers(1, 30)), skew),
            "v": rng.normal(size=n), "q": rng.integers(-5, 6, n).astype(np.int64)}
    return cols, cut(cols, draw(st.lists(st.integers(0, 80), max_size=15)))


def check_window_stream(seen, size):
    """Each window's rows, then its Window(end); windows in order of their start."""
    cur = None
    starts = []
    for s in seen:
        if isinstance(s, dict):
            ws = np.unique(s["window_start"])
            assert len(ws) == 1 and len(s["window_start"])
            if cur is None:
                cur = int(ws[0])
                assert not starts or cur > starts[-1], "windows out of order"
            assert int(ws[0]) == cur, "rows of two windows in one packet or before its punctuation"
            np.testing.assert_array_equal(s["window_end"], cur + size)
        else:
            assert isinstance(s, Window)
            assert cur is not None and s.wid == cur + size, "punctuation without rows or out of order"
            starts.append(cur)
            cur = None
    assert cur is None, "rows of a window without its punctuation"
    return starts


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=event_streams(), size=st.integers(1, 120), ratio=st.sampled_from([1, 2, 3, 4]))
def test_tumbling_and_sliding_windows(scheds, policy, data, size, ratio):
    cols, packets = data
    slide = max(1, size // ratio)
    win = Tumbling("ts", size) if ratio == 1 else Sliding("ts", size, slide)
    plan = chain_plan("win", packets, DT, (WindowAggregate, (DT, ["k"], AGGS, win), {}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    starts = check_window_stream(seen, size)
    r, s = window_pairs(cols["ts"], size, win.slide, 0)
    want = reference({"window_start": s, "k": cols["k"][r]},
                     {"v": cols["v"][r], "q2": cols["q"][r] * 2, "ts": cols["ts"][r]}, ["window_start", "k"])
    got = rows(seen, ["window_start", "k"] + NAMES)
    assert_same(got, want, ["window_start", "k"])
    assert starts == sorted(set(s.tolist()))


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=event_streams(disorder=True), size=st.integers(1, 60), lateness=st.integers(0, 20))
def test_out_of_order_rows_late_rows_dropped(scheds, policy, data, size, lateness):
    cols, packets = data
    plan = chain_plan("late", packets, DT, (WindowAggregate, (DT, ["k"], AGGS, Tumbling("ts", size, lateness)), {}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    check_window_stream(seen, size)
    r, s = window_pairs(cols["ts"], size, size, lateness)
    want = reference({"window_start": s, "k": cols["k"][r]},
                     {"v": cols["v"][r], "q2": cols["q"][r] * 2, "ts": cols["ts"][r]}, ["window_start", "k"])
    assert_same(rows(seen, ["window_start", "k"] + NAMES), want, ["window_start", "k"])


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(data=event_streams(), marks=st.lists(st.integers(0, 3), max_size=30), keyed=st.booleans())
def test_punctuation_delimited_windows(scheds, policy, data, marks, keyed):
    cols, packets = data
    items, seg, segs = [], 0, []
    for i, p in enumerate(packets):
        items.append(p)
        segs.append(np.full(len(p["ts"]), seg, np.int64))
        m = marks[i] if i < len(marks) else 0
        if m == 1 or m == 2:
            items.append(Window(f"w{seg}"))
            seg += 1
        if m == 2:
            items.append(Batch(ts=i))  # other punctuations pass through in order
    seg_of = np.concatenate(segs) if segs else np.empty(0, np.int64)
    keys = ["k"] if keyed else []
    plan = chain_plan("pw", items, DT, (WindowAggregate, (DT, keys, AGGS, Punctuated()), {}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    # every input punctuation comes out, in order, right after its window's rows
    trailing = len(seg_of) and seg_of[-1] == seg and (seg_of == seg).any()
    want_p = [it for it in items if not isinstance(it, dict)] + ([Window(None)] if trailing else [])
    assert puncts(seen) == want_p
    w = 0
    for s in seen:
        if isinstance(s, dict):
            np.testing.assert_array_equal(s["window"], w)
        elif isinstance(s, Window):
            w += 1
    group = ["window", "k"] if keyed else ["window"]
    want = reference({"window": seg_of, **({"k": cols["k"]} if keyed else {})},
                     {"v": cols["v"], "q2": cols["q"] * 2, "ts": cols["ts"]}, group)
    assert_same(rows(seen, group + NAMES), want, group)


@pytest.mark.parametrize("policy", POLICIES)
def test_many_windows_closing_on_one_packet_and_big_windows(scheds, policy):
    """A packet spanning hundreds of windows, then a window with more groups than fit in
    one packet: emitted in order, each followed by its punctuation."""
    n = 60_000
    ts = np.concatenate([np.arange(0, 1000), np.full(n, 5000)]).astype(np.int64)
    cols = {"ts": ts, "k": np.arange(len(ts), dtype=np.int64), "v": np.ones(len(ts)), "q": np.ones(len(ts), np.int64)}
    plan = chain_plan("many", [cols], DT, (WindowAggregate, (DT, ["k"], [("n", "count", None)], Tumbling("ts", 3)), {}))
    seen = scheds[policy].submit(plan).result(timeout=60)
    starts = check_window_stream(seen, 3)
    assert starts == list(range(0, 1000, 3)) + [4998]
    got = rows(seen, ["window_start", "k", "n"])
    assert len(got["k"]) == len(ts) and (got["n"] == 1).all()
    assert sum(1 for s in seen if isinstance(s, dict) and s["window_start"][0] == 4998) > 1


def test_window_model_and_arguments():
    m = M.model_of(WindowAggregate(DT, ["k"], AGGS, Tumbling("ts", 10)))
    assert m.key == ("k",) and m.selectivity == M.UNKNOWN and m.forwards("k") and not m.forwards("v")
    assert m.punct_in == {"in": M.OBLIVIOUS} and m.punct_out == {"out": M.GENERATES}
    assert m.emit_order == "unordered"
    p = M.model_of(WindowAggregate(DT, [], AGGS, Punctuated()))
    assert p.state == M.UNKNOWN and p.punct_in == {"in": M.EXPECTING}
    with pytest.raises(ValueError, match="positive"):
        WindowAggregate(DT, ["k"], AGGS, Sliding("ts", 10, 0))
    with pytest.raises(ValueError, match="integers"):
        WindowAggregate(DT, ["k"], AGGS, Tumbling("v", 10))
    with pytest.raises(ValueError, match="unknown aggregate"):
        WindowAggregate(DT, ["k"], [("x", "median", "v")], Tumbling("ts", 10))
