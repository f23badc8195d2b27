"""Derived rows and hidden columns: how a row operator's outputs keep track of the input
rows they came from.

A parallel-region rewrite (seed 001, section 4.3) numbers the rows entering a region in a
hidden column ``__seq`` and needs every output row to carry the number of the input row
that caused it: a filter's survivors keep theirs (gaps), a flat-map's k outputs repeat
theirs (duplicates). Stream row operators therefore send what they produce through
:func:`send_derived`, with the *parents* they compute anyway: ``parents[j]`` is the
input row that output row j came from (None: row j came from row j, a 1:1 operator).

Hidden columns are those whose name starts with ``__`` (:data:`HIDDEN`). Operators never
see them in their schemas or kernels; :func:`send_derived` copies every hidden column of
the input packet to the output, gathered by the parents, in one nogil kernel per column.
A packet without hidden columns (no region, the common case) costs one dict scan.
Operators that send this way declare ``seq_aware = True``, the declaration the
parallel-region analyser (``bobox_sched.regions.analysis``, rule R9) requires of a selective
or prolific operator before it replicates it (``bobox_sched.core.seq`` is the runtime's
side of the same contract, for ``__seq`` alone).
Operators whose outputs are caused by no single row (window aggregates, sessions: rule
R8) drop hidden columns.
"""

from __future__ import annotations

import numpy as np

from bobox_sched.core.packet import Packet, PacketSpec

from operators.stream.kernels import take_rows

HIDDEN = "__"
from bobox_sched.core.seq import SEQ  # the sequence number a region's splitter gives every row
_SPECS: dict = {}  # (name, dtype) -> PacketSpec of one hidden column (a few entries)


def hidden_columns(pkt) -> list[str]:
    """Names of the hidden columns of `pkt` (usually none)."""
    return [c for c in pkt.columns if c.startswith(HIDDEN)]


def visible(pkt) -> dict:
    """The columns of `pkt` without the hidden ones."""
    return {c: v for c, v in pkt.columns.items() if not c.startswith(HIDDEN)}


def derive(ctx, parent, out: Packet, parents: np.ndarray | None = None) -> Packet:
    """Attach `parent`'s hidden columns to `out`: gathered by `parents` (output row j
    came from input row ``parents[j]``), or as they are when `parents` is None (row j
    came from row j; `out` has as many rows as `parent`). Returns `out`."""
    for name, col in parent.columns.items():
        if not name.startswith(HIDDEN) or name in out.columns:
            continue
        if parents is None:
            if out.nrows != parent.nrows:
                raise ValueError(f"derived packet has {out.nrows} rows, its parent {parent.nrows}: give parents")
            out.columns[name] = col
        else:
            spec = _SPECS.get((name, col.dtype))
            if spec is None:
                spec = _SPECS[(name, col.dtype)] = PacketSpec({name: col.dtype})
            dst = ctx.new_packet(spec, len(parents)).columns[name]
            take_rows(col, parents, dst)
            out.columns[name] = dst
    return out


def send_derived(ctx, port: str, out: Packet, parent, parents: np.ndarray | None = None) -> bool:
    """Send `out` on `port`, carrying the hidden columns of `parent`, the input packet
    its rows came from (:func:`derive`: row j from row ``parents[j]``; with `parents`
    None, from row j). The output packet comes first, as in ``ctx.send_derived(port,
    packet, parent_pkt, parent)``. Returns what ``ctx.send`` returns.

    Raises TypeError if `out` or `parent` is not a Packet, and ValueError if the parent
    rows do not fit `out` (`parents` not one per row of `out`; without `parents`, `out`
    and `parent` of different lengths): the signs of the two packets swapped, which
    outside a region (no hidden column to carry) would send the input instead, silently.
    Swapped packets of equal length (a 1:1 operator's) cannot be told apart."""
    if not isinstance(out, Packet) or not isinstance(parent, Packet):
        bad, what = (out, "out") if not isinstance(out, Packet) else (parent, "parent")
        raise TypeError(f"send_derived(ctx, port, out, parent, parents): {what} must be a Packet, "
                        f"got {type(bad).__name__}")
    rows = parent.nrows if parents is None else len(parents)
    if rows != out.nrows:
        raise ValueError(f"send_derived(ctx, port, out, parent, parents): out has {out.nrows} rows but "
                         + (f"parent {rows} (a 1:1 output without parents)" if parents is None else
                            f"{rows} parent rows are given")
                         + "; the output packet comes first, then the input it was derived from")
    for name in parent.columns:
        if name.startswith(HIDDEN):
            derive(ctx, parent, out, parents)
            break
    return ctx.send(port, out)


__all__ = ["HIDDEN", "SEQ", "derive", "hidden_columns", "send_derived", "visible"]
