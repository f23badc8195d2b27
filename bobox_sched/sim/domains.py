"""Domains simulated: the machine cut into interpreters as ``bobox run --domains`` cuts it
(``topology.partition.domain_layout``), each a :class:`~bobox_sched.sim.engine.Simulation`
of its own CPUs with its own GIL, fed by a front.

The front (as ``bobox_sched/domains/front.py`` does): every request waits in it until a
domain has room -- at most ``INFLIGHT_PER_WORKER`` requests per worker of the domain --
and goes to the least loaded domain (requests per worker), arriving ``FRONT_NS`` later;
when a domain ends a request, the front sends it the next waiting one. A request runs
whole inside its domain. Not simulated: requests spanning domains (``domains/span.py``)
and the front's own Python (its own process, off every domain's GIL).

The domains' simulations are stepped together in time order (the one whose next event
comes first plays it), so the front sees each request end at its virtual time. Each
domain checks its own invariants; the run's figures are the domains' combined.

Memory bandwidth (``Costs.node_bandwidth_gbs``, ``engine.py``'s module doc) is the
node's, whichever domain reads from it: the domains share one count of the tasks reading
from each node (``Simulation.reading``), which they update in that same time order, so
two domains on one node share its bandwidth as two workers of one interpreter do.
"""

from __future__ import annotations

from collections import deque

from bobox_sched.sim.engine import Simulation
from topology.partition import domain_layout

# Requests the front sends a domain per worker: domains/front.py's INFLIGHT_PER_WORKER
# (tests/test_sim.py checks that they agree).
INFLIGHT_PER_WORKER = 2
# From a domain's done message to the next request arriving in it: the front's reader
# wakes up and sends (front.py: "~0.1 ms here", the 2-core VM).
FRONT_NS = 100_000


class DomainsSimulation:
    """`plans` run on `topology` cut into `domains` ("auto", N or "off": module doc)."""

    def __init__(self, topology, plans, domains="auto", policy: str = "bobox", threads_per_node: int | None = None,
                 seed: int = 0, costs=None, domain_workers: int | None = None, label: str | None = None):
        lay = domain_layout(topology, domains, domain_workers, gil=True)
        if lay is None:  # one interpreter: the whole machine
            lay = [([c for n in topology.cpu_nodes for c in n.cpus], None)]
        self.layout = lay
        self.topology = topology
        self.sims = []
        for i, (cpus, nid) in enumerate(lay):
            sub = topology.restrict(nodes=None if nid is None else [nid], cpus=cpus)
            self.sims.append(Simulation(sub, [], policy=policy, threads_per_node=threads_per_node,
                                        seed=seed * 1009 + i, costs=costs,
                                        label=f"{label or 'simulated'} · domain {i}"))
        shared: dict = {}  # node -> tasks reading from it now, over every domain (module doc)
        for s in self.sims:
            s.reading = shared
        self.seed = seed
        self.waiting = deque(plans)

    @staticmethod
    def _inflight(sim) -> int:
        """Requests the front sent `sim` that have not ended (a domain's ``plans`` are the
        requests sent to it, ``done`` those ended)."""
        return len(sim.plans) - len(sim.done)

    def _send(self, t: float) -> None:
        """The front fills every domain up to its limit, least loaded first."""
        sims = self.sims
        while self.waiting:
            room = [s for s in sims if self._inflight(s) < INFLIGHT_PER_WORKER * len(s.workers)]
            if not room:
                return
            s = min(room, key=lambda s: self._inflight(s) / len(s.workers))  # the first of equals
            s.submit_at(t + FRONT_NS, self.waiting.popleft())

    def run(self) -> dict:
        for s in self.sims:
            s.start()
        self._send(0)
        sims = self.sims
        while True:
            nxt, i = None, -1
            for k, s in enumerate(sims):
                t = s.next_time()
                if t is not None and (nxt is None or t < nxt):
                    nxt, i = t, k
            if i < 0:
                break
            s = sims[i]
            before = len(s.done)
            s.step()
            if len(s.done) > before:  # a request ended: the front sends the next
                self._send(s.now)
        parts = [s.finish() for s in sims]
        return self.summary(parts)

    def summary(self, parts) -> dict:
        span = max(p["makespan_ms"] for p in parts)
        workers = sum(p["workers"] for p in parts)
        busy = sum(p["busy_ms"] for p in parts)
        return {
            "policy": parts[0]["policy"], "domains": len(parts), "seed": self.seed, "workers": workers,
            "requests": sum(p["requests"] for p in parts), "makespan_ms": span,
            "nodes": len(self.topology.cpu_nodes), "tasks": sum(p["tasks"] for p in parts),
            "steals": sum(p["steals"] for p in parts), "sleeps": sum(p["sleeps"] for p in parts),
            "migrations": sum(p["migrations"] for p in parts), "shares": sum(p["shares"] for p in parts),
            "events": sum(p["events"] for p in parts), "busy_ms": round(busy, 4),
            "bytes": sum(p["bytes"] for p in parts), "bandwidth_bound": sum(p["bandwidth_bound"] for p in parts),
            "utilisation": round(busy / (span * workers), 4) if span else 0.0,
            "requests_per_domain": [len(s.plans) for s in self.sims], "per_domain": parts,
        }


__all__ = ["FRONT_NS", "INFLIGHT_PER_WORKER", "DomainsSimulation"]
