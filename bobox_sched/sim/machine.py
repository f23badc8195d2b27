"""The machine a simulation runs on: the live one, a captured sysfs tree (like the hwloc
fixtures), or a description.

A description is ``NODES x CORES`` with optional comma-separated settings, e.g.
``"4x16"``, ``"4 nodes x 16 cores, smt 2, l2 1M, distances 10/21"``:

* ``smt K``: hardware threads per core (default 1); a worker runs per hardware thread;
* ``l2 SIZE``: the L2 per core (default 1M; the packet size is half of it, as on a real
  machine);
* ``distances LOCAL/REMOTE``: the node distance matrix's two values (default 10/21, what
  two-socket x86 machines report);
* ``bandwidth GBPS``: each node's memory bandwidth in GB/s, e.g. ``bandwidth 40G`` (or
  ``40``, ``40 GB/s``; default: unlimited), shared by the tasks reading from the node at
  once (``engine.py``'s ``Costs.node_bandwidth_gbs``).

:func:`machine` returns a ``topology.Topology`` (``live`` False, ``root`` naming the
source), so the scheduler's policies see exactly what they would see on such a machine.
A Topology has no bandwidth: :func:`bandwidth_of` reads it from the same text (None for
the live machine, a captured tree, or a description that sets none), for the caller's
``Costs``.
"""

from __future__ import annotations

import os
import re

from topology.errors import TopologyError
from topology.probe import CPU, Cache, Node, Topology

MAX_NODES = 64
MAX_CPUS = 4096  # what limits.py allows a real machine too
# A node's bandwidth at most, GB/s: far above any node's memory (the H200's HBM3e, 4.8 TB/s
# for the whole package, is 4,800), so only a typo is refused.
MAX_BANDWIDTH_GBS = 10_000.0
_SIZE = re.compile(r"^(\d+)\s*([kKmMgG]?)(?:i?[bB])?$")
_BANDWIDTH = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(?:g|gb/s|gbps|gb)?$", re.IGNORECASE)


def _size(text: str) -> int:
    m = _SIZE.match(text.strip())
    if not m:
        raise TopologyError(f"machine description: cannot read the size {text!r} (e.g. 1M, 512K)")
    return int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2).lower()]


def _bandwidth(text: str, part: str, val: str) -> float:
    m = _BANDWIDTH.match(val)
    gbs = float(m.group(1)) if m else 0.0
    if not 0 < gbs <= MAX_BANDWIDTH_GBS:
        raise TopologyError(f"machine description {text!r}: cannot read {part!r} (GB/s per node, above 0 and at "
                            f"most {MAX_BANDWIDTH_GBS:g}, e.g. 'bandwidth 40G')")
    return gbs


def _settings(text: str) -> tuple:
    """(nodes, cores, smt, l2, local, remote, bandwidth GB/s or None) of a description."""
    head, *rest = [p.strip() for p in text.split(",")]
    m = re.match(r"^(\d+)\s*(?:nodes?)?\s*[xX×]\s*(\d+)\s*(?:cores?)?$", head)
    if not m:
        raise TopologyError(f"machine description {text!r}: expected 'NODES x CORES[, smt K][, l2 SIZE]"
                            "[, distances L/R][, bandwidth GBPS]', e.g. '4 nodes x 16 cores, smt 2'")
    nodes, cores = int(m.group(1)), int(m.group(2))
    smt, l2, local, remote, bandwidth = 1, 2**20, 10, 21, None
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
            elif key == "bandwidth":
                bandwidth = _bandwidth(text, part, val)
            else:
                raise TopologyError(f"machine description {text!r}: unknown setting {key!r} (smt, l2, distances, "
                                    "bandwidth)")
        except ValueError:
            raise TopologyError(f"machine description {text!r}: cannot read {part!r}") from None
    return nodes, cores, smt, l2, local, remote, bandwidth


def bandwidth_of(spec: str | None) -> float | None:
    """The GB/s per node that `spec` (what :func:`machine` takes) sets with ``bandwidth``
    (module doc); None where it sets none: the live machine, a captured tree, a
    description without it. A description that cannot be read raises as :func:`describe`."""
    if spec is None or spec == "live" or os.path.isdir(spec):
        return None
    return _settings(spec)[6]


def describe(text: str) -> Topology:
    """A Topology from a description (module doc; its ``bandwidth``: :func:`bandwidth_of`)."""
    nodes, cores, smt, l2, local, remote, _bandwidth_gbs = _settings(text)
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


__all__ = ["MAX_BANDWIDTH_GBS", "bandwidth_of", "describe", "machine"]
