"""Named shared-memory segments, the memory that domains (interpreters of one Scheduler)
share: rings of packet descriptors (``ring.py``), and later the node-local packet pools
and read-only tables.

A segment is a file in ``/dev/shm`` (tmpfs: pages of memory, no disk), mapped with
``mmap``. Its name says who made it: ``bobox-<pid>-<token>-<what>``, `pid` being the
creating process. ``multiprocessing.shared_memory`` is not used: before 3.13 every
process that *attaches* a segment registers it with its resource tracker, which unlinks
it when that process exits, under the creator's feet (gh-82300); and its tracker warns
about segments it did not unlink itself.

Lifetime: the creator unlinks (``Segment.unlink``; the name goes, the pages stay mapped
by whoever has them until they unmap). A process that dies without unlinking leaves its
segments behind; ``sweep_stale()`` removes the segments of processes that no longer
exist, and the next Scheduler calls it before it makes its own. A segment's pages come
from the node of the thread that first touches them (first touch), so a domain
touches its node's segments itself.

Who touches what: the bytes of a segment belong to the protocol of what lives in it
(a ring's module doc says its own). This module only makes, maps and removes them.
"""

from __future__ import annotations

import mmap
import os
import secrets

import numpy as np

SHM_DIR = "/dev/shm"
PREFIX = "bobox-"


def _path(name: str) -> str:
    if not name.startswith(PREFIX) or "/" in name:
        raise ValueError(f"not a bobox shared-memory segment name: {name!r}")
    return os.path.join(SHM_DIR, name)


def new_name(what: str) -> str:
    """A fresh segment name of this process (`what`: letters, digits, '-' or '_')."""
    if not what or not all(c.isalnum() or c in "-_" for c in what):
        raise ValueError(f"segment label must be letters, digits, '-' or '_', got {what!r}")
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{what}"


class Segment:
    """One mapped segment. ``create`` makes it (this process is its owner and unlinks
    it), ``attach`` maps an existing one by name."""

    __slots__ = ("name", "size", "mm", "owner")

    def __init__(self, name: str, size: int, mm: mmap.mmap, owner: bool):
        self.name = name
        self.size = size
        self.mm = mm
        self.owner = owner

    @classmethod
    def create(cls, nbytes: int, what: str, node: int | None = None) -> "Segment":
        """A new segment of `nbytes` (zero-filled, no page touched yet). `node`: its pages
        come from that NUMA node's memory when first touched, whoever touches them
        (``prefer_node``)."""
        return cls.create_named(new_name(what), nbytes, node)

    @classmethod
    def create_named(cls, name: str, nbytes: int, node: int | None = None) -> "Segment":
        """``create`` under a given name (``bobox-<this pid>-...``: ``sweep_stale`` and
        ``unlink_of`` find it by that pid)."""
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"a segment needs a positive size in bytes, got {nbytes!r}")
        if _pid_of(name) != os.getpid():
            raise ValueError(f"segment {name!r} is not named after this process ({os.getpid()})")
        path = _path(name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            mm = mmap.mmap(fd, nbytes)
            if node is not None:
                prefer_node(mm, nbytes, node)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(name, nbytes, mm, True)

    @classmethod
    def attach(cls, name: str, readonly: bool = False) -> "Segment":
        fd = os.open(_path(name), os.O_RDONLY if readonly else os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        return cls(name, size, mm, False)

    def array(self, dtype, offset: int = 0, count: int = -1) -> np.ndarray:
        """A numpy view of the segment's bytes from `offset` (`count` items; -1: to the end)."""
        return np.frombuffer(self.mm, dtype=dtype, count=count, offset=offset)

    def unlink(self) -> None:
        """Remove the name (the owner's job; idempotent). Mappings stay valid."""
        unlink(self.name)

    def close(self) -> bool:
        """Unmap, if no numpy view of it is alive (else the mapping goes with the last
        view: False)."""
        try:
            self.mm.close()
        except BufferError:
            return False
        return True


_MPOL_PREFERRED = 1
_SYS_MBIND = {"x86_64": 237, "aarch64": 235}


def prefer_node(mm: mmap.mmap, nbytes: int, node: int) -> bool:
    """``mbind(MPOL_PREFERRED, {node})`` over a fresh shared mapping: on tmpfs the policy
    belongs to the file itself (the kernel's shared policy), so its pages come from
    `node` when first touched, by this process or any other that maps it. Preferred,
    not bound: a full node spills over instead of failing. False where the kernel or
    the platform says no (one node, no NUMA support): the pages then follow first touch."""
    import ctypes
    import platform

    nr = _SYS_MBIND.get(platform.machine())
    if nr is None or not 0 <= node < 64:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    view = (ctypes.c_char * nbytes).from_buffer(mm)
    try:
        mask = ctypes.c_ulong(1 << node)
        rc = libc.syscall(nr, ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_ulong(nbytes), _MPOL_PREFERRED,
                          ctypes.byref(mask), ctypes.c_ulong(64), 0)
    finally:
        del view  # the export, so that the mapping can be closed later
    return rc == 0


def reserve(name: str, offset: int, nbytes: int) -> None:
    """Allocate the pages of bytes ``offset .. offset + nbytes`` of segment `name` now
    (``posix_fallocate``; by the file's memory policy, ``prefer_node``): a full /dev/shm
    then raises OSError (ENOSPC) here, instead of a SIGBUS when the page is first
    touched."""
    fd = os.open(_path(name), os.O_RDWR)
    try:
        os.posix_fallocate(fd, offset, nbytes)
    finally:
        os.close(fd)


def unlink(name: str) -> bool:
    """Remove segment `name` (by name: no need to map it). False if it was gone already.
    Mappings of it stay valid."""
    try:
        os.unlink(_path(name))
    except FileNotFoundError:
        return False
    return True


def _pid_of(name: str) -> int | None:
    rest = name[len(PREFIX):]
    head = rest.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def ours(pid: int | None = None) -> list[str]:
    """Names of the segments that process `pid` (default: this one) made and has not
    unlinked."""
    pid = os.getpid() if pid is None else pid
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(PREFIX) and _pid_of(n) == pid)


def unlink_of(pid: int | None, suffix: str = "") -> list[str]:
    """Unlink every segment process `pid` made (it has exited: a domain that died or
    ended) whose name ends with `suffix`; their names. Other processes' mappings of
    them stay valid."""
    if pid is None:
        return []
    return [n for n in ours(pid) if n.endswith(suffix) and unlink(n)]


def sweep_stale() -> list[str]:
    """Unlink the segments whose creating process no longer exists; their names."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    gone = []
    for n in names:
        if not n.startswith(PREFIX):
            continue
        pid = _pid_of(n)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        if unlink(n):
            gone.append(n)
    return gone


__all__ = ["PREFIX", "SHM_DIR", "Segment", "new_name", "ours", "prefer_node", "reserve", "sweep_stale", "unlink", "unlink_of"]
