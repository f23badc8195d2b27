"""Hardened reading of sysfs/procfs files: one file in, one value (or a clear refusal) out.

The probe reads kernel files from the live machine or from a captured tree that anyone
may have edited, so nothing read here is trusted:

* At most :data:`MAX_FILE_BYTES` of a file are read (a kernel attribute is at most one
  page; a CPU list for :data:`MAX_CPU_ID` CPUs in its worst form is about 40 KiB).
  A longer file is malformed. Only regular files are opened, without blocking, so a
  FIFO or a device in a captured tree cannot hang the probe.
* The text ends at the first NUL byte, as hwloc (C strings) reads it: some ARM kernels
  pad values with NULs (hwloc's ``128arm-2pa2n8cluster4co`` capture).
* Missing or unreadable files give ``None``. A file whose text is not of the expected
  form raises :class:`Malformed`, whose message names the file; the probe turns that
  into a note and a fallback (hwloc's way) or into a one-line ``TopologyError``.
* CPU ids are bounded by the caller's ``limit`` (one past the highest ``cpuN``
  directory) and never exceed :data:`MAX_CPU_ID`; node ids by :data:`MAX_NODE_ID`.
  Ranges are clipped before they are expanded, so ``0-999999999`` costs what ``0-15``
  costs: memory and time stay proportional to the real CPU count.

The reader counts files read, bytes read and ids produced (:attr:`SysfsReader.reads`,
``bytes_read``, ``ids``) so that tests can bound the work by counts, not by clocks.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

# A kernel attribute file is one page (4 KiB). 64 KiB leaves room for the longest CPU
# list of MAX_CPU_ID CPUs ("0,2,4,..." is ~40 KiB) and rejects anything bigger.
MAX_FILE_BYTES = 64 * 1024
# /proc/mounts grows with the number of mounts (container hosts have thousands).
MAX_MOUNTS_BYTES = 1024 * 1024

# Largest CPU id we accept, exclusive: Linux's largest NR_CPUS (x86-64
# NR_CPUS_RANGE_END = 8192, arch/x86/Kconfig) times two for headroom. Ids at or beyond
# it cannot be real CPUs and are dropped with a note.
MAX_CPU_ID = 16384
# Largest NUMA node id, exclusive: MAX_NUMNODES = 1 << NODES_SHIFT, and NODES_SHIFT is
# at most 10 on x86-64 and arm64 (mm/Kconfig, arch/*/Kconfig).
MAX_NODE_ID = 1024

_CPULIST_PART = re.compile(r"(\d{1,10})(?:-(\d{1,10}))?")
_MASK_WORD = re.compile(r"[0-9a-fA-F]{1,8}")
_INT = re.compile(r"-?\d{1,18}")
_SIZE = re.compile(r"(\d{1,15})\s*([KMG]?)i?B?")


class Malformed(ValueError):
    """A file whose content is not of the expected form. ``str()`` names the file."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def _show(text: str, n: int = 24) -> str:
    """A short, printable quote of bad input for a one-line message."""
    t = text if len(text) <= n else text[:n] + "..."
    return ascii(t)


# ---------------------------------------------------------------------------------
# pure parsers: text in, value out, ValueError (without the file name) on bad input

def parse_cpulist(text: str, limit: int = MAX_CPU_ID) -> tuple[list[int], int]:
    """Parse a kernel CPU list such as ``0-3,8,10-11``.

    Returns ``(ids below limit, sorted; count of ids at or above limit)``. The count is
    computed, not enumerated. An empty text is the empty set (a memory-only node's
    ``cpulist``). Raises ``ValueError`` on anything else that is not a CPU list."""
    t = text.strip()
    if not t:
        return [], 0
    spans: list[tuple[int, int]] = []
    beyond = 0
    for part in t.split(","):
        m = _CPULIST_PART.fullmatch(part.strip())
        if not m:
            raise ValueError(f"not a CPU list: {_show(part.strip() or t)}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"backwards range in CPU list: {_show(part.strip())}")
        if hi >= limit:
            beyond += hi - max(lo, limit) + 1
            hi = limit - 1
        if lo <= hi:
            spans.append((lo, hi))
    # Merge the clipped spans before expanding: the expansion is at most `limit` ids,
    # whatever the number of (overlapping) ranges in the file.
    spans.sort()
    out: list[int] = []
    end = -1
    for lo, hi in spans:
        lo = max(lo, end + 1)
        if lo <= hi:
            out.extend(range(lo, hi + 1))
            end = hi
    return out, beyond


def parse_cpumask(text: str, limit: int = MAX_CPU_ID) -> tuple[list[int], int]:
    """Parse a kernel hex CPU mask such as ``00000000,000000ff`` (32-bit words, the
    most significant first). Returns ``(ids below limit; count of set bits at or above
    limit)``. Raises ``ValueError`` if the text is not such a mask."""
    t = text.strip()
    words = t.split(",")
    if not t:
        raise ValueError("empty CPU mask")
    for w in words:
        if not _MASK_WORD.fullmatch(w):
            raise ValueError(f"not a hex CPU mask: {_show(w or t)}")
    out: list[int] = []
    beyond = 0
    for i, w in enumerate(reversed(words)):
        v = int(w, 16)
        if not v:
            continue
        base = 32 * i
        if base >= limit:
            beyond += v.bit_count()
            continue
        for b in range(32):
            if v >> b & 1:
                if base + b < limit:
                    out.append(base + b)
                else:
                    beyond += 1
    return out, beyond


def parse_int(text: str) -> int:
    t = text.strip()
    if not _INT.fullmatch(t):
        raise ValueError(f"not an integer: {_show(t)}")
    return int(t)


def parse_size(text: str) -> int | None:
    """``512K``/``1024 KiB``/``8M`` -> bytes; ``None`` if it is not such a size."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        return None
    mult = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)]
    return int(m.group(1)) * mult


_CACHE_SIZE = re.compile(r"(\d{1,12})K?")


def parse_cache_size(text: str) -> int:
    """A cache ``size`` file: KiB with a ``K`` suffix (the kernel prints ``%uK``; hwloc
    reads the number as KiB with or without it). Raises ``ValueError`` otherwise, or
    for 0."""
    t = text.strip()
    m = _CACHE_SIZE.fullmatch(t)
    if not m or not int(m.group(1)):
        raise ValueError(f"not a cache size: {_show(t)}")
    return int(m.group(1)) * 1024


def parse_distances(text: str, count: int) -> list[int]:
    """A node's ``distance`` row: exactly `count` decimal values in 1..255 (ACPI SLIT
    and device-tree distances are bytes; 255 means unreachable)."""
    parts = text.split()
    if len(parts) != count:
        if len(parts) > count:
            raise ValueError(f"{len(parts)} values for {count} NUMA nodes")
        raise ValueError(f"{len(parts)} values for {count} NUMA nodes: {_show(text.strip())}")
    out = []
    for p in parts:
        if not p.isdigit() or len(p) > 3 or not 1 <= int(p) <= 255:
            raise ValueError(f"not a NUMA distance (1..255): {_show(p)}")
        out.append(int(p))
    return out


# ---------------------------------------------------------------------------------

class SysfsReader:
    """Reads files under a root (``/`` or a captured tree) with the rules above.

    Not thread-safe: one probe owns one reader."""

    def __init__(self, root: Path):
        self.root = root
        # file names are built as strings: a probe of a 256-CPU tree opens thousands of
        # files, and pathlib's joins and str() took about a third of a probe (cProfile of
        # tests/test_topology_property.py, 2026-11-28)
        self._base = os.fspath(root).rstrip("/")
        self._notes: list[str] = []
        # malformed files, grouped by (file name, problem, consequence): a kernel quirk
        # repeated in every cpuN directory is one note, not hundreds
        self._bad: dict[tuple[str, str, str], list] = {}
        self.reads = 0  # files opened and read
        self.bytes_read = 0
        self.ids = 0  # CPU/node ids produced by the parsers

    # -- raw access ---------------------------------------------------------------
    def name(self, rel: str) -> str:
        """The file's name as messages print it (and as it is opened)."""
        return f"{self._base}/{rel.lstrip('/')}"

    def note(self, msg: str) -> None:
        if msg not in self._notes:
            self._notes.append(msg)

    def bad(self, e: Malformed, consequence: str = "ignored") -> None:
        """Note a malformed file and what was done instead."""
        key = (os.path.basename(e.path), e.why, consequence)
        if key in self._bad:
            self._bad[key][1] += 1
        else:
            self._bad[key] = [e.path, 1]

    @property
    def notes(self) -> list[str]:
        out = []
        for (base, why, consequence), (first, n) in self._bad.items():
            more = f"; the same in {n - 1} more {base} file{'s' if n > 2 else ''}" if n > 1 else ""
            out.append(f"{first}: {why} ({consequence}{more})")
        return out + self._notes

    def exists(self, rel: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(self.name(rel)).st_mode)
        except (OSError, ValueError):
            return False

    def text(self, rel: str, max_bytes: int = MAX_FILE_BYTES, strict: bool = True) -> str | None:
        """The file's text up to its first NUL, or None if it is missing, unreadable or
        not a regular file. With `strict`, a file longer than `max_bytes` is
        :class:`Malformed`; otherwise only its first `max_bytes` are returned."""
        p = self.name(rel)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except (OSError, ValueError):
            return None
        chunks = []
        size = 0
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            while size <= max_bytes:
                b = os.read(fd, max_bytes + 1 - size)
                if not b:
                    break
                chunks.append(b)
                size += len(b)
        except OSError:
            return None
        finally:
            os.close(fd)
        self.reads += 1
        self.bytes_read += size
        data = b"".join(chunks)
        if size > max_bytes:
            if strict:
                raise Malformed(p, f"longer than {max_bytes // 1024} KiB")
            data = data[:max_bytes]
        return data.split(b"\0", 1)[0].decode("ascii", errors="replace")

    def text_or_note(self, rel: str, consequence: str = "ignored") -> str | None:
        """:meth:`text`, with a file over the size cap noted and read as absent."""
        try:
            return self.text(rel)
        except Malformed as e:
            self.bad(e, consequence)
            return None

    def listdir(self, rel: str) -> list[str]:
        try:
            return os.listdir(self.name(rel))
        except (OSError, ValueError):
            return []

    def numbered(self, rel: str, prefix: str, cap: int, what: str) -> list[int]:
        """Sorted N of the ``<prefix>N`` entries of a directory, below `cap`."""
        pat = re.compile(re.escape(prefix) + r"(\d{1,9})")
        found = set()
        over = []
        for n in self.listdir(rel):
            m = pat.fullmatch(n)
            if m:
                v = int(m.group(1))
                (found.add(v) if v < cap else over.append(v))
        if over:
            self.note(f"{self.name(rel)}: {what} ids at or beyond the limit of {cap} ignored: "
                      f"{','.join(map(str, sorted(over)[:5]))}{'...' if len(over) > 5 else ''}")
        return sorted(found)

    # -- typed access (raise Malformed) ---------------------------------------------
    def cpus(self, rel: str, limit: int, mask: bool = False, what: str = "CPU") -> list[int] | None:
        """Ids from a CPU (or node) list or hex mask file; None if the file is absent."""
        t = self.text(rel)
        if t is None:
            return None
        try:
            ids, beyond = (parse_cpumask if mask else parse_cpulist)(t, limit)
        except ValueError as e:
            raise Malformed(self.name(rel), str(e)) from None
        cap = MAX_NODE_ID if what == "node" else MAX_CPU_ID
        if beyond and (limit >= cap or _max_id(t, mask) >= cap):
            # Ids between the real count and the cap may be absent CPUs (possible but
            # not present); beyond the cap they cannot exist at all.
            self.note(f"{self.name(rel)}: {what} ids beyond {cap - 1} ignored")
        self.ids += len(ids)
        return ids

    def integer(self, rel: str) -> int | None:
        """An integer file's value; None if absent or empty (hwloc-gather-topology
        leaves attributes it could not read empty, and hwloc ignores them)."""
        t = self.text(rel)
        if t is None or not t.strip():
            return None
        try:
            return parse_int(t)
        except ValueError as e:
            raise Malformed(self.name(rel), str(e)) from None

    # -- typed access with hwloc's fallbacks (note, never raise) ------------------------
    def first_cpus(self, candidates, limit: int, what: str = "CPU", must_hold: int | None = None,
                   fallback: str = "ignored") -> list[int] | None:
        """The first readable, well-formed file of `candidates` (``(rel, is_mask)``
        pairs); a malformed one gets a note and the next is tried. None if none is.

        With `must_hold`, a set without that CPU is malformed too (a CPU always shares
        its own caches and is its own thread sibling; the kernel never says otherwise,
        but ia64 kernels leave some cache maps empty)."""
        for rel, mask in candidates:
            try:
                v = self.cpus(rel, limit, mask=mask, what=what)
                if v is not None and must_hold is not None and must_hold not in v:
                    raise Malformed(self.name(rel), f"does not list CPU {must_hold}" if v else "lists no CPU")
            except Malformed as e:
                self.bad(e, fallback)
                continue
            if v is not None:
                return v
        return None

    def int_or(self, rel: str, default, valid=None):
        """An integer file's value, `default` if absent; malformed or invalid -> note."""
        try:
            v = self.integer(rel)
        except Malformed as e:
            self.bad(e)
            return default
        if v is None:
            return default
        if valid is not None and not valid(v):
            self.bad(Malformed(self.name(rel), f"value {v} out of range"))
            return default
        return v


def _max_id(text: str, mask: bool) -> int:
    """The largest id a well-formed list/mask text names (cheap: no expansion)."""
    if mask:
        words = text.strip().split(",")
        for i, w in enumerate(words):
            v = int(w, 16)
            if v:
                return 32 * (len(words) - 1 - i) + v.bit_length() - 1
        return -1
    return max((int(x) for x in re.findall(r"\d{1,10}", text)), default=-1)
