"""Sessionization: per key, runs of rows whose timestamps are at most a timeout apart;
one output row per closed session."""

from __future__ import annotations

import numpy as np

from bobox_sched import StreamOperator
from bobox_sched.control import model as M

from operators import kernels as K
from operators.expr import Compiled, Field, Schema, col
from operators.ops import KeyEvaluator, send_gather
from operators.stream.aggstate import AggSpec, decode_keys
from operators.stream.kernels import session_expire, session_update
from operators.stream.schemas import as_schema

_NO_WM = -(1 << 62)
# Sessions of keys not seen again stay in the table as closed slots until it is compacted:
# when it holds more than this many groups and twice as many as were open at the last
# compaction (so compaction is amortised O(1) per row).
_COMPACT_MIN = 1024


class Sessionize(StreamOperator):
    """Sessions by key (``keys``: column names) over the integer event-time column
    ``time``: a key's session takes every row whose timestamp is at most ``timeout``
    after the session's last one; a longer gap closes it.

    A session closes, and its row is emitted, as soon as no later row can extend it: when
    the watermark (the largest timestamp seen) passes its last timestamp by more than
    `timeout`, checked after each packet, or at end of stream. Output columns: the keys,
    ``session_start``, ``session_end`` (first and last timestamp), then the aggregates
    ``aggs`` (as for ``WindowAggregate``; e.g. ``("events", "count", None)``). Sessions
    closing on the same packet are emitted in order of (end, key), so with input in
    timestamp order the output is every session in order of its end, whatever the packet
    boundaries. (Out-of-order input is accepted: a row joins its key's open session when
    within `timeout` of its last row; a session already emitted is not reopened.)

    Per packet: one nogil kernel folds the rows in order (finding each key's group,
    closing on gaps, folding aggregates), one closes expired sessions; keys not seen for
    a while are compacted away (amortised).

    Model: partitioned by the keys, selectivity unknown (emits when time passes),
    forwards the keys, removes punctuations (its output is not aligned with its input's).
    """

    selectivity_bound = M.UNKNOWN
    punct_out = M.REMOVES

    def __init__(self, schema, keys, time: str, timeout: int, aggs=()):
        schema = as_schema(schema)
        self.in_schema = schema
        self.keys = list(keys)
        if not self.keys:
            raise ValueError("Sessionize needs at least one key column")
        for k in self.keys:
            schema[k]
        t = schema[time]
        if t.kind not in ("int", "date"):
            raise ValueError(f"session time column {time!r} must hold integers, not {t.kind}")
        if not isinstance(timeout, (int, np.integer)) or timeout < 0:
            raise ValueError(f"session timeout must be an integer >= 0, got {timeout!r}")
        self.time = time
        self.timeout = int(timeout)
        self.spec = AggSpec(schema, aggs)
        self.state = M.Partitioned(tuple(self.keys))
        self.forwarding = M.FunctionAny(tuple(self.keys))
        self._km = KeyEvaluator([Compiled(col(k), schema, k) for k in self.keys], schema)
        self.key_fields = [schema[k] for k in self.keys]
        self.schema = Schema(self.key_fields + [Field("session_start", "int", np.dtype(np.int64)),
                                                Field("session_end", "int", np.dtype(np.int64))] + self.spec.fields)
        self.wm = _NO_WM
        self.sessions = 0
        self._compact_at = _COMPACT_MIN
        self._alloc(16)
        self._out_cap = 0
        self._outs(64)

    # -- state arrays ------------------------------------------------------------------------
    def _alloc(self, cap: int, keep: np.ndarray | None = None) -> None:
        """(Re)build the group arrays with capacity `cap` slots, keeping groups `keep`."""
        g = cap // 2
        nk = len(self.keys)
        gkeys = np.empty((nk, g), np.int64)
        active = np.zeros(g, np.bool_)
        start = np.empty(g, np.int64)
        last = np.empty(g, np.int64)
        facc, iacc = self.spec.fresh(g)
        n = 0
        if keep is not None:
            n = len(keep)
            gkeys[:, :n] = self.gkeys[:, keep]
            active[:n] = self.active[keep]
            start[:n] = self.start[keep]
            last[:n] = self.last[keep]
            facc[:, :n] = self.facc[:, keep]
            iacc[:, :n] = self.iacc[:, keep]
        self.gkeys, self.active, self.start, self.last, self.facc, self.iacc = gkeys, active, start, last, facc, iacc
        self.cap = cap
        self.ngroups = n
        self.slots = K.groupby_rehash(self.gkeys, n, cap)

    def _outs(self, need: int) -> None:
        if need <= self._out_cap:
            return
        cap = max(need, 2 * self._out_cap)
        self.o_keys = np.empty((len(self.keys), cap), np.int64)
        self.o_start = np.empty(cap, np.int64)
        self.o_end = np.empty(cap, np.int64)
        self.o_facc = np.empty((len(self.spec.frows), cap), np.float64)
        self.o_iacc = np.empty((len(self.spec.irows), cap), np.int64)
        self._out_cap = cap

    def _compact(self) -> None:
        ids = np.flatnonzero(self.active[: self.ngroups])
        self._alloc(max(16, K.table_capacity(len(ids))), ids)
        self._compact_at = max(_COMPACT_MIN, 2 * len(ids))

    # -- rows --------------------------------------------------------------------------------
    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        if n == 0:
            return
        cols = pkt.columns
        km = self._km(cols, n)
        fv, iv = self.spec.values(cols, n)
        if self.ngroups + n > self.cap // 2:
            self._alloc(K.table_capacity(self.ngroups + n), np.arange(self.ngroups))
        self._outs(n + self.ngroups + n)
        sp = self.spec
        self.ngroups, t, self.wm = session_update(
            km, cols[self.time], self.timeout, self.wm, self.slots, self.gkeys, self.ngroups, self.active,
            self.start, self.last, fv, sp.fops, self.facc, sp.finit, iv, sp.iops, self.iacc, sp.iinit,
            self.o_keys, self.o_start, self.o_end, self.o_facc, self.o_iacc)
        t = self._expire(t, False)
        self._emit(ctx, t)
        if self.ngroups >= self._compact_at:
            self._compact()

    def _expire(self, t: int, everything: bool) -> int:
        return session_expire(self.gkeys, self.ngroups, self.active, self.start, self.last, self.facc, self.iacc,
                              self.timeout, self.wm, everything, self.o_keys, self.o_start, self.o_end,
                              self.o_facc, self.o_iacc, t)

    def _emit(self, ctx, t: int) -> None:
        if t == 0:
            return
        keys = self.o_keys[:, :t]
        # order: session end, then the keys (np.lexsort's last key is the primary one)
        order = np.lexsort(tuple(keys[::-1]) + (self.o_end[:t],))
        cols = decode_keys(keys, self.key_fields)
        cols["session_start"] = self.o_start[:t]
        cols["session_end"] = self.o_end[:t]
        cols.update(self.spec.finalize(self.o_facc[:, :t], self.o_iacc[:, :t]))
        send_gather(ctx, "out", self.schema, cols, order)
        self.sessions += t

    def on_end(self, ctx):
        self._outs(self.ngroups)
        self._emit(ctx, self._expire(0, True))


__all__ = ["Sessionize"]
