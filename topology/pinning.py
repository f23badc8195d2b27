"""Pin the calling thread to a NUMA node's CPUs or to one CPU, and read the mask back.

On Linux ``os.sched_setaffinity(0, ...)`` applies to the *calling thread* (pid 0 is the
caller's TID for this system call), so these functions work from any worker thread and
leave the other threads of the process alone.

Where pinning is impossible (no ``sched_setaffinity`` on this platform, CPUs outside the
cgroup's cpuset, ...) a :class:`PinningWarning` is issued and the thread keeps its mask:
a scheduler that cannot pin still schedules correctly, only with less locality. Asking for
a node or CPU this machine does not have is a caller error and raises
:class:`~topology.errors.TopologyError`.
"""

from __future__ import annotations

import os
import warnings

from topology.errors import TopologyError
from topology.probe import Topology


class PinningWarning(RuntimeWarning):
    """The thread could not be pinned; it runs with its previous CPU mask."""


def current_mask() -> set[int]:
    """The calling thread's CPU affinity mask (all CPUs where unsupported)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def pin_to_cpus(cpus) -> set[int]:
    """Pin the calling thread to `cpus`; return the mask actually in force afterwards."""
    want = {int(c) for c in cpus}
    if not want:
        raise TopologyError("cannot pin a thread to an empty CPU set")
    if not hasattr(os, "sched_setaffinity"):
        warnings.warn("thread pinning is not supported on this platform", PinningWarning, 2)
        return current_mask()
    try:
        os.sched_setaffinity(0, want)
    except OSError as e:
        warnings.warn(
            f"could not pin thread to CPUs {sorted(want)}: {e.strerror or e}", PinningWarning, 2
        )
    return current_mask()


def pin_to_node(topo: Topology, node: int) -> set[int]:
    """Pin the calling thread to every CPU of NUMA node `node` (OS index)."""
    n = topo.node(node)  # raises TopologyError for an unknown node
    if not n.cpus:
        raise TopologyError(f"NUMA node {node} has no usable CPU to pin to")
    return pin_to_cpus(n.cpus)


def pin_to_cpu(topo: Topology | None, cpu: int) -> set[int]:
    """Pin the calling thread to one CPU (OS index)."""
    if topo is not None:
        topo.cpu(cpu)  # raises TopologyError for an unknown CPU
    return pin_to_cpus([cpu])
