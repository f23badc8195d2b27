"""The five streaming TPCx-BB queries of Prasaad et al. (Table 1 [L375-383]) as ordered
stream plans, following spec 000 section 5 (our operator mapping; the paper gives only
the operator types):

====  ==========================================  =======================================
Q     chain                                       what it computes
====  ==========================================  =======================================
1     SS -> SL -> PS(ticket) -> PS(pair) -> SF    top 100 item pairs sold together, hourly
2     WC -> SL -> PS(user) -> SL -> PS(item) -> SF  top 30 items viewed in a session with
                                                  item 10001 (3600 s session timeout)
3     WC -> SL -> PS(user) -> PS(item)            items among the last 5 viewed (10 days)
                                                  before a purchase of item 10001, counted
4     WC -> SL -> PS(user) -> SL -> SF            cart abandonment: average pages of the
                                                  abandoned sessions
15    SS -> SL -> SL -> PS(category)              categories with flat or declining sales
                                                  (running regression slope <= 0)
====  ==========================================  =======================================

Every operator's per-row work is a numba ``nogil`` kernel over its packet or bucket
slices; partitioned state lives in one hash table of numpy arrays per bucket
(``ordered_table.Table``). A partitioned operator's kernel takes every slice a worker
holds of one packet in one call (``on_slices``), finding each bucket's table through
the operator's ``ordered_table.Directory``: the Python cost is per call, not per slice
(Q15's regression, 10 buckets of 5 sums each, keeps the per-slice ``on_slice``). Parameters follow the
TPCx-BB reference queries (stores {10, 20, 33, 40, 50} and categories {1, 2, 3} in Q1,
item 10001 in Q2 and Q3, store 10 in Q15), with thresholds lowered for synthetic data
(Q1 keeps pairs seen >= 3 times in an hour). Q15 regresses net paid on the hour of
the sale (the synthetic stream spans days, not years).

``cost_us``: the generator emits binary columns, so nothing has to be parsed; the
paper's operators did real per-tuple work in C++. Each operator therefore also runs the
parametric per-row computation of ``ordered_micro`` for `cost_us` microseconds per input
row: 0.5 us for the first operator (decoding a raw record), 0.2 us for partitioned
operators, 0.1 us for the others (``DEFAULT_COSTS``; ``costs=`` overrides). These are
the knobs that make the pipeline's operators differ in cost, as in the paper's
queries; set them to 0 for the bare operators.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit, types
from numba.typed import Dict

from bobox_sched import Plan, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.policies.ordered.partitioned import PartitionedOperator

from operators.stream.ordered_gen import HOT_ITEM, MAX_BASKET, clickstream, store_sales
from operators.stream.ordered_micro import DigestSink, Replay, burn, burn_spans, iterations_for
from bobox_sched.policies.ordered.partitioned import span_total
from operators.stream.ordered_table import TOMB, Directory, Table, delete, table_at, upsert

QUERIES = ("q1", "q2", "q3", "q4", "q15")
STREAM_OF = {"q1": "ss", "q2": "wc", "q3": "wc", "q4": "wc", "q15": "ss"}
DEFAULT_COSTS = {"first": 0.5, "partitioned": 0.2, "other": 0.1}
SESSION_TIMEOUT = 3600
Q1_STORES = (10, 20, 33, 40, 50)
Q1_CATEGORIES = (1, 2, 3)
Q1_MIN_COUNT = 3
Q3_WINDOW = 864000
Q3_CATEGORIES = (2, 3)
Q15_STORE = 10

_I64 = types.int64


def _i64(a):
    return np.ascontiguousarray(a, dtype=np.int64)


class _Costly:
    """Mixin: the per-row computation of `cost_us` (module doc); ``cost_mode="sleep"``
    sleeps instead (``ordered_micro.Cost``)."""

    cost_mode = "compute"

    def _set_cost(self, cost_us):
        self.cost_us = float(cost_us)
        self._iters = iterations_for(self.cost_us) if self.cost_us > 0 and self.cost_mode == "compute" else 0

    def _work(self, col):
        if self._iters:
            burn(np.asarray(col, dtype=np.float64), self._iters)
        elif self.cost_mode == "sleep" and self.cost_us > 0 and len(col):
            time.sleep(len(col) * self.cost_us * 1e-6)


class _SL(_Costly, StreamOperator):
    state = M.STATELESS
    max_parallelism = 1 << 20

    def __init__(self, cost_us=0.1):
        self._set_cost(cost_us)

    def on_packet(self, ctx, port, pkt):
        self._work(pkt[self.work_col])
        out = self.apply(pkt)
        if out is not None:
            ctx.send("out", out)


class _PS(_Costly, PartitionedOperator):
    """A partitioned operator whose bucket state is an ``ordered_table.Table`` with
    `table_width` integer values per key. ``kernel(*in_columns, directory, spans,
    *params)`` does the work of every span in one call and returns the output columns
    (``out_columns``) and the parent row of each output row (an index into the gathered
    rows)."""

    table_width = 1
    in_columns: tuple = ()
    out_columns: tuple = ()

    def __init__(self, cost_us=0.2, partitions=None):
        self._set_cost(cost_us)
        self.partitions = partitions or 100

    def new_state(self):
        return Table(self.table_width)

    def relocate_state(self, table):
        return table.copy()

    def states_reset(self, p):
        self._tables = Directory(p)  # at submit, before any worker (PartitionedOperator.states_reset)

    def params(self) -> tuple:
        return ()

    def on_slices(self, ctx, rows, spans, states, emit):
        if self._iters:
            burn_spans(rows[self.work_col], spans, self._iters)
        elif self.cost_mode == "sleep" and self.cost_us > 0:
            time.sleep(span_total(spans) * self.cost_us * 1e-6)
        d = self._tables
        for j, t in enumerate(states):
            if t.bound is None:  # new, relocated or copied: its row is written by us, its bucket's worker
                d.bind(int(spans[j, 0]), t)
        d.reserve(spans)
        out = self.kernel(*[_i64(rows[c]) for c in self.in_columns], d.rows, spans, *self.params())
        emit(Packet(dict(zip(self.out_columns, out[:-1]))), out[-1])

    def _send_by_key(self, ctx, rows_of, key: str, columns=None) -> None:
        """At the end of the stream: ``rows_of(table, live slots)`` (a column dict) of
        every bucket, sent as one packet sorted by `key` (``_by_key``), with only
        `columns` if given."""
        out = _by_key([rows_of(t, t.live_slots()) for _, t in self.bucket_states()], key)
        if out is not None:
            ctx.send("out", out if columns is None else Packet({c: out[c] for c in columns}))


# ---------------------------------------------------------------------------------------
# kernels shared by several queries

@njit(nogil=True, cache=True)
def _outputs(k):
    """An output buffer of `k` int64 columns, one per row of a 2-D array (``_room``
    grows it; a kernel returns ``o[r, :m]``, each a contiguous view)."""
    return np.empty((k, 16), np.int64)


@njit(nogil=True, cache=True)
def _room(o, m):
    """`o`, or a copy twice as wide, with room for column index `m`."""
    if m < o.shape[1]:
        return o
    b = np.empty((o.shape[0], max(2 * o.shape[1], m + 16)), o.dtype)
    b[:, : o.shape[1]] = o
    return b


@njit(nogil=True, cache=True)
def _top_k(counts, k):
    """The k (key, count) pairs of a dict with the largest counts (ties: smaller key)."""
    n = len(counts)
    keys = np.empty(n, np.int64)
    vals = np.empty(n, np.int64)
    j = 0
    for key, v in counts.items():
        keys[j] = key
        vals[j] = v
        j += 1
    order = np.argsort(keys, kind="mergesort")
    keys = keys[order]
    vals = vals[order]
    order = np.argsort(-vals, kind="mergesort")[:k]
    return keys[order], vals[order]


@njit(nogil=True, cache=True)
def _item_counts(item, d, spans):
    """count[item] += 1 per row of every span (its bucket's table): (item, new count, row)."""
    n = span_total(spans)
    out_item = np.empty(n, np.int64)
    out_count = np.empty(n, np.int64)
    parent = np.empty(n, np.int64)
    m = 0
    for j in range(spans.shape[0]):
        tk, ti, tf, meta = table_at(d, spans[j, 0])
        for i in range(spans[j, 1], spans[j, 2]):
            s, _ = upsert(tk, ti, tf, meta, item[i])
            ti[s, 0] += 1
            out_item[m] = item[i]
            out_count[m] = ti[s, 0]
            parent[m] = i
            m += 1
    return out_item, out_count, parent


class ItemCounts(_PS):
    """PS by item: a running count per item; emits (item, count) for every row (Q2, Q3)."""

    state = M.Partitioned("item")
    work_col = "item"
    in_columns = ("item",)
    out_columns = ("item", "count")
    kernel = staticmethod(_item_counts)


@njit(nogil=True, cache=True)
def _max_counts(items, counts, best):
    for i in range(items.shape[0]):
        if counts[i] > best.get(items[i], 0):
            best[items[i]] = counts[i]


class TopItems(_Costly, StreamOperator):
    """SF: the largest count seen per item; at the end the top `k` (item, count)."""

    def __init__(self, k=30, cost_us=0.1):
        self.k = k
        self._set_cost(cost_us)
        self.best = Dict.empty(_I64, _I64)

    def on_packet(self, ctx, port, pkt):
        self._work(pkt["item"])
        _max_counts(_i64(pkt["item"]), _i64(pkt["count"]), self.best)

    def on_end(self, ctx):
        keys, vals = _top_k(self.best, self.k)
        ctx.send("out", Packet({"item": keys, "count": vals}, len(keys)))


# ---------------------------------------------------------------------------------------
# Q1

@njit(nogil=True, cache=True)
def _q1_mask(store, cat):
    n = store.shape[0]
    keep = np.empty(n, np.bool_)
    for i in range(n):
        s = store[i]
        c = cat[i]
        keep[i] = (s == 10 or s == 20 or s == 33 or s == 40 or s == 50) and (c == 1 or c == 2 or c == 3)
    return keep


class Q1Filter(_SL):
    work_col = "item"

    def apply(self, pkt):
        keep = _q1_mask(_i64(pkt["store"]), _i64(pkt["category"]))
        return Packet({"ticket": pkt["ticket"][keep], "item": pkt["item"][keep], "ts": pkt["ts"][keep]})


@njit(nogil=True, cache=True)
def _q1_baskets(ticket, item, ts, d, spans):
    """Per ticket (a row of the table: [hour, n, items...]), the items seen so far; a new
    item of a ticket pairs with each earlier, different item: (min, max, the ticket's
    hour), caused by the new item's row. Per key only: independent of the bucketing.
    A bucket's table keeping over 4096 tickets first forgets those of hours before the
    slice's first hour minus one (``_forget_before``)."""
    o = _outputs(4)  # rows: a, b, hour, parent row
    m = 0
    for j in range(spans.shape[0]):
        tk, ti, tf, meta = table_at(d, spans[j, 0])
        lo = spans[j, 1]
        if meta[1] > 4096:
            _forget_before(tk, ti, meta, ts[lo] // 3600 - 1)
        o, m = _q1_basket_rows(ticket, item, ts, tk, ti, tf, meta, lo, spans[j, 2], o, m)
    return o[0, :m], o[1, :m], o[2, :m], o[3, :m]


@njit(nogil=True, cache=True)
def _q1_basket_rows(ticket, item, ts, tk, ti, tf, meta, lo, hi, o, m):
    cap = ti.shape[1] - 2
    for i in range(lo, hi):
        s, new = upsert(tk, ti, tf, meta, ticket[i])
        if new:
            ti[s, 0] = ts[i] // 3600
        x = item[i]
        k = ti[s, 1]
        dup = False
        for j in range(k):
            if ti[s, 2 + j] == x:
                dup = True
                break
        if dup:
            continue
        for j in range(k):
            y = ti[s, 2 + j]
            o = _room(o, m)
            o[0, m] = min(x, y)
            o[1, m] = max(x, y)
            o[2, m] = ti[s, 0]
            o[3, m] = i
            m += 1
        if k < cap:
            ti[s, 2 + k] = x
            ti[s, 1] = k + 1
    return o, m


@njit(nogil=True, cache=True)
def _forget_before(tk, ti, meta, hour):
    """Drop the tickets of hours before `hour` (a ticket's rows are consecutive in the
    stream, so an old ticket gets no more items; bounds the state)."""
    for s in range(tk.shape[0]):
        if tk[s] > TOMB and ti[s, 0] < hour:
            delete(tk, meta, s)


class Q1Baskets(_PS):
    """PS by ticket: pairs of items sold together (a < b), as the ticket's items come."""

    state = M.Partitioned("ticket")
    work_col = "item"
    table_width = 2 + MAX_BASKET
    in_columns = ("ticket", "item", "ts")
    out_columns = ("a", "b", "hour")
    kernel = staticmethod(_q1_baskets)


@njit(nogil=True, cache=True)
def _q1_pairs(a, b, hour, d, spans, min_count):
    """Count per pair ([hour, count]) in its current hour; a row of a later hour for that
    pair first emits (pair, hour, count) if the count reached `min_count` (caused by that
    row)."""
    o = _outputs(4)  # rows: pair, hour, count, parent row
    m = 0
    for j in range(spans.shape[0]):
        tk, ti, tf, meta = table_at(d, spans[j, 0])
        o, m = _q1_pair_rows(a, b, hour, tk, ti, tf, meta, spans[j, 1], spans[j, 2], min_count, o, m)
    return o[0, :m], o[1, :m], o[2, :m], o[3, :m]


@njit(nogil=True, cache=True)
def _q1_pair_rows(a, b, hour, tk, ti, tf, meta, lo, hi, min_count, o, m):
    for i in range(lo, hi):
        k = (a[i] << 21) | b[i]
        s, new = upsert(tk, ti, tf, meta, k)
        if new:
            ti[s, 0] = hour[i]
        elif ti[s, 0] != hour[i]:
            c = ti[s, 1]
            if c >= min_count:
                o = _room(o, m)
                o[0, m] = k
                o[1, m] = ti[s, 0]
                o[2, m] = c
                o[3, m] = i
                m += 1
            ti[s, 0] = hour[i]
            ti[s, 1] = 0
        ti[s, 1] += 1
    return o, m


class Q1PairCounts(_PS):
    """PS by pair: counts per hour; emits (pair, hour, count >= 3) when the pair's hour
    ends (its next row is of a later hour), the rest at the end of the stream."""

    state = M.Partitioned("a", "b")
    work_col = "a"
    table_width = 2
    in_columns = ("a", "b", "hour")
    out_columns = ("pair", "hour", "count")
    kernel = staticmethod(_q1_pairs)

    def __init__(self, cost_us=0.2, partitions=None, min_count=Q1_MIN_COUNT):
        super().__init__(cost_us, partitions)
        self.min_count = min_count

    def params(self):
        return (self.min_count,)

    def on_end(self, ctx):
        def rows_of(t, s):
            s = s[t.ivals[s, 1] >= self.min_count]
            return {"pair": t.keys[s], "hour": t.ivals[s, 0], "count": t.ivals[s, 1]}

        self._send_by_key(ctx, rows_of, "pair")


def _by_key(parts: list, key: str):
    """One packet of the `parts` (column dicts) sorted by `key`: what a partitioned
    operator emits at the end must not depend on how keys were bucketed."""
    parts = [p for p in parts if len(p[key])]
    if not parts:
        return None
    cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    order = np.argsort(cols[key], kind="stable")
    return Packet({c: v[order] for c, v in cols.items()})


class Q1TopPairs(_Costly, StreamOperator):
    """SF: per hour, the top 100 pairs by count (at the end of the stream)."""

    def __init__(self, k=100, cost_us=0.1):
        self.k = k
        self._set_cost(cost_us)
        self.parts = []

    def on_packet(self, ctx, port, pkt):
        self._work(pkt["pair"])
        if pkt.nrows:
            self.parts.append((_i64(pkt["hour"]), _i64(pkt["pair"]), _i64(pkt["count"])))

    def on_end(self, ctx):
        if not self.parts:
            return
        h, p, c = (np.concatenate(x) for x in zip(*self.parts))
        order = np.lexsort((p, -c, h))
        h, p, c = h[order], p[order], c[order]
        rank = np.arange(len(h)) - np.searchsorted(h, h, side="left")
        keep = rank < self.k
        ctx.send("out", Packet({"hour": h[keep], "pair": p[keep], "count": c[keep]}))


# ---------------------------------------------------------------------------------------
# Q2

@njit(nogil=True, cache=True)
def _not_null(a, b):
    n = a.shape[0]
    keep = np.empty(n, np.bool_)
    for i in range(n):
        keep[i] = a[i] >= 0 and b[i] >= 0
    return keep


class Q2Clean(_SL):
    work_col = "item"

    def apply(self, pkt):
        keep = _not_null(_i64(pkt["user"]), _i64(pkt["item"]))
        return Packet({"user": pkt["user"][keep], "item": pkt["item"][keep], "ts": pkt["ts"][keep]})


@njit(nogil=True, cache=True)
def _q2_sessions(user, item, ts, d, spans, timeout):
    """Sessionize by user ([last ts, session number, n, items...]): a click more than
    `timeout` s after the user's last one closes the session: (session id, item) for its
    items, caused by that click. A session keeps its first SESSION_ITEMS items."""
    o = _outputs(3)  # rows: session, item, parent row
    m = 0
    for j in range(spans.shape[0]):
        tk, ti, tf, meta = table_at(d, spans[j, 0])
        o, m = _q2_session_rows(user, item, ts, tk, ti, tf, meta, spans[j, 1], spans[j, 2], timeout, o, m)
    return o[0, :m], o[1, :m], o[2, :m]


@njit(nogil=True, cache=True)
def _q2_session_rows(user, item, ts, tk, ti, tf, meta, lo, hi, timeout, o, m):
    cap = ti.shape[1] - 3
    for i in range(lo, hi):
        u = user[i]
        s, new = upsert(tk, ti, tf, meta, u)
        if not new and ts[i] - ti[s, 0] > timeout:
            sid = (u << 20) | ti[s, 1]
            for j in range(ti[s, 2]):
                o = _room(o, m)
                o[0, m] = sid
                o[1, m] = ti[s, 3 + j]
                o[2, m] = i
                m += 1
            ti[s, 1] += 1
            ti[s, 2] = 0
        k = ti[s, 2]
        if k < cap:
            ti[s, 3 + k] = item[i]
            ti[s, 2] = k + 1
        ti[s, 0] = ts[i]
    return o, m


SESSION_ITEMS = 64


class Q2Sessions(_PS):
    """PS by user: sessions (3600 s timeout); a closed session's (session, item) rows."""

    state = M.Partitioned("user")
    work_col = "item"
    table_width = 3 + SESSION_ITEMS
    in_columns = ("user", "item", "ts")
    out_columns = ("session", "item")
    kernel = staticmethod(_q2_sessions)

    def params(self):
        return (SESSION_TIMEOUT,)

    def on_end(self, ctx):
        sids, items = [], []
        for _, t in self.bucket_states():
            for s in t.live_slots():
                k = int(t.ivals[s, 2])
                sids.append(np.full(k, (int(t.keys[s]) << 20) | int(t.ivals[s, 1]), np.int64))
                items.append(t.ivals[s, 3:3 + k])
        out = _by_key([{"session": np.concatenate(sids), "item": np.concatenate(items)}] if sids else [], "session")
        if out is not None:
            ctx.send("out", out)


@njit(nogil=True, cache=True)
def _q2_pairs(session, item, hot):
    """For every session (a run of equal session ids) that contains `hot`, its other items."""
    n = session.shape[0]
    out_item = np.empty(n, np.int64)
    m = 0
    s = 0
    while s < n:
        e = s
        has = False
        while e < n and session[e] == session[s]:
            if item[e] == hot:
                has = True
            e += 1
        if has:
            for j in range(s, e):
                if item[j] != hot:
                    out_item[m] = item[j]
                    m += 1
        s = e
    return out_item[:m]


class Q2ViewedWith(_SL):
    work_col = "item"

    def apply(self, pkt):
        it = _q2_pairs(_i64(pkt["session"]), _i64(pkt["item"]), HOT_ITEM)
        return Packet({"item": it}, len(it))


# ---------------------------------------------------------------------------------------
# Q3

class Q3Project(_SL):
    work_col = "item"

    def apply(self, pkt):
        keep = _not_null(_i64(pkt["user"]), _i64(pkt["item"]))
        return Packet({c: pkt[c][keep] for c in ("user", "ts", "item", "sales", "category")})


@njit(nogil=True, cache=True)
def _q3_views(user, ts, item, sales, cat, d, spans, hot, window, c1, c2):
    """Last 5 views per user (a ring: [n, items x5, ts x5, categories x5]); a purchase of
    `hot` emits the viewed items of categories c1/c2 from the last `window` seconds,
    newest first."""
    o = _outputs(2)  # rows: item, parent row
    m = 0
    for j in range(spans.shape[0]):
        tk, ti, tf, meta = table_at(d, spans[j, 0])
        o, m = _q3_view_rows(user, ts, item, sales, cat, tk, ti, tf, meta, spans[j, 1], spans[j, 2], hot, window,
                             c1, c2, o, m)
    return o[0, :m], o[1, :m]


@njit(nogil=True, cache=True)
def _q3_view_rows(user, ts, item, sales, cat, tk, ti, tf, meta, lo, hi, hot, window, c1, c2, o, m):
    for i in range(lo, hi):
        s, _ = upsert(tk, ti, tf, meta, user[i])
        k = ti[s, 0]
        if sales[i] < 0:
            j = k % 5
            ti[s, 1 + j] = item[i]
            ti[s, 6 + j] = ts[i]
            ti[s, 11 + j] = cat[i]
            ti[s, 0] = k + 1
        elif item[i] == hot:
            for back in range(min(k, 5)):
                j = (k - 1 - back) % 5
                if ts[i] - ti[s, 6 + j] <= window and (ti[s, 11 + j] == c1 or ti[s, 11 + j] == c2):
                    o = _room(o, m)
                    o[0, m] = ti[s, 1 + j]
                    o[1, m] = i
                    m += 1
    return o, m


class Q3LastViews(_PS):
    state = M.Partitioned("user")
    work_col = "item"
    table_width = 16
    in_columns = ("user", "ts", "item", "sales", "category")
    out_columns = ("item",)
    kernel = staticmethod(_q3_views)

    def params(self):
        return (HOT_ITEM, Q3_WINDOW, Q3_CATEGORIES[0], Q3_CATEGORIES[1])


# ---------------------------------------------------------------------------------------
# Q4

@njit(nogil=True, cache=True)
def _q4_clicks(user, sales):
    n = user.shape[0]
    keep = np.empty(n, np.bool_)
    for i in range(n):
        keep[i] = user[i] >= 0 and sales[i] < 0
    return keep


class Q4Clicks(_SL):
    work_col = "page"

    def apply(self, pkt):
        keep = _q4_clicks(_i64(pkt["user"]), _i64(pkt["sales"]))
        return Packet({"user": pkt["user"][keep], "ts": pkt["ts"][keep], "ptype": pkt["page"][keep] % 5})


@njit(nogil=True, cache=True)
def _q4_sessions(user, ts, ptype, d, spans, timeout):
    """Sessionize by user ([last ts, pages, last dynamic ts, last order ts]); a closed
    session emits (abandoned, pages): abandoned when its last dynamic (add-to-cart) click
    came after its last order click."""
    o = _outputs(3)  # rows: abandoned, pages, parent row
    m = 0
    for j in range(spans.shape[0]):
        tk, ti, tf, meta = table_at(d, spans[j, 0])
        o, m = _q4_session_rows(user, ts, ptype, tk, ti, tf, meta, spans[j, 1], spans[j, 2], timeout, o, m)
    return o[0, :m], o[1, :m], o[2, :m]


@njit(nogil=True, cache=True)
def _q4_session_rows(user, ts, ptype, tk, ti, tf, meta, lo, hi, timeout, o, m):
    for i in range(lo, hi):
        s, new = upsert(tk, ti, tf, meta, user[i])
        if new:
            ti[s, 2] = -1
            ti[s, 3] = -1
        elif ts[i] - ti[s, 0] > timeout:
            o = _room(o, m)
            o[0, m] = 1 if ti[s, 2] > ti[s, 3] else 0
            o[1, m] = ti[s, 1]
            o[2, m] = i
            m += 1
            ti[s, 1] = 0
            ti[s, 2] = -1
            ti[s, 3] = -1
        ti[s, 1] += 1
        if ptype[i] == 1:
            ti[s, 2] = ts[i]
        elif ptype[i] == 2:
            ti[s, 3] = ts[i]
        ti[s, 0] = ts[i]
    return o, m


class Q4Sessions(_PS):
    state = M.Partitioned("user")
    work_col = "ts"
    table_width = 4
    in_columns = ("user", "ts", "ptype")
    out_columns = ("abandoned", "pages")
    kernel = staticmethod(_q4_sessions)

    def params(self):
        return (SESSION_TIMEOUT,)

    def on_end(self, ctx):
        def rows_of(t, s):  # sorted by user, sent without it
            return {"user": t.keys[s], "abandoned": (t.ivals[s, 2] > t.ivals[s, 3]).astype(np.int64),
                    "pages": t.ivals[s, 1]}

        self._send_by_key(ctx, rows_of, "user", ("abandoned", "pages"))


class Q4Abandoned(_SL):
    work_col = "pages"

    def apply(self, pkt):
        keep = np.asarray(pkt["abandoned"]) == 1
        return Packet({"pages": pkt["pages"][keep]})


class Q4Average(_Costly, StreamOperator):
    """SF: the running average of pages per abandoned session, per row."""

    def __init__(self, cost_us=0.1):
        self._set_cost(cost_us)
        self.n = 0
        self.total = 0

    def on_packet(self, ctx, port, pkt):
        self._work(pkt["pages"])
        pages = _i64(pkt["pages"])
        tot = self.total + np.cumsum(pages)
        cnt = self.n + np.arange(1, len(pages) + 1)
        if len(pages):
            self.total = int(tot[-1])
            self.n = int(cnt[-1])
        ctx.send("out", Packet({"sessions": cnt, "avg_pages": tot / np.maximum(cnt, 1)}, len(pages)))


# ---------------------------------------------------------------------------------------
# Q15

@njit(nogil=True, cache=True)
def _q15_mask(store, store_id):
    n = store.shape[0]
    keep = np.empty(n, np.bool_)
    for i in range(n):
        keep[i] = store[i] == store_id
    return keep


class Q15Filter(_SL):
    work_col = "item"

    def apply(self, pkt):
        keep = _q15_mask(_i64(pkt["store"]), Q15_STORE)
        return Packet({"category": pkt["category"][keep], "ts": pkt["ts"][keep], "net_paid": pkt["net_paid"][keep]})


class Q15Map(_SL):
    work_col = "net_paid"

    def apply(self, pkt):
        x = np.asarray(pkt["ts"], dtype=np.float64) / 3600.0
        y = np.asarray(pkt["net_paid"], dtype=np.float64)
        return Packet({"category": pkt["category"], "x": x, "y": y, "xy": x * y, "xx": x * x})


@njit(nogil=True, cache=True)
def _q15_regression(cat, x, y, xy, xx, sums):
    """Running least-squares sums per category; rows whose slope so far is <= 0."""
    n = cat.shape[0]
    oc = np.empty(n, np.int64)
    os = np.empty(n)
    op = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        c = cat[i]
        sums[c, 0] += 1.0
        sums[c, 1] += x[i]
        sums[c, 2] += y[i]
        sums[c, 3] += xy[i]
        sums[c, 4] += xx[i]
        k = sums[c, 0]
        den = k * sums[c, 4] - sums[c, 1] * sums[c, 1]
        if k >= 2 and den > 0:
            slope = (k * sums[c, 3] - sums[c, 1] * sums[c, 2]) / den
            if slope <= 0:
                oc[m] = c
                os[m] = slope
                op[m] = i
                m += 1
    return oc[:m], os[:m], op[:m]


class Q15Regression(_PS):
    """PS by category (10 categories: range buckets 0..9, so p = 10 [L428])."""

    state = M.Partitioned("category")
    work_col = "x"

    def __init__(self, cost_us=0.2, partitions=None):
        self._set_cost(cost_us)
        if partitions is None or partitions == 10:
            self.partitions = 10
            self.partitioner = "range"
            self.bounds = [c + 0.5 for c in range(9)]
        else:
            self.partitions = partitions

    def new_state(self):
        return np.zeros((10, 5))

    states_reset = PartitionedOperator.states_reset
    on_slices = PartitionedOperator.on_slices  # 10 buckets: one on_slice each

    def on_slice(self, ctx, rows, sums, emit):
        self._work(rows[self.work_col])
        c, s, parent = _q15_regression(_i64(rows["category"]), rows["x"], rows["y"], rows["xy"], rows["xx"], sums)
        emit(Packet({"category": c, "slope": s}, len(c)), parent)


# ---------------------------------------------------------------------------------------
# plans

def _with_mode(factory, mode):
    if mode == "compute":
        return factory
    return type(factory.__name__, (factory,), {"cost_mode": mode})


def chain_of(query: str, costs: dict | None = None, partitions: int | None = None,
             cost_mode: str = "compute") -> list:
    """[(name, factory, kwargs)] of a query's operators (without source and sink)."""
    return [(n, _with_mode(f, cost_mode), kw) for n, f, kw in _chain(query, costs, partitions)]


def _chain(query, costs, partitions):
    c = dict(DEFAULT_COSTS)
    c.update(costs or {})
    first, ps, other = c["first"], c["partitioned"], c["other"]
    p = {"partitions": partitions}
    if query == "q1":
        return [("filter", Q1Filter, {"cost_us": first}), ("baskets", Q1Baskets, {"cost_us": ps, **p}),
                ("pairs", Q1PairCounts, {"cost_us": ps, **p}), ("top", Q1TopPairs, {"cost_us": other})]
    if query == "q2":
        return [("clean", Q2Clean, {"cost_us": first}), ("sessions", Q2Sessions, {"cost_us": ps, **p}),
                ("viewed", Q2ViewedWith, {"cost_us": other}), ("counts", ItemCounts, {"cost_us": ps, **p}),
                ("top", TopItems, {"cost_us": other})]
    if query == "q3":
        return [("project", Q3Project, {"cost_us": first}), ("views", Q3LastViews, {"cost_us": ps, **p}),
                ("counts", ItemCounts, {"cost_us": ps, **p})]
    if query == "q4":
        return [("clicks", Q4Clicks, {"cost_us": first}), ("sessions", Q4Sessions, {"cost_us": ps, **p}),
                ("abandoned", Q4Abandoned, {"cost_us": other}), ("average", Q4Average, {"cost_us": other})]
    if query == "q15":
        return [("filter", Q15Filter, {"cost_us": first}), ("map", Q15Map, {"cost_us": other}),
                ("regression", Q15Regression, {"cost_us": ps, **p})]
    raise ValueError(f"unknown query {query!r} (one of {', '.join(QUERIES)})")


def stream_for(query: str, rows: int, seed: int = 0) -> dict:
    """The synthetic input stream of `query` (clickstream or store sales)."""
    if STREAM_OF.get(query) == "wc":
        return clickstream(rows, seed=seed)
    if STREAM_OF.get(query) == "ss":
        return store_sales(rows, seed=seed)
    raise ValueError(f"unknown query {query!r} (one of {', '.join(QUERIES)})")


def query_plan(query: str, data: dict, rows_per_packet: int = 8192, marker_every: int = 4,
               costs: dict | None = None, partitions: int | None = None, cost_mode: str = "compute") -> Plan:
    """Replay(data) -> the query's chain -> DigestSink, as a Plan."""
    plan = Plan(query)
    plan.add("source", Replay, data, rows_per_packet, marker_every)
    names = ["source"]
    for name, factory, kw in chain_of(query, costs, partitions, cost_mode):
        plan.add(name, factory, **kw)
        names.append(name)
    plan.add("egress", DigestSink)
    names.append("egress")
    plan.chain(*names)
    return plan


__all__ = ["DEFAULT_COSTS", "QUERIES", "chain_of", "query_plan", "stream_for"]
