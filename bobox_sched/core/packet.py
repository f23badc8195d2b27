"""Packets: columnar batches of tuples, allocated from per-node pools of node-local memory.

A :class:`Packet` is a set of equal-length numpy arrays by column name. Operators fill a
packet they got from ``ctx.new_packet(...)``: its columns are views into one pooled block
whose pages were placed on the producing worker's NUMA node (see ``topology.memory`` for
why plain ``np.empty`` + first touch is not enough). A packet is immutable once sent.

Pool protocol (who may touch what, when):

* A :class:`NodePool` belongs to one NUMA node. Any thread may ``acquire`` from any pool
  (normally a worker takes from its own node's pool), and a block goes back from whatever
  thread drops the last reference to a packet's columns, at any moment: from a
  ``__del__`` that the cyclic garbage collector runs. Since Python 3.12 the collector can
  run between almost any two bytecodes, including inside a ``with lock:`` block of the
  same thread, so **the give-back path takes no lock and calls nothing that does**:
  a thread that held a pool lock when the collector freed a lease of that pool would
  deadlock on itself (it happened with the earlier locked free lists on 3.12.1).
* Free blocks wait in one ``collections.deque`` per power-of-two size class. ``append``
  (give back) and ``pop`` (acquire; newest first, its pages are the warmest in cache) are
  each one atomic operation under the GIL, and internally synchronised in free-threaded
  builds, so neither side needs a lock. The only lock, ``_classes_lock``, guards creating
  a size class's deque (once per class per pool, never on the give-back path: a lease's
  class exists before the lease).
* A block is handed out wrapped in a fresh :class:`_Lease`. numpy keeps the lease as the
  base of every column view, so the block goes back to its free list exactly when the
  last view of the packet dies (CPython refcounting: at once, in the dropping thread).
  Operators may therefore keep views of input packets for as long as they like (a hash
  join keeps its build side): the memory is then simply not recycled yet. No packet
  memory is ever reused while something can still see it.
* Each size class keeps at most ``max_free_bytes // size`` free blocks; beyond that a
  returned block is dropped (its ``numa_free`` runs when it dies). The check and the
  append are two steps, so with T threads giving back at once a class can overshoot by
  at most T blocks: a soft cap on cached memory, never on correctness.

In a domain process (``bobox_sched/domains``) a pool's new blocks come from its
``block_source`` instead, the domain's shared arena (``domains/arena.py``): a block then
knows its place there (``origin``), which is how a packet crosses to another domain
without a copy (``domains/loans.py``: the lent packet's columns are held until the
other domain's views died, so the lease argument above covers them too). Shared blocks
have no cap (the arena never takes one back).

Byte accounting, at request level only (:class:`ByteAccount`, one per request): the
allocating thread adds under the account's lock (a normal context, never a ``__del__``);
a give-back only appends the byte count to the account's ``freed`` deque, lock-free.
Whoever next takes the lock (an allocation, or a reader) folds the pending frees in first,
so a request's ``held`` and ``peak`` are exact at every allocation: a free that completed
before an allocation is always folded before that allocation is counted. A packet costs
one lock pair (the request's) and one deque append.

The scheduler-wide figures (:class:`ByteTotals`) are sums over the request accounts,
computed when read, not counted per packet: ``packets``/``allocated`` exactly (the
accounts of retired requests are summed once, when they retire), ``held`` exactly at the
read (each account folded under its own lock, one at a time: no lock is held while
another is taken). The scheduler-wide ``peak`` is *sampled*: the sum of the accounts'
``held`` is taken whenever one request reaches a new peak of its own (the moments the
total grows), and at every read. It can miss a total that peaked while no single request
did; every request's own peak stays exact. The sample reads the other accounts' ``_held``
without their locks (an int read, never torn; frees not yet folded make it a little
high), so no lock order exists between accounts. An account is retired (dropped from the
sum, its counts added to the totals) once its request ended and nothing of it is held.

Free-threaded CPython: the deques stay correct (they lock internally); the folding
``while freed: held -= freed.popleft()`` has a single consumer (the lock holder), so it
needs nothing more. What the GIL provides here is only that ``len(deque)`` and the slot
reads of a lease are not torn, which free-threaded builds also guarantee.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections import deque

import numpy as np

from topology.memory import PAGE_SIZE, alloc_on_node, numa_available

# Columns start on 64-byte boundaries (one cache line; also what SIMD loads like).
ALIGN = 64
# Smallest block handed out: one page. Blocks are power-of-two sized above that, so a
# block is at most twice the packet, and a handful of size classes cover all packets.
MIN_BLOCK = PAGE_SIZE
# Free memory kept per node and size class for reuse before blocks are returned to the
# kernel: 256 MiB holds the in-flight packets of ~100 concurrent requests at the default
# 4-packet buffers and 0.5 MiB packets (measured on the query mix), without hoarding on
# small machines. A run uses one or two size classes (the packet size, and smaller last
# packets of a stream).
DEFAULT_MAX_FREE_BYTES = 256 * 1024 * 1024


def _aligned_zeros(size: int) -> np.ndarray:
    """Plain (not node-local) zeroed memory starting on an ALIGN boundary."""
    raw = np.zeros(size + ALIGN, dtype=np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip : skip + size]


def _count_value(counter: itertools.count) -> int:
    """The next value an ``itertools.count`` would return, without advancing it (its
    repr is ``count(N)``; ``__reduce__`` would do too, but is deprecated in 3.14)."""
    return int(repr(counter)[6:-1])


def _lease_del(self):
    """``__del__`` of a lease (see ``_lease_type``). It may run inside any other code of
    any thread (module doc): it only appends to deques, never takes a lock, never calls
    into Python code that could."""
    freed = self.freed
    if freed is not None:
        freed.append(self.nbytes)
    block = self.block
    home = block.home
    if len(home) < block.cap:
        home.append(block)


def _lease_type(size: int) -> type:
    """The lease class for blocks of `size` bytes: a ctypes byte array laid over the
    block (``from_address``, no copy), with the attributes ``block``, ``nbytes``,
    ``freed``. A packet's columns are ``np.frombuffer`` views of one lease:
    numpy keeps the lease (a non-array buffer exporter) as their base, so the lease dies,
    and ``__del__`` gives the block back, exactly when the last column view dies. Measured
    against an ``__array_interface__`` object + ``np.asarray`` + views: 0.43 vs 0.73 us
    per packet (numpy 2, CPython 3.11)."""
    return type(f"_Lease{size}", (ctypes.c_char * size,), {"__del__": _lease_del})


class _Block:
    """A pooled piece of node-local memory, its lease class, and the free list of its size
    class it goes back to."""

    __slots__ = ("array", "address", "size", "home", "cap", "lease", "origin")

    def __init__(self, array: np.ndarray, home: deque, cap: int, lease: type, origin=None):
        self.array = array  # owns the memory (numa_free when it dies)
        self.address = array.ctypes.data
        self.size = array.nbytes
        self.home = home
        self.cap = cap
        self.lease = lease
        self.origin = origin  # (arena key, segment, offset) for a block of shared memory, else None


def block_of(arr: np.ndarray) -> _Block | None:
    """The pool block whose memory `arr` views (a packet column, or a view of one), or
    None for memory from elsewhere."""
    base = arr.base
    while isinstance(base, np.ndarray):
        base = base.base
    block = getattr(base, "block", None)
    return block if isinstance(block, _Block) else None


class ByteAccount:
    """Bytes held by a request's live packets, with the peak (see the module doc for the
    protocol: locked adds, lock-free frees folded in later). `on_peak`, if set, is called
    (outside the lock) after an add that raised the peak."""

    __slots__ = ("_held", "_peak", "allocated", "packets", "_lock", "freed", "on_peak", "ended", "rid")

    def __init__(self, on_peak=None):
        self._held = 0
        self._peak = 0
        self.allocated = 0
        self.packets = 0
        self._lock = threading.Lock()
        self.freed: deque = deque()  # byte counts given back, not yet folded into _held
        self.on_peak = on_peak
        self.ended = False  # set once by the scheduler when the request ended
        self.rid = -1  # the request's id (set once by the request; a trace's memory series)

    def add(self, n: int) -> None:
        with self._lock:
            freed = self.freed
            held = self._held
            while freed:  # the only consumer: the lock holder
                held -= freed.popleft()
            held += n
            self._held = held
            self.allocated += n
            self.packets += 1
            if held <= self._peak:
                return
            self._peak = held
        if self.on_peak is not None:
            self.on_peak()

    def _fold(self) -> int:
        with self._lock:
            freed = self.freed
            held = self._held
            while freed:
                held -= freed.popleft()
            self._held = held
            return held

    @property
    def held(self) -> int:
        """Bytes held by live packets now."""
        return self._fold()

    @property
    def peak(self) -> int:
        """The most bytes held at once since creation (or ``reset_peak``)."""
        return self._peak

    def reset_peak(self) -> None:
        """Restart peak tracking from the bytes held now."""
        with self._lock:
            freed = self.freed
            held = self._held
            while freed:
                held -= freed.popleft()
            self._held = self._peak = held


class ByteTotals:
    """Scheduler-wide packet figures, summed over the request accounts (module doc):
    ``packets``, ``allocated``, ``held``, a sampled ``peak``. ``_accounts`` is a tuple
    replaced (never mutated) under ``_lock`` by ``track`` and the retiring reads, so the
    lock-free peak sample reads a consistent set."""

    def __init__(self):
        self._lock = threading.Lock()
        self._accounts: tuple = ()
        self._retired_packets = 0
        self._retired_bytes = 0
        self._peak = 0

    def new_account(self) -> ByteAccount:
        """A request's account, counted in these totals."""
        acc = ByteAccount(self._sample)
        with self._lock:
            self._accounts = self._accounts + (acc,)
        return acc

    def _sample(self) -> None:
        # Lock-free (called after an account's add, outside its lock); a racing sample
        # can overwrite a slightly higher one: the peak is a sample anyway.
        total = 0
        for a in self._accounts:
            total += a._held
        if total > self._peak:
            self._peak = total

    def held_by_request(self) -> tuple[int, dict]:
        """(bytes held now, {request id: its bytes held} for those holding any): each
        account folded under its own lock (never called from ``__del__``); the ended
        accounts are not retired (that is ``_collect``'s). A trace's memory counters."""
        total, by_req = 0, {}
        for a in self._accounts:
            h = a._fold()
            total += h
            if h:
                by_req[a.rid] = h
        return total, by_req

    def _collect(self) -> tuple[int, int, int]:
        """(packets, bytes allocated, bytes held) now; retires the accounts of ended
        requests that hold nothing."""
        with self._lock:
            keep = []
            held = 0
            packets, allocated = self._retired_packets, self._retired_bytes
            for a in self._accounts:
                h = a._fold()  # takes the account's lock alone (never ours inside it)
                if a.ended and h == 0:
                    self._retired_packets += a.packets
                    self._retired_bytes += a.allocated
                else:
                    keep.append(a)
                held += h
                packets += a.packets
                allocated += a.allocated
            self._accounts = tuple(keep)
            if held > self._peak:
                self._peak = held
            return packets, allocated, held

    @property
    def packets(self) -> int:
        return self._collect()[0]

    @property
    def allocated(self) -> int:
        return self._collect()[1]

    @property
    def held(self) -> int:
        return self._collect()[2]

    @property
    def peak(self) -> int:
        self._collect()
        return self._peak

    def reset_peak(self) -> None:
        """Restart peak tracking from the bytes held now."""
        self._peak = self._collect()[2]


class NodePool:
    """Free lists of node-local blocks for one NUMA node (protocol: the module doc)."""

    def __init__(self, node: int, max_free_bytes: int = DEFAULT_MAX_FREE_BYTES, node_local: bool = True):
        self.node = node
        self.max_free_bytes = max_free_bytes
        # Without libnuma (or NUMA support in the kernel) blocks are plain numpy memory.
        self.node_local = node_local and numa_available()
        # size class -> (free blocks, newest on the right; the lease class of that size)
        self._free: dict[int, tuple] = {}
        self._classes_lock = threading.Lock()
        self._mapped = itertools.count()  # blocks obtained from the kernel (atomic next())
        self._reused = itertools.count()
        # size -> (array, origin) or None: where new blocks come from instead, if set (a domain's
        # shared arena, domains/arena.py: its blocks can be lent to other domains). Set
        # before the pool's first acquire. Shared blocks have no cap: the arena never
        # takes a block back, so a dropped one would be lost to it.
        self.block_source = None

    @property
    def blocks_mapped(self) -> int:
        return _count_value(self._mapped)

    @property
    def blocks_reused(self) -> int:
        return _count_value(self._reused)

    def _size_class_list(self, size: int) -> tuple:
        with self._classes_lock:
            cls = self._free.get(size)
            if cls is None:
                cls = self._free[size] = (deque(), _lease_type(size))
            return cls

    def acquire(self, nbytes: int, account: ByteAccount | None):
        """A lease (a ctypes byte array, buffer protocol) over a block of at least `nbytes`
        on this node; the block is recycled when the lease and every view of it died.
        `account` counts `nbytes` while it lives."""
        size = MIN_BLOCK if nbytes <= MIN_BLOCK else 1 << (nbytes - 1).bit_length()
        cls = self._free.get(size)
        if cls is None:
            cls = self._size_class_list(size)
        home = cls[0]
        try:
            block = home.pop()
            next(self._reused)
        except IndexError:
            next(self._mapped)
            got = self.block_source(size) if self.block_source is not None else None
            if got is not None:
                block = _Block(got[0], home, 1 << 62, cls[1], got[1])
            else:  # private memory (also when the shared source has no room)
                array = alloc_on_node(size, self.node) if self.node_local else _aligned_zeros(size)
                block = _Block(array, home, max(1, self.max_free_bytes // size), cls[1])
        # Every attribute is set before anything that can fail: __del__ reads them all.
        lease = block.lease.from_address(block.address)
        lease.block = block
        lease.nbytes = nbytes
        if account is None:
            lease.freed = None
        else:
            lease.freed = account.freed
            account.add(nbytes)
        return lease

    @property
    def free_bytes(self) -> int:
        return sum(size * len(cls[0]) for size, cls in list(self._free.items()))


class Packet:
    """A columnar batch: ``columns`` maps names to equal-length numpy arrays.

    ``node`` is the NUMA node whose pool the packet's memory came from (None for packets
    wrapping arrays from elsewhere)."""

    __slots__ = ("columns", "nrows", "node")

    def __init__(self, columns: dict, nrows: int | None = None, node: int | None = None):
        self.columns = columns
        if nrows is None:
            nrows = len(next(iter(columns.values()))) if columns else 0
        self.nrows = nrows
        self.node = node

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return self.nrows

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values())

    def head(self, n: int) -> "Packet":
        """The first `n` rows (views, no copy): used after a kernel filled fewer rows
        than the packet's capacity."""
        n = min(n, self.nrows)
        return Packet({k: v[:n] for k, v in self.columns.items()}, n, self.node)

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}:{v.dtype}" for k, v in self.columns.items())
        return f"Packet({self.nrows} rows, {self.nbytes} B, node={self.node}, [{cols}])"


class PacketSpec:
    """The column layout of a kind of packet, computed once: names, dtypes, item sizes,
    and per row count the column offsets in a block. Operators keep one per output schema
    and pass it to ``ctx.new_packet``."""

    __slots__ = ("names", "dtypes", "itemsizes", "row_bytes", "_rows", "_layouts")

    # Layouts cached per spec: the packet-size row count and the short last packets of a
    # few streams. Beyond this many distinct row counts (filters make any count) a
    # layout is computed each time instead of growing the cache without bound.
    MAX_CACHED_LAYOUTS = 64

    def __init__(self, schema: dict):
        self.names = tuple(schema)
        self.dtypes = tuple(np.dtype(d) for d in schema.values())
        self.itemsizes = tuple(d.itemsize for d in self.dtypes)
        self.row_bytes = sum(self.itemsizes) or 1
        self._rows: dict[int, int] = {}
        self._layouts: dict[int, tuple] = {}

    def rows_for(self, packet_bytes: int) -> int:
        """Rows that make a packet of about `packet_bytes`."""
        r = self._rows.get(packet_bytes)
        if r is None:
            r = self._rows[packet_bytes] = max(1, packet_bytes // self.row_bytes)
        return r

    def layout(self, nrows: int) -> tuple:
        """``(block bytes, ((name, dtype, offset), ...))`` for a packet of `nrows` rows:
        columns one after the other, each starting on an ALIGN boundary."""
        lay = self._layouts.get(nrows)
        if lay is None:
            cols = []
            off = 0
            for name, dt, isz in zip(self.names, self.dtypes, self.itemsizes):
                cols.append((name, dt, off))
                off += -(-(isz * nrows) // ALIGN) * ALIGN
            lay = (off or 1, tuple(cols))
            if len(self._layouts) < self.MAX_CACHED_LAYOUTS:
                self._layouts[nrows] = lay
        return lay


def as_spec(schema) -> PacketSpec:
    return schema if isinstance(schema, PacketSpec) else PacketSpec(schema)


def new_packet(pool: NodePool, schema, nrows: int, account: ByteAccount | None) -> Packet:
    """A packet of `nrows` rows (uninitialised) with the columns of `schema` (a
    PacketSpec, or a ``{name: dtype}`` dict) from `pool`, counted in `account` (a
    request's). Columns start on 64-byte boundaries; each is one ndarray over the block."""
    spec = schema if isinstance(schema, PacketSpec) else PacketSpec(schema)
    if nrows.__class__ is not int:
        if not isinstance(nrows, (int, np.integer)) or isinstance(nrows, bool):
            raise TypeError(f"packet row count must be an integer, got {nrows!r}")
        nrows = int(nrows)
    if nrows < 0:
        raise ValueError(f"packet row count must be >= 0, got {nrows}")
    nbytes, cols = spec.layout(nrows)
    raw = pool.acquire(nbytes, account)
    fb = np.frombuffer
    return Packet({name: fb(raw, dt, nrows, off) for name, dt, off in cols}, nrows, pool.node)


def row_bytes(schema) -> int:
    return as_spec(schema).row_bytes


def rows_per_packet(schema, packet_bytes: int) -> int:
    """How many rows of `schema` make a packet of about `packet_bytes`."""
    return as_spec(schema).rows_for(packet_bytes)
