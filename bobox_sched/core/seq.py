"""Sequence numbers inside a parallel region: the hidden ``__seq`` column.

Schneider et al. section 4.3: the first splitter of a region numbers its input rows, and
every row an operator of a channel emits carries the seqno of the input row that caused
it (a prolific operator's several outputs share it, a selective operator leaves gaps).
In bobox a seqno is a row of the int64 column ``__seq`` of a packet: it travels with
the packet (in band, so channels may run on other NUMA nodes or Spark executors) and is
stripped by the region's last merger.

How ``__seq`` gets through a channel's operators (``channel.ChannelOperator`` enforces it):

* an operator that forwards its input packet (or a slice of it) forwards ``__seq`` with it;
* an operator declared ``EXACTLY_ONE`` needs nothing: its output rows are, in order, one
  per input row, so the channel attaches the input's seqnos to its outputs by counting
  rows (a view, no copy) -- the library's ``Project`` is such an operator;
* a selective or prolific operator declares ``seq_aware = True`` and sends what it
  derives from input rows with :func:`send_derived` (``ctx.send_derived``): it gives the
  parent-row index of every output row (a selection vector, or a flat-map kernel's parent
  index) and ``__seq`` is gathered from the input in a nogil kernel. The library's
  ``Filter`` copies ``__seq`` in its fused filter kernel instead. An undeclared selective
  operator cannot say which input caused which output: the analyser keeps it out of
  regions (rule R9).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bobox_sched.core.packet import Packet, PacketSpec


@njit(nogil=True, cache=True)
def gather(src, idx, out):
    """``out[i] = src[idx[i]]`` (any dtype; a column, or the seqnos of parent rows)."""
    for i in range(idx.shape[0]):
        out[i] = src[idx[i]]


SEQ = "__seq"
SEQ_SPEC = PacketSpec({SEQ: np.int64})


def has_seq(pkt) -> bool:
    return SEQ in pkt.columns


def strip(pkt) -> Packet:
    """The packet without its ``__seq`` column (views, no copy)."""
    cols = pkt.columns
    if SEQ not in cols:
        return pkt
    return Packet({k: v for k, v in cols.items() if k != SEQ}, pkt.nrows, pkt.node)


def attach(pkt, seq: np.ndarray) -> Packet:
    """`pkt` with ``__seq`` = `seq` (a view is kept, nothing copied)."""
    cols = dict(pkt.columns)
    cols[SEQ] = seq
    return Packet(cols, pkt.nrows, pkt.node)


def derive(ctx, out, parent_pkt, parent) -> Packet:
    """`out` with ``__seq[i] = parent_pkt.__seq[parent[i]]`` when `parent_pkt` carries
    seqnos (inside a region); `out` unchanged otherwise. `parent` holds, for every row of
    `out`, the index of the input row that caused it.

    Checked outside a region too (a type test and a length): with the two packets
    swapped nothing there would show it, and the input would leave as the output."""
    if not isinstance(parent_pkt, Packet):
        raise TypeError(f"send_derived(port, packet, parent_pkt, parent): parent_pkt must be a Packet, "
                        f"got {type(parent_pkt).__name__}")
    if isinstance(out, Packet) and len(parent) != out.nrows:  # not a Packet: send's OperatorError
        raise ValueError(f"send_derived: {len(parent)} parent indices for a packet of {out.nrows} rows "
                         "(send_derived(port, packet, parent_pkt, parent): the output packet comes first)")
    src = parent_pkt.columns.get(SEQ)
    if src is None:
        return out
    parent = np.asarray(parent)
    s = ctx.new_packet(SEQ_SPEC, out.nrows)[SEQ] if ctx is not None else np.empty(out.nrows, np.int64)
    if out.nrows:
        if parent.dtype != np.int64:
            parent = parent.astype(np.int64)
        gather(src, parent, s)
    return attach(out, s)


def send_derived(ctx, port: str, out, parent_pkt, parent) -> bool:
    """Send `out` on `port`, its rows derived from rows `parent` of `parent_pkt` (see the
    module doc). Outside a region this is ``ctx.send(port, out)``."""
    return ctx.send(port, derive(ctx, out, parent_pkt, parent))


__all__ = ["SEQ", "SEQ_SPEC", "attach", "derive", "has_seq", "send_derived", "strip"]
