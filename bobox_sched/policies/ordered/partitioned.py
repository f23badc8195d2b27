"""Partitioned stateful operators (Prasaad et al. section 4; spec 000 sections 1, 3, A1).

A partitioned stateful (PS) operator keeps its state per *bucket*: the key selector
(``state = Partitioned("key", ...)``) maps every row to a key, the partitioner maps keys
to ``partitions`` = p buckets (``"hash"``, or ``"range"`` with ``bounds`` or ``key_range``), and the rows of
one bucket are processed in arrival order against that bucket's state, so buckets are
independent. One bucket is treated as one key [L226]; p bounds the degree of
parallelism (default 100, the paper's [L416]).

``partitions = "auto"`` lets the runtime choose p when the request starts. The paper's
unit is a tuple, so its p = 100 costs nothing per unit. Ours is a packet slice (spec
A1), and every slice costs a fixed Python step (queueing, the reorder buffer, the
operator's kernel call): 20-60 us on the TPCx-BB chains, measured by ``bobox experiment
ordered`` figure 11 (``us_per_slice``). So p = 100 cuts a packet into up to 100 slices
and pays that step 100 times. The spec says "prefer fine buckets, as far as overheads
allow" (section 3). "auto" takes ``AUTO_BUCKETS_PER_WORKER`` buckets per worker that may
run the operator, fixed at submit from the policy's ``bucket_parallelism()``: with M =
min(max_parallelism, that), p = 1 if M = 1, else min(100, 2 * M). Under ``ordered`` that
is every worker; a policy that runs one packet of an operator at a time (``bobox``,
``simple``, the sequential reference) gives p = 1: nothing is split. Keep a fixed, fine
p (the default) where a few hot keys must spread over workers (figure 9's skew); "auto"
suits cheap per-row operators on many keys, the TPCx-BB chains' case. With ``row_order =
"packet"`` a packet's output rows come in bucket order, so under "auto" their order
inside a packet depends on the worker count (the "exact" default does not).

Subclass :class:`PartitionedOperator` and write

* ``new_state()``: a fresh state for one bucket (default: an empty dict);
* ``on_slice(ctx, rows, state, emit)``: process `rows` (a packet holding rows of one
  bucket, in arrival order) against `state`; output with ``emit(packet, parent)``, where
  ``parent[i]`` is the index in `rows` of the row that caused output row i (None when
  output row i comes from row i, 1:1). Runs on the bucket's active worker only: touch
  nothing but `state`;
* optionally ``on_end(ctx)`` (all buckets' states: ``self.bucket_states()``);
* optionally ``on_slices(ctx, rows, spans, states, emit)``: several slices of one input
  packet in one call, so that one kernel call can do them all (the Python cost of a
  slice is paid per call, not per slice). `rows` is the packet with its rows gathered
  in bucket order (arrival order inside a bucket), `spans` an int64 array of
  (bucket, start, end) rows, one per slice, distinct buckets in bucket order: slice j is
  ``rows[start:end]``, to be processed against ``states[j]``; ``emit(packet, parent)``
  with ``parent[i]`` the index *in `rows`* of the row that caused output row i (None:
  output row i comes from the i-th row of the spans' rows, 1:1). The default calls
  ``on_slice`` per span; override it when a kernel can take every span at once
  (``operators/stream/ordered_queries.py``: one kernel call per packet; it finds the
  states' arrays through an index made in ``states_reset(p)``, which runs at submit,
  before any worker).

What it emits must depend only on each *key*'s rows, as the model's Partitioned(key)
says, not on which keys share a bucket: then the output is the same for every p and
partitioner (so PARTITIONED-QUEUE with p = workers and HYBRID-QUEUE with p = 100 give
the same egress). In particular ``on_end`` should emit in key order, not bucket order.

The same code runs under every policy. Under ``bobox``/``simple`` (and in the sequential
reference) ``on_packet`` splits each packet into its bucket slices, runs them in bucket
order and merges the outputs; under ``ordered`` the policy runs the slices on many
workers (``hybrid.py``) and merges in its reorder drain. Either way the output of one
input packet is, with ``row_order = "exact"`` (the default, spec A1), its slices'
outputs stable-sorted by parent row ordinal: the order a row-at-a-time run gives; with
``"packet"`` they are concatenated in bucket order (order then holds across packets and
per key only).

State placement: a bucket's state is made by the first worker that processes the bucket
(so its memory comes from that worker's node: workers prefer their node's memory), and
``relocate_state`` copies it to the node of the worker that owns it now when that node
changed (the ordered policy calls ``state_for(bucket, node)``; one node: never).

Kernels: bucket ids, the stable counting sort by bucket and the merge are numba
``nogil`` kernels or numpy calls that release the GIL; the Python cost is one step per
``on_slices`` call, plus a few dequeue steps per slice (spec A1: a packet of R rows over
p buckets is min(R, p) slices). ``slice_group`` cuts a packet once into a
:class:`SliceGroup` (the gathered rows, their ordinals, the spans); the ordered stage
queues one unit per slice, all pointing at the group, and sends the group's merged
output on when its last slice ran.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bobox_sched.core.operator import StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.core.sync import AtomicCounter
from bobox_sched.control import model as _model

ROW_ORDERS = ("exact", "packet")
PARTITIONERS = ("hash", "range")
DEFAULT_PARTITIONS = 100  # the paper's p for HYBRID-QUEUE [L416]
# partitions="auto": buckets per worker that may run the operator (module doc). From the
# p sweep of the five TPCx-BB chains on the 2-core machine (2026-11-25, 2 workers, 150k
# rows, median of 3, HYBRID-QUEUE at p / PARTITIONED-QUEUE at p = 2): p = 4 gave 0.98 to
# 1.14 on all five, p = 8 0.92 to 1.25, p = 16 0.87 to 1.20, p = 100 0.58 to 1.03.
AUTO_BUCKETS_PER_WORKER = 2


# -- kernels ------------------------------------------------------------------------------

@njit(nogil=True, cache=True, inline="always")
def _mix(h):
    # splitmix64 finaliser: every key bit reaches every bucket bit
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@njit(nogil=True, cache=True)
def hash_buckets(keys, p):
    """Bucket (0..p-1) of every row: `keys` is int64 [ncols, n] (a key per column)."""
    ncols, n = keys.shape
    out = np.empty(n, np.int64)
    up = np.uint64(p)
    for i in range(n):
        h = np.uint64(0x9E3779B97F4A7C15)
        for c in range(ncols):
            h = _mix(h ^ np.uint64(keys[c, i]))
        out[i] = np.int64(h % up)
    return out


@njit(nogil=True, cache=True)
def range_buckets(key, bounds):
    """Bucket of every row for sorted split points `bounds` (p - 1 of them): bucket b
    holds bounds[b-1] <= key < bounds[b]."""
    n = key.shape[0]
    out = np.empty(n, np.int64)
    m = bounds.shape[0]
    for i in range(n):
        x = key[i]
        lo, hi = 0, m
        while lo < hi:  # first bound > x
            mid = (lo + hi) >> 1
            if bounds[mid] <= x:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


@njit(nogil=True, cache=True)
def bucket_order(ids, p):
    """Stable counting sort by bucket: (order, starts) with the rows of bucket b at
    ``order[starts[b]:starts[b+1]]``, in arrival order."""
    n = ids.shape[0]
    starts = np.zeros(p + 1, np.int64)
    for i in range(n):
        starts[ids[i] + 1] += 1
    for b in range(p):
        starts[b + 1] += starts[b]
    fill = starts[:p].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        b = ids[i]
        order[fill[b]] = i
        fill[b] += 1
    return order, starts


@njit(nogil=True, cache=True)
def _is_sorted(a):
    for i in range(1, a.shape[0]):
        if a[i] < a[i - 1]:
            return False
    return True


# -- packets ------------------------------------------------------------------------------

def gather(pkt: Packet, order: np.ndarray) -> dict:
    """Columns of `pkt` reordered by `order` (numpy take: releases the GIL)."""
    return {name: np.take(col, order) for name, col in pkt.columns.items()}


def merge_outputs(packets: list, keys: list):
    """One packet from the outputs of one input packet's slices, stable-sorted by
    `keys` (an int64 array per packet: the row's input ordinal under ``row_order =
    "exact"``, its slice's position in bucket order under ``"packet"``). None when there
    are no rows."""
    packets = [(p, o) for p, o in zip(packets, keys) if p.nrows]
    if not packets:
        return None
    if len(packets) == 1:
        pkt, ords = packets[0]
        if _is_sorted(ords):
            return pkt
    names = packets[0][0].names
    cols = {k: np.concatenate([p[k] for p, _ in packets]) for k in names}
    ords = np.concatenate([o for _, o in packets])
    if not _is_sorted(ords):
        perm = np.argsort(ords, kind="stable")
        cols = {k: np.take(v, perm) for k, v in cols.items()}
    n = len(next(iter(cols.values()))) if cols else 0
    return Packet(cols, n)


@njit(nogil=True, cache=True)
def span_total(spans):
    """Rows in the spans (bucket, start, end)."""
    n = 0
    for j in range(spans.shape[0]):
        n += spans[j, 2] - spans[j, 1]
    return n


@njit(nogil=True, cache=True)
def span_rows(spans):
    """The row indices (in the gathered packet) of every span's rows, in span order."""
    out = np.empty(span_total(spans), np.int64)
    m = 0
    for j in range(spans.shape[0]):
        for r in range(spans[j, 1], spans[j, 2]):
            out[m] = r
            m += 1
    return out


@njit(nogil=True, cache=True)
def _slice_keys(parent, starts, exact, order):
    """Merge keys of output rows caused by gathered rows `parent`: the input ordinal
    (`exact`) or the index of the span holding the row (`starts`: the group's span
    starts, ascending)."""
    n = parent.shape[0]
    out = np.empty(n, np.int64)
    if exact:
        for i in range(n):
            out[i] = order[parent[i]]
        return out
    m = starts.shape[0]
    for i in range(n):
        x = parent[i]
        lo, hi = 0, m
        while lo < hi:  # last start <= x
            mid = (lo + hi) >> 1
            if starts[mid] <= x:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo - 1
    return out


class SliceGroup:
    """One input packet of a partitioned operator cut into its bucket slices.

    Made by the single producer (``PartitionedOperator.slice_group``); then ``outs[j]``
    is written only by the worker that ran slice j (inside ``on_slices``, before its
    ``left.fetch_sub``), and read only by the worker whose ``fetch_sub`` brought
    ``left`` to 0: the counter's lock orders the writes before that read."""

    __slots__ = ("rows", "order", "spans", "starts", "buckets", "k", "node", "serial", "left", "outs", "t0")

    def __init__(self, rows: Packet, order: np.ndarray, spans: np.ndarray):
        self.rows = rows
        self.order = order
        self.spans = spans
        self.starts = np.ascontiguousarray(spans[:, 1])
        self.buckets = spans[:, 0].tolist()
        self.k = k = len(self.buckets)
        self.node = rows.node
        self.serial = 0
        self.left = AtomicCounter(k)
        self.outs = [None] * k
        self.t0 = 0


class SpanCollector:
    """The ``emit`` of one ``on_slices`` call: keeps each output packet with the merge
    keys of its rows (``_slice_keys``)."""

    __slots__ = ("group", "spans", "exact", "packets", "keys", "_rows")

    def __init__(self, group: SliceGroup, spans: np.ndarray, exact: bool, packets: list, keys: list):
        self.group = group
        self.spans = spans
        self.exact = exact
        self.packets = packets
        self.keys = keys
        self._rows = None

    def rows(self) -> np.ndarray:
        """The gathered indices of the spans' rows (what parent=None means)."""
        if self._rows is None:
            self._rows = span_rows(self.spans)
        return self._rows

    def __call__(self, packet, parent=None) -> None:
        if not isinstance(packet, Packet):
            raise TypeError(f"emit() takes a Packet, not {type(packet).__name__}")
        if parent is None:
            parent = self.rows()
            if packet.nrows != parent.shape[0]:
                raise ValueError(f"emit() of {packet.nrows} rows for slices of {parent.shape[0]}: pass parent= "
                                 "(the input row of every output row)")
        else:
            parent = _checked_parent(parent, packet.nrows, self.group.rows.nrows)
        g = self.group
        self.packets.append(packet)
        self.keys.append(_slice_keys(parent, g.starts, self.exact, g.order))


class _OneSpan:
    """The ``emit`` the default ``on_slices`` hands to ``on_slice``: slice-local parents
    (or none) become gathered row indices."""

    __slots__ = ("emit", "start", "n")

    def __init__(self, emit, start: int, n: int):
        self.emit = emit
        self.start = start
        self.n = n

    def __call__(self, packet, parent=None) -> None:
        if not isinstance(packet, Packet):
            raise TypeError(f"emit() takes a Packet, not {type(packet).__name__}")
        if parent is None:
            if packet.nrows != self.n:
                raise ValueError(f"emit() of {packet.nrows} rows for a slice of {self.n}: pass parent= "
                                 "(the input row of every output row)")
            parent = np.arange(self.start, self.start + self.n, dtype=np.int64)
        else:
            parent = _checked_parent(parent, packet.nrows, self.n) + self.start
        self.emit(packet, parent)


def _checked_parent(parent, nrows: int, n: int) -> np.ndarray:
    """`parent` as int64 indices, checked: one per output row, each in 0..n-1."""
    parent = np.asarray(parent)
    if parent.shape != (nrows,):
        raise ValueError(f"emit(): parent has shape {parent.shape}, expected ({nrows},)")
    if parent.dtype.kind not in "iu":
        raise TypeError(f"emit(): parent must hold integer row indices, not {parent.dtype}")
    parent = parent.astype(np.int64, copy=False)
    if nrows and (int(parent.min()) < 0 or int(parent.max()) >= n):
        raise IndexError(f"emit(): parent indices must be in 0..{n - 1}, got {int(parent.min())}..{int(parent.max())}")
    return parent


# -- the operator ---------------------------------------------------------------------------

class PartitionedOperator(StreamOperator):
    """Base class of partitioned stateful operators (module doc)."""

    partitions: int | str = DEFAULT_PARTITIONS  # or "auto" (module doc)
    partitioner: str = "hash"
    bounds = None  # "range": p - 1 sorted split points ...
    key_range = None  # ... or (lo, hi): p equal-width ranges (keys outside go to the end buckets)
    row_order: str | None = None  # None: "exact" (under ``ordered``: the policy's row_order)
    # How many buckets may run at once; the ordered policy uses min(this, partitions).
    max_parallelism: int = 1 << 20
    selectivity_bound = _model.UNKNOWN
    resolves_partitions = True  # the scheduler calls resolve_partitions at submit

    def new_state(self):
        return {}

    def on_slice(self, ctx, rows: Packet, state, emit) -> None:
        raise NotImplementedError(f"{type(self).__name__}.on_slice")

    def on_slices(self, ctx, rows: Packet, spans: np.ndarray, states: list, emit) -> None:
        """Several slices of one packet (module doc); the default runs ``on_slice`` per span."""
        cols = rows.columns
        node = rows.node
        for (_, s, e), st in zip(spans.tolist(), states):
            self.on_slice(ctx, Packet({k: v[s:e] for k, v in cols.items()}, e - s, node), st, _OneSpan(emit, s, e - s))

    def states_reset(self, p: int) -> None:
        """The `p` bucket states are made anew (all None): at submit, before any worker
        runs the operator (``resolve_partitions``). Default: nothing; an operator that
        keeps an index of its states makes it here, never lazily from two workers at once."""

    def relocate_state(self, state):
        """A copy of `state` made by the calling worker (so on its node). Default: numpy
        arrays (alone, or as the values of a dict) are copied, other objects kept."""
        if isinstance(state, np.ndarray):
            return state.copy()
        if isinstance(state, dict):
            return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
        return state

    # -- runtime side ---------------------------------------------------------------------
    def _partitioning(self):
        """(key columns, p, partitioner, bounds array), checked once per instance."""
        part = self.__dict__.get("_bx_part")
        if part is None:
            key = _model.model_of(self).key
            if not key:
                raise ValueError(f"operator '{getattr(self, 'name', type(self).__name__)}': a PartitionedOperator "
                                 "must declare state = Partitioned(key)")
            p = self.partitions
            if p == "auto":
                if self.partitioner == "range" and self.key_range is None:
                    raise ValueError("partitions='auto' with range partitioning needs key_range=(lo, hi), not bounds")
                p = self.__dict__.get("_bx_auto_p", 1)
            elif not isinstance(p, int) or isinstance(p, bool) or p < 1:
                raise ValueError(f"partitions must be a positive integer or 'auto', got {p!r}")
            if self.partitioner not in PARTITIONERS:
                raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}, got {self.partitioner!r}")
            bounds = None
            if self.partitioner == "range":
                if len(key) != 1:
                    raise ValueError("range partitioning needs a single key column")
                if self.key_range is not None:
                    lo, hi = self.key_range
                    bounds = np.linspace(float(lo), float(hi), p + 1)[1:-1]
                elif self.bounds is not None:
                    bounds = np.asarray(self.bounds, dtype=np.float64)
                    if bounds.shape != (p - 1,):
                        raise ValueError(f"bounds must hold p - 1 = {p - 1} split points, got {bounds.size}")
                else:
                    raise ValueError("partitioner='range' needs key_range=(lo, hi) or bounds (p - 1 split points)")
                if np.any(np.diff(bounds) < 0):
                    raise ValueError("range bounds must be sorted")
            ro = self.row_order
            if ro is not None and ro not in ROW_ORDERS:
                raise ValueError(f"row_order must be one of {', '.join(ROW_ORDERS)}, got {ro!r}")
            part = (key, p, self.partitioner, bounds)
            self._bx_part = part
            self._bx_states = [None] * p
            self._bx_state_node = [None] * p
            self.states_reset(p)
        return part

    def resolve_partitions(self, workers: int) -> int:
        """Called by ``Scheduler.submit`` with the policy's ``bucket_parallelism()``, the
        buckets it may run at once: fixes p for ``partitions = "auto"`` (module doc)
        and checks the partitioning (ValueError). Returns p. Once a bucket has state, p
        stays (an instance copied after it ran keeps its buckets)."""
        if self.partitions == "auto":
            states = self.__dict__.get("_bx_states")
            if states is None or all(s is None for s in states):
                m = max(1, min(_model.model_of(self).max_parallelism, workers))
                p = 1 if m == 1 else min(DEFAULT_PARTITIONS, AUTO_BUCKETS_PER_WORKER * m)
                if self.__dict__.get("_bx_auto_p") != p:
                    self.__dict__.pop("_bx_part", None)  # a template's cache, copied by the plan
                    self._bx_auto_p = p
        return self._partitioning()[1]

    def bucket_ids(self, pkt: Packet) -> np.ndarray:
        """The bucket of every row of `pkt`."""
        key, p, how, bounds = self._partitioning()
        if how == "range":
            return range_buckets(np.asarray(pkt[key[0]], dtype=np.float64), bounds)
        if len(key) == 1:
            k = pkt[key[0]]
            k = k.view(np.int64) if k.dtype.itemsize == 8 and k.dtype.kind in "iuf" else k.astype(np.int64)
            return hash_buckets(k.reshape(1, -1), p)
        return hash_buckets(np.stack([np.asarray(pkt[c]).astype(np.int64) for c in key]), p)

    def slice_group(self, pkt: Packet) -> SliceGroup | None:
        """`pkt` cut into its non-empty bucket slices (one gather), or None when it has no rows."""
        p = self._partitioning()[1]
        if pkt.nrows == 0:
            return None
        ids = self.bucket_ids(pkt)
        order, starts = bucket_order(ids, p)
        rows = Packet(gather(pkt, order), pkt.nrows, pkt.node)
        return SliceGroup(rows, order, _spans(starts))

    def state_for(self, bucket: int, node=None):
        """Bucket `bucket`'s state, made on first use; moved (``relocate_state``) when the
        worker using it now is on another node than the last one. Only the bucket's
        active worker calls this (H1), so the two list slots need no lock."""
        self._partitioning()
        st = self._bx_states[bucket]
        if st is None:
            st = self._bx_states[bucket] = self.new_state()
            self._bx_state_node[bucket] = node
        elif node is not None and self._bx_state_node[bucket] != node:
            st = self._bx_states[bucket] = self.relocate_state(st)
            self._bx_state_node[bucket] = node
        return st

    def bucket_states(self):
        """(bucket, state) of every bucket that has one (after the stream: exclusive)."""
        self._partitioning()
        return [(b, s) for b, s in enumerate(self._bx_states) if s is not None]

    def effective_row_order(self, default: str = "exact") -> str:
        return self.row_order or default

    def on_packet(self, ctx, port, pkt):
        """One-thread path (``bobox``, ``simple``, the sequential reference): every slice
        in one ``on_slices`` call, merged as under ``ordered``."""
        g = self.slice_group(pkt)
        if g is None:
            return
        node = ctx.node
        states = [self.state_for(b, node) for b in g.buckets]
        packets, keys = [], []
        self.on_slices(ctx, g.rows, g.spans, states,
                       SpanCollector(g, g.spans, self.effective_row_order() == "exact", packets, keys))
        merged = merge_outputs(packets, keys)
        if merged is not None:
            ctx.send(self.outputs[0], merged)


@njit(nogil=True, cache=True)
def _spans(starts):
    """(bucket, start, end) of every non-empty bucket, from ``bucket_order``'s starts."""
    p = starts.shape[0] - 1
    k = 0
    for b in range(p):
        if starts[b + 1] > starts[b]:
            k += 1
    out = np.empty((k, 3), np.int64)
    j = 0
    for b in range(p):
        if starts[b + 1] > starts[b]:
            out[j, 0] = b
            out[j, 1] = starts[b]
            out[j, 2] = starts[b + 1]
            j += 1
    return out


__all__ = [
    "AUTO_BUCKETS_PER_WORKER",
    "DEFAULT_PARTITIONS",
    "PARTITIONERS",
    "PartitionedOperator",
    "ROW_ORDERS",
    "SliceGroup",
    "SpanCollector",
    "bucket_order",
    "gather",
    "hash_buckets",
    "merge_outputs",
    "range_buckets",
    "span_rows",
    "span_total",
]
