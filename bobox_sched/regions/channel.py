"""A region member's instance in one channel: the user's operator, plus the bookkeeping
that keeps the merger's assumptions true.

:class:`ChannelOperator` wraps a fresh instance of the operator (each channel has its own:
state partitioned by key, since the splitter routes a key to one channel). It takes the
inner operator's ports and declarations, so the runtime treats it exactly like the
operator (punctuations on oblivious inputs, pulses passing through), and runs the
inner ``process`` with a context that intercepts ``recv`` and ``send``:

``"rr"`` (round-robin regions: stateless, exactly one output row per input row)
    each input packet yields exactly one output packet of the same row count: outputs
    the operator cut differently are joined (or split) at input-packet boundaries. The
    round-robin merger relies on it to take one packet per channel in turn.
``"seq"`` (regions whose rows carry ``__seq``)
    an EXACTLY_ONE operator's outputs get the seqnos of its inputs by position (views of
    the input's ``__seq``: the i-th output row of a packet's outputs is caused by its
    i-th row); other operators must send ``__seq`` themselves (``seq.send_derived``).
``"plain"`` (unordered chains: parallel sources/sinks)
    nothing to do.

Checks (``check=True``, the default; "debug mode" in the spec): an operator declared
EXACTLY_ONE must emit as many rows as it received, by the time its ``process`` returns;
otherwise a round-robin or seqno merger would wait forever for the missing row, so the
channel raises :class:`MisdeclaredOperator` naming the operator instead. Rows sent
without ``__seq`` in a numbered region raise too.

Threads: a channel operator is an operator like any other (one thread at a time); its
queue of pending inputs is touched only by the thread running it.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from bobox_sched.core.operator import Operator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.regions.merger import MisdeclaredOperator
from bobox_sched.control.punct import Punctuation
from bobox_sched.core.seq import SEQ

# The seqno of rows emitted at the end of stream by window-group operators: after every
# other seqno (the merger emits them once every channel ended).
EOS_GROUP = np.iinfo(np.int64).max - 1

RR = "rr"
SEQ_MODE = "seq"
PLAIN = "plain"

_DECLARED = ("state", "selectivity_bound", "forwarding", "reassigns", "punct_in", "punct_out", "emit_order",
             "fuse_with", "seq_aware")


class _ChannelContext:
    """The context the inner operator sees: the worker's context, with recv/send routed
    through the channel's bookkeeping. Everything else is delegated."""

    __slots__ = ("_ctx", "_ch")

    def __init__(self, ch):
        self._ch = ch
        self._ctx = None

    def recv(self, port):
        item = self._ctx.recv(port)
        if item is not None:
            if isinstance(item, Punctuation):
                self._ch._punct = item
            else:
                self._ch._punct = None
                self._ch._input(item)
        return item

    def send(self, port, packet):
        return self._ch._output(self._ctx, port, packet)

    def recv_many(self, port, limit=None):
        """One item at a time (``recv``'s bookkeeping: what the operator sends next
        derives from the packet it took last), which ``recv_many``'s contract allows."""
        if limit is not None and limit < 1:
            return []
        item = self.recv(port)
        return [] if item is None else [item]

    def send_many(self, port, packets):
        ok = True
        for p in packets:
            ok = self.send(port, p)
        return ok

    def send_derived(self, port, packet, parent_pkt, parent):
        from bobox_sched.core.seq import derive

        return self.send(port, derive(self._ctx, packet, parent_pkt, parent))

    # the calls operators make per packet, delegated without __getattr__'s detour
    @property
    def blocked(self):
        return self._ctx.blocked

    def at_eos(self, port):
        return self._ctx.at_eos(port)

    def new_packet(self, schema, nrows):
        return self._ctx.new_packet(schema, nrows)

    def punctuate(self, punct, port=None):
        return self._ctx.punctuate(punct, port)

    def close(self, port=None):
        return self._ctx.close(port)

    def finish(self):
        return self._ctx.finish()

    def __getattr__(self, name):
        return getattr(self._ctx, name)


class ChannelOperator(Operator):
    """Channel `channel` (of `degree`) of a region member: see the module doc."""

    def __init__(self, inner: Operator, mode: str, channel: int, degree: int, check: bool = True):
        if mode not in (RR, SEQ_MODE, PLAIN):
            raise ValueError(f"unknown channel mode {mode!r}")
        self.inner = inner
        self.mode = mode
        self.channel = channel
        self.degree = degree
        self.check = check
        model = M.model_of(inner)
        self.inputs = tuple(inner.inputs)
        self.outputs = tuple(inner.outputs)
        for a in _DECLARED:
            if hasattr(inner, a):
                setattr(self, a, getattr(inner, a))
        self.state = model.state
        self.selectivity_bound = model.selectivity
        self.selectivity = getattr(inner, "selectivity", None)
        # the operator may want to know (e.g. to size per-channel state)
        inner.region_channel = channel
        inner.region_degree = degree
        self._exactly_one = model.selectivity == M.EXACTLY_ONE
        # emits rows on punctuations, unordered per window (R8): they get the seqno of the
        # punctuation's window group (one below its own), or the end-of-stream group's
        from bobox_sched.regions.analysis import emits_window_groups

        self._windows = emits_window_groups(model, bool(self.outputs))
        self._punct = None  # the punctuation the operator was last given (until its next packet)
        self._ctxp = _ChannelContext(self)
        # Inputs whose rows were not all answered yet: [seqnos or None, rows, rows answered]
        self._pending: deque = deque()
        self._parts: list = []  # round-robin: output parts of the oldest pending input
        self.rows_in = 0
        self.rows_out = 0

    def __repr__(self) -> str:
        return f"<ChannelOperator {getattr(self, 'name', '?')} {self.inner!r}>"

    # -- bookkeeping -------------------------------------------------------------------
    def _input(self, pkt) -> None:
        n = pkt.nrows
        self.rows_in += n
        if self.mode == PLAIN or not n or not self._exactly_one:
            return
        self._pending.append([pkt.columns.get(SEQ), n, 0])

    def _take(self, n: int) -> list:
        """Answer `n` output rows from the pending inputs: ``[(seqnos slice, done), ...]``."""
        parts = []
        pend = self._pending
        while n:
            if not pend:
                raise MisdeclaredOperator(f"operator '{self.name}' is declared EXACTLY_ONE but emitted more rows "
                                          f"than it received ({self.rows_out + n} > {self.rows_in})")
            e = pend[0]
            k = min(n, e[1] - e[2])
            seq = e[0]
            parts.append((None if seq is None else seq[e[2]:e[2] + k], k, e[2] + k == e[1]))
            e[2] += k
            n -= k
            if e[2] == e[1]:
                pend.popleft()
        return parts

    def _output(self, ctx, port, pkt) -> bool:
        mode = self.mode
        n = pkt.nrows
        if mode == PLAIN:
            self.rows_out += n
            return ctx.send(port, pkt)
        if not n:
            return True  # empty packets carry nothing (the splitter sends none)
        if self._windows and mode == SEQ_MODE and SEQ not in pkt.columns:
            p = self._punct
            if p is not None and p.seq is not None:
                g = p.seq - 1
            elif ctx.all_eos():
                g = EOS_GROUP
            else:
                raise MisdeclaredOperator(f"operator '{self.name}' emitted rows without {SEQ} outside a "
                                          "punctuation or the end of stream")
            self.rows_out += n
            return ctx.send(port, Packet({**pkt.columns, SEQ: np.full(n, g, np.int64)}, n, pkt.node))
        if not self._exactly_one:
            if mode == SEQ_MODE and SEQ not in pkt.columns:
                raise MisdeclaredOperator(f"operator '{self.name}' sent rows without {SEQ} inside a parallel "
                                          "region (declare seq_aware and use ctx.send_derived, or EXACTLY_ONE)")
            self.rows_out += n
            return ctx.send(port, pkt)
        parts = self._take(n)
        self.rows_out += n
        if mode == SEQ_MODE:
            if SEQ in pkt.columns:
                return ctx.send(port, pkt)
            seqs = [p[0] for p in parts]
            seq = seqs[0] if len(seqs) == 1 else np.concatenate(seqs)
            cols = dict(pkt.columns)
            cols[SEQ] = seq
            return ctx.send(port, Packet(cols, n, pkt.node))
        # round-robin: one output packet per input packet
        ok = True
        a = 0
        for _seq, k, done in parts:
            piece = pkt if (a == 0 and k == n) else Packet({nm: v[a:a + k] for nm, v in pkt.columns.items()}, k,
                                                           pkt.node)
            a += k
            self._parts.append(piece)
            if done:
                ps = self._parts
                self._parts = []
                out = ps[0] if len(ps) == 1 else _concat(ps)
                ok = ctx.send(port, out) and ok
        return ok

    # -- running -------------------------------------------------------------------------
    def process(self, ctx):
        p = self._ctxp
        p._ctx = ctx
        try:
            self.inner.process(p)
        finally:
            p._ctx = None
        if self.check and self._pending and self.mode != PLAIN:
            e = self._pending[0]
            raise MisdeclaredOperator(
                f"operator '{self.name}' is declared EXACTLY_ONE but answered {e[2]} of the {e[1]} rows of an input "
                "packet before returning (it dropped rows or holds them back); a round-robin or seqno merger would "
                "wait forever")


def _concat(parts) -> Packet:
    names = list(parts[0].columns)
    cols = {nm: np.concatenate([p.columns[nm] for p in parts]) for nm in names}
    return Packet(cols, sum(p.nrows for p in parts), parts[0].node)


__all__ = ["ChannelOperator", "PLAIN", "RR", "SEQ_MODE"]
