"""Node-local memory: numpy buffers whose pages live on a chosen NUMA node, and the
kernel's answer to "which node is each page of this buffer on?".

Why not ``np.empty`` + first touch by a pinned thread: glibc recycles freed heap and
mmap chunks, so a "fresh" array on node 1 may be made of pages already faulted in on
node 0 (seen in a 4-node VM: after freeing an 8 MiB array the next one reused pages of
another node). Here every buffer is its own ``mmap`` from libnuma's
``numa_alloc_onnode`` (``MPOL_BIND`` to the node), its pages are touched at once so they
exist, and it is returned with ``numa_free`` when the last numpy view of it dies.

Verification uses ``move_pages(2)`` with no target nodes (libnuma's ``numa_move_pages``):
the kernel then moves nothing and reports the node of each page, or ``-errno``
(``-ENOENT`` for a page that was never touched).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import os
import threading
import weakref
from collections import Counter

import numpy as np

from topology.errors import TopologyError

PAGE_SIZE = mmap.PAGESIZE


class _LibNuma:
    """ctypes bindings of the few libnuma calls we use, loaded once."""

    def __init__(self):
        name = ctypes.util.find_library("numa") or "libnuma.so.1"
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            raise TopologyError(
                f"libnuma is not available ({e}); install it (Debian: apt-get install libnuma1)"
            ) from None
        lib.numa_available.restype = ctypes.c_int
        lib.numa_max_node.restype = ctypes.c_int
        lib.numa_alloc_onnode.restype = ctypes.c_void_p
        lib.numa_alloc_onnode.argtypes = [ctypes.c_size_t, ctypes.c_int]
        lib.numa_free.restype = None
        lib.numa_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.numa_move_pages.restype = ctypes.c_int
        lib.numa_move_pages.argtypes = [
            ctypes.c_int,
            ctypes.c_ulong,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
        ]
        lib.numa_set_preferred.restype = None
        lib.numa_set_preferred.argtypes = [ctypes.c_int]
        lib.numa_set_localalloc.restype = None
        self.lib = lib
        self.available = lib.numa_available() >= 0


@functools.lru_cache(maxsize=1)
def libnuma() -> _LibNuma:
    return _LibNuma()


def numa_available() -> bool:
    """True when libnuma loads and the kernel supports NUMA policies."""
    try:
        return libnuma().available
    except TopologyError:
        return False


def live_nodes() -> list[int]:
    try:
        names = os.listdir("/sys/devices/system/node")
    except OSError:
        return [0]
    ids = sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())
    return ids or [0]


def check_node(node: int) -> int:
    """Validate a node index against the live machine; return it."""
    nodes = live_nodes()
    if not isinstance(node, (int, np.integer)) or int(node) not in nodes:
        raise TopologyError(
            f"unknown NUMA node {node} (this machine has: {', '.join(map(str, nodes))})"
        )
    return int(node)


class _NodeBlock:
    """Owner of one ``numa_alloc_onnode`` mapping; numpy arrays use it as their base.

    numpy keeps a reference to the object it got ``__array_interface__`` from, so the
    mapping lives exactly as long as some array or view of it does; when the last one is
    collected the finalizer unmaps it."""

    __slots__ = ("__array_interface__", "address", "nbytes", "node", "__weakref__")

    def __init__(self, address: int, nbytes: int, node: int):
        self.address = address
        self.nbytes = nbytes
        self.node = node
        self.__array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
        }


def _free(address: int, nbytes: int) -> None:
    libnuma().lib.numa_free(address, nbytes)


def alloc_on_node(nbytes: int, node: int, dtype=np.uint8) -> np.ndarray:
    """A zero-filled 1-D array of at least `nbytes` bytes whose pages are on `node`.

    The length is ``nbytes // itemsize``; the mapping is rounded up to whole pages.
    Pages are touched here, so they are placed now (by the mapping's policy, whichever
    thread touches them) and ``page_nodes`` can verify them at once."""
    node = check_node(node)
    nbytes = int(nbytes)
    if nbytes <= 0:
        raise TopologyError(f"allocation size must be positive, got {nbytes}")
    ln = libnuma()
    size = -(-nbytes // PAGE_SIZE) * PAGE_SIZE
    address = ln.lib.numa_alloc_onnode(size, node)
    if not address:
        raise MemoryError(f"numa_alloc_onnode({size}, {node}) failed")
    block = _NodeBlock(address, size, node)
    weakref.finalize(block, _free, address, size)
    raw = np.asarray(block)
    # Fresh mappings are already zero: one write per page is enough to fault it in.
    raw[::PAGE_SIZE] = 0
    dt = np.dtype(dtype)
    return raw[: (nbytes // dt.itemsize) * dt.itemsize].view(dt)


def alloc_local(nbytes: int, dtype=np.uint8) -> np.ndarray:
    """Like :func:`alloc_on_node`, on the node of the CPU the caller runs on."""
    return alloc_on_node(nbytes, current_node(), dtype)


def current_node() -> int:
    """NUMA node of the CPU the calling thread is running on right now."""
    cpu = ctypes.c_uint()
    node = ctypes.c_uint()
    libc = _libc()
    if hasattr(libc, "getcpu") and libc.getcpu(ctypes.byref(cpu), ctypes.byref(node)) == 0:
        return int(node.value)
    return 0


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _buffer_address(arr: np.ndarray) -> tuple[int, int]:
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    return arr.__array_interface__["data"][0], arr.nbytes


def page_nodes(arr: np.ndarray) -> np.ndarray:
    """Node of each page spanned by `arr` according to the kernel (``move_pages(2)``
    with no target nodes). Negative entries are ``-errno`` (``-2`` = ENOENT: page never
    touched; ``-14`` = EFAULT: not mapped)."""
    address, nbytes = _buffer_address(arr)
    if nbytes == 0:
        return np.zeros(0, dtype=np.int32)
    first = address - address % PAGE_SIZE
    count = -(-(address + nbytes - first) // PAGE_SIZE)
    pages = (ctypes.c_void_p * count)(*[first + i * PAGE_SIZE for i in range(count)])
    status = (ctypes.c_int * count)()
    rc = libnuma().lib.numa_move_pages(0, count, pages, None, status, 0)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"move_pages failed: {os.strerror(err)}")
    return np.frombuffer(status, dtype=np.int32).copy()


def node_histogram(arr: np.ndarray) -> Counter:
    """``Counter({node: pages})`` for the pages of `arr`."""
    return Counter(int(x) for x in page_nodes(arr))


_tls = threading.local()


def prefer_node(node: int | None) -> None:
    """Set the calling thread's memory policy: prefer `node` (None = local allocation).

    Pages that Python, numpy or a kernel fault in afterwards from this thread come from
    that node when it has free memory. Pools are still needed for recycled memory."""
    ln = libnuma()
    if not ln.available:
        return
    if node is None:
        ln.lib.numa_set_localalloc()
    else:
        ln.lib.numa_set_preferred(check_node(node))
    _tls.preferred = node
