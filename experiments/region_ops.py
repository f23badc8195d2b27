"""Small declared operators for the parallel-region experiments and tests (Schneider et
al. section 6): a parametric work kernel (w dependent integer multiplications per row,
nogil), selective and prolific variants, a partitioned running aggregate, a key-dropping
projection, punctuation generators and consumers, undeclared operators, a fan-in and a
fan-out, sources (sequential and parallel) and a recording sink.

Every operator here is *row-deterministic*: its output rows and punctuations, in order,
depend only on its input rows and punctuations, never on how they were cut into
packets. That is what makes "the parallel plan's output is identical to the sequential
plan's" a meaningful test (``tests/test_regions_differential.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bobox_sched import Operator, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.control.punct import Window
from bobox_sched.core.seq import SEQ

# ---------------------------------------------------------------------------------------
# kernels


@njit(nogil=True, cache=True, inline="always")
def _work1(v, w):
    # w dependent integer multiplications (the paper's simulated computation, section 6)
    # (the xor with the step keeps LLVM from folding the chain into a power: measured
    # ~1 ns per step on the 2-core EPYC, about one multiplication's latency)
    acc = v | 1
    m = v | 3
    for j in range(w):
        acc = (acc * m) ^ j
    return acc


@njit(nogil=True, cache=True)
def work_map(x, w, out):
    for i in range(x.shape[0]):
        out[i] = _work1(np.int64(x[i]), w)


@njit(nogil=True, cache=True)
def work_select(x, w, modulus, keep):
    """Rows whose work result falls in the first `keep` of `modulus` buckets (a selective
    operator whose selectivity is keep/modulus); returns their indices."""
    idx = np.empty(x.shape[0], np.int64)
    k = 0
    for i in range(x.shape[0]):
        r = _work1(np.int64(x[i]), w)
        h = (r ^ (r >> 29)) * 0x2545F4914F6CDD1D
        if (h >> 11) % modulus < keep:
            idx[k] = i
            k += 1
    return idx[:k]


@njit(nogil=True, cache=True)
def flat_parents(x, kmax, w):
    """Row i is emitted ``(x[i] mod (kmax+1))`` times (0..kmax): the parent index of every
    output row, in order; `w` work per output row."""
    total = 0
    for i in range(x.shape[0]):
        total += np.int64(x[i]) % (kmax + 1) if x[i] >= 0 else (-np.int64(x[i])) % (kmax + 1)
    par = np.empty(total, np.int64)
    val = np.empty(total, np.int64)
    k = 0
    for i in range(x.shape[0]):
        xi = np.int64(x[i])
        c = xi % (kmax + 1) if xi >= 0 else (-xi) % (kmax + 1)
        for j in range(c):
            par[k] = i
            val[k] = _work1(xi + j, w)
            k += 1
    return par, val


@njit(nogil=True, cache=True)
def running_count(keys, x, w, counts, sums, out_cnt, out_sum):
    """Per-key running count and sum of work(x): the state of key k is counts[k], sums[k]."""
    for i in range(keys.shape[0]):
        k = keys[i]
        counts[k] += 1
        sums[k] += _work1(np.int64(x[i]), w)
        out_cnt[i] = counts[k]
        out_sum[i] = sums[k]


@njit(nogil=True, cache=True)
def emit_every_nth(keys, n, counts, sel):
    """Partitioned selective aggregate: a row passes when its key's count reaches a
    multiple of n (selectivity 1:n, work only per emitted result)."""
    k = 0
    for i in range(keys.shape[0]):
        key = keys[i]
        counts[key] += 1
        if counts[key] % n == 0:
            sel[k] = i
            k += 1
    return k


# ---------------------------------------------------------------------------------------
# helpers


def _with(pkt, **cols) -> Packet:
    c = dict(pkt.columns)
    c.update(cols)
    return Packet(c, pkt.nrows, pkt.node)


def _take(pkt, idx) -> Packet:
    return Packet({k: v[idx] for k, v in pkt.columns.items() if k != SEQ}, len(idx), pkt.node)


def _state_array(n, ctx) -> np.ndarray:
    """Zeroed int64 state of `n` slots, on the worker's NUMA node when it has one (node
    local per channel: channel operators run on their node's workers)."""
    node = ctx.node
    if node is not None:
        try:
            from topology.memory import alloc_on_node, live_nodes

            if node in live_nodes():
                a = alloc_on_node(8 * n, node, np.int64)
                a[:] = 0
                return a
        except Exception:  # noqa: BLE001 - libnuma missing: plain memory
            pass
    return np.zeros(n, np.int64)


# ---------------------------------------------------------------------------------------
# operators


class Work(StreamOperator):
    """Stateless map, exactly one row out per row in: ``out = work(col)`` with `w`
    dependent multiplications per row (nogil)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, w: int, col: str = "x", out: str = "y"):
        self.w = int(w)
        self.col = col
        self.out = out
        self.reassigns = frozenset({out})

    def on_packet(self, ctx, port, pkt):
        y = ctx.new_packet({self.out: np.int64}, pkt.nrows)[self.out]
        work_map(pkt[self.col], self.w, y)
        ctx.send("out", _with(pkt, **{self.out: y}))


class WorkFilter(StreamOperator):
    """Stateless filter with work `w` per row, selectivity keep/modulus; seq-aware."""

    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    seq_aware = True

    def __init__(self, w: int = 0, modulus: int = 2, keep: int = 1, col: str = "x"):
        self.w, self.modulus, self.keep, self.col = int(w), int(modulus), int(keep), col

    def on_packet(self, ctx, port, pkt):
        idx = work_select(pkt[self.col], self.w, self.modulus, self.keep)
        if len(idx):
            ctx.send_derived("out", _take(pkt, idx), pkt, idx)


class FlatMap(StreamOperator):
    """Prolific: row i is emitted ``x mod (kmax+1)`` times with ``y = work(x + j)``."""

    state = M.STATELESS
    selectivity_bound = M.UNKNOWN
    forwarding = M.ALWAYS
    seq_aware = True

    def __init__(self, kmax: int = 2, w: int = 0, col: str = "x", out: str = "y"):
        self.kmax, self.w, self.col, self.out = int(kmax), int(w), col, out
        self.reassigns = frozenset({out})

    def on_packet(self, ctx, port, pkt):
        par, val = flat_parents(pkt[self.col], self.kmax, self.w)
        if len(par):
            out = _take(pkt, par)
            out.columns[self.out] = val
            ctx.send_derived("out", out, pkt, par)


class RunningCount(StreamOperator):
    """Partitioned by `key`: per-key running count ``cnt`` and running sum ``acc`` of
    work(x) (w multiplications per row). Keys must lie in [0, nkeys). State is allocated
    on the node of the worker that first runs it (each channel's own)."""

    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, key: str = "k", nkeys: int = 1024, w: int = 0, col: str = "x", cnt: str = "cnt",
                 acc: str = "acc", report: dict | None = None):
        self.key, self.nkeys, self.w, self.col, self.cnt, self.acc = key, int(nkeys), int(w), col, cnt, acc
        self.state = M.Partitioned(key)
        self.reassigns = frozenset({cnt, acc})
        self.counts = None
        self.sums = None
        self.nodes_seen = set()
        self.report = report  # if a dict: where each channel ran and where its state lives, at the end

    def on_end(self, ctx):
        if self.report is not None and self.counts is not None:
            from topology.memory import node_histogram

            pages = {}
            try:
                pages = {str(k): int(v) for k, v in node_histogram(self.counts).items()}
            except OSError:
                pass
            self.report[getattr(self, "region_channel", "sequential")] = {
                "nodes": sorted(n for n in self.nodes_seen if n is not None), "state_pages": pages}

    def on_packet(self, ctx, port, pkt):
        if self.counts is None:
            self.counts = _state_array(self.nkeys, ctx)
            self.sums = _state_array(self.nkeys, ctx)
        self.nodes_seen.add(ctx.node)
        n = pkt.nrows
        o = ctx.new_packet({self.cnt: np.int64, self.acc: np.int64}, n)
        running_count(pkt[self.key], pkt[self.col], self.w, self.counts, self.sums, o[self.cnt], o[self.acc])
        ctx.send("out", _with(pkt, **{self.cnt: o[self.cnt], self.acc: o[self.acc]}))


class EveryNth(StreamOperator):
    """Partitioned by `key`, selective 1:n: a row passes when its key's count reaches a
    multiple of n; then `w` work on it (work only per emitted result, Fig. 9 selectivity)."""

    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    seq_aware = True

    def __init__(self, key: str = "k", nkeys: int = 1024, n: int = 2, w: int = 0, col: str = "x", out: str = "y"):
        self.key, self.nkeys, self.n, self.w, self.col, self.out = key, int(nkeys), int(n), int(w), col, out
        self.state = M.Partitioned(key)
        self.reassigns = frozenset({out})
        self.counts = None

    def on_packet(self, ctx, port, pkt):
        if self.counts is None:
            self.counts = _state_array(self.nkeys, ctx)
        sel = np.empty(pkt.nrows, np.int64)
        k = emit_every_nth(pkt[self.key], self.n, self.counts, sel)
        if k:
            idx = sel[:k]
            out = _take(pkt, idx)
            y = np.empty(k, np.int64)
            work_map(out[self.col], self.w, y)
            out.columns[self.out] = y
            ctx.send_derived("out", out, pkt, idx)


class ReKey(StreamOperator):
    """Stateless 1:1 projection that overwrites column `col` (``col = (col * 7 + 3) mod
    m``): the key it rewrites is no longer forwarded (R4)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, col: str = "k", m: int = 64):
        self.col, self.m = col, int(m)
        self.reassigns = frozenset({col})

    def on_packet(self, ctx, port, pkt):
        v = (pkt[self.col].astype(np.int64) * 7 + 3) % self.m
        ctx.send("out", _with(pkt, **{self.col: v}))


class DropCols(StreamOperator):
    """Stateless 1:1 projection dropping columns `drop` (forwarding: always, minus them)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS

    def __init__(self, drop=("k2",)):
        self.drop = tuple(drop)
        self.reassigns = frozenset(self.drop)

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", Packet({k: v for k, v in pkt.columns.items() if k not in self.drop}, pkt.nrows, pkt.node))


class PunctGen(StreamOperator):
    """Stateless 1:1, generates a Window punctuation after every `every` rows (cutting
    packets there, so the position is row-exact whatever the packet boundaries)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    punct_out = M.GENERATES

    def __init__(self, every: int = 10):
        self.every = int(every)
        self.rows = 0
        self.wid = 0

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        a = 0
        while a < n:
            k = min(n - a, self.every - self.rows % self.every)
            part = pkt if (a == 0 and k == n) else Packet({c: v[a:a + k] for c, v in pkt.columns.items()}, k, pkt.node)
            ctx.send("out", part)
            a += k
            self.rows += k
            if self.rows % self.every == 0:
                self.wid += 1
                ctx.punctuate(Window(wid=("gen", self.wid)))


class WindowSum(StreamOperator):
    """Expecting: sums column `col` between window punctuations and emits one row
    ``(wid_rows, total)`` per window, then the punctuation (R8: emits on punctuation)."""

    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.UNKNOWN
    punct_in = M.EXPECTING
    punct_out = M.PRESERVES

    def __init__(self, col: str = "x"):
        self.col = col
        self.total = 0
        self.rows = 0

    def on_packet(self, ctx, port, pkt):
        self.total += int(pkt[self.col].sum())
        self.rows += pkt.nrows

    def on_punct(self, ctx, port, p):
        out = ctx.new_packet({"rows": np.int64, "total": np.int64}, 1)
        out["rows"][0] = self.rows
        out["total"][0] = self.total
        self.total = self.rows = 0
        ctx.send("out", out)
        ctx.punctuate(p)


class WindowCount(StreamOperator):
    """Partitioned by `key`, expecting punctuations: counts rows per key and emits ``(key,
    count)`` for every key seen when a window punctuation arrives (and at the end), then
    forwards the punctuation. Declared ``emit_order="unordered"``: its output per window
    is a multiset (rule R8), so it may run in a region."""

    selectivity_bound = M.AT_MOST_ONE  # per input row: nothing (it emits on punctuations)
    forwarding = M.FunctionAny("k")
    punct_in = M.EXPECTING
    punct_out = M.PRESERVES
    emit_order = "unordered"
    seq_aware = True

    def __init__(self, key: str = "k", nkeys: int = 1024):
        self.key, self.nkeys = key, int(nkeys)
        self.state = M.Partitioned(key)
        self.counts = None

    def on_packet(self, ctx, port, pkt):
        if self.counts is None:
            self.counts = _state_array(self.nkeys, ctx)
        np.add.at(self.counts, pkt[self.key], 1)

    def _flush(self, ctx):
        if self.counts is None:
            return
        keys = np.flatnonzero(self.counts)
        if len(keys):
            ctx.send("out", Packet({"k": keys.astype(np.int64), "count": self.counts[keys].copy()}, len(keys)))
            self.counts[keys] = 0

    def on_punct(self, ctx, port, p):
        self._flush(ctx)
        ctx.punctuate(p)

    def on_end(self, ctx):
        self._flush(ctx)


def same_per_window(a: dict, b: dict) -> bool:
    """Two Record results agree as multisets of rows per window (between consecutive
    punctuations), with the same punctuations at the same positions."""
    if [p for _, p in a["puncts"]] != [p for _, p in b["puncts"]] or set(a["cols"]) != set(b["cols"]):
        return False
    if [i for i, _ in a["puncts"]] != [i for i, _ in b["puncts"]]:
        return False
    names = sorted(a["cols"])
    bounds = [0] + [i for i, _ in a["puncts"]] + [len(a["cols"][names[0]]) if names else 0]
    for lo, hi in zip(bounds, bounds[1:]):
        ra = sorted(zip(*[a["cols"][c][lo:hi].tolist() for c in names]))
        rb = sorted(zip(*[b["cols"][c][lo:hi].tolist() for c in names]))
        if ra != rb:
            return False
    return True


class Opaque(StreamOperator):
    """An undeclared operator (state unknown: never parallelised); passes packets."""

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


class Concat2(Operator):
    """Fan-in: all rows of ``in0``, then all rows of ``in1`` (deterministic; punctuations
    removed: concatenating whole inputs has no window to align), keeping `columns`."""

    inputs = ("in0", "in1")
    outputs = ("out",)
    state = M.UNKNOWN
    punct_out = M.REMOVES

    def __init__(self, columns=("x", "k", "k2")):
        self.columns = tuple(columns)
        self.stash = []

    def _keep(self, p):
        return Packet({c: p.columns[c] for c in self.columns}, p.nrows, p.node)

    def process(self, ctx):
        while not ctx.blocked:
            p = ctx.recv("in0")
            if p is None:
                break
            ctx.send("out", self._keep(p))
        while True:
            p = ctx.recv("in1")
            if p is None:
                break
            self.stash.append(self._keep(p))
        if ctx.at_eos("in0"):
            while self.stash and not ctx.blocked:
                ctx.send("out", self.stash.pop(0))
            if ctx.at_eos("in1") and not self.stash:
                ctx.close()
                ctx.finish()
            elif self.stash and ctx.blocked:
                ctx.reschedule()


class Tee2(StreamOperator):
    """Fan-out: every packet and punctuation to both outputs."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    outputs = ("out0", "out1")

    def on_packet(self, ctx, port, pkt):
        ctx.send("out0", pkt)
        ctx.send("out1", pkt)


# ---------------------------------------------------------------------------------------
# application kernels (Fig. 12/13 style): a CEP-like and a finance-like one


@njit(nogil=True, cache=True)
def parse_kernel(raw, w, n_authors, n_tags, author, tag, length):
    for i in range(raw.shape[0]):
        r = _work1(np.int64(raw[i]), w)
        v = np.int64(raw[i])
        author[i] = (v >> 3) % n_authors
        tag[i] = (v >> 17) % n_tags
        length[i] = r & 0xFF


@njit(nogil=True, cache=True)
def match_kernel(author, tag, x, w, last_tag, run, sel):
    """Per author: a match when 3 consecutive tweets carry the same tag (then the run
    restarts); `w` work per tweet. Returns how many rows matched (indices in sel)."""
    k = 0
    chk = np.int64(0)  # the work's results, returned: LLVM may not drop the work
    for i in range(author.shape[0]):
        a = author[i]
        chk ^= _work1(np.int64(x[i]), w)
        if tag[i] == last_tag[a]:
            run[a] += 1
        else:
            last_tag[a] = tag[i]
            run[a] = 1
        if run[a] == 3:
            run[a] = 0
            last_tag[a] = -1
            sel[k] = i
            k += 1
    return k, chk


class Parse(StreamOperator):
    """CEP-like kernel, step 1: parse a raw tweet into author, tag and length (w work per
    row). Stateless 1:1; the columns it writes are not forwarded (so the next region,
    keyed by author, is reached through a shuffle)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    reassigns = frozenset({"author", "tag", "length"})

    def __init__(self, w: int, n_authors: int = 4096, n_tags: int = 8):
        self.w, self.n_authors, self.n_tags = int(w), int(n_authors), int(n_tags)

    def on_packet(self, ctx, port, pkt):
        n = pkt.nrows
        o = ctx.new_packet({"author": np.int64, "tag": np.int64, "length": np.int64}, n)
        parse_kernel(pkt["raw"], self.w, self.n_authors, self.n_tags, o["author"], o["tag"], o["length"])
        ctx.send("out", _with(pkt, author=o["author"], tag=o["tag"], length=o["length"]))


class Match(StreamOperator):
    """CEP-like kernel, step 2: per author, three consecutive tweets with the same tag
    make a match (partitioned by author, at most one row out per row, w work per row)."""

    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    seq_aware = True

    def __init__(self, w: int, n_authors: int = 4096):
        self.w, self.n_authors = int(w), int(n_authors)
        self.state = M.Partitioned("author")
        self.last_tag = None

    def on_packet(self, ctx, port, pkt):
        if self.last_tag is None:
            self.last_tag = _state_array(self.n_authors, ctx)
            self.last_tag[:] = -1
            self.run = _state_array(self.n_authors, ctx)
        sel = np.empty(pkt.nrows, np.int64)
        k, self.chk = match_kernel(pkt["author"], pkt["tag"], pkt["raw"], self.w, self.last_tag, self.run, sel)
        if k:
            idx = sel[:k]
            ctx.send_derived("out", _take(pkt, idx), pkt, idx)


@njit(nogil=True, cache=True)
def vwap_kernel(sym, price, vol, w, pv, vv, out):
    chk = np.int64(0)
    for i in range(sym.shape[0]):
        s = sym[i]
        chk ^= _work1(np.int64(price[i]), w)
        pv[s] += price[i] * vol[i]
        vv[s] += vol[i]
        out[i] = pv[s] // vv[s]
    return chk


@njit(nogil=True, cache=True)
def combine_kernel(t_ts, t_sym, t_vwap, t_done, q_ts, q_sym, q_ask, q_done, w, last_vwap, o_ts, o_sym, o_ask, o_vwap):
    """Timestamp merge of trades (their VWAP updates the symbol's last VWAP) and quotes
    (each quote leaves with its symbol's last VWAP), sequential by nature; `w` work per
    row. Stops where the order is not yet known (one side used up, the other not ended).
    Returns (trades used, quotes used, rows out)."""
    i = 0
    j = 0
    k = 0
    chk = np.int64(0)
    nt = t_ts.shape[0]
    nq = q_ts.shape[0]
    while True:
        if i < nt and (j < nq and t_ts[i] <= q_ts[j] or j >= nq and q_done):
            chk ^= _work1(np.int64(t_vwap[i]), w)
            last_vwap[t_sym[i]] = t_vwap[i]
            i += 1
        elif j < nq and (i < nt or t_done):
            chk ^= _work1(np.int64(q_ask[j]), w)
            o_ts[k] = q_ts[j]
            o_sym[k] = q_sym[j]
            o_ask[k] = q_ask[j]
            o_vwap[k] = last_vwap[q_sym[j]]
            k += 1
            j += 1
        else:
            return i, j, k, chk


class Vwap(StreamOperator):
    """Finance-like: running volume-weighted average price per symbol (partitioned by
    sym, 1:1, w work per row)."""

    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    reassigns = frozenset({"vwap", "price", "vol"})  # it keeps ts, sym; adds vwap

    def __init__(self, w: int, n_syms: int = 512):
        self.w, self.n_syms = int(w), int(n_syms)
        self.state = M.Partitioned("sym")
        self.pv = None

    def on_packet(self, ctx, port, pkt):
        if self.pv is None:
            self.pv = _state_array(self.n_syms, ctx)
            self.vv = _state_array(self.n_syms, ctx)
        out = ctx.new_packet({"vwap": np.int64}, pkt.nrows)["vwap"]
        self.chk = vwap_kernel(pkt["sym"], pkt["price"], pkt["vol"], self.w, self.pv, self.vv, out)
        ctx.send("out", Packet({"ts": pkt["ts"], "sym": pkt["sym"], "vwap": out,
                                **({SEQ: pkt[SEQ]} if SEQ in pkt.columns else {})}, pkt.nrows, pkt.node))


class Combine(Operator):
    """Finance-like: the timestamp merge of trades (``trades``: ts, sym, vwap) and quotes
    (``quotes``: ts, sym, ask), w work per row. Two inputs: never in a region (R2), it
    is the sequential step that caps the kernel's speedup. Each side's packets wait in a
    queue; the merge kernel works on the two head packets (no re-copying of a backlog)."""

    inputs = ("trades", "quotes")
    outputs = ("out",)
    state = M.Partitioned("sym")  # the last VWAP per symbol; still n.p.: two inputs (R2)
    _T = ("ts", "sym", "vwap")
    _Q = ("ts", "sym", "ask")

    def __init__(self, w: int, n_syms: int = 512):
        from collections import deque

        self.w = int(w)
        self.last = np.zeros(n_syms, np.int64)
        self.tq = deque()  # [packet, position]
        self.qq = deque()

    def process(self, ctx):
        for port, q in (("trades", self.tq), ("quotes", self.qq)):
            while True:
                p = ctx.recv(port)
                if p is None:
                    break
                if p.nrows:
                    q.append([p, 0])
        t_eos, q_eos = ctx.at_eos("trades"), ctx.at_eos("quotes")
        empty = np.empty(0, np.int64)
        while self.tq or self.qq:
            th = self.tq[0] if self.tq else None
            qh = self.qq[0] if self.qq else None
            tcols = [th[0][c][th[1]:] for c in self._T] if th else [empty] * 3
            qcols = [qh[0][c][qh[1]:] for c in self._Q] if qh else [empty] * 3
            # a side is done for the kernel when nothing follows its head packet, ever
            t_done = t_eos and len(self.tq) <= 1
            q_done = q_eos and len(self.qq) <= 1
            nq = len(qcols[0])
            o = ctx.new_packet({"ts": np.int64, "sym": np.int64, "ask": np.int64, "vwap": np.int64}, nq)
            i, j, k, self.chk = combine_kernel(*tcols, t_done, *qcols, q_done, self.w, self.last, o["ts"], o["sym"], o["ask"],
                                     o["vwap"])
            if k:
                ctx.send("out", o.head(k))
            if th:
                th[1] += i
                if th[1] >= th[0].nrows:
                    self.tq.popleft()
            if qh:
                qh[1] += j
                if qh[1] >= qh[0].nrows:
                    self.qq.popleft()
            if not (i or j):
                break
        if t_eos and q_eos and not self.tq and not self.qq:
            ctx.close()
            ctx.finish()


class QuoteProject(StreamOperator):
    """Finance-like: normalise a quote's ask (stateless 1:1, w work per row)."""

    state = M.STATELESS
    selectivity_bound = M.EXACTLY_ONE
    forwarding = M.ALWAYS
    reassigns = frozenset({"ask"})

    def __init__(self, w: int):
        self.w = int(w)

    def on_packet(self, ctx, port, pkt):
        y = ctx.new_packet({"ask": np.int64}, pkt.nrows)["ask"]
        work_map(pkt["ask"], self.w, y)
        y &= 0xFFFF
        ctx.send("out", _with(pkt, ask=y + 9000))


@njit(nogil=True, cache=True)
def bargain_kernel(ask, vwap, w, sel):
    k = 0
    chk = np.int64(0)
    for i in range(ask.shape[0]):
        chk ^= _work1(np.int64(ask[i]), w)
        if vwap[i] > 0 and ask[i] * 100 < vwap[i] * 99:
            sel[k] = i
            k += 1
    return k, chk


class Bargains(StreamOperator):
    """Finance-like: quotes asking less than 99% of the symbol's VWAP (stateless, at most
    one row out per row, w work per row)."""

    state = M.STATELESS
    selectivity_bound = M.AT_MOST_ONE
    forwarding = M.ALWAYS
    seq_aware = True

    def __init__(self, w: int):
        self.w = int(w)

    def on_packet(self, ctx, port, pkt):
        sel = np.empty(pkt.nrows, np.int64)
        k, self.chk = bargain_kernel(pkt["ask"], pkt["vwap"], self.w, sel)
        if k:
            idx = sel[:k]
            ctx.send_derived("out", _take(pkt, idx), pkt, idx)


# ---------------------------------------------------------------------------------------
# sources and sink


class ArraySource(Source):
    """Emits `columns` (dict of arrays) in packets of the given row counts (cycled; 0
    makes an empty packet), with punctuations before given row positions
    (``puncts``: ``[(row, punctuation), ...]``, sorted)."""

    def __init__(self, columns: dict, sizes=(1024,), puncts=()):
        self.columns = columns
        self.n = len(next(iter(columns.values())))
        self.sizes = list(sizes) or [1024]
        if not any(self.sizes):
            raise ValueError("ArraySource needs at least one positive packet size")
        self.puncts = [(min(int(r), self.n), p) for r, p in puncts]
        self.pos = 0
        self.i = 0
        self.pi = 0

    def process(self, ctx):
        while not ctx.blocked:
            while self.pi < len(self.puncts) and self.puncts[self.pi][0] <= self.pos:
                ctx.punctuate(self.puncts[self.pi][1])
                self.pi += 1
            if self.pos >= self.n:
                if self.pi < len(self.puncts):
                    continue
                ctx.close()
                ctx.finish()
                return
            size = self.sizes[self.i % len(self.sizes)]
            self.i += 1
            end = min(self.n, self.pos + size)
            if self.pi < len(self.puncts):
                end = min(end, max(self.pos, self.puncts[self.pi][0]))
            k = end - self.pos
            p = ctx.new_packet({c: a.dtype for c, a in self.columns.items()}, k)
            for c, a in self.columns.items():
                p[c][:] = a[self.pos:end]
            self.pos = end
            ctx.send("out", p)
        ctx.reschedule()


class PartitionedArraySource(ArraySource):
    """A parallel source (``partitionBy`` its `key`): channel i of n emits the rows whose
    key hashes to i (the splitter's hash), in order."""

    def __init__(self, columns: dict, key: str = "k", sizes=(1024,)):
        super().__init__(columns, sizes)
        self.key = key
        self.state = M.Partitioned(key)

    def for_channel(self, i: int, n: int):
        from bobox_sched.regions.splitter import channels_of

        ch = channels_of(self.columns, (self.key,), n)
        rows = np.flatnonzero(ch == i)
        return ArraySource({c: a[rows] for c, a in self.columns.items()}, self.sizes)


class Record(StreamOperator):
    """Sink: every row (columns concatenated) and every punctuation with its position:
    the result is ``{"cols": {name: array}, "puncts": [(rows before, punctuation)]}``."""

    outputs = ()
    punct_in = M.EXPECTING

    def __init__(self, columns=None):
        self.columns = columns
        self.parts = []
        self.puncts = []
        self.rows = 0

    def on_packet(self, ctx, port, pkt):
        if pkt.nrows:
            names = self.columns or [c for c in pkt.columns if c != SEQ]
            self.parts.append({c: np.array(pkt[c]) for c in names})
            self.rows += pkt.nrows

    def on_punct(self, ctx, port, p):
        self.puncts.append((self.rows, p))

    def on_end(self, ctx):
        names = list(self.parts[0]) if self.parts else list(self.columns or [])
        cols = {c: np.concatenate([p[c] for p in self.parts]) if self.parts else np.empty(0, np.int64)
                for c in names}
        ctx.set_result({"cols": cols, "puncts": self.puncts})


class CountSink(StreamOperator):
    """Sink: the row count and an order-sensitive checksum of column `col` and of the
    punctuations' positions (for timing runs: no copies). Two runs with equal results
    emitted the same rows of `col` and the same punctuations, in the same order (up to
    a 64-bit hash collision)."""

    outputs = ()
    punct_in = M.EXPECTING

    def __init__(self, col: str = "x"):
        self.col = col
        self.rows = 0
        self.h = 0
        self.puncts = 0

    def on_packet(self, ctx, port, pkt):
        if pkt.nrows:
            a = pkt[self.col]
            self.h = _chk(a, self.h, self.rows)
            self.rows += pkt.nrows

    def on_punct(self, ctx, port, p):
        self.puncts += 1
        self.h = _chk(np.array([hash(p) & 0x7FFFFFFFFFFFFFFF], np.int64), self.h, self.rows)

    def on_end(self, ctx):
        ctx.set_result({"rows": self.rows, "puncts": self.puncts, "checksum": self.h})


@njit(nogil=True, cache=True)
def _chk_kernel(a, h, start):
    for i in range(a.shape[0]):
        v = np.uint64(np.int64(a[i])) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(start + i)
        h = (h ^ v) * np.uint64(0x100000001B3)
    return h


def _chk(a, h, start) -> int:
    return int(_chk_kernel(a, np.uint64(h), start))


def same_output(a: dict, b: dict) -> bool:
    """Two Record results are identical: same columns, rows in the same order, the same
    punctuations at the same positions."""
    if set(a["cols"]) != set(b["cols"]):
        return False
    for c in a["cols"]:
        if not np.array_equal(a["cols"][c], b["cols"][c]):
            return False
    return [(i, p) for i, p in a["puncts"]] == [(i, p) for i, p in b["puncts"]]


__all__ = [
    "ArraySource",
    "Bargains",
    "Combine",
    "Concat2",
    "CountSink",
    "DropCols",
    "EveryNth",
    "FlatMap",
    "Match",
    "Opaque",
    "Parse",
    "PartitionedArraySource",
    "PunctGen",
    "QuoteProject",
    "Record",
    "ReKey",
    "RunningCount",
    "Tee2",
    "Vwap",
    "WindowCount",
    "WindowSum",
    "Work",
    "WorkFilter",
    "same_output",
    "same_per_window",
    "work_map",
]
