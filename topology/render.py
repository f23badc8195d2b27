"""Render a :class:`Topology` as a tree in the conventions of hwloc's ``lstopo``.

Objects are nested by CPU-set inclusion, as hwloc does: Machine > Package > (Group of a
NUMA node when a package holds several) > L3 > L2 > L1d > L1i > Core > PU. A NUMA node is
printed as the first child of the smallest object whose CPU set equals its own (where it
is local). ``L#`` is the logical index (depth-first order), ``P#`` the OS index.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.probe import Topology

_RANK = {"Machine": 0, "Package": 1, "Group": 2, "Core": 20, "PU": 21}


def _rank(kind: str) -> tuple[int, int]:
    """Parents first on equal CPU sets: Machine > Package > Group > L9..L1 (unified or
    data before instruction, as lstopo nests L1i under L1d) > Core > PU."""
    if kind in _RANK:
        return _RANK[kind], 0
    level = int(kind[1])  # "L2", "L2d", "L1i": Cache.name
    return 3 + (9 - level), 1 if kind.endswith("i") else 0


@dataclass
class _Obj:
    kind: str
    cpus: frozenset
    label: str = ""
    os_index: int | None = None
    children: list = field(default_factory=list)
    memory: list = field(default_factory=list)  # NUMA node lines attached here


def human_bytes(n: int | None) -> str:
    """Sizes the way lstopo prints them: KiB below 10 MiB, MiB below 10 GiB, then GiB."""
    if n is None:
        return "?"
    if n < 10 * 1024**2:
        return f"{round(n / 1024)}KiB"
    if n < 10 * 1024**3:
        return f"{round(n / 1024**2)}MiB"
    return f"{round(n / 1024**3)}GiB"


def build_tree(topo: Topology) -> _Obj:
    all_cpus = frozenset(c.os_index for c in topo.cpus)
    total = sum(n.memory_bytes or 0 for n in topo.nodes)
    model = f' CPUModel="{topo.cpu_model}"' if topo.cpu_model else ""
    machine = _Obj("Machine", all_cpus, f"(total={human_bytes(total)}{model})")
    objs: list[_Obj] = []
    pkgs: dict[int, set] = {}
    for c in topo.cpus:
        pkgs.setdefault(c.package, set()).add(c.os_index)
    for p, cs in pkgs.items():
        objs.append(_Obj("Package", frozenset(cs), os_index=p))
    for k in topo.caches:
        extra = f" linesize={k.line_size}" if k.line_size else ""
        extra += f" ways={k.ways}" if k.ways else ""
        objs.append(_Obj(k.name, frozenset(k.cpus), f"(size={human_bytes(k.size_bytes)}{extra})"))
    cores: dict[tuple, set] = {}
    core_id: dict[tuple, int] = {}
    for c in topo.cpus:
        key = c.siblings or (c.os_index,)
        cores.setdefault(key, set()).add(c.os_index)
        core_id[key] = c.core
    for key, cs in cores.items():
        objs.append(_Obj("Core", frozenset(cs), os_index=core_id[key]))
    for c in topo.cpus:
        objs.append(_Obj("PU", frozenset([c.os_index]), os_index=c.os_index))
    existing = {o.cpus for o in objs} | {all_cpus}
    for n in topo.nodes:
        if n.cpus and frozenset(n.cpus) not in existing:
            objs.append(_Obj("Group", frozenset(n.cpus)))
            existing.add(frozenset(n.cpus))

    # Insert big sets first; on equal sets the higher-ranked kind becomes the parent.
    objs.sort(key=lambda o: (-len(o.cpus), _rank(o.kind)))
    placed: list[_Obj] = [machine]
    for o in objs:
        parent = machine
        for cand in placed:  # the last matching candidate is the deepest one
            if o.cpus <= cand.cpus:
                parent = cand
        parent.children.append(o)
        placed.append(o)

    def attach(node_cpus: frozenset) -> _Obj:
        """Shallowest object whose CPU set is the node's (breadth-first)."""
        level = [machine]
        while level:
            for o in level:
                if o.cpus == node_cpus:
                    return o
            level = [c for o in level for c in o.children]
        return machine

    for n in topo.nodes:
        holder = attach(frozenset(n.cpus)) if n.cpus else machine
        holder.memory.append(n)

    def sort(o: _Obj):
        o.children.sort(key=lambda c: min(c.cpus) if c.cpus else -1)
        for c in o.children:
            sort(c)

    sort(machine)
    return machine


def render_tree(topo: Topology) -> str:
    machine = build_tree(topo)
    counters: dict[str, int] = {}
    node_lidx = {n.os_index: i for i, n in enumerate(topo.nodes)}
    lines: list[str] = []

    def emit(o: _Obj, depth: int):
        pad = "  " * depth
        if o.kind == "Machine":
            lines.append(f"Machine {o.label}")
        else:
            name = f"{o.kind}Cache" if o.kind[0] == "L" and o.kind[1:2].isdigit() else o.kind
            li = counters.get(o.kind, 0)
            counters[o.kind] = li + 1
            parts = []
            if o.os_index is not None:
                parts.append(f"P#{o.os_index}")
            if o.label:
                parts.append(o.label.strip("()"))
            detail = f" ({' '.join(parts)})" if parts else ""
            lines.append(f"{pad}{name} L#{li}{detail}")
        for n in o.memory:
            mem = f" local={human_bytes(n.memory_bytes)}" if n.memory_bytes else ""
            free = f" free={human_bytes(n.free_bytes)}" if n.free_bytes is not None else ""
            lines.append(f"{pad}  NUMANode L#{node_lidx[n.os_index]} (P#{n.os_index}{mem}{free})")
        for c in o.children:
            emit(c, depth + 1)

    emit(machine, 0)
    if len(topo.nodes) > 1:
        lines.append("Relative latency matrix between NUMANodes (by OS index):")
        ids = [n.os_index for n in topo.nodes]
        w = max(5, max(len(str(i)) for i in ids) + 1)
        lines.append(" index" + "".join(f"{i:>{w}}" for i in ids))
        for n in topo.nodes:
            lines.append(f"{n.os_index:>6}" + "".join(f"{d:>{w}}" for d in n.distances))
    lines.append(
        f"Packet size: {human_bytes(topo.packet_bytes)} ({topo.packet_bytes} bytes"
        + (", overridden)" if topo.packet_bytes_override else ", half the L2 cache)")
    )
    for note in topo.notes:
        lines.append(f"Note: {note}")
    return "\n".join(lines)
