"""Parse hwloc ``lstopo`` console output (the ``.console`` files of the fixtures).

Only what the fixture tests compare: for every NUMA node its OS index and the OS indexes
of the PUs under its parent object, and for every PU the size of the L2 cache above it.
Indentation is nesting, as in lstopo's output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(r"^(?P<indent>\s*)(?P<kind>[A-Za-z0-9]+) (?:L#(?P<l>\d+))?\s*(?:\((?P<attrs>.*)\))?\s*$")
_SIZE = re.compile(r"size=(\d+)(KiB|MiB|GiB|B)")
_PIDX = re.compile(r"P#(\d+)")
_MEM = re.compile(r"local=(\d+)(KiB|MiB|GiB|TiB)")
_UNIT = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


@dataclass
class _Obj:
    kind: str
    os_index: int | None
    attrs: str
    depth: int
    children: list = field(default_factory=list)
    parent: "_Obj | None" = None


@dataclass
class Console:
    nodes: dict  # node OS index -> set of PU OS indexes
    node_memory: dict  # node OS index -> bytes (as printed, rounded by lstopo)
    pu_l2: dict  # PU OS index -> L2 size in bytes, or None
    distances: list | None  # rows in logical node order, or None


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
        if not m:
            continue
        depth = len(m.group("indent")) // 2
        attrs = m.group("attrs") or ""
        p = _PIDX.search(attrs)
        obj = _Obj(m.group("kind"), int(p.group(1)) if p else None, attrs, depth)
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

    def walk(o, l2):
        if o.kind == "L2Cache":
            s = _SIZE.search(o.attrs)
            l2 = int(s.group(1)) * _UNIT[s.group(2)] if s else None
        if o.kind == "NUMANode":
            nodes[o.os_index] = set(pus(o.parent))
            mm = _MEM.search(o.attrs)
            mem[o.os_index] = int(mm.group(1)) * _UNIT[mm.group(2)] if mm else None
        if o.kind == "PU":
            pu_l2[o.os_index] = l2
        for c in o.children:
            walk(c, l2)

    walk(root, None)
    dist = None
    for i, line in enumerate(lines):
        if line.startswith("Relative latency matrix"):
            dist = []
            for row in lines[i + 2 :]:
                parts = row.split()
                if not parts or not parts[0].isdigit():
                    break
                dist.append([int(x) for x in parts[1:]])
            break
    return Console(nodes, mem, pu_l2, dist)
