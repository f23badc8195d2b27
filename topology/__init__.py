"""Topology probe: NUMA nodes, CPUs, caches and distances of a Linux machine (or of a
captured sysfs/procfs tree), thread pinning, node-local memory, NUMA-factor measurement.

    >>> import topology
    >>> topo = topology.probe()            # the live machine
    >>> topo.packet_bytes                  # half the L2 cache
    >>> topology.pin_to_node(topo, 0)      # pin the calling thread
    >>> a = topology.alloc_on_node(1 << 20, 0)
    >>> topology.node_histogram(a)         # Counter({0: 256}) per the kernel
"""

from topology.errors import TopologyError
from topology.memory import (
    alloc_local,
    alloc_on_node,
    check_node,
    current_node,
    node_histogram,
    numa_available,
    page_nodes,
    prefer_node,
)
from topology.pinning import PinningWarning, current_mask, pin_to_cpu, pin_to_cpus, pin_to_node
from topology.probe import CPU, Cache, Node, Topology, node_free_bytes, probe

__all__ = [
    "CPU",
    "Cache",
    "Node",
    "PinningWarning",
    "Topology",
    "TopologyError",
    "alloc_local",
    "alloc_on_node",
    "check_node",
    "current_mask",
    "current_node",
    "node_free_bytes",
    "node_histogram",
    "numa_available",
    "page_nodes",
    "pin_to_cpu",
    "pin_to_cpus",
    "pin_to_node",
    "prefer_node",
    "probe",
]
