"""Splitters: the entry of a parallel region (Schneider et al. sections 4.1-4.4).

A splitter routes each packet's rows to N channels and, at a region's first joint, gives
them seqnos. Routing is round-robin for stateless regions (whole packets to channels 0,
1, ..., N-1, 0, ...) or by the hash of the region key (the same key always reaches the
same channel, so each channel's partitioned state sees only its keys). Per packet it
costs a few kernel calls: hash the key columns, a stable counting sort by channel, one
gather per column into a single packet whose channel slices are contiguous (sent as
views), and the seqnos ``base + row`` (``fission_kernels``).

Roles:

``edge`` (a region's, or a shuffle chain's, first splitter)
    numbers rows (the hidden ``__seq`` column) when the region's merger needs seqnos;
    every punctuation or latency marker takes a fresh seqno and is broadcast on every
    channel; with pulses, after every ``epoch * N`` units (packets by default: the
    batched analog of the paper's tuples; ``epoch_unit="row"`` counts rows and cuts
    packets at the boundary) one :class:`Pulse` with a fresh seqno goes on every channel.
``shuffle`` (the end of each channel of a region followed by a shuffle)
    only routes: rows keep their seqnos, pulses and punctuations are broadcast as they are.

Empty packets are not routed: they carry nothing, and the output compares rows and
punctuations, not packet boundaries. End of stream is sent on every channel.

Threads: one splitter instance is run by one thread at a time (the runtime's operator
state machine); it holds no lock. The same routing code serves the Spark driver
(:func:`route`).
"""

from __future__ import annotations

import numpy as np

from bobox_sched.core.operator import Operator
from bobox_sched.core.packet import Packet, PacketSpec
from bobox_sched.regions import kernels as FK
from bobox_sched.control import model as M
from bobox_sched.control.punct import Marker, Punctuation, Pulse
from bobox_sched.core.seq import SEQ

EDGE = "edge"
SHUFFLE_ROLE = "shuffle"
PACKET = "packet"
ROW = "row"


def _int_view(a: np.ndarray) -> np.ndarray:
    """The column as integers for hashing (floats bit for bit; others as they are)."""
    if a.dtype.kind == "f":
        return a.view(np.int64 if a.itemsize == 8 else np.int32 if a.itemsize == 4 else np.int16)
    if a.dtype.kind == "b":
        return a.view(np.uint8)
    return a


def channels_of(columns: dict, key: tuple, n: int) -> np.ndarray:
    """Channel (0..n-1) of every row by the hash of its `key` columns (nogil kernels)."""
    first = columns[key[0]]
    rows = len(first)
    h = np.empty(rows, np.uint64)
    FK.hash_init(h)
    for k in key:
        col = columns[k]
        if not col.flags.c_contiguous:
            col = np.ascontiguousarray(col)
        FK.hash_mix(h, _int_view(col))
    ch = np.empty(rows, np.int64)
    FK.channel_of(h, n, ch)
    return ch


class Router:
    """Routing and numbering state of one splitter (the part the Spark driver reuses)."""

    def __init__(self, n: int, key: tuple | None, number: bool, alloc=None, first: int = 0, windows: bool = False):
        self.n = n
        # A region whose operators emit rows on punctuations (unordered per window, R8):
        # each punctuation takes two seqnos, the first for the rows emitted on it.
        self.windows = windows
        self.key = tuple(key) if key else None
        self.number = number
        self.next_seq = first  # the next seqno to give
        self.rr = 0  # the next round-robin channel
        self.alloc = alloc
        self._specs: dict = {}
        self.rows = np.zeros(n, np.int64)  # rows routed per channel

    def _spec(self, pkt, with_seq: bool) -> PacketSpec:
        k = (tuple((nm, a.dtype.str) for nm, a in pkt.columns.items()), with_seq)
        s = self._specs.get(k)
        if s is None:
            cols = {nm: a.dtype for nm, a in pkt.columns.items()}
            if with_seq:
                cols[SEQ] = np.int64
            s = self._specs[k] = PacketSpec(cols)
        return s

    def _new(self, spec, n):
        if self.alloc is not None:
            return self.alloc(spec, n)
        return Packet({nm: np.empty(n, dt) for nm, dt in zip(spec.names, spec.dtypes)}, n)

    def _numbered(self, pkt) -> Packet:
        """`pkt` whole, its rows numbered from ``next_seq`` (a view of its columns plus
        a fresh ``__seq``)."""
        n = pkt.nrows
        s = self._new(_SEQ_ONLY, n)[SEQ]
        FK.fill_range(s, self.next_seq)
        self.next_seq += n
        cols = dict(pkt.columns)
        cols[SEQ] = s
        return Packet(cols, n, pkt.node)

    def route(self, pkt) -> list:
        """``[(channel, packet), ...]`` for one input packet (non-empty), numbered if this
        router numbers."""
        n = pkt.nrows
        number = self.number and SEQ not in pkt.columns
        if self.key is None:
            c = self.rr
            self.rr = (c + 1) % self.n
            self.rows[c] += n
            return [(c, self._numbered(pkt) if number else pkt)]
        ch = channels_of(pkt.columns, self.key, self.n)
        order, bounds = FK.scatter_order(ch, self.n)
        counts = np.diff(bounds)
        self.rows += counts
        used = np.flatnonzero(counts)
        if len(used) == 1:  # every row to one channel: no gather
            c = int(used[0])
            return [(c, self._numbered(pkt) if number else pkt)]
        out = self._new(self._spec(pkt, number), n)
        for nm, a in pkt.columns.items():
            FK.gather(a, order, out.columns[nm])
        if number:
            FK.seq_of_order(order, self.next_seq, out.columns[SEQ])
            self.next_seq += n
        res = []
        cols = out.columns
        for c in used:
            a, b = int(bounds[c]), int(bounds[c + 1])
            res.append((int(c), Packet({nm: v[a:b] for nm, v in cols.items()}, b - a, out.node)))
        return res

    def control(self, p: Punctuation) -> Punctuation:
        """The copy of control item `p` to broadcast (with a fresh seqno if numbering)."""
        if self.number:
            if self.windows and not isinstance(p, (Pulse, Marker)):
                self.next_seq += 1  # the window group's seqno: rows emitted on p
            p = p.with_seq(self.next_seq)
            self.next_seq += 1
        return p

    def pulse(self) -> Pulse:
        p = Pulse(seq=self.next_seq)
        self.next_seq += 1
        return p


_SEQ_ONLY = PacketSpec({SEQ: np.int64})


def route(pkt, n: int, key: tuple | None, base: int) -> list:
    """Route one packet as a numbering splitter would, seqnos from `base` (Spark driver)."""
    r = Router(n, key, True, first=base)
    return r.route(pkt)


class SplitterOperator(Operator):
    """One input, N outputs ``out0`` ... ``out{N-1}`` (the channels). See the module doc.

    ``stats`` (a dict, optional): at the end the splitter stores its figures there under
    ``(request id, operator name)``: rows per channel, pulses, seconds spent."""

    inputs = ("in",)
    control_aware = True
    state = M.UNKNOWN  # runtime-internal: never part of a region itself
    punct_in = M.EXPECTING
    punct_out = M.GENERATES

    def __init__(self, n: int, key=None, number: bool = False, pulses: bool = False, epoch: int = 10,
                 epoch_unit: str = PACKET, role: str = EDGE, stats: dict | None = None, windows: bool = False):
        if n < 1:
            raise ValueError(f"a splitter needs at least one channel, got {n}")
        if epoch_unit not in (PACKET, ROW):
            raise ValueError(f"epoch_unit must be '{PACKET}' or '{ROW}', got {epoch_unit!r}")
        if not isinstance(epoch, int) or epoch < 1:
            raise ValueError(f"epoch must be a positive integer, got {epoch!r}")
        self.outputs = tuple(f"out{c}" for c in range(n))
        self.n = n
        self.key = tuple(key) if key else None
        self.number = number and role == EDGE
        self.pulses = pulses and role == EDGE
        self.period = epoch * n  # units between pulse rounds
        self.epoch_unit = epoch_unit
        self.role = role
        self.stats = stats
        self.windows = windows
        self._router = None
        self._units = 0
        self._npulses = 0
        self._seconds = 0.0

    def _broadcast(self, ctx, p) -> None:
        for port in self.outputs:
            ctx.punctuate(p, port)

    def _send(self, ctx, pkt) -> None:
        outs = self.outputs
        for c, part in self._router.route(pkt):
            ctx.send(outs[c], part)

    def _data(self, ctx, pkt) -> None:
        if not self.pulses:
            self._send(ctx, pkt)
            return
        if self.epoch_unit == PACKET:
            self._send(ctx, pkt)
            self._units += 1
            if self._units >= self.period:
                self._units = 0
                self._pulse(ctx)
            return
        # rows: cut the packet where a pulse is due
        n = pkt.nrows
        a = 0
        while a < n:
            k = min(n - a, self.period - self._units)
            part = pkt if (a == 0 and k == n) else Packet({nm: v[a:a + k] for nm, v in pkt.columns.items()}, k,
                                                          pkt.node)
            self._send(ctx, part)
            a += k
            self._units += k
            if self._units >= self.period:
                self._units = 0
                self._pulse(ctx)

    def _pulse(self, ctx) -> None:
        self._npulses += 1
        self._broadcast(ctx, self._router.pulse())

    def process(self, ctx):
        import time

        t0 = time.perf_counter()
        r = self._router
        if r is None:
            r = self._router = Router(self.n, self.key, self.number, windows=self.windows)
        r.alloc = ctx.new_packet  # this worker's context (node-local packets), for this run only
        while not ctx.blocked:
            item = ctx.recv("in")
            if item is None:
                break
            if isinstance(item, Punctuation):
                if isinstance(item, Pulse) and self.role == EDGE:
                    continue  # pulses never leave a region: one from upstream is stale
                self._broadcast(ctx, item if self.role != EDGE else r.control(item))
            elif item.nrows:
                self._data(ctx, item)
        r.alloc = None
        if ctx.at_eos("in"):
            ctx.close()
            ctx.finish()
            if self.stats is not None:
                self.stats[(ctx.request.id, self.name)] = {
                    "rows": [int(x) for x in r.rows], "pulses": self._npulses,
                    "seconds": self._seconds + time.perf_counter() - t0}
        self._seconds += time.perf_counter() - t0


__all__ = ["EDGE", "PACKET", "ROW", "Router", "SHUFFLE_ROLE", "SplitterOperator", "channels_of", "route"]
