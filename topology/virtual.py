"""Virtual NUMA nodes: a machine's CPUs split into k nodes (same memory), so that
node-aware scheduling (placement, balancing, channels spread over nodes) can be
exercised and studied on a one-node machine. Page placement is of course not real."""

from __future__ import annotations

from topology.errors import TopologyError
from topology.probe import Topology


def virtual_topology(topo: Topology, k: int) -> Topology:
    """The machine's CPUs split into `k` NUMA nodes (same memory): lets the balancer be
    studied on a one-node machine. Node i keeps the real node's OS index for i == 0."""
    from dataclasses import replace

    from topology.probe import Node

    cpus = [c.os_index for c in topo.cpus]
    if k > len(cpus):
        raise TopologyError(f"cannot split {len(cpus)} CPUs into {k} virtual nodes")
    base = topo.cpu_nodes[0]
    nodes = []
    for i in range(k):
        part = tuple(cpus[len(cpus) * i // k: len(cpus) * (i + 1) // k])
        nodes.append(Node(i if i else base.os_index, part, (base.memory_bytes or 0) // k, (base.free_bytes or 0) // k,
                          tuple(10 if j == i else 20 for j in range(k))))
    node_of = {c: n.os_index for n in nodes for c in n.cpus}
    new_cpus = tuple(replace(c, node=node_of[c.os_index]) for c in topo.cpus)
    return replace(topo, nodes=tuple(nodes), cpus=new_cpus,
                   notes=topo.notes + (f"{k} virtual nodes made of one real node's CPUs",))


__all__ = ["virtual_topology"]
