"""numba ``nogil`` kernels of parallel regions: routing, scatter, sequence numbers and the
ordered merge. Every per-row loop of a splitter, a channel's sequence-number bookkeeping
and a merger runs here, with the GIL released; the Python around them works per packet.

* routing: :func:`hash_mix` folds one key column into a per-row 64-bit hash (integers,
  dictionary codes and dates widened, floats bit for bit), :func:`channel_of` maps the
  hash onto N channels, :func:`scatter_order` is a stable counting sort by channel (the
  order in which rows are gathered into one packet whose channel slices are contiguous);
* sequence numbers: :func:`fill_range` (``base, base+1, ...``), :func:`seq_of_order`
  (``base + order[i]``: the row index in the splitter's input is the seqno offset),
  :func:`gather` (a column, or ``__seq``, at parent-row indices);
* merging: :func:`merge_ready` walks the merged order of the channel runs and applies
  the strategy's per-item ready test (see ``merger.py`` for the rules and the proof that
  this batched walk is the per-item algorithm), :func:`group_by_channel` and
  :func:`scatter` build an output column from the channels' runs in that order, :func:`check_run` verifies a channel's
  run is ordered (strictly increasing where duplicates are impossible).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bobox_sched.core.seq import gather  # noqa: F401 -- the core owns it (send_derived), regions reuse it

# The largest int64: the "back" of a closed channel (nothing more can arrive on it).
SEQ_INF = np.iinfo(np.int64).max

# merge_ready: how a channel's run ends (kind[c])
RUN_LAST = 0  # nothing is queued after the run: the channel leaves the merge when it is used up
RUN_MORE = 1  # more items follow the run: stop when it is used up (Python pops, then calls again)
RUN_CTRL = 2  # the channel's head is a control item with seqno ctrl[c] (the run is empty)

# merge_ready: why it stopped
STOP_EMPTY = 0  # no candidate left
STOP_NOT_READY = 1  # the smallest head is not ready yet
STOP_RUN_END = 2  # a RUN_MORE channel's run was used up
STOP_CONTROL = 3  # the smallest head is a control item (channel in the result)
STOP_DISORDER = 4  # a row broke the channel order the strategy relies on (misdeclared operator)

# ordering strategies (codes shared with merger.py)
ORD_SEQNO = 1
ORD_STRICT = 2
ORD_RELAXED = 3
ORD_RELAXED_WINDOWS = 4  # relaxed, and rows of one window group may share a seqno across channels


@njit(nogil=True, cache=True, inline="always")
def _mix64(x):
    # splitmix64's finalizer: every input bit affects every output bit
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True)
def hash_init(h):
    """Start every row's hash (``h`` uint64)."""
    for i in range(h.shape[0]):
        h[i] = np.uint64(0x243F6A8885A308D3)


@njit(nogil=True, cache=True)
def hash_mix(h, col):
    """Fold integer column `col` into the per-row hashes `h` (uint64)."""
    for i in range(h.shape[0]):
        h[i] = _mix64(h[i] ^ np.uint64(np.int64(col[i])))


@njit(nogil=True, cache=True)
def channel_of(h, n, out):
    """``out[i]`` = channel (0..n-1) of row i from its hash."""
    m = np.uint64(n)
    for i in range(h.shape[0]):
        out[i] = np.int64(_mix64(h[i] ^ np.uint64(0x5851F42D4C957F2D)) % m)


@njit(nogil=True, cache=True)
def scatter_order(ch, n):
    """Stable counting sort of the rows by channel: ``(order, bounds)`` where the rows of
    channel c are ``order[bounds[c]:bounds[c+1]]``, in input order."""
    bounds = np.zeros(n + 1, np.int64)
    for i in range(ch.shape[0]):
        bounds[ch[i] + 1] += 1
    for c in range(n):
        bounds[c + 1] += bounds[c]
    pos = bounds[:n].copy()
    order = np.empty(ch.shape[0], np.int64)
    for i in range(ch.shape[0]):
        c = ch[i]
        order[pos[c]] = i
        pos[c] += 1
    return order, bounds


@njit(nogil=True, cache=True)
def fill_range(out, base):
    for i in range(out.shape[0]):
        out[i] = base + i


@njit(nogil=True, cache=True)
def seq_of_order(order, base, out):
    for i in range(order.shape[0]):
        out[i] = base + order[i]


@njit(nogil=True, cache=True)
def check_run(seq, prev, strict):
    """True if `seq` continues a channel whose last seqno was `prev` in order: strictly
    increasing when `strict` (no duplicates possible), non-decreasing otherwise."""
    last = prev
    for i in range(seq.shape[0]):
        s = seq[i]
        if s < last or (strict and s == last):
            return False
        last = s
    return True


@njit(nogil=True, cache=True, inline="always")
def _ready(strategy, t, last, last_chan, last_ctrl, steady, seen_top, back):
    gap = t - last
    if strategy == 1:  # seqno: no gaps, no duplicates
        return gap == 1
    if strategy == 2:  # strict seqno + pulses: gaps
        return gap == 1 or (steady and t - 1 < seen_top)
    # relaxed seqno + pulses: gaps and duplicates (duplicates of x only on x's channel)
    if gap == 0:
        return True
    if gap == 1:
        # noDups(t-1): t-1 = last; more copies of it can only come on last_chan, and
        # none will once that channel has moved past it. A control item's seqno is
        # fresh (never a row's), so after one there is nothing to wait for.
        return last_ctrl or (last_chan >= 0 and last < back[last_chan])
    return steady and t - 1 < seen_top


@njit(nogil=True, cache=True)
def merge_ready(cat, start, end, kind, ctrl, back, strategy, last, last_chan, last_ctrl, steady, seen_top, out_chan,
                out_row):
    """Walk the merged order of the channel runs and emit while the head is ready.

    Channel c's queued seqnos (its head packet, in channel order) are
    ``cat[start[c]:end[c]]`` (one array: indexing a tuple of arrays per row is slow);
    ``kind[c]`` says what follows the run (``RUN_*``; ``ctrl[c]`` is the seqno of a
    control head). The smallest head (ties: lowest channel) is tested with the
    strategy's per-item rule (``merger.py``); emitted rows go to ``out_chan``/``out_row``
    (row index within the channel's run). Once the smallest head is known, the rows of
    its run below every other head are walked without looking at the other channels
    again (a run of consecutive rows of one channel costs a few ns per row). Returns
    ``(count, stop, channel, last, last_chan)``: ``stop`` says why it stopped
    (``STOP_*``), ``channel`` is the channel concerned (control, used-up run, disorder)
    or -1."""
    n = kind.shape[0]
    pos = start.copy()
    count = 0
    while True:
        best = -1
        bval = np.int64(0)
        bctrl = False
        lim_chan = -1  # the second smallest head: the walk of best's run stops there
        lim = np.int64(0)
        for c in range(n):
            if pos[c] < end[c]:
                v = cat[pos[c]]
                isctrl = False
            elif kind[c] == 1:
                return count, 2, c, last, last_chan
            elif kind[c] == 2:
                v = ctrl[c]
                isctrl = True
            else:
                continue
            if best < 0 or v < bval:
                if best >= 0:
                    lim_chan = best
                    lim = bval
                best = c
                bval = v
                bctrl = isctrl
            elif lim_chan < 0 or v < lim:
                lim_chan = c
                lim = v
        if best < 0:
            return count, 0, -1, last, last_chan
        if bctrl:
            return count, 3, best, last, last_chan
        p = pos[best]
        m = end[best]
        s0 = start[best]
        # a row equal to `last` is legal only under relaxed, as a duplicate of the last
        # row on that row's channel (kept out of the loop's test: measured 20x faster)
        dup_ok = (strategy == 3 and not last_ctrl and best == last_chan) or (strategy == 4 and not last_ctrl)
        while p < m:
            v = cat[p]
            if lim_chan >= 0 and (v > lim or (v == lim and best > lim_chan)):
                break
            if v <= last:
                if v < last or not dup_ok:
                    pos[best] = p
                    return count, 4, best, last, last_chan
            if not _ready(strategy, v, last, last_chan, last_ctrl, steady, seen_top, back):
                pos[best] = p
                return count, 1, -1, last, last_chan
            out_chan[count] = best
            out_row[count] = p - s0
            count += 1
            p += 1
            last = v
            last_chan = best
            last_ctrl = False
            dup_ok = strategy >= 3
        pos[best] = p


@njit(nogil=True, cache=True)
def group_by_channel(chan, n):
    """Stable counting sort of output rows by channel: ``(pos, bounds)``, where the
    output positions of channel c's rows, in order, are ``pos[bounds[c]:bounds[c+1]]``."""
    return scatter_order(chan, n)


@njit(nogil=True, cache=True)
def scatter(src, pos, out):
    """``out[pos[i]] = src[i]``: one channel's rows into their places in the output."""
    for i in range(pos.shape[0]):
        out[pos[i]] = src[i]


__all__ = [
    "ORD_RELAXED",
    "ORD_RELAXED_WINDOWS",
    "ORD_SEQNO",
    "ORD_STRICT",
    "RUN_CTRL",
    "RUN_LAST",
    "RUN_MORE",
    "SEQ_INF",
    "STOP_CONTROL",
    "STOP_DISORDER",
    "STOP_EMPTY",
    "STOP_NOT_READY",
    "STOP_RUN_END",
    "channel_of",
    "check_run",
    "fill_range",
    "gather",
    "group_by_channel",
    "hash_init",
    "hash_mix",
    "merge_ready",
    "scatter",
    "scatter_order",
    "seq_of_order",
]
