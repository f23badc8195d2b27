"""Packets: columnar batches of tuples, allocated from per-node pools of node-local memory.

A :class:`Packet` is a set of equal-length numpy arrays by column name. Operators fill a
packet they got from ``ctx.new_packet(...)``: its columns are views into one pooled block
whose pages were placed on the producing worker's NUMA node (see ``topology.memory`` for
why plain ``np.empty`` + first touch is not enough). A packet is immutable once sent.

Pool protocol (who may touch what, when):

* A :class:`NodePool` belongs to one NUMA node. Any thread may ``acquire`` from any pool
  (normally a worker takes from its own node's pool) and blocks are given back from
  whatever thread drops the last reference to a packet's columns. Both paths take the
  pool's lock, held for a few dict/list operations only: it guards the free lists and
  the byte counters, nothing else.
* A block is handed out wrapped in a fresh :class:`_Lease`. numpy keeps the lease as the
  base of every column view, so the block goes back to its free list exactly when the
  last view of the packet dies (CPython refcounting: at once, in the dropping thread).
  Operators may therefore keep views of input packets for as long as they like (a hash
  join keeps its build side): the memory is then simply not recycled yet. No packet
  memory is ever reused while something can still see it.
* Free blocks are kept per power-of-two size class, up to ``max_free_bytes`` per node;
  beyond that a returned block is unmapped (its ``numa_free`` runs when it dies).
"""

from __future__ import annotations

import threading

import numpy as np

from topology.memory import PAGE_SIZE, alloc_on_node, numa_available

# Columns start on 64-byte boundaries (one cache line; also what SIMD loads like).
ALIGN = 64
# Smallest block handed out: one page. Blocks are power-of-two sized above that, so a
# block is at most twice the packet, and a handful of size classes cover all packets.
MIN_BLOCK = PAGE_SIZE
# Free memory kept per node for reuse before blocks are returned to the kernel: 256 MiB
# holds the in-flight packets of ~100 concurrent requests at the default 4-packet buffers
# and 0.5 MiB packets (measured on the query mix), without hoarding on small machines.
DEFAULT_MAX_FREE_BYTES = 256 * 1024 * 1024


def _size_class(nbytes: int) -> int:
    n = max(nbytes, MIN_BLOCK)
    return 1 << (n - 1).bit_length()


class _Lease:
    """One packet's hold on a pooled block. numpy keeps it alive through the column views
    (it is the base of the raw byte array); ``__del__`` gives the block back."""

    __slots__ = ("__array_interface__", "block", "pool", "nbytes", "account")

    def __init__(self, block: "_Block", nbytes: int, pool: "NodePool", account):
        self.block = block
        self.pool = pool
        self.nbytes = nbytes
        self.account = account
        self.__array_interface__ = block.iface  # shared: numpy only reads it

    def __del__(self):
        self.pool._release(self.block, self.nbytes, self.account)


class _Block:
    """A pooled piece of node-local memory and its (reusable) numpy array interface."""

    __slots__ = ("array", "iface", "size")

    def __init__(self, array: np.ndarray):
        self.array = array
        self.size = array.nbytes
        self.iface = {
            "shape": (array.nbytes,),
            "typestr": "|u1",
            "data": (array.__array_interface__["data"][0], False),
            "version": 3,
        }


class ByteAccount:
    """Bytes held by live packets, with the peak, for a request or a whole scheduler.
    Updated under the owning pool's lock (a request's packets may come from several
    pools, hence its own lock)."""

    __slots__ = ("held", "peak", "allocated", "packets", "_lock", "parent")

    def __init__(self, parent: "ByteAccount | None" = None):
        self.held = 0
        self.peak = 0
        self.allocated = 0
        self.packets = 0
        self._lock = threading.Lock()
        self.parent = parent

    def add(self, n: int) -> None:
        with self._lock:
            self.held += n
            self.allocated += n
            self.packets += 1
            if self.held > self.peak:
                self.peak = self.held
        if self.parent is not None:
            self.parent.add(n)

    def sub(self, n: int) -> None:
        with self._lock:
            self.held -= n
        if self.parent is not None:
            self.parent.sub(n)


class NodePool:
    """Free lists of node-local blocks for one NUMA node."""

    def __init__(self, node: int, max_free_bytes: int = DEFAULT_MAX_FREE_BYTES, node_local: bool = True):
        self.node = node
        self.max_free_bytes = max_free_bytes
        # Without libnuma (or NUMA support in the kernel) blocks are plain numpy memory.
        self.node_local = node_local and numa_available()
        self._free: dict[int, list[_Block]] = {}
        self._free_bytes = 0
        self._lock = threading.Lock()
        self.blocks_mapped = 0  # blocks obtained from the kernel (not reused)
        self.blocks_reused = 0

    def acquire(self, nbytes: int, account: ByteAccount | None) -> np.ndarray:
        """A raw uint8 array of `nbytes` on this node, recycled when its views die."""
        size = _size_class(nbytes)
        block = None
        with self._lock:
            lst = self._free.get(size)
            if lst:
                block = lst.pop()
                self._free_bytes -= size
                self.blocks_reused += 1
            else:
                self.blocks_mapped += 1
        if block is None:
            if self.node_local:
                block = _Block(alloc_on_node(size, self.node))
            else:
                block = _Block(np.zeros(size, dtype=np.uint8))
        if account is not None:
            account.add(nbytes)
        return np.asarray(_Lease(block, nbytes, self, account))

    def _release(self, block: _Block, nbytes: int, account: ByteAccount | None) -> None:
        if account is not None:
            account.sub(nbytes)
        size = block.size
        # Runs from _Lease.__del__, which the garbage collector may call while this very
        # thread holds the lock: nothing allocated under it may start a collection (a
        # new list would), so a size class's free list is made before taking it.
        lst = self._free.get(size)
        if lst is None:
            lst = []
        with self._lock:
            if self._free_bytes + size <= self.max_free_bytes:
                self._free.setdefault(size, lst).append(block)
                self._free_bytes += size

    @property
    def free_bytes(self) -> int:
        return self._free_bytes


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
    """The column layout of a kind of packet, computed once: names, dtypes, item sizes.
    Operators keep one per output schema and pass it to ``ctx.new_packet``."""

    __slots__ = ("names", "dtypes", "itemsizes", "row_bytes", "_rows")

    def __init__(self, schema: dict):
        self.names = tuple(schema)
        self.dtypes = tuple(np.dtype(d) for d in schema.values())
        self.itemsizes = tuple(d.itemsize for d in self.dtypes)
        self.row_bytes = sum(self.itemsizes) or 1
        self._rows: dict[int, int] = {}

    def rows_for(self, packet_bytes: int) -> int:
        """Rows that make a packet of about `packet_bytes`."""
        r = self._rows.get(packet_bytes)
        if r is None:
            r = self._rows[packet_bytes] = max(1, packet_bytes // self.row_bytes)
        return r


def as_spec(schema) -> PacketSpec:
    return schema if isinstance(schema, PacketSpec) else PacketSpec(schema)


def new_packet(pool: NodePool, schema, nrows: int, account: ByteAccount | None) -> Packet:
    """A packet of `nrows` rows (uninitialised) with the columns of `schema` (a
    PacketSpec, or a ``{name: dtype}`` dict) from `pool`. Columns start on 64-byte
    boundaries."""
    spec = schema if isinstance(schema, PacketSpec) else PacketSpec(schema)
    offs = []
    off = 0
    for isz in spec.itemsizes:
        offs.append(off)
        off += -(-(isz * nrows) // ALIGN) * ALIGN
    raw = pool.acquire(off or 1, account)
    columns = {}
    for name, dt, isz, o in zip(spec.names, spec.dtypes, spec.itemsizes, offs):
        columns[name] = raw[o : o + isz * nrows].view(dt)
    return Packet(columns, nrows, pool.node)


def row_bytes(schema) -> int:
    return as_spec(schema).row_bytes


def rows_per_packet(schema, packet_bytes: int) -> int:
    """How many rows of `schema` make a packet of about `packet_bytes`."""
    return as_spec(schema).rows_for(packet_bytes)
