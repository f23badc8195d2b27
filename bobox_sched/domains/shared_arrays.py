"""Large arrays of a plan travel to the domains once, through shared memory.

A plan carries its data (a TPC-H plan holds its tables' columns: ~50 MiB at SF 0.1,
pickled in 2-17 ms per plan and copied into the domain every time it is submitted).
``PlanPickler`` (cloudpickle's, with one more rule) writes each C-contiguous numpy array
of ``SHARE_BYTES`` or more as a reference: the first time the front sees the array it
copies it into a segment of its own (``shm.Segment``), and every later plan that holds
the same array object refers to that segment. A domain maps a segment once
(``attach``), as a read-only array, and every plan it unpickles uses that mapping: one
copy of the data in memory (tmpfs pages), whatever the number of domains and requests.

Contract: an array is shared as it is when first submitted; a plan must not change it
afterwards (its operators get a read-only view; writing raises). Arrays of objects and
non-contiguous ones travel by value as before.

Who touches what: ``ArrayShare`` belongs to the front; ``export`` is called by the
threads that submit, under its lock (the cache and the segment list). ``attach``'s cache
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
    """The front's shared arrays (module doc)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_id: dict = {}  # id(array) -> (weakref to it, (name, dtype, shape))
        self._segments: list[Segment] = []
        self._closed = False
        self.bytes_shared = 0

    def export(self, arr: np.ndarray) -> tuple:
        with self._lock:
            if self._closed:
                raise RuntimeError("the scheduler's shared arrays are closed (it shut down)")
            hit = self._by_id.get(id(arr))
            if hit is not None and hit[0]() is arr:
                return hit[1]
            seg = Segment.create(max(arr.nbytes, 1), "array")
            view = seg.array(np.uint8, count=arr.nbytes)
            view[:] = arr.reshape(-1).view(np.uint8)
            del view
            seg.close()
            meta = (seg.name, arr.dtype, arr.shape)  # the dtype itself: a structured one keeps its fields
            self._by_id[id(arr)] = (weakref.ref(arr), meta)
            self._segments.append(seg)
            self.bytes_shared += arr.nbytes
            return meta

    def close(self) -> None:
        """Unlink every segment (the domains' mappings stay valid until they exit)."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.unlink()
            self._segments.clear()
            self._by_id.clear()


class PlanPickler(cloudpickle.Pickler):
    """cloudpickle, with large arrays written as references to shared segments."""

    def __init__(self, file, share: ArrayShare):
        super().__init__(file, protocol=5)
        self.share = share

    def reducer_override(self, obj):
        if type(obj) is np.ndarray and obj.nbytes >= SHARE_BYTES and obj.flags.c_contiguous \
                and not obj.dtype.hasobject:
            return attach, self.share.export(obj)
        return super().reducer_override(obj)


def dumps(obj, share: ArrayShare) -> bytes:
    import io

    f = io.BytesIO()
    PlanPickler(f, share).dump(obj)
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


__all__ = ["SHARE_BYTES", "ArrayShare", "PlanPickler", "attach", "dumps"]
