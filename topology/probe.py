"""Read the machine's topology from Linux sysfs/procfs under a root directory.

The probe reads the same files hwloc's Linux backend reads, so that the trees captured
by hwloc's test suite (a folder holding ``sys/`` and ``proc/``) can be read exactly like
the live machine. Only plain file reads happen here; nothing is pinned or allocated.

Degradation rules (kept in step with hwloc):

* no ``sys/devices/system/node`` directory -> one node holding every CPU;
* several nodes that all claim the same CPU set (hwloc's "buggy NUMA") -> merged into
  one node (its memory is the sum, since the memory is real even if the CPU maps lie);
* no cache information -> on the live machine, py-cpuinfo's L2 size, else unknown;
* offline CPUs are left out; on the live machine the CPUs outside the process's
  affinity mask are left out too, and :attr:`Topology.notes` says so.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import TopologyError

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
# parsing helpers

def parse_cpulist(text: str) -> list[int]:
    """Parse a kernel CPU list such as ``0-3,8,10-11`` (empty string -> [])."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            # "0-31:2/4" strides exist in cmdline syntax but not in sysfs output.
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def parse_cpumask(text: str) -> list[int]:
    """Parse a kernel hex CPU mask such as ``00000000,000000ff`` (words high first)."""
    words = text.strip().replace("\n", "").split(",")
    value = 0
    for w in words:
        value = (value << 32) | int(w or "0", 16)
    return [i for i in range(value.bit_length()) if value >> i & 1]


def parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text)
    if not m:
        return None
    mult = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)]
    return int(m.group(1)) * mult


class _Reader:
    def __init__(self, root: Path):
        self.root = root

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def read(self, rel: str) -> str | None:
        try:
            return self.path(rel).read_text(errors="replace")
        except (OSError, ValueError):
            return None

    def read_int(self, rel: str) -> int | None:
        t = self.read(rel)
        try:
            return int(t.strip()) if t is not None else None
        except ValueError:
            return None

    def cpus_file(self, list_path: str, mask_path: str) -> list[int] | None:
        """CPU set from a cpulist file or, failing that, the matching hex mask file."""
        t = self.read(list_path)
        if t is not None:
            return parse_cpulist(t)
        t = self.read(mask_path)
        if t is not None:
            return parse_cpumask(t)
        return None

    def listdir(self, rel: str) -> list[str]:
        try:
            return os.listdir(self.path(rel))
        except OSError:
            return []


def _numbered(names, prefix):
    out = []
    for n in names:
        m = re.fullmatch(prefix + r"(\d+)", n)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


# ---------------------------------------------------------------------------------

def probe(root: str | os.PathLike = "/", packet_bytes: int | None = None) -> Topology:
    """Probe the topology under `root` ("/" = the live machine)."""
    rootp = Path(root)
    if not rootp.exists():
        raise TopologyError(f"topology root does not exist: {rootp}")
    if not rootp.is_dir():
        raise TopologyError(f"topology root is not a directory: {rootp}")
    if not (rootp / "sys").is_dir():
        raise TopologyError(f"topology root has no sys/ directory: {rootp}")
    live = rootp.resolve() == Path("/")
    r = _Reader(rootp)
    notes: list[str] = []

    cpu_dir = "sys/devices/system/cpu"
    present = _numbered(r.listdir(cpu_dir), "cpu")
    online_txt = r.read(f"{cpu_dir}/online")
    online = set(parse_cpulist(online_txt)) if online_txt is not None else set(present)
    cpus_ids = []
    for c in present:
        flag = r.read_int(f"{cpu_dir}/cpu{c}/online")
        if flag == 0 or c not in online:
            continue
        cpus_ids.append(c)
    if not cpus_ids:
        # Some captures have no cpuN directories; fall back to the online list.
        cpus_ids = sorted(online)
    offline = sorted(set(present) - set(cpus_ids))
    if offline:
        notes.append(f"offline CPUs left out: {_fmt_list(offline)}")
    if live:
        allowed = os.sched_getaffinity(0)
        outside = sorted(set(cpus_ids) - allowed)
        if outside:
            notes.append(
                f"restricted to this process's affinity mask; CPUs left out: {_fmt_list(outside)}"
            )
        cpus_ids = [c for c in cpus_ids if c in allowed]
    if not cpus_ids:
        raise TopologyError(f"no usable CPU found under {rootp / cpu_dir}")
    cpuset = set(cpus_ids)

    # -- NUMA nodes ------------------------------------------------------------------
    node_dir = "sys/devices/system/node"
    node_ids = _numbered(r.listdir(node_dir), "node")
    raw_nodes: list[tuple[int, list[int], int | None, int | None, list[int]]] = []
    for n in node_ids:
        ncpus = r.cpus_file(f"{node_dir}/node{n}/cpulist", f"{node_dir}/node{n}/cpumap") or []
        total, free = _node_meminfo(r.read(f"{node_dir}/node{n}/meminfo"))
        dist_t = r.read(f"{node_dir}/node{n}/distance")
        dists = [int(x) for x in dist_t.split()] if dist_t else []
        raw_nodes.append((n, ncpus, total, free, dists))

    if not raw_nodes:
        total, free = _machine_meminfo(r, live)
        raw_nodes = [(0, sorted(cpuset), total, free, [10])]
        node_ids = [0]
        notes.append("no NUMA information: one node holding every CPU")
    elif len(raw_nodes) > 1 and all(
        set(x[1]) == set(raw_nodes[0][1]) and x[1] for x in raw_nodes
    ):
        totals = [x[2] for x in raw_nodes]
        frees = [x[3] for x in raw_nodes]
        merged = (
            raw_nodes[0][0],
            raw_nodes[0][1],
            sum(totals) if None not in totals else None,
            sum(frees) if None not in frees else None,
            [10],
        )
        notes.append(
            f"{len(raw_nodes)} NUMA nodes all claim the same CPUs; treated as one node "
            "(as hwloc does)"
        )
        raw_nodes = [merged]
        node_ids = [merged[0]]

    # The kernel's distance rows list every online node in increasing order; keep the
    # columns of the nodes we kept.
    all_ids = [x[0] for x in raw_nodes]
    cpu_node: dict[int, int] = {}
    nodes: list[Node] = []
    for n, ncpus, total, free, dists in raw_nodes:
        kept = tuple(c for c in sorted(ncpus) if c in cpuset)
        for c in kept:
            cpu_node.setdefault(c, n)
        if len(dists) == len(all_ids):
            drow = tuple(dists)
        else:
            drow = tuple(10 if m == n else 20 for m in all_ids)
            if len(all_ids) > 1:
                notes.append(f"node {n}: no usable distance row, assuming 10 local / 20 remote")
        nodes.append(Node(n, kept, total, free, drow))
    orphans = sorted(cpuset - set(cpu_node))
    if orphans:
        # CPUs that no node claims: attach them to the first node with CPUs, like hwloc
        # attaches them to the machine's memory.
        first = nodes[0]
        nodes[0] = replace(first, cpus=tuple(sorted(set(first.cpus) | set(orphans))))
        for c in orphans:
            cpu_node[c] = first.os_index
        notes.append(f"CPUs in no NUMA node attached to node {first.os_index}: {_fmt_list(orphans)}")

    # -- CPUs: package, core ------------------------------------------------------------
    # A core is the set of CPUs that are thread siblings of each other *and* report the
    # same (package, die, core_id): AMD family 15h lists the two cores of a compute unit
    # as "thread siblings" although they are cores, and hwloc reports them as two cores.
    info = {}
    for c in sorted(cpuset):
        base = f"{cpu_dir}/cpu{c}/topology"
        pkg = r.read_int(f"{base}/physical_package_id")
        core = r.read_int(f"{base}/core_id")
        die = r.read_int(f"{base}/die_id")
        sib = r.cpus_file(f"{base}/thread_siblings_list", f"{base}/thread_siblings") or [c]
        pkg = pkg if pkg is not None and pkg >= 0 else 0
        core = core if core is not None and core >= 0 else c
        info[c] = ((pkg, die or 0, core), set(sib) & cpuset)
    cpus: list[CPU] = []
    for c in sorted(cpuset):
        key, sib = info[c]
        same_core = tuple(sorted(x for x in sib | {c} if info[x][0] == key))
        cpus.append(CPU(os_index=c, core=key[2], package=key[0], node=cpu_node[c],
                        siblings=same_core))

    # -- caches -------------------------------------------------------------------------
    caches: dict[tuple, Cache] = {}
    for c in sorted(cpuset):
        cbase = f"{cpu_dir}/cpu{c}/cache"
        for idx in _numbered(r.listdir(cbase), "index"):
            ib = f"{cbase}/index{idx}"
            level = r.read_int(f"{ib}/level")
            ctype = (r.read(f"{ib}/type") or "Unified").strip()
            if level is None or ctype not in ("Data", "Instruction", "Unified"):
                continue
            size_t = r.read(f"{ib}/size")
            size = parse_size(size_t) if size_t else None
            shared = r.cpus_file(f"{ib}/shared_cpu_list", f"{ib}/shared_cpu_map") or [c]
            shared_t = tuple(x for x in sorted(shared) if x in cpuset) or (c,)
            key = (level, ctype, shared_t)
            if key in caches:
                continue
            caches[key] = Cache(
                level=level,
                type=ctype,
                size_bytes=size if size else None,
                line_size=r.read_int(f"{ib}/coherency_line_size"),
                ways=r.read_int(f"{ib}/ways_of_associativity"),
                cpus=shared_t,
            )
    cache_list = sorted(caches.values(), key=lambda k: (-k.level, k.type, k.cpus))
    if not any(k.level == 2 for k in cache_list):
        l2 = _cpuinfo_l2_bytes() if live else None
        if l2:
            notes.append("no L2 cache information in sysfs: L2 size taken from py-cpuinfo")
            cache_list.extend(
                Cache(2, "Unified", l2, None, None, (c.os_index,)) for c in cpus
            )
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
        notes=tuple(notes),
    )


def _fmt_list(xs) -> str:
    return ",".join(str(x) for x in xs)


def _node_meminfo(text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    total = free = None
    for line in text.splitlines():
        m = re.match(r"Node\s+\d+\s+(MemTotal|MemFree):\s+(\d+)\s*kB", line)
        if m:
            v = int(m.group(2)) * 1024
            if m.group(1) == "MemTotal":
                total = v
            else:
                free = v
    return total, free


def _machine_meminfo(r: _Reader, live: bool) -> tuple[int | None, int | None]:
    if live:
        import psutil

        vm = psutil.virtual_memory()
        return vm.total, vm.available
    text = r.read("proc/meminfo") or ""
    vals = {}
    for line in text.splitlines():
        m = re.match(r"(MemTotal|MemFree):\s+(\d+)\s*kB", line)
        if m:
            vals[m.group(1)] = int(m.group(2)) * 1024
    return vals.get("MemTotal"), vals.get("MemFree")


def node_free_bytes(node: int, root: str = "/") -> int | None:
    """Current free memory of a node on the live machine (re-read each call)."""
    total, free = _node_meminfo(_Reader(Path(root)).read(f"sys/devices/system/node/node{node}/meminfo"))
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


def _procfs_cpu_model(r: _Reader) -> str | None:
    text = r.read("proc/cpuinfo") or ""
    # x86: "model name"; POWER: "cpu"; old ARM: "Processor"; others: "Hardware".
    for key in ("model name", "cpu model", "cpu", "Processor", "Hardware"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m and m.group(1).strip():
            return m.group(1).strip()
    return None


@functools.lru_cache(maxsize=1)
def _live_cpu_model() -> str | None:
    try:
        import cpuinfo

        return cpuinfo.get_cpu_info().get("brand_raw") or None
    except Exception:  # py-cpuinfo probes with subprocesses; never let it kill the probe
        return None
