"""Parse hwloc's expected outputs of the fixtures: ``lstopo`` console text (``.console``)
and hwloc XML (``.xml``, for captures whose hwloc test compares XML).

Only what the fixture tests compare: every NUMA node's OS index, the OS indexes of the
PUs of its locality (console: the PUs under its parent, the first ancestor that is not
a memory-side cache; XML: its ``cpuset``), its memory; every PU's L2 size (unified or
data); the latency matrix, in node OS index order. Indentation is nesting in lstopo's
output.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# "NUMANode(DRAM) L#0 (P#0 ...)", "L2dCache L#0 (...)", "PU L#1 (P#2)"
_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<kind>[A-Za-z0-9]+)(?:\((?P<subtype>[^)]*)\))?(?:\[[^\]]*\])? "
    r"(?:L#(?P<l>\d+))?\s*(?:\((?P<attrs>.*)\))?.*$"
)
_SIZE = re.compile(r"size=(\d+)(KiB|MiB|GiB|B)")
_PIDX = re.compile(r"P#(\d+)")
_MEM = re.compile(r"local=(\d+)(KiB|MiB|GiB|TiB)")
_UNIT = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
_L2_KINDS = ("L2Cache", "L2dCache")  # unified or data: what Topology.l2_bytes reads
_MEMORY_KINDS = ("NUMANode", "MemCache")


@dataclass
class _Obj:
    kind: str
    os_index: int | None
    attrs: str
    depth: int
    logical: int | None = None
    children: list = field(default_factory=list)
    parent: "_Obj | None" = None


@dataclass
class Console:
    nodes: dict  # node OS index -> set of PU OS indexes (its locality)
    node_memory: dict  # node OS index -> bytes (as printed, rounded by lstopo), or None
    pu_l2: dict  # PU OS index -> L2 size in bytes, or None; its keys are all the PUs
    distances: list | None  # rows/columns in node OS index order, or None

    @property
    def pus(self) -> set:
        return set(self.pu_l2)

    @property
    def orphan_pus(self) -> set:
        """PUs that hwloc puts in no NUMA node's locality (attached to the machine)."""
        return self.pus - set().union(*self.nodes.values()) if self.nodes else set()


def parse_console(text: str) -> Console:
    root = None
    stack: list[_Obj] = []
    lines = text.split("\n")  # not splitlines(): DMI strings may hold a bare \r
    tree_lines = []
    for line in lines:
        if line.startswith("depth ") or line.startswith(" depth") or line.startswith("Special depth"):
            break
        tree_lines.append(line)
    for line in tree_lines:
        m = _LINE.match(line)
        if not m or not line.strip():
            continue
        depth = len(m.group("indent")) // 2
        attrs = m.group("attrs") or ""
        p = _PIDX.search(attrs)
        lidx = int(m.group("l")) if m.group("l") else None
        obj = _Obj(m.group("kind"), int(p.group(1)) if p else None, attrs, depth, lidx)
        while stack and stack[-1].depth >= depth:
            stack.pop()
        if stack:
            obj.parent = stack[-1]
            stack[-1].children.append(obj)
        else:
            root = obj
        stack.append(obj)

    def pus(o):
        if o.kind == "PU":
            yield o.os_index
        for c in o.children:
            yield from pus(c)

    nodes, mem, pu_l2 = {}, {}, {}
    logical = {}  # node logical index (L#) -> OS index (P#)

    def walk(o, l2):
        if o.kind in _L2_KINDS:
            s = _SIZE.search(o.attrs)
            l2 = int(s.group(1)) * _UNIT[s.group(2)] if s else None
        if o.kind == "NUMANode":
            up = o.parent
            while up is not None and up.kind in _MEMORY_KINDS:
                up = up.parent
            nodes[o.os_index] = set(pus(up)) if up is not None else set()
            mm = _MEM.search(o.attrs)
            mem[o.os_index] = int(mm.group(1)) * _UNIT[mm.group(2)] if mm else None
            logical[o.logical] = o.os_index
        if o.kind == "PU":
            pu_l2[o.os_index] = l2
        for c in o.children:
            walk(c, l2)

    walk(root, None)
    dist = None
    for i, line in enumerate(lines):
        if line.startswith("Relative latency matrix"):
            # " index  0  2  1  3": the nodes' logical indexes, in the matrix's order
            labels = [int(x) for x in lines[i + 1].split()[1:]]
            rows = []
            for row in lines[i + 2 :]:
                parts = row.split()
                # the matrix ends at the first line that is not all numbers (e.g.
                # "12 processors not represented in topology: 0x0000fff0")
                if not parts or not all(x.isdigit() for x in parts):
                    break
                rows.append([int(x) for x in parts[1:]])
            # reorder by OS index, like the probe's nodes
            order = sorted(range(len(labels)), key=lambda k: logical[labels[k]])
            dist = [[rows[a][b] for b in order] for a in order]
            break
    return Console(nodes, mem, pu_l2, dist)


def _bitmap(text: str) -> set:
    """An hwloc bitmap string (``0x000000ff,0x00000001``; ``0x0``) -> set bits."""
    words = [w for w in text.split(",")]
    out = set()
    for i, w in enumerate(reversed(words)):
        v = int(w or "0x0", 16)
        out.update(32 * i + b for b in range(32) if v >> b & 1)
    return out


def parse_xml(text: str) -> Console:
    root = ET.fromstring(text)
    nodes, mem, pu_l2 = {}, {}, {}

    def walk(o, l2):
        kind = o.get("type")
        if kind in ("L2Cache", "L2dCache") and o.get("cache_type") in (None, "0", "1"):
            l2 = int(o.get("cache_size"))
        if kind == "NUMANode":
            n = int(o.get("os_index"))
            nodes[n] = _bitmap(o.get("cpuset", "0x0"))
            mem[n] = int(o.get("local_memory")) if o.get("local_memory") else None
        if kind == "PU":
            pu_l2[int(o.get("os_index"))] = l2
        for c in o.findall("object"):
            walk(c, l2)

    for top in root.findall("object"):
        walk(top, None)
    dist = None
    for d in root.findall("distances2"):
        if d.get("type") == "NUMANode" and d.get("name", "NUMALatency") == "NUMALatency":
            idx = [int(x) for x in d.find("indexes").text.split()]
            vals = [int(x) for v in d.findall("u64values") for x in v.text.split()]
            k = len(idx)
            order = sorted(range(k), key=lambda a: idx[a])
            dist = [[vals[a * k + b] for b in order] for a in order]
    return Console(nodes, mem, pu_l2, dist)


def parse_expected(path) -> Console:
    """The expected output of a fixture, by its file name (``.console`` or ``.xml``)."""
    data = path.read_bytes().decode(errors="replace")  # bytes: DMI strings may hold \r
    return parse_xml(data) if str(path).endswith(".xml") else parse_console(data)
