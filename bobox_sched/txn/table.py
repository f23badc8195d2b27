"""State tables: shared mutable records keyed by an integer primary key (TStream
section II-B), stored node-local per chain pool.

A :class:`StateTable` is ``nkeys`` records; each record has one value (float64, field 0:
what READ returns and WRITE/READ_MODIFY set) padded to ``record_bytes`` (the paper's
record sizes: the padding is what makes a record cost a cache line or two), and, for a
*set table* (``set_capacity`` > 0), a bitset of the integers ``[0, set_capacity)`` after
the value (TP's vehicle-id set; the value is the set's size, kept by ``SET_INSERT``). A
table may declare a ``constraint`` ``(lo, hi)``: a write outside it aborts its
transaction (spec 1.8b).

A :class:`StateStore` holds the tables of one application. Global record ``g`` =
``table.base + key``. Its storage is a tuple of *segments* (float64 matrices, one row
per record, ``width`` fields), one per NUMA node that runs chain pools: ``place`` moves
every record into the segment of the node of the pool that owns it
(``topology.memory.alloc_on_node``: the pages are on that node, which
:meth:`page_nodes` verifies with ``move_pages``). Kernels reach a record through
``seg_of[g]`` and ``row_of[g]``.

Protocol: the store is read and written by nogil kernels of the transactional
operators of at most one running request (``acquire``/``release`` enforce it); who
touches which record when is the business of the concurrency-control scheme
(``coordinator.py``, ``baselines.py``). ``place``, ``values``, ``load`` run while no
request uses the store.
"""

from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np

from topology.memory import alloc_on_node, live_nodes, numa_available, page_nodes

# Records are int64 indexes everywhere; the per-record arrays of a group (chain directory,
# dependency marks, the baselines' lock words) are 8 B each, so a store is kept to 2**31.
MAX_RECORDS = 1 << 31

StoreView = namedtuple("StoreView", "segs segi seg_of row_of rec_table t_lo t_hi t_aux aux_idx")


class StateTable:
    """``nkeys`` records of one value each (see the module doc)."""

    def __init__(self, name: str, nkeys: int, *, record_bytes: int = 8, init=0.0, constraint=None,
                 set_capacity: int = 0):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a table needs a name, got {name!r}")
        if not isinstance(nkeys, (int, np.integer)) or nkeys < 1:
            raise ValueError(f"table {name!r}: nkeys must be a positive integer, got {nkeys!r}")
        if not isinstance(record_bytes, (int, np.integer)) or record_bytes < 8:
            raise ValueError(f"table {name!r}: record_bytes must be an integer >= 8, got {record_bytes!r}")
        if set_capacity < 0:
            raise ValueError(f"table {name!r}: set_capacity must be >= 0")
        lo, hi = -np.inf, np.inf
        if constraint is not None:
            try:
                lo, hi = constraint
            except (TypeError, ValueError):
                raise ValueError(f"table {name!r}: constraint must be (lo, hi), None for an open end") from None
            lo = -np.inf if lo is None else float(lo)
            hi = np.inf if hi is None else float(hi)
            if not lo <= hi:
                raise ValueError(f"table {name!r}: constraint ({lo}, {hi}) is empty")
            if set_capacity:
                raise ValueError(f"table {name!r}: a set table cannot declare a constraint")
        self.name = name
        self.nkeys = int(nkeys)
        self.record_bytes = int(record_bytes)
        self.constraint = None if constraint is None else (lo, hi)
        self.lo, self.hi = lo, hi
        self.set_capacity = int(set_capacity)
        self.init = init
        self.store: StateStore | None = None
        self.id = -1
        self.base = -1

    @property
    def fields(self) -> int:
        """float64 fields a record needs: its size, or value + bitset words."""
        return max(-(-self.record_bytes // 8), 1 + -(-self.set_capacity // 64))

    def __len__(self) -> int:
        return self.nkeys

    def __repr__(self) -> str:
        return f"<StateTable {self.name}: {self.nkeys} records>"

    def _check(self):
        if self.store is None:
            raise ValueError(f"table {self.name!r} is not in a StateStore")
        return self.store

    def values(self) -> np.ndarray:
        """A copy of every record's value, by key."""
        st = self._check()
        out = np.empty(self.nkeys, np.float64)
        st._kernels().gather_values(st.view(), self.base, self.nkeys, out)
        return out

    def load(self, values) -> None:
        """Set every record's value (not while a request uses the store)."""
        st = self._check()
        v = np.ascontiguousarray(np.broadcast_to(np.asarray(values, np.float64), (self.nkeys,)))
        st._kernels().scatter_values(st.view(), self.base, self.nkeys, v)

    def members(self, key: int) -> np.ndarray:
        """The integers in record `key`'s set (a set table)."""
        st = self._check()
        if not self.set_capacity:
            raise ValueError(f"table {self.name!r} is not a set table")
        g = self.base + int(key)
        seg = st.segments[st.seg_of[g]].view(np.int64)
        words = seg[st.row_of[g], 1:1 + -(-self.set_capacity // 64)].view(np.uint64)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")
        return np.flatnonzero(bits)[: self.set_capacity]


class StateStore:
    """The tables of one application and their storage (see the module doc)."""

    def __init__(self, *tables: StateTable):
        if len(tables) == 1 and isinstance(tables[0], (list, tuple)):
            tables = tuple(tables[0])
        if not tables:
            raise ValueError("a StateStore needs at least one table")
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate table names in {names}")
        g = 0
        for i, t in enumerate(tables):
            if not isinstance(t, StateTable):
                raise TypeError(f"a StateStore holds StateTables, not {type(t).__name__}")
            if t.store is not None:
                raise ValueError(f"table {t.name!r} already belongs to a store")
            t.store, t.id, t.base = self, i, g
            g += t.nkeys
        if g > MAX_RECORDS:
            raise ValueError(f"{g} records in one store; at most {MAX_RECORDS}")
        self.tables = tuple(tables)
        self.by_name = {t.name: t for t in tables}
        self.nrecords = g
        self.width = max(t.fields for t in tables)
        self.rec_table = np.repeat(np.arange(len(tables), dtype=np.int32), [t.nkeys for t in tables])
        self.key_of = np.concatenate([np.arange(t.nkeys, dtype=np.int64) for t in tables])
        self.t_lo = np.array([t.lo for t in tables], np.float64)
        self.t_hi = np.array([t.hi for t in tables], np.float64)
        self.t_aux = np.array([1 if t.set_capacity else 0 for t in tables], np.int8)
        self.has_constraints = any(t.constraint is not None for t in tables)
        aux = np.full(g, -1, np.int64)
        k = 0
        for t in tables:
            if t.set_capacity:
                aux[t.base:t.base + t.nkeys] = np.arange(k, k + t.nkeys)
                k += t.nkeys
        self.aux_idx = aux
        self.naux = k
        self._lock = threading.Lock()
        self._user = None
        self.placement_key = None
        # initial storage: one segment in plain memory, record g on row g
        rows = np.zeros((g, self.width), np.float64)
        for t in tables:
            rows[t.base:t.base + t.nkeys, 0] = np.broadcast_to(np.asarray(t.init, np.float64), (t.nkeys,))
        self._set_layout([rows], [None], np.zeros(g, np.int32), np.arange(g, dtype=np.int64))

    def __getitem__(self, name: str) -> StateTable:
        return self.by_name[name]

    def __repr__(self) -> str:
        return f"<StateStore {', '.join(t.name for t in self.tables)}: {self.nrecords} records x {self.width * 8} B>"

    # -- storage --------------------------------------------------------------------------
    def _set_layout(self, segments, nodes, seg_of, row_of):
        self.segments = tuple(segments)
        self.segment_nodes = tuple(nodes)  # the node each segment was placed for (None: plain)
        self.seg_of = seg_of
        self.row_of = row_of
        self._view = StoreView(self.segments, tuple(s.view(np.int64) for s in self.segments), seg_of, row_of,
                               self.rec_table, self.t_lo, self.t_hi, self.t_aux, self.aux_idx)

    def view(self) -> StoreView:
        return self._view

    @staticmethod
    def _kernels():
        from bobox_sched.txn.funs import kernels

        return kernels()

    def dense(self) -> np.ndarray:
        """A copy of every record, ``[g, field]``."""
        out = np.empty((self.nrecords, self.width), np.float64)
        self._kernels().dense_rows(self._view, out)
        return out

    def load_dense(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, np.float64)
        if rows.shape != (self.nrecords, self.width):
            raise ValueError(f"expected {(self.nrecords, self.width)} rows, got {rows.shape}")
        self._kernels().load_rows(self._view, rows)

    def place(self, pool_of_rec: np.ndarray, pool_nodes: list, key=None) -> None:
        """Re-lay the records: record g goes to the segment of node ``pool_nodes[pool]``
        (``pool = pool_of_rec[g]``; a node None: plain memory). A segment's pages are on
        its node when this machine has that node (virtual nodes map onto the real ones,
        modulo their number). Values are kept."""
        if key is not None and key == self.placement_key:
            return
        rows = self.dense()
        node_of_rec = np.asarray([pool_nodes[p] for p in range(len(pool_nodes))], dtype=object)[pool_of_rec]
        seg_ids: list = []
        for n in pool_nodes:
            if n not in seg_ids:
                seg_ids.append(n)
        index = {n: i for i, n in enumerate(seg_ids)}
        seg_of = np.array([index[n] for n in node_of_rec], dtype=np.int32) if len(node_of_rec) else np.zeros(0, np.int32)
        row_of = np.empty(self.nrecords, np.int64)
        segments = []
        for i, n in enumerate(seg_ids):
            members = np.flatnonzero(seg_of == i)
            row_of[members] = np.arange(members.size)
            segments.append(_alloc_rows(max(members.size, 1), self.width, n))
        self._set_layout(segments, seg_ids, seg_of, row_of)
        self.load_dense(rows)
        self.placement_key = key

    def page_nodes(self) -> list:
        """For each segment: ``(node it was placed for, {real node: pages})`` as the
        kernel reports it (``move_pages``)."""
        out = []
        for seg, n in zip(self.segments, self.segment_nodes):
            pn = page_nodes(seg)
            vals, cnt = np.unique(pn, return_counts=True)
            out.append((n, {int(v): int(c) for v, c in zip(vals, cnt)}))
        return out

    # -- one request at a time ---------------------------------------------------------------
    def acquire(self, owner) -> None:
        with self._lock:
            if self._user is not None and self._user is not owner:
                raise RuntimeError("this StateStore is already used by another running request")
            self._user = owner

    def release(self, owner) -> None:
        with self._lock:
            if self._user is owner:
                self._user = None

    def copy(self) -> "StateStore":
        """A new store with the same tables (declarations) and values, in plain memory."""
        tabs = [StateTable(t.name, t.nkeys, record_bytes=t.record_bytes, constraint=t.constraint,
                           set_capacity=t.set_capacity) for t in self.tables]
        st = StateStore(*tabs)
        st.load_dense(self.dense())
        return st


def real_node(node):
    """The real NUMA node that holds memory for (possibly virtual) node `node`; None for
    plain memory (no libnuma, or no node)."""
    if node is None or not numa_available():
        return None
    live = live_nodes()
    return node if node in live else live[node % len(live)]


def _alloc_rows(nrows: int, width: int, node) -> np.ndarray:
    rn = real_node(node)
    if rn is None:
        return np.zeros((nrows, width), np.float64)
    flat = alloc_on_node(nrows * width * 8, rn, np.float64)
    return flat.reshape(nrows, width)


__all__ = ["StateStore", "StateTable", "StoreView", "real_node"]
