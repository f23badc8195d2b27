"""Large arrays of a plan travel to the domains once, through shared memory.

A plan carries its data (a TPC-H plan holds its tables' columns: ~50 MiB at SF 0.1,
pickled in 2-17 ms per plan and copied into the domain every time it is submitted).
``PlanPickler`` (cloudpickle's, with one more rule) writes each C-contiguous numpy array
of ``SHARE_BYTES`` or more as a reference: the first time the front sees the array it
copies it into a segment of its own (``shm.Segment``), and every later plan that holds
the same array object refers to that segment. A domain maps a segment once
(``attach``), as a read-only array, and every plan it unpickles uses that mapping: one
copy of the data in memory (tmpfs pages), whatever the number of domains and requests.

Read-only data loaded while a Scheduler with domains runs (the TPC-H table store's
columns: ``operators.data``) goes straight into shared memory: ``home()`` is the live
front's share, and ``place`` copies a freshly loaded array into a segment of it and
returns that mapping, which the loader keeps instead of its own copy. So the user's
process, and every domain, map one copy per node; nothing of it stays on the front's
heap. On a machine with several NUMA nodes a segment's pages are preferred on one node
(``shm.prefer_node``): ``place`` uses the first domain's node, and ``export`` for a
domain of another node makes that node its own copy (one per node, not per domain).

Contract: an array is shared as it is when first submitted; a plan must not change it
afterwards (its operators get a read-only view; writing raises). Arrays of objects and
non-contiguous ones travel by value as before.

Who touches what: ``ArrayShare`` belongs to the front; ``export`` and ``place`` are
called by the threads that submit or load data, under its lock (the cache and the
segment list). ``_home`` (the share that ``place`` fills) is set by a front when it
starts and cleared when it closes, under ``_home_lock``. ``attach``'s cache
belongs to one domain process; several of its threads may unpickle at once, so it also
takes a lock. Segments are unlinked by the front's ``close`` (at shutdown), or by the
next Scheduler's ``shm.sweep_stale`` if the front died.
"""

from __future__ import annotations

import threading
import weakref

import cloudpickle
import numpy as np

from bobox_sched.domains.shm import Segment

# Arrays from this size on are shared (below it, pickling by value costs less than a
# segment: one file, one mmap and a page of rounding each).
SHARE_BYTES = 1 << 20


class ArrayShare:
    """The front's shared arrays (module doc). `home_node`: the node whose memory
    ``place`` prefers (None: first touch decides)."""

    def __init__(self, home_node: int | None = None):
        self._lock = threading.Lock()
        self._by_id: dict = {}  # id(array) -> (weakref to it, {node: (name, dtype, shape)})
        self._segments: list[Segment] = []
        self._closed = False
        self.home_node = home_node
        self.bytes_shared = 0

    def _copy(self, arr: np.ndarray, node: int | None) -> tuple[Segment, tuple]:
        """A new segment holding `arr`'s bytes, its pages on `node`; caller holds the lock."""
        seg = Segment.create(max(arr.nbytes, 1), "array", node)
        view = seg.array(np.uint8, count=arr.nbytes)
        view[:] = arr.reshape(-1).view(np.uint8)
        del view
        self._segments.append(seg)
        self.bytes_shared += arr.nbytes
        return seg, (seg.name, arr.dtype, arr.shape)  # the dtype itself: a structured one keeps its fields

    def export(self, arr: np.ndarray, node: int | None = None) -> tuple:
        """The (segment name, dtype, shape) a domain of `node` maps `arr` from: made on
        the first call for that node (any node's copy serves when `node` is None)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the scheduler's shared arrays are closed (it shut down)")
            hit = self._by_id.get(id(arr))
            if hit is not None and hit[0]() is arr:
                metas = hit[1]
                if node in metas:
                    return metas[node]
                if node is None or None in metas:
                    return next(iter(metas.values()))
            else:
                metas = {}
                self._by_id[id(arr)] = (weakref.ref(arr), metas)
            seg, meta = self._copy(arr, node)
            seg.close()
            metas[node] = meta
            return meta

    def place(self, arr: np.ndarray) -> np.ndarray:
        """`arr` copied into a segment of this share (its pages on ``home_node``), as a
        read-only array over that mapping: what a loader keeps instead of `arr`, so the
        data exists once (module doc). `arr` itself if the share is closed."""
        with self._lock:
            if self._closed:
                return arr
            seg, meta = self._copy(arr, self.home_node)
            out = seg.array(arr.dtype, count=int(np.prod(arr.shape, dtype=np.int64))).reshape(arr.shape)
            out.flags.writeable = False
            self._by_id[id(out)] = (weakref.ref(out), {self.home_node: meta})
        _release_arrow_pool()
        return out

    def close(self) -> None:
        """Unlink every segment (the domains' mappings, and the arrays ``place`` gave,
        stay valid until they are unmapped)."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.unlink()
            self._segments.clear()
            self._by_id.clear()
        set_home(None, self)


def _release_arrow_pool() -> None:
    """Give the memory Arrow's pool keeps after a load back to the system: the loader's
    buffers (Parquet pages, conversions) are gone once the data sits in a segment, and
    mimalloc otherwise holds them (~130 MiB in the front after loading the SF 1 mix's
    columns, measured with /proc/self/smaps)."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return
    pa.default_memory_pool().release_unused()


_home: ArrayShare | None = None
_home_lock = threading.Lock()


def home() -> ArrayShare | None:
    """The share that read-only data loaded now should go into (module doc), or None."""
    return _home


def set_home(share: ArrayShare | None, only_if: ArrayShare | None = None) -> None:
    """Make `share` the home of data loaded from now on; with `only_if`, only while that
    one still is (a closing front clears its own, not a newer front's)."""
    global _home
    with _home_lock:
        if only_if is None or _home is only_if:
            _home = share


def place_if_shared(arr: np.ndarray) -> np.ndarray:
    """What a loader of read-only data keeps: `arr` placed in the live front's shared
    memory when there is one and `arr` is large enough to share, else `arr`."""
    share = _home
    if share is None or type(arr) is not np.ndarray or arr.nbytes < SHARE_BYTES or not arr.flags.c_contiguous \
            or arr.dtype.hasobject:
        return arr
    return share.place(arr)


class PlanPickler(cloudpickle.Pickler):
    """cloudpickle, with large arrays written as references to shared segments."""

    def __init__(self, file, share: ArrayShare, node: int | None = None):
        super().__init__(file, protocol=5)
        self.share = share
        self.node = node

    def reducer_override(self, obj):
        if type(obj) is np.ndarray and obj.nbytes >= SHARE_BYTES and obj.flags.c_contiguous \
                and not obj.dtype.hasobject:
            return attach, self.share.export(obj, self.node)
        return super().reducer_override(obj)


def dumps(obj, share: ArrayShare, node: int | None = None) -> bytes:
    """`obj` cloudpickled for a domain of `node`: its large arrays as references to
    segments of `share` whose pages are on that node."""
    import io

    f = io.BytesIO()
    PlanPickler(f, share, node).dump(obj)
    return f.getvalue()


_attached: dict = {}
_attach_lock = threading.Lock()


def attach(name: str, dtype, shape: tuple) -> np.ndarray:
    """In a domain: the shared array `name`, mapped once, read-only (the mapping itself:
    no flag can make it writable)."""
    with _attach_lock:
        arr = _attached.get(name)
        if arr is None:
            seg = Segment.attach(name, readonly=True)
            n = int(np.prod(shape, dtype=np.int64))
            arr = seg.array(np.dtype(dtype), count=n).reshape(shape)
            _attached[name] = arr
        return arr


__all__ = ["SHARE_BYTES", "ArrayShare", "PlanPickler", "attach", "dumps", "home", "place_if_shared", "set_home"]
