"""Ordered mergers: the exit of a parallel region (Schneider et al. section 4.3).

A merger has one FIFO queue per channel. It accepts whatever arrives at once (an
operator must keep consuming every input) and then emits as far as its strategy allows;
within a channel items are already in order, so merging is a merge of ordered sources.
Four strategies, each more general than the one before (a more general one is always
safe; an override may only go up this lattice):

``round_robin``
    1:1 stateless regions. The splitter sends whole packets to channels 0, 1, ..., N-1,
    0, ...; each channel returns exactly one packet per packet (``channel.py`` makes
    sure), so the merger takes one packet from channel m and moves on. A punctuation is
    broadcast by the splitter without moving the pointer: the merger emits it once when
    it heads channel m and pops the copy heading every other channel (it must be there:
    anything else is a runtime error).
``seqno``
    1:1 regions (partitioned): emit the smallest head when it is ``last + 1``.
``strict``
    at most one output per input (gaps): the head t is ready when ``t - last == 1`` or
    ``t - 1`` is known to have been dropped: ``steady and t - 1 < seenTop``, where
    ``back[c]`` is the last seqno ever received on channel c (a pulse counts; a closed
    channel's is +inf), ``seenTop = min(back)`` and steady means every channel has
    received something.
``relaxed``
    any number of outputs per input (gaps and duplicates; duplicates of x only on x's
    channel): ready when ``gap == 0``, or ``gap == 1`` and no more copies of ``last``
    can come (``last < back[lastChan]``), or ``gap > 1`` and ``t - 1`` was dropped.

Control items (pulses, punctuations, latency markers) carry a seqno of their own, fresh
from the first splitter's counter (never a row's), and are broadcast on every channel.
They are ordered like rows; the first ready copy is emitted (the region's last merger
drops pulses and strips seqnos, a shuffle merger keeps both) and later copies, whose
seqno is ``<= last``, are dropped. After a control item, ``noDups`` holds trivially (no
row shares its seqno): a derived refinement of the paper's rule, applied by both mergers
below. End of stream on channel c sets ``back[c] = +inf``; the output ends when every
channel ended and every queue is empty.

Batched merging (why per-packet work is enough). :class:`ReferenceMerger` is the
paper's algorithm item by item: after each arrival, repeatedly test the smallest queue
head and emit it while ready. Between two arrivals the queues only shrink, so the heads
it examines, in order, are exactly the merged order of the queued items (ties: lowest
channel; rows of equal seqno sit on one channel, in order). :class:`OrderedMerger` runs
that same walk in one nogil kernel (``fission_kernels.merge_ready``) over the head
packets of every channel, with the same ready test, ``last``, ``lastChan``, ``back``,
``seenTop`` and ``steady`` (the latter three cannot change during a walk: no arrival
happens inside it). It stops where the per-item algorithm stops (the smallest head not
ready) or earlier, where the kernel cannot see the next head (a channel's head packet is
used up and more is queued behind it, or the smallest head is a control item): Python
then pops the used-up packet or decides the control item with the same rule, and walks
on. Output rows are gathered from the channels' packets in that order in one more kernel
call per column (or sliced, without copying, when one channel supplied them all). So
the output equals the reference merger's for every interleaving of arrivals (tested in
``tests/test_regions_merger.py``), and the Python cost is per packet and per control
item, never per row.

Threads: a merger object is used by one thread at a time (the runtime runs an operator
on one thread at a time; on Spark the driver's one thread feeds it); it holds no lock.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from bobox_sched.core.errors import OperatorError
from bobox_sched.core.operator import Operator
from bobox_sched.core.packet import Packet, PacketSpec
from bobox_sched.regions import kernels as FK
from bobox_sched.control import model as M
from bobox_sched.control.punct import Punctuation, Pulse
from bobox_sched.core.seq import SEQ

ROUND_ROBIN = "round_robin"
SEQNO = "seqno"
STRICT = "strict"
RELAXED = "relaxed"
UNORDERED = "unordered"
# The lattice of ordering strategies, least general first (Table 1).
LATTICE = (ROUND_ROBIN, SEQNO, STRICT, RELAXED)
STRATEGY_NAMES = {
    ROUND_ROBIN: "round-robin",
    SEQNO: "seqno",
    STRICT: "strict seqno + pulses",
    RELAXED: "relaxed seqno + pulses",
    UNORDERED: "unordered (parallel source/sink: routing only)",
}
_CODE = {SEQNO: FK.ORD_SEQNO, STRICT: FK.ORD_STRICT, RELAXED: FK.ORD_RELAXED}
_EMPTY_SEQ = np.empty(0, np.int64)


class MisdeclaredOperator(OperatorError, RuntimeError):
    """A channel delivered what its region's declarations rule out (an operator declared
    ExactlyOne dropped or added rows, a selective one duplicated rows, ...): the merger
    stops the request with this error instead of waiting forever. An ``OperatorError``
    (the operator broke what it declared), so a ``BoboxError`` like every runtime error;
    still a ``RuntimeError``, as it was."""


def _ready_py(strategy: str, t: int, last: int, last_chan: int, last_ctrl: bool, steady: bool, seen_top: int,
              back) -> bool:
    """The per-item ready test (same as ``fission_kernels._ready``)."""
    gap = t - last
    if strategy == SEQNO:
        return gap == 1
    if strategy == STRICT:
        return gap == 1 or (steady and t - 1 < seen_top)
    if gap == 0:
        return True
    if gap == 1:
        return last_ctrl or (last_chan >= 0 and last < back[last_chan])
    return steady and t - 1 < seen_top


# ---------------------------------------------------------------------------------------
# the reference: item by item, exactly the paper's algorithms


class Row:
    """One tuple for :class:`ReferenceMerger`: a seqno (None under round-robin) and a value."""

    __slots__ = ("seq", "value")

    def __init__(self, seq, value=None):
        self.seq = seq
        self.value = value

    def __repr__(self) -> str:
        return f"Row({self.seq}, {self.value!r})"


class ReferenceMerger:
    """The per-item merger of section 4.3, used as the oracle of the batched one and to
    replay the Fig. 5 traces. ``arrive(c, item)`` queues a :class:`Row` or a
    punctuation and returns what became ready; ``close(c)`` ends channel c.

    Its fields are the paper's: ``queues``, ``back``, ``last`` (lastSeqno), ``last_chan``,
    ``steady()``, ``seen_top()``, ``next_top()`` (the nextHeap's top as (seqno, channel)),
    and for round-robin the pointer ``m``."""

    def __init__(self, n: int, strategy: str, *, keep_pulses: bool = False, first: int = 0):
        if strategy not in LATTICE:
            raise ValueError(f"unknown ordering {strategy!r}")
        self.n = n
        self.strategy = strategy
        self.keep_pulses = keep_pulses
        self.queues = [deque() for _ in range(n)]
        self.back = [None] * n  # None: nothing received yet
        self.closed = [False] * n
        self.last = first - 1
        self.last_chan = -1
        # True while the last item emitted was no row (at the start: nothing yet), so no
        # copies of `last` can still come.
        self.last_ctrl = True
        self.m = 0

    # -- the paper's helpers -----------------------------------------------------------
    def steady(self) -> bool:
        return all(b is not None for b in self.back)

    def seen_top(self):
        return min((b for b in self.back if b is not None), default=None)

    def next_top(self):
        heads = [(q[0].seq, c) for c, q in enumerate(self.queues) if q]
        return min(heads) if heads else None

    def gap(self, s) -> int:
        return s - self.last

    def dropped(self, s) -> bool:
        return self.steady() and s < self.seen_top()

    def no_dups(self, s) -> bool:
        return self.last_ctrl or (self.last_chan >= 0 and s < self.back[self.last_chan])

    # -- arrivals ----------------------------------------------------------------------
    def arrive(self, c: int, item) -> list:
        self.queues[c].append(item)
        if self.strategy != ROUND_ROBIN:
            self.back[c] = item.seq
        return self.drain()

    def close(self, c: int) -> list:
        self.closed[c] = True
        self.back[c] = FK.SEQ_INF
        return self.drain()

    @property
    def done(self) -> bool:
        return all(self.closed) and not any(self.queues)

    def drain(self) -> list:
        return self._drain_rr() if self.strategy == ROUND_ROBIN else self._drain_seq()

    def _drain_rr(self) -> list:
        out = []
        while True:
            q = self.queues[self.m]
            if not q:
                return out
            head = q[0]
            if not isinstance(head, Punctuation):
                out.append(q.popleft())
                self.m = (self.m + 1) % self.n
                continue
            others = [j for j in range(self.n) if j != self.m]
            if any(not self.queues[j] for j in others):
                return out  # wait for every copy
            for j in others:
                if self.queues[j][0] != head:
                    raise MisdeclaredOperator(f"round-robin merger: channel {j} has {self.queues[j][0]!r} where "
                                              f"a copy of {head!r} was due")
            for j in range(self.n):
                self.queues[j].popleft()
            out.append(head)

    def _drain_seq(self) -> list:
        out = []
        while True:
            top = self.next_top()
            if top is None:
                return out
            t, c = top
            item = self.queues[c][0]
            is_ctrl = isinstance(item, Punctuation)
            if is_ctrl and t <= self.last:
                self.queues[c].popleft()  # a copy of what was emitted
                continue
            if not _ready_py(self.strategy, t, self.last, self.last_chan, self.last_ctrl, self.steady(),
                             self.seen_top() if self.steady() else None, self.back):
                return out
            self.queues[c].popleft()
            self.last, self.last_chan, self.last_ctrl = t, c, is_ctrl
            if not (isinstance(item, Pulse) and not self.keep_pulses):
                out.append(item)


# ---------------------------------------------------------------------------------------
# the batched merger: packets in, packets out


def _plain_alloc(spec: PacketSpec, n: int) -> Packet:
    return Packet({name: np.empty(n, dt) for name, dt in zip(spec.names, spec.dtypes)}, n)


class OrderedMerger:
    """The batched merger (module doc). ``push(c, item)`` queues a packet (with ``__seq``
    unless round-robin) or a punctuation from channel c; ``close(c)`` ends channel c;
    ``drain()`` returns the packets and punctuations now ready, in order.

    ``keep_seq``: a shuffle merger keeps ``__seq`` and forwards one copy of each pulse
    (True); a region's last merger strips seqnos and drops pulses (False).
    ``alloc(spec, nrows)``: where gathered output packets come from (``ctx.new_packet``
    in an operator). ``check``: verify each channel's order (a cheap nogil pass per
    packet) and raise :class:`MisdeclaredOperator` instead of mis-ordering or hanging."""

    def __init__(self, n: int, strategy: str, *, keep_seq: bool = False, alloc=None, check: bool = True,
                 first: int = 0, name: str = "merger", windows: bool = False):
        if strategy not in LATTICE and strategy != UNORDERED:
            raise ValueError(f"unknown ordering {strategy!r} (one of {', '.join(LATTICE + (UNORDERED,))})")
        if n < 1:
            raise ValueError(f"a merger needs at least one channel, got {n}")
        self.n = n
        self.strategy = strategy
        self.keep_seq = keep_seq
        self.alloc = alloc or _plain_alloc
        self.check = check
        self.name = name
        # windows: the region's operators emit rows on punctuations, unordered within the
        # window (R8): those rows share the seqno just below the punctuation's on every
        # channel, and a punctuation (any control item) leaves only once every channel is
        # past that seqno, i.e. once every channel's rows of the window were emitted.
        if windows and strategy != RELAXED:
            raise ValueError("window groups need the relaxed strategy")
        self.windows = windows
        self.strategy_code = FK.ORD_RELAXED_WINDOWS if windows else _CODE.get(strategy, 0)
        self._oc = np.empty(0, np.int64)  # the walk's output: channel and row of each emitted row
        self._orow = np.empty(0, np.int64)
        self.q = [deque() for _ in range(n)]  # [packet, pos] for data; Punctuation for control
        self.back = [-(1 << 62)] * n
        self.heard = [False] * n
        self.n_heard = 0
        self.closed = [False] * n
        self.last = first - 1
        self.last_chan = -1
        self.last_ctrl = True  # the last item emitted was no row (none yet): no copies of `last` to wait for
        self.m = 0  # round-robin pointer
        self._specs: dict = {}
        self._ucount: dict = {}  # unordered: copies of each control item seen
        # statistics: items queued now / at most, rows in and out, kernel calls
        self.queued = 0
        self.peak_queued = 0
        self.rows_in = 0
        self.rows_out = 0
        self.walks = 0
        self.controls_in = 0  # control items received (every copy)
        self.pulses_in = 0

    # -- arrivals ----------------------------------------------------------------------
    def push(self, c: int, item) -> None:
        if isinstance(item, Punctuation):
            self.controls_in += 1
            if isinstance(item, Pulse):
                self.pulses_in += 1
            if self.strategy not in (ROUND_ROBIN, UNORDERED):
                if item.seq is None:
                    raise MisdeclaredOperator(f"{self.name}: channel {c} delivered {item!r} without a seqno "
                                              "(a punctuation generated inside the region: rule R7)")
                if self.check and item.seq <= self.back[c] and self.heard[c]:
                    raise MisdeclaredOperator(f"{self.name}: channel {c} went back from seqno {self.back[c]} to "
                                              f"{item.seq} ({item!r})")
                self.back[c] = item.seq
            self.q[c].append(item)
        else:
            n = item.nrows
            if n == 0:
                return
            if self.strategy not in (ROUND_ROBIN, UNORDERED):
                seq = item.columns.get(SEQ)
                if seq is None:
                    raise MisdeclaredOperator(f"{self.name}: channel {c} delivered rows without {SEQ}: an operator "
                                              "of the region dropped the seqnos (declare seq_aware and use "
                                              "ctx.send_derived, or declare EXACTLY_ONE)")
                if not seq.flags.c_contiguous or seq.dtype != np.int64:
                    seq = np.ascontiguousarray(seq, np.int64)
                    item = Packet({**item.columns, SEQ: seq}, n, item.node)
                if self.check and not FK.check_run(seq, self.back[c] if self.heard[c] else -(1 << 62),
                                                   self.strategy != RELAXED):
                    raise MisdeclaredOperator(
                        f"{self.name}: channel {c} delivered seqnos out of order"
                        + (" or duplicated (an operator declared at most one output per input emitted more)"
                           if self.strategy != RELAXED else ""))
                self.back[c] = int(seq[n - 1])
            self.rows_in += n
            self.q[c].append([item, 0])
        if not self.heard[c]:
            self.heard[c] = True
            self.n_heard += 1
        self.queued += 1
        if self.queued > self.peak_queued:
            self.peak_queued = self.queued

    def close(self, c: int) -> None:
        if self.closed[c]:
            return
        self.closed[c] = True
        self.back[c] = FK.SEQ_INF
        if not self.heard[c]:
            self.heard[c] = True
            self.n_heard += 1

    @property
    def done(self) -> bool:
        """Every channel ended and everything was emitted."""
        return all(self.closed) and self.queued == 0

    def drain(self) -> list:
        """What is ready now, in order: packets and punctuations."""
        s = self.strategy
        if s == ROUND_ROBIN:
            out = self._drain_rr()
        elif s == UNORDERED:
            out = self._drain_unordered()
        else:
            out = self._drain_seq()
        if all(self.closed) and self.queued:
            self._stuck()
        return out

    def _stuck(self):
        left = {c: len(q) for c, q in enumerate(self.q) if q}
        raise MisdeclaredOperator(
            f"{self.name}: every channel ended but items are still queued ({left}) and can never be ordered: "
            "an operator of the region does not behave as declared (e.g. declared EXACTLY_ONE but dropped rows)")

    # -- round-robin -------------------------------------------------------------------
    def _drain_rr(self) -> list:
        out = []
        q = self.q
        n = self.n
        while True:
            qm = q[self.m]
            if not qm:
                if self.closed[self.m] and self.queued:
                    self._stuck()
                return out
            head = qm[0]
            if head.__class__ is list:
                qm.popleft()
                self.queued -= 1
                pkt = head[0]
                self.rows_out += pkt.nrows
                out.append(pkt)
                self.m = (self.m + 1) % n
                continue
            for j in range(n):
                if j != self.m:
                    if not q[j]:
                        if self.closed[j]:
                            self._stuck()
                        return out  # wait for every copy
                    h = q[j][0]
                    if not (h is head or (isinstance(h, Punctuation) and h == head and h.seq == head.seq)):
                        raise MisdeclaredOperator(f"{self.name}: round-robin channel {j} has {h!r} where a copy "
                                                  f"of {head!r} was due (a channel operator is not 1:1)")
            for j in range(n):
                q[j].popleft()
            self.queued -= n
            out.append(head)

    # -- unordered (parallel source or sink chains) --------------------------------------
    def _drain_unordered(self) -> list:
        out = []
        for c in range(self.n):
            qc = self.q[c]
            while qc:
                item = qc.popleft()
                self.queued -= 1
                if item.__class__ is list:
                    pkt = item[0]
                    self.rows_out += pkt.nrows
                    out.append(pkt if self.keep_seq else _strip(pkt))
                    continue
                key = (type(item), item.seq, tuple(sorted(item._fields().items(), key=repr)))
                k = self._ucount.get(key, 0) + 1
                if k == self.n:
                    self._ucount.pop(key, None)
                    if not isinstance(item, Pulse) or self.keep_seq:
                        out.append(item if self.keep_seq else item.with_seq(None))
                else:
                    self._ucount[key] = k
        return out

    # -- seqno strategies ----------------------------------------------------------------
    def _drain_seq(self) -> list:
        out = []
        n = self.n
        q = self.q
        code = self.strategy_code
        strategy = self.strategy
        kinds = np.empty(n, np.int64)
        ctrl = np.zeros(n, np.int64)
        start = np.empty(n, np.int64)
        end = np.empty(n, np.int64)
        while True:
            steady = self.n_heard == n
            back = self.back
            seen_top = min(back) if steady else 0
            runs = []
            total = 0
            any_head = False
            for c in range(n):
                qc = q[c]
                start[c] = total
                if qc:
                    any_head = True
                    head = qc[0]
                    if head.__class__ is list:
                        r = head[0].columns[SEQ][head[1]:]
                        runs.append(r)
                        total += len(r)
                        kinds[c] = FK.RUN_MORE if len(qc) > 1 else FK.RUN_LAST
                    else:
                        kinds[c] = FK.RUN_CTRL
                        ctrl[c] = head.seq
                else:
                    kinds[c] = FK.RUN_LAST
                end[c] = total
            if not any_head:
                return out
            cat = runs[0] if len(runs) == 1 else (np.concatenate(runs) if runs else _EMPTY_SEQ)
            if len(self._oc) < total:
                self._oc = np.empty(max(total, 2 * len(self._oc)), np.int64)
                self._orow = np.empty(len(self._oc), np.int64)
            count, stop, ch, last, last_chan = FK.merge_ready(
                cat, start, end, kinds, ctrl, np.array(back, np.int64), code, self.last, self.last_chan,
                self.last_ctrl, steady, seen_top, self._oc, self._orow)
            self.walks += 1
            if count:
                self._emit_rows(out, self._oc[:count], count)
                self.last, self.last_chan, self.last_ctrl = int(last), int(last_chan), False
            if stop == FK.STOP_RUN_END:
                continue  # the used-up packet was popped by _emit_rows
            if stop == FK.STOP_CONTROL:
                item = q[ch][0]
                t = item.seq
                if t <= self.last:
                    q[ch].popleft()  # a copy of a control item already emitted
                    self.queued -= 1
                    continue
                if self.windows:
                    if not (steady and t - 1 < seen_top):
                        return out
                elif not _ready_py(strategy, t, self.last, self.last_chan, self.last_ctrl, steady, seen_top, back):
                    return out
                q[ch].popleft()
                self.queued -= 1
                self.last, self.last_chan, self.last_ctrl = t, ch, True
                if self.keep_seq:
                    out.append(item)
                elif not isinstance(item, Pulse):
                    out.append(item.with_seq(None))
                continue
            if stop == FK.STOP_DISORDER:
                raise MisdeclaredOperator(
                    f"{self.name}: channel {ch} delivered a seqno at or below the last one emitted ({self.last}): "
                    "rows duplicated on several channels or out of order (an operator's declared selectivity or "
                    "state does not hold)")
            return out

    def _emit_rows(self, out, chans, count) -> None:
        """Emit the `count` rows the walk chose (channel of each, in output order); each
        channel's rows are a prefix of its head packet's remaining rows."""
        q = self.q
        n = self.n
        pos, bounds = FK.group_by_channel(chans, n)
        used = [c for c in range(n) if bounds[c + 1] > bounds[c]]
        if len(used) == 1:  # one channel: a slice of its packet, no copy
            c = used[0]
            entry = q[c][0]
            pkt, p0 = entry
            k = count
            cols = {name: a[p0:p0 + k] for name, a in pkt.columns.items() if self.keep_seq or name != SEQ}
            out.append(Packet(cols, k, pkt.node))
        else:
            first = q[used[0]][0][0]
            names = [nm for nm in first.columns if self.keep_seq or nm != SEQ]
            spec_key = tuple((nm, first.columns[nm].dtype.str) for nm in names)
            spec = self._specs.get(spec_key)
            if spec is None:
                spec = self._specs[spec_key] = PacketSpec({nm: first.columns[nm].dtype for nm in names})
            res = self.alloc(spec, count)
            for c in used:
                entry = q[c][0]
                pkt, p0 = entry
                a, b = int(bounds[c]), int(bounds[c + 1])
                where = pos[a:b]
                for nm in names:
                    FK.scatter(pkt.columns[nm][p0:p0 + b - a], where, res.columns[nm])
            out.append(res)
        self.rows_out += count
        for c in used:
            entry = q[c][0]
            entry[1] += int(bounds[c + 1] - bounds[c])
            if entry[1] >= entry[0].nrows:
                q[c].popleft()
                self.queued -= 1


def _strip(pkt):
    if SEQ not in pkt.columns:
        return pkt
    return Packet({k: v for k, v in pkt.columns.items() if k != SEQ}, pkt.nrows, pkt.node)


# ---------------------------------------------------------------------------------------
# the merger as an operator of a plan


class MergerOperator(Operator):
    """N inputs (``in0`` ... ``in{N-1}``, one per channel), one output. It consumes every
    input whenever it runs (stashing what is not ready yet) and emits what the
    :class:`OrderedMerger` releases. ``stats`` after the run: peak items queued, rows."""

    outputs = ("out",)
    control_aware = True  # pulses and markers come to it, not through the runtime
    state = M.UNKNOWN  # runtime-internal: never part of a region itself
    punct_in = M.EXPECTING
    punct_out = M.GENERATES

    def __init__(self, n: int, strategy: str, keep_seq: bool = False, check: bool = True, label: str = "merger",
                 stats: dict | None = None, windows: bool = False):
        self.inputs = tuple(f"in{c}" for c in range(n))
        self.n = n
        self.strategy = strategy
        self.keep_seq = keep_seq
        self.check = check
        self.label = label
        self.stats = stats
        self.windows = windows
        self._m = None
        self._seconds = 0.0

    def process(self, ctx):
        t0 = time.perf_counter()
        try:
            self._process(ctx)
        finally:
            self._seconds += time.perf_counter() - t0

    def _process(self, ctx):
        m = self._m
        if m is None:
            m = self._m = OrderedMerger(self.n, self.strategy, keep_seq=self.keep_seq, check=self.check,
                                        name=f"merger '{self.name}'", windows=self.windows)
        m.alloc = ctx.new_packet  # this worker's context (node-local packets), for this run only
        for c, port in enumerate(self.inputs):
            while True:
                item = ctx.recv(port)
                if item is None:
                    break
                m.push(c, item)
            if not m.closed[c] and ctx.at_eos(port):
                m.close(c)
        out = m.drain()
        m.alloc = _plain_alloc
        for item in out:
            if isinstance(item, Punctuation):
                ctx.punctuate(item)
            else:
                ctx.send("out", item)
        if m.done:
            ctx.close()
            ctx.finish()
            if self.stats is not None:
                self.stats[(ctx.request.id, self.name)] = {
                    "strategy": m.strategy, "peak_queued": m.peak_queued, "rows_in": m.rows_in,
                    "rows_out": m.rows_out, "walks": m.walks, "pulses_in": m.pulses_in,
                    "controls_in": m.controls_in, "seconds": self._seconds}


__all__ = [
    "LATTICE",
    "MergerOperator",
    "MisdeclaredOperator",
    "OrderedMerger",
    "RELAXED",
    "ROUND_ROBIN",
    "ReferenceMerger",
    "Row",
    "SEQNO",
    "STRATEGY_NAMES",
    "STRICT",
    "UNORDERED",
]
