"""The machine a simulation runs on: the live one, a captured sysfs tree (like the hwloc
fixtures), or a description.

A description is ``NODES x CORES`` with optional comma-separated settings, e.g.
``"4x16"``, ``"4 nodes x 16 cores, smt 2, l2 1M, distances 10/21"``:

* ``smt K``: hardware threads per core (default 1); a worker runs per hardware thread;
* ``l2 SIZE``: the L2 per core (default 1M; the packet size is half of it, as on a real
  machine);
* ``distances LOCAL/REMOTE``: the node distance matrix's two values (default 10/21, what
  two-socket x86 machines report).

:func:`machine` returns a ``topology.Topology`` (``live`` False, ``root`` naming the
source), so the scheduler's policies see exactly what they would see on such a machine.
"""

from __future__ import annotations

import os
import re

from topology.errors import TopologyError
from topology.probe import CPU, Cache, Node, Topology

MAX_NODES = 64
MAX_CPUS = 4096  # what limits.py allows a real machine too
_SIZE = re.compile(r"^(\d+)\s*([kKmMgG]?)(?:i?[bB])?$")


def _size(text: str) -> int:
    m = _SIZE.match(text.strip())
    if not m:
        raise TopologyError(f"machine description: cannot read the size {text!r} (e.g. 1M, 512K)")
    return int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2).lower()]


def describe(text: str) -> Topology:
    """A Topology from a description (module doc)."""
    head, *rest = [p.strip() for p in text.split(",")]
    m = re.match(r"^(\d+)\s*(?:nodes?)?\s*[xX×]\s*(\d+)\s*(?:cores?)?$", head)
    if not m:
        raise TopologyError(f"machine description {text!r}: expected 'NODES x CORES[, smt K][, l2 SIZE]"
                            "[, distances L/R]', e.g. '4 nodes x 16 cores, smt 2'")
    nodes, cores = int(m.group(1)), int(m.group(2))
    smt, l2, local, remote = 1, 2**20, 10, 21
    for part in rest:
        key, _, val = part.partition(" ")
        key, val = key.lower(), val.strip()
        try:
            if key == "smt":
                smt = int(val)
            elif key == "l2":
                l2 = _size(val)
            elif key == "distances":
                a, b = val.split("/")
                local, remote = int(a), int(b)
            else:
                raise TopologyError(f"machine description {text!r}: unknown setting {key!r} (smt, l2, distances)")
        except ValueError:
            raise TopologyError(f"machine description {text!r}: cannot read {part!r}") from None
    if not (1 <= nodes <= MAX_NODES) or cores < 1 or not (1 <= smt <= 8) or nodes * cores * smt > MAX_CPUS:
        raise TopologyError(f"machine description {text!r}: 1-{MAX_NODES} nodes, 1-8 threads per core, at most "
                            f"{MAX_CPUS} CPUs")
    if not (1 <= local <= remote):
        raise TopologyError(f"machine description {text!r}: distances need 1 <= local <= remote")
    cpus, node_list, caches = [], [], []
    for n in range(nodes):
        ids = []
        for c in range(cores):
            core = n * cores + c
            sib = tuple(core * smt + t for t in range(smt))
            for t in sib:
                cpus.append(CPU(t, core, n, n, sib))
                ids.append(t)
            caches.append(Cache(2, "Unified", l2, 64, 16, sib))
        node_list.append(Node(n, tuple(ids), 64 * 2**30, 64 * 2**30,
                              tuple(local if j == n else remote for j in range(nodes))))
    return Topology(root=f"sim:{text}", live=False, nodes=tuple(node_list), cpus=tuple(cpus), caches=tuple(caches),
                    captured_cpu_model="simulated")


def machine(spec: str | None) -> Topology:
    """``None`` or ``"live"``: this machine; an existing folder: a captured tree (its
    ``sys/`` and ``proc/``); anything else: a description (module doc)."""
    from topology import probe

    if spec is None or spec == "live":
        return probe()
    if os.path.isdir(spec):
        return probe(spec)
    return describe(spec)


__all__ = ["describe", "machine"]
