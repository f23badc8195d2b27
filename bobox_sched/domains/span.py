"""A request that spans domains: its plan cut into one part per domain, each cross-domain
edge replaced by a channel (``channel.py``).

Which operator goes where: the plan's lanes (``Plan.lane``: ``Query(parallel=k)``
marks every per-partition operator with its partition) map to domains,
``lane % domains`` in the order the front chose (the request's home domain first), and
every operator without a lane (a scan of a small table, a broadcast, the unions and
merges that gather partitions, the sink) runs in the home domain. An edge whose ends
run in different domains becomes a ``ChannelOut`` operator in the producer's part and a
``ChannelIn`` source in the consumer's, joined by a channel segment that the front
makes here and unlinks when the request ends. Within a domain the parts' operators are
the plan's own, so the domain's Bobox policy runs them as it runs any plan: this is
the paper's *share* of a decomposed request, across interpreters.
"""

from __future__ import annotations

from bobox_sched.core.plan import Plan
from bobox_sched.domains.channel import ChannelIn, ChannelOut, create_channel


def place(plan: Plan, slots: list[int]) -> dict[str, int]:
    """Each operator's domain slot: lane ``i`` on ``slots[i % len(slots)]``, the rest on
    ``slots[0]`` (the home)."""
    lanes = plan._lanes
    return {name: slots[lanes[name] % len(slots)] if name in lanes else slots[0] for name in plan._specs}


def split(plan: Plan, slots: list[int], bells: dict[int, str]) -> tuple[dict[int, Plan], list]:
    """The parts of `plan` (slot -> Plan, the home's first) and the channel segments made
    for its cross-domain edges (module doc); `bells`: each slot's bell segment name."""
    where = place(plan, slots)
    parts: dict[int, Plan] = {}
    for s in slots:
        if s in where.values():
            parts[s] = Plan(f"{plan.name}@{s}")
    for name, (factory, args, kwargs) in plan._specs.items():
        parts[where[name]].add(name, factory, *args, **kwargs)
        if name in plan._places:
            parts[where[name]].place(name, plan._places[name])
    segs = []
    try:
        for k, (s, sp, d, dp) in enumerate(plan._edges):
            src = s if sp is None else f"{s}.{sp}"
            dst = d if dp is None else f"{d}.{dp}"
            a, b = where[s], where[d]
            if a == b:
                parts[a].connect(src, dst)
                continue
            seg = create_channel()
            segs.append(seg)
            seg.close()
            out, inp = f"_to{b}_{k}", f"_from{a}_{k}"
            parts[a].add(out, ChannelOut, seg.name, bells[b])
            parts[a].connect(src, out)
            parts[b].add(inp, ChannelIn, seg.name, bells[b])
            parts[b].connect(inp, dst)
    except BaseException:
        for seg in segs:
            seg.unlink()
        raise
    return parts, segs


__all__ = ["place", "split"]
