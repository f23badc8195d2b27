"""Where chain pools live and who walks them (spec 3.3, ``numa_mode``).

* ``shared-nothing``: one pool per worker thread; records are routed to pools by key
  (``key mod P``); pool p's task goes to worker p (``Policy.push_on(worker=)``) and its
  records' segment is on that worker's node.
* ``shared-per-socket``: one pool per NUMA node, walked by that node's workers
  (``push_on(node=)``), records on the node.
* ``shared-everything``: one pool, walked by any worker; its records are spread over the
  nodes (by key), as an interleaved shared structure would be.

``work_stealing``: every worker of the pool's node (everything: every worker) runs a
task on the pool and claims its chains one at a time (an atomic cursor); without it a
pool has exactly one task per round.

Under a policy without nodes (``simple``: workers not bound to nodes) every pool is on
node None (plain memory) and placement requests become plain deferred tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bobox_sched.txn.config import partition_of_key


@dataclass
class Target:
    worker: object = None  # a Worker, or None
    node: int | None = None  # an OS node index, or None


@dataclass
class Placement:
    mode: str
    npools: int
    pool_nodes: list  # node of each pool (None: no node)
    tasks: list  # per pool: the Targets of its tasks in one round
    pool_of_rec: np.ndarray  # per global record
    seg_pool_nodes: list = field(default_factory=list)  # node of each pool for the store layout
    key: tuple = ()


def make_placement(mode: str, stealing: bool, workers: list, store) -> Placement:
    nodes = []
    for w in workers:
        if w.node_id not in nodes:
            nodes.append(w.node_id)
    by_node = {n: [w for w in workers if w.node_id == n] for n in nodes}
    keys = store.key_of
    if mode == "shared-nothing":
        P = len(workers)
        pool_nodes = [w.node_id for w in workers]
        if stealing:
            tasks = [[Target(worker=w)] + [Target(worker=v) for v in by_node[w.node_id] if v is not w]
                     for w in workers]
        else:
            tasks = [[Target(worker=w)] for w in workers]
        pool_of_rec = partition_of_key(keys, P).astype(np.int64)
        seg_nodes = pool_nodes
    elif mode == "shared-per-socket":
        P = len(nodes)
        pool_nodes = list(nodes)
        k = (lambda n: len(by_node[n])) if stealing else (lambda n: 1)
        tasks = [[Target(node=n) for _ in range(k(n))] for n in nodes]
        pool_of_rec = partition_of_key(keys, P).astype(np.int64)
        seg_nodes = pool_nodes
    elif mode == "shared-everything":
        P = 1
        pool_nodes = [None]
        tasks = [[Target() for _ in range(len(workers) if stealing else 1)]]
        pool_of_rec = np.zeros(len(keys), np.int64)
        # the one pool's records interleaved over the nodes, by key
        seg_nodes = list(nodes)
        return Placement(mode, P, pool_nodes, tasks, pool_of_rec, seg_nodes,
                         key=(mode, tuple(seg_nodes), "interleave"))
    else:
        raise ValueError(f"unknown numa_mode {mode!r}")
    return Placement(mode, P, pool_nodes, tasks, pool_of_rec, seg_nodes, key=(mode, tuple(seg_nodes), P))


def place_store(pl: Placement, store) -> None:
    """Lay the store's records out on the pools' nodes (see the module doc)."""
    if pl.mode == "shared-everything":
        n = len(pl.seg_pool_nodes)
        store.place(partition_of_key(store.key_of, n).astype(np.int64), pl.seg_pool_nodes, key=pl.key)
    else:
        store.place(pl.pool_of_rec, pl.seg_pool_nodes, key=pl.key)


__all__ = ["Placement", "Target", "make_placement", "place_store"]
