"""How a machine is cut into domains -- interpreters, each with its own GIL and its own
part of the CPUs (``bobox_sched/domains``; the simulator plays the same cut,
``bobox_sched/sim``).

``domains="auto"`` gives one domain per NUMA node, each split into contiguous CPU ranges
of at most ``domain_workers`` CPUs (``DEFAULT_DOMAIN_WORKERS``; whole cores: a core's
hardware threads stay together); a machine with at most that many CPUs, or an
interpreter without a GIL, keeps one. ``domains=N`` gives N domains spread over the
nodes (a node's CPUs are cut into N / nodes ranges; with fewer domains than nodes a
domain spans several nodes and binds no memory). ``domains="off"`` (or None): one.
"""

from __future__ import annotations

# Workers per domain, "auto": where one interpreter's GIL starts to queue. On the 16-core
# Xeon measured for the domains issue (Python 3.12, TPC-H mix at SF 1) each worker held
# the GIL 5.7 % of its busy time: 8 workers ask for 0.46 of one GIL, where a single
# server's queueing delay reaches about its service time (M/M/1: rho / (1 - rho) = 0.85),
# and 16 ask for 0.91 (the measured flattening: 5.18x at 8, 5.06x at 16).
DEFAULT_DOMAIN_WORKERS = 8


def domain_layout(topo, domains, domain_workers: int | None = None,
                  gil: bool = True) -> list[tuple[list[int], int | None]] | None:
    """(CPUs, node or None) per domain, or None for one interpreter (module doc); `gil`:
    whether the interpreter has a GIL ("auto" without one keeps one interpreter).
    One-line ValueErrors for bad values."""
    w = DEFAULT_DOMAIN_WORKERS if domain_workers is None else domain_workers
    if not isinstance(w, int) or isinstance(w, bool) or w < 1:
        raise ValueError(f"domain_workers must be a positive integer, got {domain_workers!r}")
    nodes = [(n.os_index, by_core(topo, n.cpus)) for n in topo.cpu_nodes]
    ncpu = sum(len(c) for _, c in nodes)
    if domains in (None, "off"):
        return None
    if domains == "auto":
        if not gil or ncpu <= w:
            return None
        out = []
        for nid, cpus in nodes:
            k = -(-len(cpus) // w)
            out += [(part, nid) for part in split(cpus, k)]
        return out
    if not isinstance(domains, int) or isinstance(domains, bool) or domains < 1:
        raise ValueError(f"domains must be 'auto', 'off' or a positive integer, got {domains!r}")
    if domains > ncpu:
        raise ValueError(f"domains={domains}: more domains than the {ncpu} CPUs")
    if domains == 1:
        return [([c for _, cs in nodes for c in cs], nodes[0][0] if len(nodes) == 1 else None)]
    if domains < len(nodes):
        groups = split(list(range(len(nodes))), domains)
        return [([c for i in g for c in nodes[i][1]], None) for g in groups]
    out = []
    per = split(list(range(domains)), len(nodes))  # domains per node, as even as can be
    for (nid, cpus), ds in zip(nodes, per):
        if len(ds) > len(cpus):
            raise ValueError(f"domains={domains}: node {nid} has {len(cpus)} CPUs for {len(ds)} domains")
        out += [(part, nid) for part in split(cpus, len(ds))]
    return out


def by_core(topo, cpus) -> list[int]:
    """`cpus` ordered by (package, core, CPU): hardware threads of one core side by side,
    so that cutting the list into contiguous parts never gives one core's threads to two
    domains unless a part is smaller than a core."""
    info = {c.os_index: (c.package, c.core, c.os_index) for c in topo.cpus}
    return sorted(cpus, key=lambda c: info.get(c, (0, 0, c)))


def split(xs: list, k: int) -> list[list]:
    """`xs` cut into `k` contiguous parts whose sizes differ by at most one."""
    q, r = divmod(len(xs), k)
    out, i = [], 0
    for j in range(k):
        n = q + (j < r)
        out.append(xs[i:i + n])
        i += n
    return out


__all__ = ["DEFAULT_DOMAIN_WORKERS", "by_core", "domain_layout", "split"]
