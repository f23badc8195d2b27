"""Plans and runs of the benchmark apps: a Parser (the progress controller over the event
table) -> T transactional instances -> a Sink that counts, measures latency (ingress to
result, per event) and optionally keeps every output for checking against the oracle.
"""

from __future__ import annotations

import time

import numpy as np

from bobox_sched import Plan, StreamOperator
from bobox_sched.txn import TxnConfig
from bobox_sched.txn.baselines import pat_sequence
from bobox_sched.txn.oracle import record, serial_oracle
from bobox_sched.txn.progress import ArrayParser
from bobox_sched.core.packet import Packet


class TxnSink(StreamOperator):
    """Sink of T inputs: rows, per-event latency (ns, from ``t_in``), optionally the
    outputs. Result: ``{"rows", "latency_ns", "outputs"}``; with `keep`, ``outputs`` is
    ``{column: array}`` in ts order, else None. Zero events give the same types, empty:
    ``{}`` (the columns are whatever ``post_process`` returned, and it never ran)."""

    def __init__(self, inputs: int, keep: bool = False):
        self.inputs = tuple(f"in{i}" for i in range(inputs))
        self.outputs = ()
        self.keep = keep
        self.rows = 0
        self.lat: list = []
        self.kept: list = []

    def on_packet(self, ctx, port, pkt):
        now = time.perf_counter_ns()
        self.rows += pkt.nrows
        if "t_in" in pkt:
            self.lat.append(now - pkt["t_in"])
        if self.keep:
            self.kept.append(pkt)

    def on_end(self, ctx):
        lat = np.concatenate(self.lat) if self.lat else np.zeros(0, np.int64)
        outs = {} if self.keep else None
        if self.keep and self.kept:
            names = [n for n in self.kept[0].names if n != "t_in"]
            cols = {n: np.concatenate([p[n] for p in self.kept]) for n in names}
            order = np.argsort(cols["ts"], kind="stable")
            outs = {n: v[order] for n, v in cols.items()}
        ctx.set_result({"rows": self.rows, "latency_ns": lat, "outputs": outs})


def build_plan(app, cfg: TxnConfig, events: dict, keep: bool = False, packet_rows: int | None = None,
               deadline_s: float | None = None) -> Plan:
    T = cfg.executors
    plan = Plan(f"tstream-{app.name}-{cfg.cc}")
    plan.add("parser", ArrayParser, events, T, cfg.interval, cfg, packet_rows or min(cfg.interval, 1024), deadline_s)
    plan.add("sink", TxnSink, T, keep)
    for t in range(T):
        plan.add(f"{app.name}{t}", app.operator, cfg, t, **app.operator_kwargs())
        plan.connect(f"parser.out{t}", f"{app.name}{t}")
        plan.connect(f"{app.name}{t}", f"sink.in{t}")
    return plan


def oracle_of(app, store, events: dict, n: int | None = None):
    """(final records, outputs sorted by ts) of the serial timestamp-order run of the
    first `n` events (all by default)."""
    if n is None:
        n = len(next(iter(events.values())))
    cols = {k: v[:n] for k, v in events.items()}
    cols["ts"] = np.arange(n, dtype=np.int64)
    cols["t_in"] = np.zeros(n, np.int64)
    op = app.operator(TxnConfig(store, 1), 0, **app.operator_kwargs())
    dense, outs, _ = serial_oracle(op, store, [Packet(cols)])
    out = {k: np.asarray(v) for k, v in outs[0].items() if k != "t_in"}
    return dense, out


def pat_seq_of(app, store, events: dict, nparts: int) -> np.ndarray:
    """PAT's per-partition sequence numbers for the event table (S-Store's bid array)."""
    n = len(next(iter(events.values())))
    cols = dict(events)
    cols["ts"] = np.arange(n, dtype=np.int64)
    cols["t_in"] = np.zeros(n, np.int64)
    op = app.operator(TxnConfig(store, 1), 0, **app.operator_kwargs())
    return pat_sequence(record(op, [Packet(cols)]), store, nparts)


def same_outputs(a: dict, b: dict) -> bool:
    """Outputs equal the oracle's: every column, NaN where the oracle has NaN, for rows
    whose transaction succeeded; the success flags everywhere. No rows on either side
    are equal whatever the columns (a sink that got no event has none: ``TxnSink``)."""
    if a is None or b is None:
        return False
    if not _nrows(a) and not _nrows(b):
        return True
    if set(a) != set(b):
        return False
    if not np.array_equal(a["ts"], b["ts"]) or not np.array_equal(a["ok"], b["ok"]):
        return False
    ok = b["ok"].astype(bool)
    for k in a:
        if k in ("ts", "ok"):
            continue
        x, y = np.asarray(a[k])[ok], np.asarray(b[k])[ok]
        if not np.array_equal(x, y, equal_nan=True):
            return False
    return True


def _nrows(outputs: dict) -> int:
    return len(next(iter(outputs.values()))) if outputs else 0


def run_once(scheduler, app, store, events: dict, cfg: TxnConfig, keep: bool = False, timeout: float = 600,
             deadline_s: float | None = None) -> dict:
    """One request: throughput (events/s over the request's wall time), latency
    percentiles, the group's statistics, the workers' busy time during the request, the
    sink's outputs (with `keep`). With `deadline_s` the parser stops early, after a
    prefix of the events (``events`` says how many)."""
    plan = build_plan(app, cfg, events, keep=keep, deadline_s=deadline_s)
    busy0 = sum(w.busy_ns for w in scheduler.workers)
    rel0 = sum(w.released_ns for w in scheduler.workers)
    h = scheduler.submit(plan)
    res = h.result(timeout=timeout)
    busy = (sum(w.busy_ns for w in scheduler.workers) - busy0) / 1e9
    released = (sum(w.released_ns for w in scheduler.workers) - rel0) / 1e9
    req = h._request
    elapsed = req.elapsed
    grp = req.__dict__.get("txn_groups", {}).get(cfg.name)
    lat = res["latency_ns"] / 1e6
    out = {
        "events": res["rows"],
        "elapsed_s": elapsed,
        "throughput": res["rows"] / elapsed if elapsed > 0 else 0.0,
        "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
        "group": grp.summary() if grp is not None else {},
        "outputs": res["outputs"],
        "busy_s": busy,
        # time in GIL-released calls (counted only with cfg.kernel_wrap =
        # operators.released.timed_namespace and operators.released.enable())
        "released_s": released,
        "workers": len(scheduler.workers),
    }
    return out


def run_parser_alone(scheduler, events: dict, executors: int, interval: int, timeout: float = 600) -> dict:
    """The input side by itself: the Parser dealing `events` (with its punctuations) to
    `executors` outputs straight into the Sink, no transactional operator. Its
    throughput bounds every scheme's."""
    plan = Plan("tstream-parser-alone")
    plan.add("parser", ArrayParser, events, executors, interval, None, min(interval, 1024), None)
    plan.add("sink", TxnSink, executors, False)
    for t in range(executors):
        plan.connect(f"parser.out{t}", f"sink.in{t}")
    h = scheduler.submit(plan)
    res = h.result(timeout=timeout)
    elapsed = h._request.elapsed
    return {"events": res["rows"], "elapsed_s": elapsed, "throughput": res["rows"] / elapsed if elapsed > 0 else 0.0}


__all__ = ["TxnSink", "build_plan", "oracle_of", "pat_seq_of", "run_once", "run_parser_alone", "same_outputs"]
