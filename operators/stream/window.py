"""Keyed aggregates over windows: tumbling and sliding windows of an event-time column,
or windows delimited by ``Window`` punctuations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bobox_sched import StreamOperator
from bobox_sched.control import model as M
from bobox_sched.control.punct import Window

from operators.expr import Compiled, Field, Schema, col
from operators.ops import KeyEvaluator, send_columns
from operators.stream.aggstate import AggSpec, GroupTable, decode_keys
from operators.stream.kernels import LATE, mask_index, split_closed, tumbling_assign, window_assign, window_rows
from operators.stream.schemas import as_schema

# Watermark before the first row: far below any timestamp, far enough from the int64
# limits that window arithmetic (start + size + lateness) cannot overflow.
_NO_WM = -(1 << 62)


@dataclass(frozen=True)
class Tumbling:
    """Windows ``[k * size, (k + 1) * size)`` of the integer column `time`. A window
    closes when a row with ``time >= end + lateness`` arrives (or at end of stream);
    later rows for it are late and dropped (counted in ``late_rows``)."""

    time: str
    size: int
    lateness: int = 0

    @property
    def slide(self) -> int:
        return self.size


@dataclass(frozen=True)
class Sliding:
    """Windows ``[k * slide, k * slide + size)`` of the integer column `time`: a row
    belongs to ``ceil(size / slide)`` windows (fewer near 0). Closing as :class:`Tumbling`."""

    time: str
    size: int
    slide: int
    lateness: int = 0


@dataclass(frozen=True)
class Punctuated:
    """Windows delimited by the ``Window`` punctuations of the input: each one closes the
    current window (the operator's input is *expecting*)."""


class WindowAggregate(StreamOperator):
    """Aggregates ``aggs`` (``[(name, "sum"|"count"|"avg"|"min"|"max", expression or
    column or None)]``) per key (``keys``: column names) and window.

    ``window`` is :class:`Tumbling` / :class:`Sliding` (event time: output columns
    ``window_start``, ``window_end``, the keys, the aggregates) or :class:`Punctuated`
    (output columns ``window``, the window's number from 0, the keys, the aggregates).

    When a window closes the operator emits one row per key seen in it, then a
    ``Window`` punctuation (``wid`` = the window's end, or the punctuation that closed
    it). Windows close in order of their end; several closing on one packet are emitted
    one after the other. End of stream closes every open window (punctuated windows:
    the rows after the last punctuation form a last window, followed by ``Window(None)``).
    Rows of one window come in no promised order (first appearance of their key in this
    run): the operator declares ``emit_order = "unordered"``.

    Per packet: one nogil kernel assigns rows to windows and tracks the watermark (time
    windows), one fused kernel (``groupby_aggregate``) folds every row into its (window,
    key) group; closing a window compacts the table (the groups still open move down).
    Latency markers pass through at once (the runtime forwards them), so they measure
    the path, not the time a row waits for its window.

    Model: partitioned by the keys (unknown for a global aggregate), selectivity unknown,
    forwards the keys (``FunctionAny``), generates its punctuations (time windows ignore
    the input's; punctuated windows expect them).
    """

    selectivity_bound = M.UNKNOWN
    punct_out = M.GENERATES
    emit_order = "unordered"

    def __init__(self, schema, keys, aggs, window):
        schema = as_schema(schema)
        self.in_schema = schema
        self.keys = list(keys)
        for k in self.keys:
            schema[k]
        if not isinstance(window, (Tumbling, Sliding, Punctuated)):
            raise ValueError(f"window must be Tumbling, Sliding or Punctuated, got {window!r}")
        self.window = window
        self.spec = AggSpec(schema, aggs)
        if not self.spec.aggs and not self.keys:
            raise ValueError("WindowAggregate needs keys or aggregates")
        self._km = KeyEvaluator([Compiled(col(k), schema, k) for k in self.keys], schema)
        self.key_fields = [schema[k] for k in self.keys]
        self.state = M.Partitioned(tuple(self.keys)) if self.keys else M.UNKNOWN
        self.forwarding = M.FunctionAny(tuple(self.keys))
        self.timed = not isinstance(window, Punctuated)
        if self.timed:
            t = schema[window.time]
            if t.kind not in ("int", "date"):
                raise ValueError(f"window time column {window.time!r} must hold integers, not {t.kind}")
            for what in ("size", "slide"):
                v = getattr(window, what)
                if not isinstance(v, (int, np.integer)) or v <= 0:
                    raise ValueError(f"window {what} must be a positive integer, got {v!r}")
            if window.lateness < 0:
                raise ValueError(f"window lateness must be >= 0, got {window.lateness!r}")
            self.punct_in = M.OBLIVIOUS
            head = [Field("window_start", "int", np.dtype(np.int64)), Field("window_end", "int", np.dtype(np.int64))]
            self.table = GroupTable(1 + len(self.keys), self.spec)
        else:
            self.punct_in = M.EXPECTING
            head = [Field("window", "int", np.dtype(np.int64))]
            self.table = GroupTable(len(self.keys), self.spec)
        self.schema = Schema(head + self.key_fields + self.spec.fields)
        self.wm = _NO_WM
        self.late_rows = 0
        self.windows = 0  # windows emitted

    # -- rows ------------------------------------------------------------------------------
    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        if n == 0:
            return
        cols = pkt.columns
        fv, iv = self.spec.values(cols, n)
        if not self.timed:
            self.table.add(self._km(cols, n), fv, iv)
            return
        w = self.window
        if w.slide == w.size:
            # tumbling: one window per row; the group keys are [window start; keys],
            # built in place (no per-pair copy) unless some rows were late
            keys = np.empty((1 + len(self.keys), n), np.int64)
            self.wm, late = tumbling_assign(cols[w.time], w.size, self.wm, w.lateness, keys[0])
            self._fill_keys(cols, n, keys)
            if late:
                self.late_rows += late
                kept = mask_index(keys[0] != LATE)
                keys, fv, iv = window_rows(keys[1:], fv, iv, kept, keys[0][kept])
            self.table.add(keys, fv, iv)
        else:
            rows, starts, self.wm, late = window_assign(cols[w.time], w.size, w.slide, self.wm, w.lateness)
            self.late_rows += late
            if len(rows):
                keys, f, i = window_rows(self._km(cols, n), fv, iv, rows, starts)
                self.table.add(keys, f, i)
        self._close(ctx, self.wm - w.size - w.lateness)

    def _fill_keys(self, cols, n, keys) -> None:
        """Rows 1.. of `keys` = the key matrix of the packet."""
        if not self.keys:
            return
        km = self._km
        if km.fused is not None:
            km.fused(cols, list(keys[1:]))
        else:
            keys[1:] = km(cols, n)

    # -- closing windows -------------------------------------------------------------------
    def _close(self, ctx, limit: int) -> None:
        """Emit every window starting at or before `limit` (its end passed the watermark):
        the rows of all of them computed at once, then sent window by window, each
        followed by its punctuation."""
        t = self.table
        if t.ngroups == 0:
            return
        closed, kept = split_closed(t.gkeys[0], t.ngroups, limit)
        if len(closed) == 0:
            return
        gk, fa, ia = t.take(closed)
        t.keep(kept)
        starts = gk[0]
        size = self.window.size
        cols = decode_keys(gk[1:], self.key_fields)
        cols.update(self.spec.finalize(fa, ia))
        cols["window_start"] = starts
        cols["window_end"] = starts + size
        cut = np.flatnonzero(starts[1:] != starts[:-1]) + 1
        bounds = [0, *cut.tolist(), len(starts)]
        for a, b in zip(bounds, bounds[1:]):
            send_columns(ctx, "out", self.schema, {k: v[a:b] for k, v in cols.items()}, b - a)
            ctx.punctuate(Window(int(starts[a]) + size))
            self.windows += 1

    def _emit_all(self, ctx, punct) -> None:
        t = self.table
        g = t.ngroups
        if g:
            ids = np.arange(g)
            gk, fa, ia = t.take(ids)
            cols = decode_keys(gk, self.key_fields)
            cols.update(self.spec.finalize(fa, ia))
            cols["window"] = np.full(g, self.windows, np.int64)
            send_columns(ctx, "out", self.schema, cols, g)
            t.clear()
        ctx.punctuate(punct)
        self.windows += 1

    def on_punct(self, ctx, port, p):
        if isinstance(p, Window):
            self._emit_all(ctx, p)
        else:
            ctx.punctuate(p)  # other punctuations (batch ends) pass in order

    def on_end(self, ctx):
        if self.timed:
            self._close(ctx, np.iinfo(np.int64).max)
        elif self.table.ngroups:
            self._emit_all(ctx, Window(None))


__all__ = ["Punctuated", "Sliding", "Tumbling", "WindowAggregate"]
