"""The CPUs and memory nodes a cgroup cpuset allows (containers, batch jobs).

Follows hwloc's Linux backend (``hwloc_linux__get_allowed_resources``), under the
probe's root so that captured trees and the live machine are read alike:

1. Find the cpuset hierarchy: the standard mount points first
   (``/sys/fs/cgroup/cpuset.cpus.effective`` = cgroup v2,
   ``/sys/fs/cgroup/cpuset/cpuset.cpus`` = v1, ``/dev/cpuset/cpus`` = the legacy cpuset
   file system), then ``/proc/mounts``: ``cgroup2`` with ``cpuset`` in its
   ``cgroup.controllers``, ``cpuset``, or ``cgroup`` with the ``cpuset`` option (with
   ``noprefix`` its files have no ``cpuset.`` prefix).
2. The process's cpuset: ``/proc/self/cpuset``, else the ``:cpuset:`` (v1) or ``::``
   (v2) line of ``/proc/self/cgroup``.
3. Read ``<mount><cpuset>/cpuset.{cpus,mems}.effective`` (v2), ``cpuset.{cpus,mems}``
   (v1) or ``{cpus,mems}`` (legacy).

One addition to hwloc: when that file does not exist, the mount point's own file is
read. In a container without a cgroup namespace, ``/proc/self/cgroup`` names the
container's cgroup on the host (``/docker/<id>``) while the container's
``/sys/fs/cgroup/cpuset`` *is* that cgroup; hwloc then applies no restriction. The
root of a hierarchy allows a superset of every cgroup in it, so this fallback can
never hide a CPU that the process may use. On the live machine,
``Mems_allowed_list`` of ``/proc/self/status`` (the kernel's own answer) narrows the
memory nodes further; CPUs come from the affinity mask (see ``probe``).

A file that cannot be read means no restriction, as in hwloc; one that is malformed
also, with a note naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topology.sysfs import MAX_MOUNTS_BYTES, MAX_NODE_ID, Malformed, SysfsReader, parse_cpulist

V2, V1, LEGACY = "cgroup2", "cgroup1", "cpuset"


@dataclass(frozen=True)
class Allowed:
    """What the cpuset allows; ``None`` = no restriction found."""

    cgroup: str | None = None  # the cpuset's name, e.g. "/docker/abc" ("/" = the root)
    cpus: frozenset[int] | None = None
    cpus_file: str | None = None  # the file `cpus` came from
    mems: frozenset[int] | None = None
    mems_file: str | None = None


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as \ooo (getmntent decodes)
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def find_mount(r: SysfsReader) -> tuple[str, str] | None:
    """``(kind, mount point)`` of the cpuset hierarchy, or None."""
    if r.exists("sys/fs/cgroup/cpuset.cpus.effective"):
        return V2, "/sys/fs/cgroup"
    if r.exists("sys/fs/cgroup/cpuset/cpuset.cpus"):
        return V1, "/sys/fs/cgroup/cpuset"
    if r.exists("dev/cpuset/cpus"):
        return LEGACY, "/dev/cpuset"
    try:
        mounts = r.text("proc/mounts", max_bytes=MAX_MOUNTS_BYTES, strict=False)
    except Malformed:  # pragma: no cover - strict=False never raises
        mounts = None
    for line in (mounts or "").splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        mnt, fstype, opts = _unescape(f[1]), f[2], f[3].split(",")
        if not mnt.startswith("/"):
            continue
        if fstype == "cgroup2":
            ctrls = r.text(f"{mnt}/cgroup.controllers", strict=False) or ""
            if "cpuset" in ctrls.split():
                return V2, mnt
        elif fstype == "cpuset":
            return LEGACY, mnt
        elif fstype == "cgroup" and "cpuset" in opts:
            return (LEGACY if "noprefix" in opts else V1), mnt
    return None


def _valid_name(name: str) -> bool:
    return name.startswith("/") and ".." not in name.split("/") and len(name) < 4096


def cpuset_name(r: SysfsReader) -> str | None:
    """The process's cpuset (``/proc/self/cpuset``, else ``/proc/self/cgroup``)."""
    t = r.text("proc/self/cpuset", strict=False)
    if t is not None:
        name = t.split("\n", 1)[0].strip()
        if _valid_name(name):
            return name
        r.bad(Malformed(r.name("proc/self/cpuset"), f"not a cpuset name: {ascii(name[:40])}"))
    t = r.text("proc/self/cgroup", strict=False)
    for line in (t or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        if "cpuset" in ctrls.split(",") or ctrls == "":
            path = path.strip()
            if _valid_name(path):
                return path
    return None


def _read_set(r: SysfsReader, candidates: list[str], limit: int, what: str):
    """(ids, file) from the first existing candidate; a malformed one -> note, (None, None)."""
    for rel in candidates:
        if not r.exists(rel):
            continue
        try:
            ids = r.cpus(rel, limit, what=what)
        except Malformed as e:
            r.bad(e, "cgroup restriction ignored")
            return None, None
        if ids is not None:
            return frozenset(ids), r.name(rel)
    return None, None


def allowed(r: SysfsReader, cpu_limit: int, node_limit: int = MAX_NODE_ID, live: bool = False) -> Allowed:
    """The CPUs and memory nodes that the process's cpuset allows, under `r`'s root."""
    found = find_mount(r)
    name = cpuset_name(r) if found else None
    cpus = mems = cpus_file = mems_file = None
    if found and name:
        kind, mnt = found
        here = f"{mnt}{'' if name == '/' else name}"
        fmt = {V2: "cpuset.{}.effective", V1: "cpuset.{}", LEGACY: "{}"}[kind]
        cands = [here] if here == mnt else [here, mnt]
        cpus, cpus_file = _read_set(r, [f"{d}/{fmt.format('cpus')}" for d in cands], cpu_limit, "CPU")
        mems, mems_file = _read_set(r, [f"{d}/{fmt.format('mems')}" for d in cands], node_limit, "node")
    if live:
        # The kernel's own list of the memory nodes this task may allocate from.
        for line in (r.text("proc/self/status", strict=False) or "").splitlines():
            if line.startswith("Mems_allowed_list:"):
                try:
                    ids, _ = parse_cpulist(line.split(":", 1)[1], node_limit)
                except ValueError:
                    break
                status = frozenset(ids)
                if status and (mems is None or not mems <= status):
                    mems = status if mems is None else mems & status
                    src = r.name("proc/self/status")
                    mems_file = f"{mems_file} and {src}" if mems_file else src
                break
    return Allowed(name, cpus, cpus_file, mems, mems_file)
