"""Throughput and processing latency of a stream request, side by side.

Latency markers (``bobox_sched.control.punct.Marker``) are stamped by a source after every
k-th packet (``marker_every=k``), travel in band behind the packets through every
operator (the runtime forwards them, whatever the operator does with rows) and are
measured when they reach a sink: ``handle.stats["latency"]`` (count, mean, p50, p99,
max in ms). They therefore measure the queueing and processing delay of the path, not
the time a row waits in a window for the window to close.

This module turns a finished request into one record -- rows, seconds, rows/s and the
marker latencies -- and prints it or a table of many (the streaming experiments use it):

    h = sched.submit(plan)
    rep = stream_report(h)              # rows from the sink's result ({"rows": ...})
    print(format_report(rep))           # 200,000 rows in 0.41 s: 487,000 rows/s; ...
"""

from __future__ import annotations

from bobox_sched import StreamOperator


class CountSink(StreamOperator):
    """Counts the rows and packets it receives; the result is ``{"rows", "packets"}``
    (what :func:`stream_report` reads). Latency markers are measured here."""

    outputs = ()

    def __init__(self, schema=None):
        self.schema = schema
        self.rows = 0
        self.packets = 0

    def on_packet(self, ctx, port, pkt):
        self.rows += pkt.nrows
        self.packets += 1

    def on_end(self, ctx):
        ctx.set_result({"rows": self.rows, "packets": self.packets})


def _rows_of(result) -> int | None:
    if isinstance(result, dict):
        if "rows" in result:
            return int(result["rows"])
        found = [r["rows"] for r in result.values() if isinstance(r, dict) and "rows" in r]
        if found:
            return int(sum(found))
    return None


def stream_report(handle, rows: int | None = None, timeout: float | None = None) -> dict:
    """A record of a finished request `handle`: ``rows`` (given, or the ``"rows"`` of its
    sink results), ``seconds`` (submit to end), ``rows_per_s``, and the latency markers
    measured at its sinks: ``markers``, ``latency_p50_ms``, ``latency_p99_ms``,
    ``latency_max_ms`` (None without markers). Waits for the request (re-raising its
    error)."""
    result = handle.result(timeout)
    if rows is None:
        rows = _rows_of(result)
        if rows is None:
            raise ValueError("stream_report: give rows= (the request's result has no 'rows')")
    st = handle.stats
    seconds = float(st["elapsed_s"])
    lat = st.get("latency") or {}
    return {
        "name": handle.name,
        "rows": int(rows),
        "seconds": seconds,
        "rows_per_s": rows / seconds if seconds > 0 else float("inf"),
        "markers": int(lat.get("markers", 0)),
        "latency_p50_ms": lat.get("p50_ms"),
        "latency_p99_ms": lat.get("p99_ms"),
        "latency_max_ms": lat.get("max_ms"),
    }


def _ms(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def format_report(rep: dict) -> str:
    """One line: rows, time, throughput, latency percentiles."""
    line = f"{rep['rows']:,} rows in {rep['seconds']:.3f} s: {rep['rows_per_s']:,.0f} rows/s"
    if rep["markers"]:
        line += (f"; latency p50 {_ms(rep['latency_p50_ms'])} ms, p99 {_ms(rep['latency_p99_ms'])} ms"
                 f" ({rep['markers']} markers)")
    else:
        line += "; no latency markers"
    return line


def report_table(reps: list[dict]) -> str:
    """A text table of many records (one per line), aligned."""
    head = ("name", "rows", "seconds", "rows/s", "markers", "p50 ms", "p99 ms")
    rows = [(str(r.get("name", "")), f"{r['rows']:,}", f"{r['seconds']:.3f}", f"{r['rows_per_s']:,.0f}",
             str(r["markers"]), _ms(r["latency_p50_ms"]), _ms(r["latency_p99_ms"])) for r in reps]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(r) for r in rows])


__all__ = ["CountSink", "format_report", "report_table", "stream_report"]
