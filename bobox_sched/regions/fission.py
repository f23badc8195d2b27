"""Fission: expand a plan's parallel regions into channels (Schneider et al. section 4).

``parallelize(plan, degree=N)`` returns a new :class:`~bobox_sched.Plan` in which every
region found by ``regions.analyze`` runs as N channels (``Scheduler.submit(plan,
parallelism=N)`` does this at submit time: the analyser fixes where and how, the degree
is chosen per submission). For a region ``a -> b`` between ``p`` and ``s``::

    p -> a@split -> a@0 -> b@0 -> b@merge -> s
                 \\-> a@1 -> b@1 -/

* ``<head>@split``: a :class:`~.splitter.SplitterOperator` (round-robin or hash of the
  region key; numbering and pulses when the region's merger needs them);
* ``<op>@<c>``: fresh instances of each member, one per channel, wrapped in a
  :class:`~.channel.ChannelOperator`; with ``place=True`` channel c of every member is
  placed on node slot c (``Plan.place``: channels spread over the NUMA nodes, each
  channel's state allocated by its node's workers);
* ``<tail>@merge``: a :class:`~.merger.MergerOperator` running the least general safe
  strategy (or the ``ordering`` override, which may only go up the lattice).

Adjacent regions joined by a shuffle: every channel of the first ends in
``<tail>@route<i>`` (a routing-only splitter by the second region's key) and every
channel of the second starts with ``<head>@shuffle<j>`` (a strict seqno + pulses merger
that keeps seqnos and forwards one copy of each pulse and punctuation). After a prolific
region the two are joined by a merge and a split instead (R6). A parallel source's
channels are ``source.for_channel(c, N)``; a parallel sink's replicas publish their
results under their own names.
"""

from __future__ import annotations

import copy

from bobox_sched.core.limits import check_degree_cap
from bobox_sched.core.operator import Operator
from bobox_sched.core.plan import Plan
from bobox_sched.regions import analysis as RG
from bobox_sched.regions.channel import PLAIN, RR, SEQ_MODE, ChannelOperator
from bobox_sched.regions.merger import LATTICE, ROUND_ROBIN, STRICT, UNORDERED, MergerOperator
from bobox_sched.regions.splitter import EDGE, PACKET, SHUFFLE_ROLE, SplitterOperator

DEFAULT_EPOCH = 10  # pulses every epoch * N units: the paper's default (section 6.2, Fig. 9 epoch)


def _make(spec):
    factory, args, kwargs = spec
    if isinstance(factory, Operator):
        return copy.deepcopy(factory)
    return factory(*args, **kwargs)


def make_channel(spec, mode: str, channel: int, degree: int, check: bool = True):
    """A fresh member instance for one channel (plan factory of ``<op>@<c>``)."""
    inner = _make(spec)
    if not inner.inputs:  # a parallel source: its partition of the stream
        part = inner.for_channel(channel, degree)
        return inner if part is None else part
    if mode == PLAIN:
        inner.region_channel = channel
        inner.region_degree = degree
        return inner
    return ChannelOperator(inner, mode, channel, degree, check)


def _per_region(value, rp, what: str, default):
    """A per-region setting: one value for all, or {region index or head name: value}."""
    out = {}
    if isinstance(value, dict):
        known = {r.index for r in rp.regions} | {r.head for r in rp.regions}
        bad = [k for k in value if k not in known]
        if bad:
            raise ValueError(f"{what}: no region {bad[0]!r} (regions: "
                             f"{', '.join(f'{r.index}={r.head}' for r in rp.regions) or 'none'})")
        for r in rp.regions:
            out[r.index] = value.get(r.index, value.get(r.head, default))
    else:
        for r in rp.regions:
            out[r.index] = default if value is None else value
    return out


def parallelize(plan: Plan, degree=2, *, ordering=None, epoch: int = DEFAULT_EPOCH, epoch_unit: str = PACKET,
                place: bool = True, check: bool = True, stats: dict | None = None, analysis=None) -> Plan:
    """The plan with each parallel region expanded into channels (module doc).

    `degree`: channels per region (an int, or ``{region index or head name: int}``, where
    regions not named get 1). `ordering`: a strategy name for every region's exit merger, or
    a dict per region; only upward from the analysed one (``round_robin < seqno < strict
    < relaxed``). `epoch`: pulses every ``epoch * N`` packets (``epoch_unit="row"``: rows).
    `stats`: a dict the splitters and mergers fill with their figures at the end.
    A region of degree 1 still gets its splitter and merger (N=1 is a real measurement).
    A degree above ``limits.MAX_CHANNELS`` raises BoboxError before anything is built."""
    check_degree_cap(degree)
    rp = analysis if analysis is not None else RG.analyze(plan)
    if isinstance(degree, dict):
        degrees = _per_region(degree, rp, "degree", 1)
    else:
        degrees = _per_region(degree, rp, "degree", degree)
    for i, d in degrees.items():
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:
            raise ValueError(f"degree of region {i} must be a positive integer, got {d!r}")
    overrides = _per_region(ordering, rp, "ordering", None)
    for i, o in overrides.items():
        if o is None:
            continue
        r = rp.regions[i]
        if o not in LATTICE:
            raise ValueError(f"ordering {o!r} is not one of {', '.join(LATTICE)}")
        if r.ordering == UNORDERED:
            raise ValueError(f"region {i} ({r.head}) is unordered (parallel source or sink): no ordering to choose")
        if LATTICE.index(o) < LATTICE.index(r.ordering):
            raise ValueError(f"region {i} ({r.head}) needs at least {r.ordering} ordering; an override may only go "
                             f"up the lattice {' < '.join(LATTICE)}, not down to {o}")
    return _expand(plan, rp, degrees, overrides, epoch, epoch_unit, place, check, stats)


def _chains(rp):
    nxt = dict(rp.shuffles)
    prev = {b: a for a, b in rp.shuffles}
    out = []
    for r in rp.regions:
        if r.index in prev:
            continue
        chain = [r.index]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        out.append(chain)
    return out


def _expand(plan, rp, degrees, overrides, epoch, epoch_unit, place, check, stats) -> Plan:
    specs = plan._specs
    new = Plan(plan.name)
    # Effective strategy of every region's exit, numbering and pulses per chain.
    exit_order = {}
    numbered = {}
    pulses = {}
    windows = {}
    for chain in _chains(rp):
        win = any(rp.regions[i].window_groups for i in chain)
        for i in chain:
            windows[i] = win
        last = rp.regions[chain[-1]]
        for i in chain:
            r = rp.regions[i]
            o = overrides[i] or r.ordering
            exit_order[i] = o
        unordered = last.ordering == UNORDERED
        num = not unordered and (len(chain) > 1 or exit_order[chain[-1]] != ROUND_ROBIN)
        pul = num and (len(chain) > 1 or any(exit_order[i] in (STRICT, "relaxed") for i in chain))
        for i in chain:
            numbered[i] = num
            pulses[i] = pul
    mode = {}
    for r in rp.regions:
        if exit_order[r.index] == UNORDERED:
            mode[r.index] = PLAIN
        elif numbered[r.index]:
            mode[r.index] = SEQ_MODE
        else:
            mode[r.index] = RR

    for name, spec in specs.items():
        r = rp.region(name)
        if r is None:
            factory, args, kwargs = spec
            new.add(name, factory, *args, **kwargs)
            if name in plan._places:
                new.place(name, plan._places[name])
            continue
        n = degrees[r.index]
        for c in range(n):
            cname = f"{name}@{c}"
            new.add(cname, make_channel, spec, mode[r.index], c, n, check)
            new.lane(cname, c)  # a Scheduler with domains may run channel c elsewhere (Plan.lane)
            if place:
                new.place(cname, c)
    prev_of = {b: a for a, b in rp.shuffles}
    for r in rp.regions:
        n = degrees[r.index]
        if r.first_joint == RG.SPLIT:
            new.add(f"{r.head}@split", SplitterOperator, n, r.key, numbered[r.index], pulses[r.index], epoch,
                    epoch_unit, EDGE, stats, windows[r.index])
        elif r.first_joint == RG.SHUFFLE:
            a = rp.regions[prev_of[r.index]]
            na = degrees[a.index]
            strat = UNORDERED if exit_order[a.index] == UNORDERED else (
                overrides[a.index] if overrides[a.index] and LATTICE.index(overrides[a.index]) > LATTICE.index(STRICT)
                else STRICT)
            for j in range(n):
                new.add(f"{r.head}@shuffle{j}", MergerOperator, na, strat, True, check, "shuffle", stats)
                new.lane(f"{r.head}@shuffle{j}", j)
                if place:
                    new.place(f"{r.head}@shuffle{j}", j)
            for i in range(na):
                new.add(f"{a.tail}@route{i}", SplitterOperator, n, r.key, False, False, epoch, epoch_unit,
                        SHUFFLE_ROLE, stats)
                new.lane(f"{a.tail}@route{i}", i)
                if place:
                    new.place(f"{a.tail}@route{i}", i)
        if r.last_joint == RG.MERGE:
            new.add(f"{r.tail}@merge", MergerOperator, n, exit_order[r.index], False, check, "merge", stats,
                    windows[r.index] and exit_order[r.index] != UNORDERED)

    def exit_of(op, port):
        r = rp.region(op)
        if r is None:
            return [(op, port)]
        assert op == r.tail and r.last_joint == RG.MERGE
        return [(f"{op}@merge", "out")]

    def entry_of(op, port):
        r = rp.region(op)
        if r is None:
            return (op, port)
        assert op == r.head and r.first_joint == RG.SPLIT
        return (f"{op}@split", "in")

    for s_op, s_port, d_op, d_port in plan._edges:
        rs, rd = rp.region(s_op), rp.region(d_op)
        if rs is not None and rs is rd:  # inside one region: per channel
            for c in range(degrees[rs.index]):
                new.connect(_ref(f"{s_op}@{c}", s_port), _ref(f"{d_op}@{c}", d_port))
            continue
        if rs is not None and rs.last_joint == RG.SHUFFLE and rd is not None and rd.first_joint == RG.SHUFFLE:
            na, nb = degrees[rs.index], degrees[rd.index]
            for i in range(na):
                new.connect(_ref(f"{s_op}@{i}", s_port), f"{s_op}@route{i}.in")
                for j in range(nb):
                    new.connect(f"{s_op}@route{i}.out{j}", f"{d_op}@shuffle{j}.in{i}")
            for j in range(nb):
                new.connect(f"{d_op}@shuffle{j}.out", _ref(f"{d_op}@{j}", d_port))
            continue
        (src,) = exit_of(s_op, s_port)
        dst = entry_of(d_op, d_port)
        new.connect(_ref(*src), _ref(*dst))
    # channel ends of each region: splitter outputs -> heads, tails -> merger inputs
    for r in rp.regions:
        n = degrees[r.index]
        if r.first_joint == RG.SPLIT:
            for c in range(n):
                new.connect(f"{r.head}@split.out{c}", f"{r.head}@{c}")
        if r.last_joint == RG.MERGE:
            for c in range(n):
                new.connect(f"{r.tail}@{c}", f"{r.tail}@merge.in{c}")
    return new


def _ref(op, port):
    return op if port is None else f"{op}.{port}"


__all__ = ["DEFAULT_EPOCH", "make_channel", "parallelize"]
