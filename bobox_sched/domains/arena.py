"""A domain's packet memory in shared segments: where its ``NodePool`` blocks come from,
so that a packet can cross to another domain as (segment, offset), with no copy
(``loans.py`` says how it is lent and given back).

An arena belongs to one NUMA node of one domain process. It hands out blocks by carving
them from segments of ``CHUNK_BYTES`` (a block larger than that gets a segment of its
own), named ``bobox-<pid>-<token>-pool<k>``: ``<pid>-<token>`` is the arena's ``key``
(one per arena), `k` counts its segments from 0. Another process that knows the key
maps segment `k` by name (``attach``). The segments' pages are preferred on the arena's
node (``shm.prefer_node``: the tmpfs file's own policy), so a packet's memory stays on
its node wherever it is read; without a node (one-node machines) they follow the
allocating worker's.

Who touches what, when:

* ``alloc`` is called by ``NodePool.acquire`` (any worker thread of the domain, in a
  normal context, never from a ``__del__``): it takes the arena's lock to bump the
  current segment's free offset or to make a new segment. The hot path does not come
  here: a pool reuses its free blocks first, and a run needs a handful of blocks per
  size class (``packet.py``);
* a block's pages are reserved when it is carved (``shm.reserve``: ``posix_fallocate``
  of its bytes only, so reserved memory is memory in use, and a process's PSS shows it
  once touched): a full /dev/shm is then an error there, and the arena gives None for
  good (``full``: no further tries that would fill /dev/shm for a moment each), so the
  pool makes private blocks instead, rather than a SIGBUS at a page's first touch. A
  new segment is made only while /dev/shm keeps ``MIN_SHM_ROOM`` free besides;
* a block is never given back to the arena: the pool keeps it on its free list for
  ever (``NodePool`` gives shared blocks no cap), so the arena only grows, to the
  domain's peak of packet memory in flight, as a pool of private memory would at its
  cap;
* the segments are unlinked by the front once every domain of the Scheduler ended (a
  consumer may map a segment of a loan queued for it until then; ``front._unlink_made``,
  also for a domain that died), or by the next Scheduler's ``shm.sweep_stale`` when the
  front itself died. ``close`` unlinks them from the owning process (tests).
"""

from __future__ import annotations

import errno
import os
import secrets
import threading

import numpy as np

from bobox_sched.domains.shm import PREFIX, SHM_DIR, Segment, reserve

# One segment per 64 MiB of packets: at the default 1 MiB packets, 64 blocks per
# segment, so a mix at its peak (~100 concurrent requests x 4 buffered packets, packet.py)
# maps a few segments, and an idle domain holds one.
CHUNK_BYTES = 64 << 20
# A domain takes its packet memory from /dev/shm only while it has this much room there
# besides (a container's default /dev/shm is 64 MiB): else its pools stay private and
# packets crossing domains are copied. 1 GiB: the SF 1 mix's packets in flight (75 MiB peak held
# on 2 domains, bobox run --json) many times over, with room for the table store beside.
MIN_SHM_ROOM = 1 << 30
ALIGN = 4096  # blocks start on a page: pages are what a node owns


def segment_name(key: str, k: int) -> str:
    """The name of segment `k` of the arena with `key`."""
    return f"{PREFIX}{key}-pool{k}"


class SharedArena:
    """Blocks of shared, node-preferred memory for one ``NodePool`` (module doc)."""

    def __init__(self, node: int | None, chunk_bytes: int = CHUNK_BYTES):
        self.node = node
        self.chunk_bytes = chunk_bytes
        self.key = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.segments: list[Segment] = []
        self._lock = threading.Lock()  # guards segments, _carving, _at (alloc only: never a __del__)
        self._carving: tuple[Segment, int] | None = None  # the chunk blocks are carved from, and its k
        self._at = 0  # its free offset
        self.full = False  # /dev/shm had no room once: no more shared blocks (module doc)

    def _new_segment(self, nbytes: int) -> tuple[Segment, int]:
        k = len(self.segments)
        st = os.statvfs(SHM_DIR)
        if st.f_bavail * st.f_frsize < nbytes + MIN_SHM_ROOM:
            raise OSError(errno.ENOSPC, f"{SHM_DIR} keeps less than {MIN_SHM_ROOM >> 20} MiB free beside a new arena segment")
        seg = Segment.create_named(segment_name(self.key, k), nbytes, self.node)
        self.segments.append(seg)
        return seg, k

    def alloc(self, size: int) -> tuple[np.ndarray, tuple[str, int, int]] | None:
        """A block of `size` bytes: its array, and where it lives (key, segment, offset);
        None when /dev/shm has no room for it (the pool then makes a private block)."""
        if self.full:
            return None
        size = -(-size // ALIGN) * ALIGN
        try:
            return self._alloc(size)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.ENOMEM):
                self.full = True
                return None
            raise

    def _alloc(self, size: int) -> tuple[np.ndarray, tuple[str, int, int]]:
        with self._lock:
            if size > self.chunk_bytes:  # a segment of its own; carving goes on where it was
                seg, k = self._new_segment(size)
                off = 0
            else:
                if self._carving is None or self._at + size > self._carving[0].size:
                    self._carving = self._new_segment(self.chunk_bytes)
                    self._at = 0
                seg, k = self._carving
                off = self._at
                self._at += size
        reserve(seg.name, off, size)  # outside the lock: its bytes are this block's alone
        return seg.array(np.uint8, off, size), (self.key, k, off)

    def close(self) -> None:
        """Unlink every segment (the owner's, when its domain ends; idempotent)."""
        with self._lock:
            for seg in self.segments:
                seg.unlink()


class Mapped:
    """Another process's arena segments, mapped here on first use (the consumer side of
    a loan): ``get(key, k)`` gives segment `k` of arena `key` and the address where it
    starts; the segment keeps the mapping alive for whoever holds it. Mappings of an arena
    whose process has ended are dropped when a new one is mapped (their pages stay
    mapped for the views that still hold them)."""

    def __init__(self):
        self._lock = threading.Lock()  # guards _segs (the receiver thread; tests)
        self._segs: dict = {}  # (key, k) -> (Segment, base address)

    def get(self, key: str, k: int) -> tuple[Segment, int]:
        s = self._segs.get((key, k))
        if s is None:
            with self._lock:
                s = self._segs.get((key, k))
                if s is None:
                    self._forget_ended()
                    seg = Segment.attach(segment_name(key, k), readonly=True)
                    base = seg.array(np.uint8, 0, 1).ctypes.data
                    s = self._segs[(key, k)] = (seg, base)
        return s

    def _forget_ended(self) -> None:
        from bobox_sched.domains.shm import _alive, _pid_of

        for ident in [i for i in self._segs if not _alive(_pid_of(segment_name(*i)))]:
            del self._segs[ident]


__all__ = ["CHUNK_BYTES", "MIN_SHM_ROOM", "Mapped", "SharedArena", "segment_name"]
