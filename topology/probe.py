"""Read the machine's topology from Linux sysfs/procfs under a root directory.

The probe reads the same files hwloc's Linux backend reads, so that the trees captured
by hwloc's test suite (a folder holding ``sys/`` and ``proc/``) can be read exactly like
the live machine. Only plain file reads happen here; nothing is pinned or allocated.
Every file goes through :mod:`.sysfs` (bounded reads, values cut at the first NUL as C
reads them, strict parsers, CPU ids bounded by the ``cpuN`` directories).

Sources, as in hwloc: a node's CPUs, a cache's sharing and a CPU's thread siblings come
from the hex maps (``cpumap``, ``shared_cpu_map``, ``thread_siblings``/``core_cpus``);
the ``*list`` files are the fallback (they disagree with the maps in some captures, and
the maps are right).

Degradation rules (kept in step with hwloc; each one leaves a note in
:attr:`Topology.notes`):

* a malformed file -> the next source or hwloc's default (offline flags per CPU, the
  core's CPUs for a cache, a core of its own, 10 local / 20 remote when any distance
  row is unusable), with a note naming the file; a :class:`TopologyError` whose
  one-line message names the file when nothing usable is left (no CPU, no node);
* no ``sys/devices/system/node`` directory -> one node holding every CPU;
* several nodes that all claim the same CPUs (hwloc's "buggy NUMA") -> merged into
  one node (its memory is the sum, since the memory is real even if the CPU maps lie);
* no cache information -> on the live machine, py-cpuinfo's L2 size, else unknown;
* offline CPUs are left out; on the live machine the CPUs outside the process's
  affinity mask are left out too;
* the cgroup cpuset (:mod:`.cgroup`; v1, v2 or the legacy cpuset file system) removes
  the CPUs and memory nodes it does not allow, for captured roots and the live machine
  (containers, batch jobs), as hwloc does;
* NUMA nodes of NVIDIA GPU memory are left out (hwloc hides them on POWER);
* CPUs that no usable node holds (their node is offline, absent or not allowed) are
  attached to the nearest allowed node by distance (hwloc attaches them to the machine:
  the scheduler needs a node per CPU, and the nearest node is where the kernel takes
  their memory from).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from topology import cgroup as _cgroup
from topology import sysfs as _sysfs
from topology.errors import TopologyError

# The paper (seed 003, section 5.2) sizes packets at half the L2 cache. When no L2 size
# can be found at all we fall back to the paper machine's value: a 256 KiB L2 (Xeon E7540,
# section 6), i.e. 128 KiB packets.
FALLBACK_L2_BYTES = 256 * 1024


@dataclass(frozen=True)
class Cache:
    """One cache instance: level 1-4, type Data/Instruction/Unified, the CPUs sharing it."""

    level: int
    type: str
    size_bytes: int | None
    line_size: int | None
    ways: int | None
    cpus: tuple[int, ...]

    @property
    def name(self) -> str:
        suffix = {"Data": "d", "Instruction": "i"}.get(self.type, "")
        return f"L{self.level}{suffix}"


@dataclass(frozen=True)
class CPU:
    """A processing unit (hardware thread) by OS index, with its core, package and node."""

    os_index: int
    core: int
    package: int
    node: int
    siblings: tuple[int, ...] = ()  # hardware threads of the same core, itself included


@dataclass(frozen=True)
class Node:
    """A NUMA node: its OS index, CPUs, memory and distances (in ``Topology.nodes`` order)."""

    os_index: int
    cpus: tuple[int, ...]
    memory_bytes: int | None
    free_bytes: int | None
    distances: tuple[int, ...]


@dataclass(frozen=True)
class Topology:
    root: str
    live: bool
    nodes: tuple[Node, ...]
    cpus: tuple[CPU, ...]
    caches: tuple[Cache, ...]
    captured_cpu_model: str | None
    packet_bytes_override: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def cpu_model(self) -> str | None:
        """py-cpuinfo's brand string on the live machine, procfs for captured trees.

        Lazy because py-cpuinfo takes about a second (it probes in a subprocess)."""
        if self.live:
            return _live_cpu_model() or self.captured_cpu_model
        return self.captured_cpu_model

    # -- lookups -------------------------------------------------------------------
    def node(self, os_index: int) -> Node:
        for n in self.nodes:
            if n.os_index == os_index:
                return n
        known = ", ".join(str(n.os_index) for n in self.nodes)
        raise TopologyError(f"unknown NUMA node {os_index} (this machine has: {known})")

    def cpu(self, os_index: int) -> CPU:
        for c in self.cpus:
            if c.os_index == os_index:
                return c
        raise TopologyError(f"unknown CPU {os_index}")

    @property
    def node_ids(self) -> list[int]:
        return [n.os_index for n in self.nodes]

    @property
    def cpu_nodes(self) -> list[Node]:
        """Nodes that have at least one usable CPU (memory-only nodes left out)."""
        return [n for n in self.nodes if n.cpus]

    def distance(self, a: int, b: int) -> int:
        ia = self.node_ids.index(a)
        ib = self.node_ids.index(b)
        return self.nodes[ia].distances[ib]

    def cache_of(self, cpu: int, level: int, types=("Unified", "Data")) -> Cache | None:
        for c in self.caches:
            if c.level == level and c.type in types and cpu in c.cpus:
                return c
        return None

    def l2_bytes(self, cpu: int) -> int | None:
        c = self.cache_of(cpu, 2)
        return c.size_bytes if c else None

    def cache_bytes(self, level: int, node: int | None = None) -> int | None:
        """Smallest size of a level-`level` data/unified cache seen by the node's CPUs."""
        cpus = self.node(node).cpus if node is not None else [c.os_index for c in self.cpus]
        sizes = [s for s in (getattr(self.cache_of(c, level), "size_bytes", None) for c in cpus) if s]
        return min(sizes) if sizes else None

    # -- derived values --------------------------------------------------------------
    def node_packet_bytes(self, node: int) -> int:
        """Half the L2 of the node's CPUs (the smallest L2 if they differ, e.g. hybrid
        parts), so that a packet fits the cache of any CPU of the node."""
        if self.packet_bytes_override:
            return self.packet_bytes_override
        l2 = self.cache_bytes(2, node) or FALLBACK_L2_BYTES
        return l2 // 2

    @property
    def packet_bytes(self) -> int:
        if self.packet_bytes_override:
            return self.packet_bytes_override
        nodes = self.cpu_nodes or self.nodes
        return min(self.node_packet_bytes(n.os_index) for n in nodes)

    def restrict(self, nodes=None, cpus=None) -> "Topology":
        """The same machine seen through fewer NUMA nodes and/or CPUs (OS indexes):
        e.g. one node for a locality experiment, one CPU for a 1-worker baseline."""
        keep_nodes = [n for n in self.nodes if nodes is None or n.os_index in set(nodes)]
        if not keep_nodes:
            raise TopologyError(f"no NUMA node left after restricting to {nodes}")
        cpu_ok = {c.os_index for c in self.cpus if cpus is None or c.os_index in set(cpus)}
        idx = [self.nodes.index(n) for n in keep_nodes]
        new_nodes = tuple(
            replace(n, cpus=tuple(c for c in n.cpus if c in cpu_ok), distances=tuple(n.distances[i] for i in idx))
            for n in keep_nodes
        )
        kept = {c for n in new_nodes for c in n.cpus}
        if not kept:
            raise TopologyError(f"no CPU left after restricting to nodes {nodes}, CPUs {cpus}")
        return replace(
            self,
            nodes=new_nodes,
            cpus=tuple(c for c in self.cpus if c.os_index in kept),
            caches=tuple(k for k in self.caches if set(k.cpus) & kept),
        )

    def with_packet_bytes(self, packet_bytes: int | None) -> "Topology":
        if packet_bytes is not None and packet_bytes <= 0:
            raise TopologyError(f"packet size must be positive, got {packet_bytes}")
        return replace(self, packet_bytes_override=packet_bytes)

    def to_json(self) -> dict:
        return {
            "root": self.root,
            "live": self.live,
            "cpu_model": self.cpu_model,
            "nodes": [
                {
                    "os_index": n.os_index,
                    "cpus": list(n.cpus),
                    "memory_bytes": n.memory_bytes,
                    "free_bytes": n.free_bytes,
                    "distances": list(n.distances),
                    "packet_bytes": self.node_packet_bytes(n.os_index),
                }
                for n in self.nodes
            ],
            "cpus": [
                {"os_index": c.os_index, "core": c.core, "package": c.package, "node": c.node}
                for c in self.cpus
            ],
            "caches": [
                {
                    "level": c.level,
                    "type": c.type,
                    "size_bytes": c.size_bytes,
                    "line_size": c.line_size,
                    "ways": c.ways,
                    "cpus": list(c.cpus),
                }
                for c in self.caches
            ],
            "packet_bytes": self.packet_bytes,
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------
# parsing helpers (kept for callers; the hardened versions live in .sysfs)

def parse_cpulist(text: str) -> list[int]:
    """Parse a kernel CPU list such as ``0-3,8,10-11`` (empty string -> []).
    Ids at or beyond ``sysfs.MAX_CPU_ID`` are dropped; raises ``ValueError`` on garbage."""
    return _sysfs.parse_cpulist(text.split("\0", 1)[0])[0]


def parse_cpumask(text: str) -> list[int]:
    """Parse a kernel hex CPU mask such as ``00000000,000000ff`` (words high first)."""
    return _sysfs.parse_cpumask(text.split("\0", 1)[0])[0]


parse_size = _sysfs.parse_size

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"
LIST, MASK = False, True


# ---------------------------------------------------------------------------------

def probe(root: str | os.PathLike = "/", packet_bytes: int | None = None) -> Topology:
    """Probe the topology under `root` ("/" = the live machine).

    Malformed files give a note and hwloc's fallback (see the module doc), or a
    :class:`TopologyError` whose one-line message names the file when nothing usable
    is left (no CPU, no NUMA node)."""
    rootp = Path(root)
    if not rootp.exists():
        raise TopologyError(f"topology root does not exist: {rootp}")
    if not rootp.is_dir():
        raise TopologyError(f"topology root is not a directory: {rootp}")
    if not (rootp / "sys").is_dir():
        raise TopologyError(f"topology root has no sys/ directory: {rootp}")
    live = rootp.resolve() == Path("/")
    r = _sysfs.SysfsReader(rootp)
    try:
        return _probe(r, rootp, live, packet_bytes)
    except _sysfs.Malformed as e:  # a file that nothing can replace
        raise TopologyError(str(e)) from None


def _probe(r: _sysfs.SysfsReader, rootp: Path, live: bool, packet_bytes: int | None) -> Topology:
    notes: list[str] = []  # the reader's notes on malformed files are put first at the end

    # -- CPUs: present (cpuN directories), online, allowed ----------------------------
    present = r.numbered(CPU_DIR, "cpu", _sysfs.MAX_CPU_ID, "CPU")
    # Every CPU id we keep must name a cpuN directory, so ids beyond the highest one are
    # dropped while parsing: memory and time stay proportional to the real CPU count.
    cpu_limit = max(present) + 1 if present else _sysfs.MAX_CPU_ID
    online_file = f"{CPU_DIR}/online"
    online_err = None
    try:
        online = r.cpus(online_file, cpu_limit)
        if online is not None and not online:
            raise _sysfs.Malformed(r.name(online_file), "lists no CPU")
    except _sysfs.Malformed as e:
        r.bad(e, "per-CPU online flags used")
        online, online_err = None, e
    cpus_ids = []
    for c in present:
        if online is not None:
            if c not in online:
                continue
        # hwloc reads the per-CPU flag only when the online list is unavailable
        elif r.int_or(f"{CPU_DIR}/cpu{c}/online", 1, valid=lambda v: v in (0, 1)) == 0:
            continue
        cpus_ids.append(c)
    if not present and online:
        # Some captures have no cpuN directories; the online list is all there is.
        cpus_ids = sorted(online)
    offline = sorted(set(present) - set(cpus_ids))
    if offline and cpus_ids:
        notes.append(f"offline CPUs left out: {_fmt_list(offline)}")
    if not cpus_ids:
        raise TopologyError(str(online_err) if online_err else f"no usable CPU found under {rootp / CPU_DIR}")
    if live:
        aff = os.sched_getaffinity(0)
        outside = sorted(set(cpus_ids) - aff)
        if outside:
            notes.append(f"restricted to this process's affinity mask; CPUs left out: {_fmt_list(outside)}")
        cpus_ids = [c for c in cpus_ids if c in aff]

    node_ids = r.numbered(NODE_DIR, "node", _sysfs.MAX_NODE_ID, "NUMA node")
    node_limit = max(node_ids) + 1 if node_ids else _sysfs.MAX_NODE_ID
    allowed = _cgroup.allowed(r, cpu_limit, node_limit, live=live)
    if allowed.cpus is not None:
        outside = sorted(set(cpus_ids) - allowed.cpus)
        if outside:
            notes.append(f"cgroup cpuset {allowed.cgroup} ({allowed.cpus_file}) allows CPUs "
                         f"{_fmt_list(sorted(allowed.cpus))}; left out: {_fmt_list(outside)}")
            cpus_ids = [c for c in cpus_ids if c in allowed.cpus]
        if not cpus_ids:
            source = r.name(online_file) if online is not None else f"the cpuN/online flags under {rootp / CPU_DIR}"
            raise TopologyError(f"{allowed.cpus_file}: the cgroup cpuset {allowed.cgroup} allows none of "
                                f"the usable CPUs ({_fmt_list(sorted(outside))}, online per {source})")
    if not cpus_ids:
        raise TopologyError(f"no usable CPU found under {rootp / CPU_DIR}")
    cpuset = set(cpus_ids)

    # -- NUMA nodes ----------------------------------------------------------------------
    # Like hwloc, a node's CPUs come from its hex `cpumap`; `cpulist` is the fallback
    # (the two disagree in some captures, e.g. offline-cpu0-node0).
    raw_nodes: list[list] = []  # [os_index, cpus, total, free]
    for n in node_ids:
        base = f"{NODE_DIR}/node{n}"
        ncpus = r.first_cpus([(f"{base}/cpumap", MASK), (f"{base}/cpulist", LIST)], cpu_limit) or []
        total, free = _node_meminfo(r, f"{base}/meminfo")
        raw_nodes.append([n, ncpus, total, free])
    matrix = _distance_matrix(r, node_ids)  # {node: row over node_ids} or None
    node_of_cpu = {}
    for n, ncpus, *_ in raw_nodes:
        for c in ncpus:
            node_of_cpu.setdefault(c, n)

    gpu = _nvidia_gpu_nodes(r, set(node_ids))
    if gpu:
        notes.append(f"NUMA nodes of NVIDIA GPU memory left out: {_fmt_list(sorted(gpu))}")
        raw_nodes = [x for x in raw_nodes if x[0] not in gpu]

    merged_note = None
    if not raw_nodes:
        total, free = _machine_meminfo(r, live)
        raw_nodes = [[0, sorted(cpuset), total, free]]
        notes.append("no NUMA information: one node holding every CPU")
    elif len(raw_nodes) > 1 and all(set(x[1]) == set(raw_nodes[0][1]) and x[1] for x in raw_nodes):
        totals = [x[2] for x in raw_nodes]
        frees = [x[3] for x in raw_nodes]
        merged_note = (f"{len(raw_nodes)} NUMA nodes all claim the same CPUs; treated as one node "
                       "(as hwloc does)")
        raw_nodes = [[raw_nodes[0][0], raw_nodes[0][1],
                      sum(totals) if None not in totals else None,
                      sum(frees) if None not in frees else None]]
        matrix = None
        notes.append(merged_note)

    if allowed.mems is not None and not merged_note and len(node_ids) > 0:
        outside = [x[0] for x in raw_nodes if x[0] not in allowed.mems]
        if outside:
            notes.append(f"cgroup cpuset {allowed.cgroup} ({allowed.mems_file}) allows memory nodes "
                         f"{_fmt_list(sorted(allowed.mems))}; left out: {_fmt_list(outside)}")
            kept = [x for x in raw_nodes if x[0] in allowed.mems]
            if not kept:
                raise TopologyError(f"{allowed.mems_file}: the cgroup cpuset {allowed.cgroup} allows none of "
                                    f"the NUMA nodes ({_fmt_list(outside)} under {rootp / NODE_DIR})")
            raw_nodes = kept

    # -- distances: the kernel's rows list every online node in increasing order; keep
    # the columns of the nodes we kept. No usable matrix -> 10 local / 20 remote.
    kept_ids = [x[0] for x in raw_nodes]
    if matrix is not None:
        cols = [node_ids.index(n) for n in kept_ids]
        rows = {n: tuple(matrix[n][i] for i in cols) for n in kept_ids}
    else:
        rows = {n: tuple(10 if m == n else 20 for m in kept_ids) for n in kept_ids}

    cpu_node: dict[int, int] = {}
    nodes: list[Node] = []
    for n, ncpus, total, free in raw_nodes:
        kept = tuple(c for c in sorted(ncpus) if c in cpuset and c not in cpu_node)
        dup = sorted(c for c in ncpus if c in cpu_node)
        if dup:
            # impossible on Linux (hwloc drops such a node unless told otherwise); keep
            # the node and its memory, and leave the CPUs on the first node that claims them
            notes.append(f"node {n} claims CPUs of earlier nodes; they stay there: {_fmt_list(dup)}")
        for c in kept:
            cpu_node[c] = n
        nodes.append(Node(n, kept, total, free, rows[n]))
    orphans = sorted(cpuset - set(cpu_node))
    if orphans:
        nodes, how = _attach_orphans(nodes, orphans, node_of_cpu, matrix, node_ids)
        for nd in nodes:
            for c in nd.cpus:
                cpu_node[c] = nd.os_index
        notes.append(f"CPUs in no usable NUMA node {how}: {_fmt_list(orphans)}")

    # -- CPUs: package, core ------------------------------------------------------------
    # A core is the set of CPUs that are thread siblings of each other *and* report the
    # same (package, die, core_id): AMD family 15h lists the two cores of a compute unit
    # as "thread siblings" although they are cores, and hwloc reports them as two cores.
    info = {}
    for c in sorted(cpuset):
        base = f"{CPU_DIR}/cpu{c}/topology"
        pkg = r.int_or(f"{base}/physical_package_id", None)
        core = r.int_or(f"{base}/core_id", None)
        die = r.int_or(f"{base}/die_id", None)
        sib = r.first_cpus([(f"{base}/thread_siblings", MASK), (f"{base}/core_cpus", MASK),
                            (f"{base}/thread_siblings_list", LIST), (f"{base}/core_cpus_list", LIST)],
                           cpu_limit, must_hold=c, fallback="next source, else a core of its own") or [c]
        pkg = pkg if pkg is not None and pkg >= 0 else 0
        core = core if core is not None and core >= 0 else c
        die = die if die is not None and die >= 0 else 0
        info[c] = ((pkg, die, core), set(sib) & cpuset)
    cpus: list[CPU] = []
    for c in sorted(cpuset):
        key, sib = info[c]
        same_core = tuple(sorted(x for x in sib | {c} if info[x][0] == key))
        cpus.append(CPU(os_index=c, core=key[2], package=key[0], node=cpu_node[c], siblings=same_core))

    # -- caches -------------------------------------------------------------------------
    cpus_by_id = {x.os_index: x for x in cpus}
    caches: dict[tuple, Cache] = {}
    for c in sorted(cpuset):
        cbase = f"{CPU_DIR}/cpu{c}/cache"
        for idx in r.numbered(cbase, "index", MAX_CACHE_INDEX, "cache index"):
            ib = f"{cbase}/index{idx}"
            level = r.int_or(f"{ib}/level", None, valid=lambda v: 1 <= v <= 9)
            ctype_t = r.text_or_note(f"{ib}/type", "cache ignored")
            ctype = ctype_t.strip() if ctype_t is not None else "Unified"
            if level is None:
                continue
            if ctype not in ("Data", "Instruction", "Unified"):
                r.bad(_sysfs.Malformed(r.name(f"{ib}/type"), f"not a cache type: {ascii(ctype[:24])}"),
                      "cache ignored")
                continue
            size_t = r.text_or_note(f"{ib}/size", "size unknown")
            size = None
            if size_t and size_t.strip():
                try:
                    size = _sysfs.parse_cache_size(size_t)
                except ValueError as e:
                    r.bad(_sysfs.Malformed(r.name(f"{ib}/size"), str(e)), "size unknown")
            # hwloc reads the hex map; the list is the fallback (they disagree in
            # 64fake-4n2s2ca2c2t and 64amd64-4s2n4ca2co, and the map is right). No
            # usable set (ia64 leaves some maps empty): the core's CPUs, as hwloc does.
            shared = r.first_cpus([(f"{ib}/shared_cpu_map", MASK), (f"{ib}/shared_cpu_list", LIST)],
                                  cpu_limit, must_hold=c, fallback="next source, else the core's CPUs")
            if shared is None:
                shared = cpus_by_id[c].siblings
            shared_t = tuple(x for x in sorted(shared) if x in cpuset)
            key = (level, ctype, shared_t)
            if key in caches:
                continue
            caches[key] = Cache(
                level=level,
                type=ctype,
                size_bytes=size if size else None,
                line_size=r.int_or(f"{ib}/coherency_line_size", None, valid=lambda v: v > 0),
                ways=r.int_or(f"{ib}/ways_of_associativity", None, valid=lambda v: v >= 0),
                cpus=shared_t,
            )
    cache_list = sorted(caches.values(), key=lambda k: (-k.level, k.type, k.cpus))
    if not any(k.level == 2 for k in cache_list):
        l2 = _cpuinfo_l2_bytes() if live else None
        if l2:
            notes.append("no L2 cache information in sysfs: L2 size taken from py-cpuinfo")
            cache_list.extend(Cache(2, "Unified", l2, None, None, (c.os_index,)) for c in cpus)
        else:
            notes.append(
                "no L2 cache information: L2 size unknown, packet size falls back to "
                f"{FALLBACK_L2_BYTES // 2048} KiB"
            )

    return Topology(
        root=str(rootp),
        live=live,
        nodes=tuple(nodes),
        cpus=tuple(cpus),
        caches=tuple(cache_list),
        captured_cpu_model=_procfs_cpu_model(r),
        packet_bytes_override=packet_bytes,
        notes=tuple(r.notes + notes),
    )


# Cache index directories per CPU: Linux shows one per cache (L1d, L1i, L2, L3, maybe
# L4: at most 5 on the machines of hwloc's captures); more than 32 is not a CPU.
MAX_CACHE_INDEX = 32


def _distance_matrix(r: _sysfs.SysfsReader, node_ids: list[int]) -> dict[int, list[int]] | None:
    """Every node's distance row, or None (with a note) if any row is missing or
    malformed: like hwloc, a partial matrix is no matrix."""
    if len(node_ids) <= 1:
        return None  # one node: nothing to compare (hwloc reads no matrix either)
    rows = {}
    missing = []
    for n in node_ids:
        rel = f"{NODE_DIR}/node{n}/distance"
        try:
            t = r.text(rel)
            if t is None:
                missing.append(n)
                continue
            rows[n] = _sysfs.parse_distances(t, len(node_ids))
        except _sysfs.Malformed as e:
            r.bad(e, "NUMA distances assumed 10 local / 20 remote")
            return None
        except ValueError as e:
            r.bad(_sysfs.Malformed(r.name(rel), str(e)), "NUMA distances assumed 10 local / 20 remote")
            return None
    if missing:
        r.note(f"no NUMA distance for node{'s' if len(missing) > 1 else ''} {_fmt_list(missing)}: "
               "assuming 10 local / 20 remote")
        return None
    return rows


def _attach_orphans(nodes, orphans, node_of_cpu, matrix, node_ids):
    """Give each CPU that no kept node holds to a kept node: the nearest one (by the
    distance row of the node the CPU sits on) that has CPUs, else the first such.

    hwloc leaves such CPUs outside every NUMA node (attached to the machine). The
    scheduler needs a node per CPU, and the nearest node is where the kernel takes
    that CPU's memory from when its own node is not allowed."""
    with_cpus = [i for i, n in enumerate(nodes) if n.cpus] or list(range(len(nodes)))
    extra: dict[int, list[int]] = {}
    by_distance = False
    for c in orphans:
        home = node_of_cpu.get(c)
        target = with_cpus[0]
        if matrix is not None and home in matrix:
            row = matrix[home]
            target = min(with_cpus, key=lambda i: (row[node_ids.index(nodes[i].os_index)], i))
            by_distance = True
        extra.setdefault(target, []).append(c)
    out = list(nodes)
    for i, cs in extra.items():
        out[i] = replace(out[i], cpus=tuple(sorted(set(out[i].cpus) | set(cs))))
    how = "attached to the nearest node" if by_distance else f"attached to node {nodes[with_cpus[0]].os_index}"
    return out, how


def _nvidia_gpu_nodes(r: _sysfs.SysfsReader, node_ids: set[int]) -> set[int]:
    """NUMA nodes that hold NVIDIA GPU memory (``/proc/driver/nvidia/gpus/*/numa_status``).

    hwloc hides them on POWER and keeps them elsewhere as GPU memory; we always leave
    them out: the scheduler must not place packets or workers there."""
    out = set()
    gdir = "proc/driver/nvidia/gpus"
    for g in sorted(r.listdir(gdir))[:256]:
        t = r.text(f"{gdir}/{g}/numa_status", strict=False) or ""
        m = re.search(r"^Node:\s*(\d{1,9})\s*$", t, re.MULTILINE)
        if m and int(m.group(1)) in node_ids:
            out.add(int(m.group(1)))
    return out


def _fmt_list(xs) -> str:
    return ",".join(str(x) for x in xs)


def _meminfo_values(text: str, pattern: str) -> dict[str, int]:
    vals = {}
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            vals[m.group(1)] = int(m.group(2)) * 1024
    return vals


_NODE_MEM = r"Node\s+\d+\s+(MemTotal|MemFree):\s+(\d{1,15})\s*kB"


def _node_meminfo(r: _sysfs.SysfsReader, rel: str) -> tuple[int | None, int | None]:
    try:
        text = r.text(rel)
    except _sysfs.Malformed as e:
        r.bad(e, "node memory unknown")
        return None, None
    if not text:
        return None, None
    vals = _meminfo_values(text, _NODE_MEM)
    if "MemTotal" not in vals:
        r.bad(_sysfs.Malformed(r.name(rel), "no MemTotal line"), "node memory unknown")
    return vals.get("MemTotal"), vals.get("MemFree")


def _machine_meminfo(r: _sysfs.SysfsReader, live: bool) -> tuple[int | None, int | None]:
    if live:
        import psutil

        vm = psutil.virtual_memory()
        return vm.total, vm.available
    text = r.text("proc/meminfo", strict=False) or ""
    vals = _meminfo_values(text, r"(MemTotal|MemFree):\s+(\d{1,15})\s*kB")
    return vals.get("MemTotal"), vals.get("MemFree")


def node_free_bytes(node: int, root: str = "/") -> int | None:
    """Current free memory of a node on the live machine (re-read each call)."""
    total, free = _node_meminfo(_sysfs.SysfsReader(Path(root)), f"{NODE_DIR}/node{node}/meminfo")
    if free is None and root == "/":
        import psutil

        return psutil.virtual_memory().available
    return free


def _cpuinfo_l2_bytes() -> int | None:
    try:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
    except Exception:  # py-cpuinfo probes with subprocesses; never let it kill the probe
        return None
    v = info.get("l2_cache_size")
    if isinstance(v, int):
        return v or None
    if isinstance(v, str):
        return parse_size(v.replace(" ", "").replace("KB", "K").replace("MB", "M"))
    return None


def _procfs_cpu_model(r: _sysfs.SysfsReader) -> str | None:
    # Only the first CPU's lines are needed; /proc/cpuinfo is long on big machines.
    text = r.text("proc/cpuinfo", strict=False) or ""
    # x86: "model name"; POWER: "cpu"; old ARM: "Processor"; others: "Hardware".
    for key in ("model name", "cpu model", "cpu", "Processor", "Hardware"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m and m.group(1).strip():
            return m.group(1).strip()[:200]
    return None


@functools.lru_cache(maxsize=1)
def _live_cpu_model() -> str | None:
    try:
        import cpuinfo

        return cpuinfo.get_cpu_info().get("brand_raw") or None
    except Exception:  # py-cpuinfo probes with subprocesses; never let it kill the probe
        return None
