"""The progress controller (TStream IV-B3): monotone timestamps and batch punctuations.

Events are dealt round-robin to the T executors; event j of the stream gets ``ts = j``
and goes to executor ``j mod T`` (so executor t's i-th event has ts ``t + i*T``, the
authors' scheme). After every ``interval`` events of an executor -- its events
``[k*I, (k+1)*I)`` -- that executor gets ``Batch(ts=(k+1)*I*T)``: every event it got
before has a smaller ts, every later event a larger or equal one, and the punctuations'
timestamps grow. A batch therefore holds ``interval x T`` transactions (spec 1.7).

Dealing is in timestamp order, piece by piece (a piece: an executor's next events, at
most a packet, never across its batch's end), hence batch by batch (every executor's
part of batch k, with its punctuation, before anyone's part of batch k+1): one outbox
keeps the order of all outputs, so an executor that is waiting at batch k's barrier
never holds back what another executor needs to reach that barrier, and a baseline
executor waiting for a smaller ts never holds back the packet that carries it (its own
later events are dealt after it, whatever its input buffer holds).

Flow control (dual mode): an instance waiting at a barrier keeps taking its input
(``operator.py``), so the controller bounds what is in flight itself: it deals batch b
only once batch ``b - LOOKAHEAD`` is finished, every instance having post-processed it
(``Group.gate``; LOOKAHEAD = 1: no new input while a batch is in state access or
post-processing; 2 with ``TxnConfig.pipeline``, whose instances compute the next batch
meanwhile), else it returns and the group runs it again when a batch finishes.

:class:`ProgressController` does this for one input stream (outputs ``out0 ..
out{T-1}``); :class:`ArrayParser` for a table of events held in memory (the benchmark's
Parser): both use :func:`deal`.
"""

from __future__ import annotations

import time

import numpy as np

from bobox_sched.core.operator import Operator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as _model
from bobox_sched.control.punct import Batch, Punctuation

# How often a gated ProgressController with unread input looks again (seconds). The group
# normally runs it when the batch it waits for finishes; the poll only bounds the wait
# if that wake-up is missed. A state-access phase takes 0.1-1 ms here (2-core VM, GS at
# interval 500), so 1 ms polls at most once or twice per batch.
GATED_POLL_S = 0.001


def batch_punct_ts(k: int, interval: int, executors: int) -> int:
    """Timestamp of the punctuation that ends batch k (0-based)."""
    return (k + 1) * interval * executors


def executor_rows(t: int, executors: int, start: int, stop: int) -> np.ndarray:
    """Stream positions (= timestamps) of executor t's events among ``[start, stop)``."""
    first = start + ((t - start) % executors)
    return np.arange(first, stop, executors, dtype=np.int64)


def deal(j0: int, n: int, counts: list, executors: int, interval: int, max_rows: int | None = None):
    """Deal stream positions ``[j0, j0 + n)`` batch by batch. Yields ``(t, positions,
    batch, punct_ts)``: executor t's next positions (at most `max_rows`), the batch they
    belong to, and the ts of the punctuation that follows them (None if none does).
    ``counts[t]`` (events dealt to t so far) is updated as the caller consumes."""
    T, I = executors, interval
    pos = [executor_rows(t, T, j0, j0 + n) for t in range(T)]
    at = [0] * T
    while True:
        # In timestamp order: the next piece is the one of the executor whose next event
        # has the smallest ts (a stream position). Batches are contiguous ranges of
        # positions, so this is batch by batch too (a packet need not start or end at a
        # batch boundary: executor 0 may already be in batch k+1 while the others still
        # owe rows of batch k, and a dealer gated at k+1 must first have dealt all of k).
        # Within a batch it interleaves the executors' pieces instead of dealing one
        # executor's whole share before the next one's: the baselines run a transaction
        # only after every smaller ts (LOCK's and MVLK's counter, PAT's sequences), and
        # one outbox keeps the dealing order, so an executor whose share is more packets
        # than its input buffer holds would keep the next executor's smaller timestamps
        # behind its own, waiting for them for ever.
        t, first = -1, 0
        for u in range(T):
            if at[u] < pos[u].size and (t < 0 or pos[u][at[u]] < first):
                t, first = u, pos[u][at[u]]
        if t < 0:
            return
        c = counts[t]
        k = c // I
        room = I - (c % I)
        if max_rows:
            room = min(room, max_rows)
        take = pos[t][at[t]:at[t] + room]
        c2 = c + take.size
        yield t, take, k, (batch_punct_ts(k, I, T) if c2 % I == 0 else None)
        at[t] += take.size
        counts[t] = c2


class _Dealer(Operator):
    """Shared by the controller and the parser: stamping, dealing, gating."""

    punct_out = _model.GENERATES
    state = "unknown"

    def _setup(self, executors: int, interval: int, config, max_rows):
        if not isinstance(executors, int) or executors < 1 or not isinstance(interval, int) or interval < 1:
            raise ValueError("executors and interval must be positive integers")
        if config is not None and (config.executors != executors or config.interval != interval):
            raise ValueError("executors/interval differ from the TxnConfig's")
        self.outputs = tuple(f"out{t}" for t in range(executors))
        self.T = executors
        self.interval = interval
        self.config = config
        self.max_rows = max_rows
        self.next = 0  # ts of the next event
        self.counts = [0] * executors
        self._deal = None  # the packet being dealt: (columns, j0, generator, pending item)
        self._group = None

    def _gated(self, ctx, batch: int) -> bool:
        cfg = self.config
        if cfg is None or not cfg.dual_mode:
            return True
        if self._group is None:
            from bobox_sched.txn.coordinator import group_of

            self._group = group_of(ctx, cfg, None)
        return self._group.gate(batch, ctx.task)

    def _pump(self, ctx) -> bool:
        """Send what the current packet still has; False if stopped (blocked or gated)."""
        cols, j0, gen, item = self._deal
        while True:
            if item is None:
                item = next(gen, None)
                if item is None:
                    self._deal = None
                    return True
            if ctx.blocked:
                self._deal = (cols, j0, gen, item)
                return False
            t, take, batch, pts = item
            if not self._gated(ctx, batch):
                self._deal = (cols, j0, gen, item)
                return False
            rows = take - j0
            out = {k: v[rows] for k, v in cols.items()}
            out["ts"] = take
            out["t_in"] = np.full(take.size, time.perf_counter_ns(), np.int64)
            ctx.send(f"out{t}", Packet(out, take.size))
            if pts is not None:
                ctx.punctuate(Batch(pts), f"out{t}")
            item = None

    def _start(self, cols: dict, n: int) -> None:
        j0 = self.next
        self.next = j0 + n
        self._deal = (cols, j0, deal(j0, n, self.counts, self.T, self.interval, self.max_rows), None)


class ProgressController(_Dealer):
    """Stamps ``ts`` (and ``t_in``, ingress time in ns) on a stream and deals it to
    `executors` outputs with batch punctuations every `interval` events per output
    (module doc). Give it the group's `config` to bound what is in flight (dual mode)."""

    inputs = ("in",)
    punct_in = _model.EXPECTING  # upstream punctuations are dropped: ours replace them

    def __init__(self, executors: int, interval: int, config=None):
        self._setup(executors, interval, config, None)

    def process(self, ctx):
        if self._deal is not None and not self._pump(ctx):
            self._stopped(ctx)
            return
        for _ in range(8):
            pkt = ctx.recv("in")
            if pkt is None:
                if ctx.at_eos("in"):
                    ctx.close()
                    ctx.finish()
                return
            if isinstance(pkt, Punctuation):
                continue
            self._start(dict(pkt.columns), pkt.nrows)
            if not self._pump(ctx):
                self._stopped(ctx)
                return
        ctx.reschedule()

    @staticmethod
    def _stopped(ctx) -> None:
        """Stopped with input left unread. Blocked: the receiver's next take runs us
        again. Gated: the group runs us when the batch finishes; meanwhile the runtime
        would re-run us at once for the unread input (a busy loop that its stall check
        ends), so ask to be run again after a while instead -- a poll that costs a few
        us per GATED_POLL_S."""
        if not ctx.blocked:
            ctx.reschedule(GATED_POLL_S)


class ArrayParser(_Dealer):
    """The benchmark's Parser: deals the events of ``columns`` (``{name: array}``, one
    row per event, in stream order) to `executors` outputs, in packets of at most
    `packet_rows` rows, with the progress controller's timestamps and punctuations; with
    `deadline_s`, stops early (at a batch boundary) once that many seconds passed."""

    inputs = ()

    def __init__(self, columns: dict, executors: int, interval: int, config=None, packet_rows: int = 1024,
                 deadline_s: float | None = None):
        self._setup(executors, interval, config, packet_rows)
        self.columns = columns
        self.n = len(next(iter(columns.values())))
        # stream positions handed to `deal` at once: whole batches of every executor
        self.chunk = interval * executors
        self.deadline_s = deadline_s
        self._t0 = None

    def process(self, ctx):
        if self._t0 is None:
            self._t0 = time.perf_counter()
        for _ in range(64):
            if self._deal is not None and not self._pump(ctx):
                return
            j0 = self.next
            # `deadline_s`: stop after that long, at a chunk boundary -- the events dealt
            # are then exactly the stream's first `self.next` (a prefix an oracle can check)
            late = self.deadline_s is not None and time.perf_counter() - self._t0 > self.deadline_s
            if j0 >= self.n or late:
                ctx.close()
                ctx.finish()
                return
            n = min(self.chunk, self.n - j0)
            self._start({k: v[j0:j0 + n] for k, v in self.columns.items()}, n)
            # `_pump` indexes columns by stream position minus j0: slices start at j0
        ctx.reschedule()


__all__ = ["ArrayParser", "ProgressController", "batch_punct_ts", "deal", "executor_rows"]
