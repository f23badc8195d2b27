"""Stream sources and sinks: the Parquet sink (row groups while the stream runs, atomic
publication, nothing left by a failing or cancelled request), Parquet replay (rate,
loop, dictionaries, event time across laps), the socket source over 127.0.0.1 (lines and
Arrow frames, errors, cancellation), seeded generators, latency markers and the report.
Under every policy of stream_ops_support.POLICIES."""

from __future__ import annotations

import gc
import socket
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bobox_sched import Plan, StreamOperator
from bobox_sched.core.errors import RequestCancelled
from bobox_sched.control import model as M
from bobox_sched.control.punct import Marker, Window
from bobox_sched.core.sources import QueueSource, StreamChannel
from operators.expr import col
from operators.stream import (END_FRAME, CountSink, EventSource, Map, ParquetReplay, ParquetSink, SocketSource,
                              Tumbling, WindowAggregate, arrow_frame, events, format_report, report_table,
                              stream_report)
from stream_ops_support import POLICIES, Feed, Record, cut, rows, scheds, wait_for  # noqa: F401

IN_PROCESS = [p for p in POLICIES if p != "domains"]

DT = {"ts": np.int64, "k": np.int64, "v": np.float64}


def table_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"ts": np.arange(n, dtype=np.int64), "k": rng.integers(0, 7, n).astype(np.int64), "v": rng.normal(size=n)}


def files_in(folder):
    return sorted(p.name for p in folder.iterdir())


def tmp_sizes(folder) -> list:
    """Sizes of the temporary files in `folder` (one that vanishes meanwhile is left out)."""
    sizes = []
    for n in files_in(folder):
        if n.endswith(".tmp"):
            try:
                sizes.append((folder / n).stat().st_size)
            except FileNotFoundError:
                pass
    return sizes


# -- Parquet sink ------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_parquet_sink_writes_row_groups_and_publishes_at_end(scheds, policy, tmp_path):
    cols = table_rows(10_000)
    packets = cut(cols, [0, 700, 1, 2000, 0, 3000, 999])
    items = packets[:3] + [Window(1), Marker()] + packets[3:]
    out = tmp_path / "out.parquet"
    plan = Plan("pq")
    plan.add("src", Feed, items, DT)
    plan.add("sink", ParquetSink, DT, out, 2500)
    plan.chain("src", "sink")
    h = scheds[policy].submit(plan)
    res = h.result(timeout=60)
    assert res == {"path": str(out), "rows": 10_000, "row_groups": res["row_groups"]}
    f = pq.ParquetFile(out)
    sizes = [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)]
    assert res["row_groups"] == f.num_row_groups >= 3
    assert all(s >= 2500 for s in sizes[:-1]) and sum(sizes) == 10_000
    t = f.read()
    for c in DT:
        np.testing.assert_array_equal(t[c].to_numpy(), cols[c])
    assert files_in(tmp_path) == ["out.parquet"]
    assert h.stats["latency"]["markers"] == 1  # measured at the sink


@pytest.mark.parametrize("policy", IN_PROCESS)  # a StreamChannel fed from here: no domain
def test_parquet_sink_partial_output_never_looks_complete(scheds, policy, tmp_path):
    """While the stream runs, row groups are on disk under a temporary name only; the
    final name appears at end of stream, complete."""
    out = tmp_path / "live.parquet"
    out.write_bytes(b"an older version")
    ch = StreamChannel(capacity=4)
    plan = Plan("live")
    plan.add("src", QueueSource, ch)
    plan.add("sink", ParquetSink, DT, out, 100)
    plan.chain("src", "sink")
    h = scheds[policy].submit(plan)
    try:
        for p in cut(table_rows(1000), [250] * 4):
            ch.put(p, timeout=30)
        # Each 250-row packet fills a 100-row group: a row group lands in the temporary
        # file while the stream still runs (the writer creates the file, then writes the
        # 4-byte header, then row groups: wait for the condition asserted, not the file).
        assert wait_for(lambda: tmp_sizes(tmp_path) and max(tmp_sizes(tmp_path)) > len(b"PAR1"), 30), \
            f"no row group written while the stream runs: {files_in(tmp_path)}"
        assert out.read_bytes() == b"an older version"
        ch.close()
        assert h.result(timeout=60)["rows"] == 1000
    finally:
        h.cancel()
    assert files_in(tmp_path) == ["live.parquet"] and pq.read_table(out).num_rows == 1000


class FailAfter(StreamOperator):
    """Forwards packets, then raises on the `k`-th one."""

    state = M.STATELESS

    def __init__(self, k):
        self.k, self.n = k, 0

    def on_packet(self, ctx, port, pkt):
        self.n += 1
        if self.n == self.k:
            raise RuntimeError("upstream failure")
        ctx.send("out", pkt)


@pytest.mark.parametrize("policy", POLICIES)
def test_failing_request_leaves_no_file(scheds, policy, tmp_path):
    out = tmp_path / "failed.parquet"
    plan = Plan("fail")
    plan.add("src", Feed, cut(table_rows(5000), [500] * 10), DT)
    plan.add("boom", FailAfter, 8)
    plan.add("sink", ParquetSink, DT, out, 600)  # several row groups written before the failure
    plan.chain("src", "boom", "sink")
    h = scheds[policy].submit(plan)
    with pytest.raises(RuntimeError, match="upstream failure"):
        h.result(timeout=60)
    deadline = time.monotonic() + 10
    while files_in(tmp_path) and time.monotonic() < deadline:  # the runtime drops the sink
        gc.collect()
        time.sleep(0.01)
    assert files_in(tmp_path) == []


@pytest.mark.parametrize("policy", IN_PROCESS)  # a StreamChannel fed from here: no domain
def test_cancelled_stream_and_failing_sink_leave_no_file(scheds, policy, tmp_path):
    out = tmp_path / "cancel.parquet"
    ch = StreamChannel(capacity=4)
    plan = Plan("cancel")
    plan.add("src", QueueSource, ch)
    plan.add("sink", ParquetSink, DT, out, 10)
    plan.chain("src", "sink")
    h = scheds[policy].submit(plan)
    for p in cut(table_rows(100), [20] * 5):
        ch.put(p, timeout=30)
    deadline = time.monotonic() + 30
    while not files_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert files_in(tmp_path), "the sink wrote no row group"
    h.cancel()
    with pytest.raises(RequestCancelled):
        h.result(timeout=10)
    deadline = time.monotonic() + 10
    while files_in(tmp_path) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert files_in(tmp_path) == []
    # the sink's own write fails (a packet lacks a column): removed at once
    bad = Plan("bad")
    bad.add("src", Feed, [{"ts": np.arange(5), "k": np.arange(5), "v": np.ones(5)}, {"ts": np.arange(5)}],
            {"ts": np.int64})
    bad.add("sink", ParquetSink, DT, tmp_path / "bad.parquet", 1)
    bad.chain("src", "sink")
    with pytest.raises(KeyError):
        scheds[policy].submit(bad).result(timeout=60)
    assert files_in(tmp_path) == []


def test_parquet_sink_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ParquetSink(DT, tmp_path / "nope" / "x.parquet")
    with pytest.raises(ValueError, match="group_rows"):
        ParquetSink(DT, tmp_path / "x.parquet", 0)


# -- Parquet replay ----------------------------------------------------------------------------


def write_source_file(path, n=3000, group=700):
    t = pa.table({"ts": pa.array(np.arange(n) * 2, pa.int64()), "sym": pa.array([["b", "a", "c"][i % 3] for i in range(n)]),
                  "day": pa.array(np.arange(n) % 40, pa.int32()).cast(pa.date32()),
                  "px": pa.array(np.linspace(1, 2, n))})
    pq.write_table(t, path, row_group_size=group)
    return t


@pytest.mark.parametrize("policy", POLICIES)
def test_parquet_replay_round_trip_through_sink(scheds, policy, tmp_path):
    src = tmp_path / "in.parquet"
    t = write_source_file(src)
    replay = ParquetReplay(src)
    assert [f.kind for f in replay.schema.fields] == ["int", "string", "date", "float"]
    plan = Plan("replay")
    plan.add("src", ParquetReplay, src, None, False, None, None, 2)
    plan.add("sink", ParquetSink, replay.schema, tmp_path / "out.parquet", 1000)
    plan.chain("src", "sink")
    h = scheds[policy].submit(plan)
    assert h.result(timeout=60)["rows"] == 3000
    assert pq.read_table(tmp_path / "out.parquet").equals(t)  # strings and dates decoded back
    assert h.stats["latency"]["markers"] >= 2  # 5 row groups: at least 5 packets


@pytest.mark.parametrize("policy", IN_PROCESS)  # watches its operators from this process
def test_parquet_replay_rate_and_loop_with_time_shift(scheds, policy, tmp_path):
    src = tmp_path / "in.parquet"
    write_source_file(src, n=300, group=100)
    got, done = [], threading.Event()

    class Until(Record):
        def on_packet(self, ctx, port, pkt):
            got.append({k: np.array(v) for k, v in pkt.columns.items()})
            if sum(len(p["ts"]) for p in got) >= 1000:
                done.set()

    plan = Plan("loop")
    plan.add("src", ParquetReplay, src, 20_000.0, True, ["ts", "px"], "ts")  # 20k rows/s, forever
    plan.add("sink", Until)
    plan.chain("src", "sink")
    t0 = time.monotonic()
    h = scheds[policy].submit(plan)
    try:
        assert done.wait(30)
        took = time.monotonic() - t0
    finally:
        h.cancel()
    with pytest.raises(RequestCancelled):
        h.result(timeout=10)
    ts = rows(got)["ts"][:1000]
    lap = np.arange(1000) // 300
    np.testing.assert_array_equal(ts, (np.arange(1000) % 300) * 2 + lap * 599)  # shifted by max - min + 1
    assert (np.diff(ts) > 0).all()  # event time keeps increasing across laps
    assert took >= 0.9 * 900 / 20_000  # paced (a floor, not a timing bound)


def test_parquet_replay_refuses_missing_things(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        ParquetReplay(tmp_path / "missing.parquet")
    write_source_file(tmp_path / "in.parquet", n=10)
    with pytest.raises(ValueError, match="no column 'nope'"):
        ParquetReplay(tmp_path / "in.parquet", columns=["nope"])


# -- socket source -----------------------------------------------------------------------------


class Server:
    """A one-connection TCP server on 127.0.0.1 sending `chunks` (bytes), then closing
    (or keeping the connection open when `hold`)."""

    def __init__(self, chunks, hold=False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.chunks, self.hold = chunks, hold
        self.release = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        conn, _ = self.sock.accept()
        with conn:
            for c in self.chunks:
                conn.sendall(c)
            if self.hold:
                self.release.wait(30)
        self.sock.close()


def socket_plan(port, fmt, **kw):
    plan = Plan("sock")
    plan.add("src", SocketSource, "127.0.0.1", port, DT, fmt, **kw)
    plan.add("sink", Record)
    plan.chain("src", "sink")
    return plan


@pytest.mark.parametrize("policy", POLICIES)
def test_socket_lines_end_to_end(scheds, policy):
    cols = table_rows(5000, seed=3)
    text = "".join(f"{t},{k},{float(v)!r}\n" for t, k, v in zip(cols["ts"], cols["k"], cols["v"])).encode()
    # split at awkward places: inside lines, and the last line without its newline
    chunks = [text[:7], text[7:20000], text[20000:20001], text[20001:-1]]
    srv = Server(chunks)
    h = scheds[policy].submit(socket_plan(srv.port, "lines", capacity=2, marker_every=3))
    seen = h.result(timeout=60)
    got = rows(seen)
    for c in DT:
        np.testing.assert_array_equal(got[c], cols[c])
    packets = sum(isinstance(s, dict) for s in seen)
    assert h.stats["latency"]["markers"] == packets // 3


@pytest.mark.parametrize("policy", POLICIES)
def test_socket_arrow_frames_end_to_end(scheds, policy):
    cols = table_rows(3000, seed=4)
    frames = [arrow_frame(pa.table({k: v[a:a + 700] for k, v in cols.items()})) for a in range(0, 3000, 700)]
    frames.append(arrow_frame(pa.record_batch({k: v[:0] for k, v in cols.items()})))  # an empty batch
    srv = Server([b"".join(frames)[:13], b"".join(frames)[13:], END_FRAME])
    got = rows(scheds[policy].submit(socket_plan(srv.port, "arrow")).result(timeout=60))
    for c in DT:
        np.testing.assert_array_equal(got[c], cols[c])


@pytest.mark.parametrize("policy", POLICIES)
def test_socket_errors_fail_the_request(scheds, policy):
    frame = arrow_frame(pa.table({k: v[:10] for k, v in table_rows(10).items()}))
    srv = Server([frame, frame[:20]])  # the connection drops inside a frame
    with pytest.raises(ConnectionError, match="inside a frame"):
        scheds[policy].submit(socket_plan(srv.port, "arrow")).result(timeout=60)
    srv = Server([b"1,2,3.0\n", b"4,x,5.0\n"])  # not a number
    with pytest.raises(pa.ArrowInvalid):
        scheds[policy].submit(socket_plan(srv.port, "lines")).result(timeout=60)
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nobody listens there now
    with pytest.raises(ConnectionRefusedError):
        scheds[policy].submit(socket_plan(port, "lines")).result(timeout=60)


@pytest.mark.parametrize("policy", IN_PROCESS)  # watches its operators from this process
def test_socket_source_cancel_stops_the_reader(scheds, policy):
    srv = Server([b"1,2,3.0\n"], hold=True)
    plan = socket_plan(srv.port, "lines")
    h = scheds[policy].submit(plan)
    # The reader thread runs once the sink has the first line (what counting the source's
    # runs in h.stats["tasks"] meant: that count is 0 under "streams", whose sources run on
    # their own threads, and the wait used to run out its 30 s).
    sink = h._request.ops["sink"]
    assert wait_for(lambda: len(sink.seen) > 0, 30), "the first line never reached the sink"
    assert any(t.name.startswith(f"bobox-socket-127.0.0.1:{srv.port}") for t in threading.enumerate())
    h.cancel()
    deadline = time.monotonic() + 10
    while any(t.name.startswith(f"bobox-socket-127.0.0.1:{srv.port}") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "reader thread still running after cancel"
        time.sleep(0.02)
    srv.release.set()


# -- generators, markers, report ------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("rows_per_packet", [1, 37, None])
def test_event_source_is_the_seeded_stream_whatever_the_packets(scheds, policy, rows_per_packet):
    want = events(2000, seed=11, n_keys=50, skew=1.5, mean_gap=4.0, start_ts=100)
    plan = Plan("gen")
    plan.add("src", EventSource, 2000, 11, 50, 1.5, 4.0, 100, rows_per_packet=rows_per_packet)
    plan.add("sink", Record)
    plan.chain("src", "sink")
    got = rows(scheds[policy].submit(plan).result(timeout=60))
    for c in ("ts", "key", "value"):
        np.testing.assert_array_equal(got[c], want[c])
    assert (np.diff(want["ts"]) >= 0).all() and want["ts"][0] >= 100
    counts = np.bincount(want["key"], minlength=50)
    assert counts[0] > 3 * counts[25]  # skewed
    other = events(2000, seed=12, n_keys=50, skew=1.5, mean_gap=4.0, start_ts=100)
    assert not np.array_equal(other["key"], want["key"])


@pytest.mark.parametrize("policy", POLICIES)
def test_markers_through_a_window_pipeline_and_the_report(scheds, policy, tmp_path):
    """Source samples every 2nd packet; markers cross the map and the window aggregate
    (which holds rows, not markers) and are measured at the sink; the report puts the
    latency next to throughput."""
    plan = Plan("report")
    plan.add("src", EventSource, 20_000, 5, 10, rows_per_packet=1000, marker_every=2, rate=400_000.0)
    m = Map(EventSource.schema, [("v2", col("value") * 2.0)])
    plan.add("map", Map, EventSource.schema, [("v2", col("value") * 2.0)])
    w = WindowAggregate(m.schema, ["key"], [("s", "sum", "v2")], Tumbling("ts", 500))
    plan.add("win", WindowAggregate, m.schema, ["key"], [("s", "sum", "v2")], Tumbling("ts", 500))
    plan.add("sink", ParquetSink, w.schema, tmp_path / "w.parquet")
    plan.chain("src", "map", "win", "sink")
    h = scheds[policy].submit(plan)
    rep = stream_report(h, rows=20_000)
    assert rep["rows"] == 20_000 and rep["markers"] == 10
    assert 0 < rep["latency_p50_ms"] <= rep["latency_p99_ms"] <= rep["latency_max_ms"]
    assert rep["rows_per_s"] == pytest.approx(20_000 / rep["seconds"])
    line = format_report(rep)
    assert "20,000 rows" in line and "p99" in line and "10 markers" in line
    plan2 = Plan("count")
    plan2.add("src", EventSource, 5000, rows_per_packet=500)
    plan2.add("sink", CountSink)
    plan2.chain("src", "sink")
    rep2 = stream_report(scheds[policy].submit(plan2))  # rows from the sink's result
    assert rep2["rows"] == 5000 and rep2["markers"] == 0 and "no latency markers" in format_report(rep2)
    table = report_table([rep, rep2]).splitlines()
    assert len(table) == 3 and table[0].split()[:2] == ["name", "rows"]
