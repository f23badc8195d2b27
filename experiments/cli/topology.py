"""``bobox topology``: the topology package's command (``topology/cli.py``) plus
``--domains``: how ``Scheduler(domains=...)`` would cut this machine (or a captured
tree) into domain processes (``bobox_sched/domains/front.py``'s ``layout``)."""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    from bobox_sched.core import limits
    from topology.cli import add_arguments as base

    from experiments.cli.argtypes import count
    from experiments.cli.run import domains_arg

    base(p)
    p.add_argument("--domains", type=domains_arg, metavar="auto|off|N",
                   help="also show the domains Scheduler(domains=...) would run: CPUs and node of each")
    p.add_argument("--domain-workers", type=count(limits.MAX_THREADS_PER_NODE), metavar="W", default=None,
                   help="with --domains auto: the most CPUs per domain (default 8)")


def run(args) -> int:
    from topology.cli import run as base

    if args.domains is None:
        return base(args)
    from bobox_sched.core.errors import BoboxError
    from bobox_sched.domains.front import cpu_ranges, layout
    from topology.probe import probe

    topo = probe(args.root, packet_bytes=args.packet_bytes)
    try:
        places = layout(topo, args.domains, args.domain_workers)
    except ValueError as e:
        raise BoboxError(str(e)) from None
    if args.json:
        doc = topo.to_json()
        doc["domains"] = [{"domain": i, "cpus": c, "node": n} for i, (c, n) in enumerate(places or [])]
        print(json.dumps(doc))
        return 0
    base(args)
    print()
    if not places:
        print(f"domains={args.domains!r}: one in-process runtime on every CPU (the layout has no domains)")
        return 0
    print(f"domains={args.domains!r}: {len(places)} domain processes")
    for i, (cpus, node) in enumerate(places):
        print(f"  domain {i}: CPUs {cpu_ranges(cpus)} ({len(cpus)}), "
              + (f"node {node}'s memory preferred" if node is not None else "several nodes: no memory binding"))
    return 0
