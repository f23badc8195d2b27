"""Parallel-region analysis: where a plan may be replicated into channels, and how.

Schneider et al., *Safe Data Parallelism for General Streaming*, section 3 (spec
``specs/001-safe-parallelism.md`` sections 1-2). The analyser decides *where* regions are
and *which strategy* each uses, never the degree (``parallelize``/``submit(parallelism=N)``
choose N). It trusts the operator models (``model.py``); undeclared means unknown, and
nothing unknown is parallelised.

Rules: an operator o may join region R only if

R1  its state is known (stateless or Partitioned(key)); a source only as a *parallel
    source* (declared Partitioned, with ``for_channel(i, n)``);
R2  it has at most one input and one output, so that R has one entry and one exit;
R3  the region key (the attributes every partitioned member shares) stays non-empty;
R4  every member between the region entry and a partitioned member forwards the region
    key unchanged (``forwarding``/``reassigns``);
R5  members fused with it (``fuse_with``) are in R too, or neither is in any region;
R6  (at the joints) a region that may emit several rows per input (prolific) ends in a
    merge, never in a shuffle;
R7  punctuations it generates do not leave R (they would reach the merger once per
    channel): an operator whose generated punctuations reach R's exit is not placed;
R8  it does not emit on a punctuation or a timer (expecting input with outputs, or
    ``timer_driven``), unless it declares ``emit_order="unordered"``;
R9  (derived, bobox) a selective or prolific member says which input row caused each
    output row (``seq_aware = True``: ``ctx.send_derived``), so that its outputs carry
    seqnos; EXACTLY_ONE members need not (the channel attaches seqnos by position).

Formation (spec section 2): operators are visited in topological order; a region starts
at the first unassigned operator passing R1/R2/R8/R9 and grows greedily along single
successors while R1-R4 hold, tracking its key K, the attributes F forwarded unchanged
from its entry, and its selectivity range; when growth stops, R5 and R7 are enforced by
truncating the region before the first offending member (which is not parallelised) and
re-examining what follows it. Strategies (Table 1): routing hash(K) when K is set, else
round-robin; ordering the least general that covers the region: round-robin (stateless,
exactly one), seqno (partitioned, exactly one), strict seqno + pulses (at most one),
relaxed seqno + pulses (prolific). Adjacent regions are joined by a *shuffle* when the
first is not prolific (R6), else by a merge and a split; a chain of shuffled regions is
numbered once at its first splitter, its shuffle mergers run strict seqno + pulses and
its last merger the strategy of the chain's combined selectivity (at least seqno). A
chain that starts at a parallel source or ends at a parallel sink is unordered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bobox_sched.control import model as M
from bobox_sched.regions.merger import LATTICE, RELAXED, ROUND_ROBIN, SEQNO, STRATEGY_NAMES, STRICT, UNORDERED

INF = None  # selectivity upper bound: unbounded

# Joint kinds (section 3.4)
SPLIT = "split"
SHUFFLE = "shuffle"
MERGE = "merge"
PARALLEL_SOURCE = "parallel source"
PARALLEL_SINK = "parallel sink"

RULES = {
    "R1": "state",
    "R2": "fan-in/fan-out",
    "R3": "compatible keys",
    "R4": "forwarded keys",
    "R5": "region-local fusion",
    "R6": "no shuffle after prolific",
    "R7": "punctuation dependencies",
    "R8": "emits on punctuation or timer",
    "R9": "seqno propagation",
}


@dataclass(frozen=True)
class Exclusion:
    """Why operator `op` is in no region."""

    op: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} ({RULES[self.rule]}): {self.reason}"


@dataclass
class Region:
    """An unexpanded parallel region: a chain of operators ``ops`` (entry first)."""

    index: int
    ops: tuple
    key: tuple | None  # the region key; None = no key (stateless: round-robin routing)
    selectivity: tuple  # (lo, hi) output rows per input row; hi None = unbounded
    ended_by: str  # the rule (and reason) that stopped its growth
    partitioned: bool = False
    first_joint: str = SPLIT
    last_joint: str = MERGE
    own_ordering: str = ROUND_ROBIN  # Table 1 for this region alone
    ordering: str = ROUND_ROBIN  # what its exit merger runs (after shuffle-chain adjustment)
    chain: int = 0  # shuffle chain it belongs to
    numbered: bool = False  # tuples carry seqnos inside it
    pulses: bool = False  # its chain's first splitter emits pulses
    window_groups: bool = False  # a member emits rows on punctuations, unordered per window (R8)

    @property
    def routing(self) -> str:
        return "hash" if self.key else "round-robin"

    @property
    def head(self) -> str:
        return self.ops[0]

    @property
    def tail(self) -> str:
        return self.ops[-1]

    @property
    def prolific(self) -> bool:
        return self.selectivity[1] is INF or self.selectivity[1] > 1

    def to_dict(self) -> dict:
        lo, hi = self.selectivity
        return {"index": self.index, "ops": list(self.ops), "key": list(self.key) if self.key else None,
                "selectivity": [lo, hi], "routing": self.routing, "ordering": self.ordering,
                "own_ordering": self.own_ordering, "first_joint": self.first_joint, "last_joint": self.last_joint,
                "ended_by": self.ended_by, "chain": self.chain, "numbered": self.numbered, "pulses": self.pulses,
                "window_groups": self.window_groups}


@dataclass
class RegionPlan:
    """The analysis of a plan: regions (in formation order), excluded operators with the
    rule that excluded each, the joints between adjacent regions."""

    name: str
    regions: list
    excluded: dict  # op name -> Exclusion
    order: list  # operators in topological order
    region_of: dict = field(default_factory=dict)  # op name -> region index
    shuffles: list = field(default_factory=list)  # (region a, region b)
    sequential_points: list = field(default_factory=list)  # (a, b): merge then split (R6)

    def region(self, op: str) -> Region | None:
        i = self.region_of.get(op)
        return None if i is None else self.regions[i]

    def to_dict(self) -> dict:
        return {"plan": self.name, "regions": [r.to_dict() for r in self.regions],
                "excluded": {k: {"rule": e.rule, "reason": e.reason} for k, e in self.excluded.items()},
                "shuffles": [list(p) for p in self.shuffles],
                "sequential_points": [list(p) for p in self.sequential_points]}

    def explain(self) -> str:
        out = [f"plan '{self.name}': {len(self.regions)} parallel region(s), "
               f"{len(self.excluded)} operator(s) not parallelised"]
        for r in self.regions:
            out.append(f"region {r.index}: {' -> '.join(r.ops)}")
            key = f"({', '.join(r.key)})" if r.key else "none"
            route = f"hash({', '.join(r.key)})" if r.key else "round-robin"
            out.append(f"    key: {key}; routing: {route}; selectivity: {_fmt_sel(r.selectivity)}")
            if r.last_joint == SHUFFLE:
                order = (f"{STRATEGY_NAMES[r.own_ordering]} alone; shuffle into region "
                         f"{_next_in_chain(self, r)} (its channels' mergers: {STRATEGY_NAMES[STRICT]})")
            else:
                order = STRATEGY_NAMES[r.ordering]
                if r.ordering != r.own_ordering:
                    order += f" (alone: {STRATEGY_NAMES[r.own_ordering]}; set by its shuffle chain)"
            out.append(f"    ordering: {order}")
            out.append(f"    joints: first {r.first_joint}, last {r.last_joint}"
                       + (f"; seqnos{' + pulses' if r.pulses else ''}" if r.numbered else "")
                       + ("; rows emitted on punctuations are unordered within their window (R8)"
                          if r.window_groups else ""))
            out.append(f"    ended by: {r.ended_by}")
        if self.excluded:
            out.append("not parallelised:")
            for name in self.order:
                e = self.excluded.get(name)
                if e is not None:
                    out.append(f"    {name}: {e}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.explain()


def _next_in_chain(rp: RegionPlan, r: Region) -> str:
    for a, b in rp.shuffles:
        if a == r.index:
            return str(b)
    return "?"


def _fmt_sel(sel) -> str:
    lo, hi = sel
    return f"[{lo}, {'inf' if hi is INF else hi}]" + (" (prolific)" if hi is INF or hi > 1 else "")


# ---------------------------------------------------------------------------------------
# the graph


@dataclass
class _Info:
    name: str
    op: object
    model: M.OperatorModel
    preds: list  # predecessor operator names, by input port
    succs: list  # successor operator names, by output port

    @property
    def fan_in(self) -> int:
        return len(self.preds)

    @property
    def fan_out(self) -> int:
        return len(self.succs)


def _graph(plan):
    ops, edges = plan.instantiate()
    preds = {n: [None] * len(op.inputs) for n, op in ops.items()}
    succs = {n: [None] * len(op.outputs) for n, op in ops.items()}
    for s, si, d, di in edges:
        succs[s][si] = (d, di)
        preds[d][di] = (s, si)
    infos = {}
    for n, op in ops.items():
        infos[n] = _Info(n, op, M.model_of(op), [p[0] for p in preds[n]], [s[0] for s in succs[n]])
    # topological order, ties in the order operators were added (deterministic)
    rank = {n: i for i, n in enumerate(ops)}
    indeg = {n: len(infos[n].preds) for n in ops}
    ready = sorted((n for n, k in indeg.items() if k == 0), key=rank.get)
    order = []
    import heapq

    heap = [(rank[n], n) for n in ready]
    heapq.heapify(heap)
    while heap:
        _, n = heapq.heappop(heap)
        order.append(n)
        for m in infos[n].succs:
            indeg[m] -= 1
            if indeg[m] == 0:
                heapq.heappush(heap, (rank[m], m))
    return infos, order, edges


# ---------------------------------------------------------------------------------------
# forwarding sets: ("all", dropped) = every attribute but `dropped`; ("only", kept)


def _fwd_apply(F, model: M.OperatorModel):
    f = model.forwarding
    if f == M.ALWAYS:
        if F[0] == "all":
            return ("all", F[1] | model.reassigns)
        return ("only", F[1] - model.reassigns)
    if isinstance(f, M.FunctionAny):
        cols = frozenset(f.cols)
        return ("only", cols - F[1]) if F[0] == "all" else ("only", F[1] & cols)
    return ("only", frozenset())


def _fwd_filter(F, attrs) -> frozenset:
    """The attributes of `attrs` that F forwards."""
    attrs = frozenset(attrs)
    return attrs - F[1] if F[0] == "all" else attrs & F[1]


def emits_window_groups(model: M.OperatorModel, has_outputs: bool) -> bool:
    """An operator that may emit rows when a punctuation arrives, as a multiset per window
    (rule R8's escape: ``emit_order="unordered"`` on an expecting input)."""
    return has_outputs and model.emit_order == "unordered" and M.EXPECTING in model.punct_in.values()


def _sel_of(info):
    """A member's selectivity range; a parallel source's is its partition's (1:1), and an
    operator emitting window groups may emit any number of rows per punctuation."""
    if not info.fan_in:
        return (1, 1)
    if emits_window_groups(info.model, info.fan_out > 0):
        return (0, INF)
    return M.SELECTIVITY_RANGE[info.model.selectivity]


def _sel_mul(a, b):
    lo = a[0] * b[0]
    hi = INF if (a[1] is INF or b[1] is INF) else a[1] * b[1]
    return (lo, hi)


# ---------------------------------------------------------------------------------------
# per-operator eligibility (R1, R2, R8, R9)


def _blocker(info: _Info) -> Exclusion | None:
    """Why `info` can be in no region by itself (R1, R2, R8, R9), or None."""
    m = info.model
    name = info.name
    if m.state == M.UNKNOWN:
        return Exclusion(name, "R1", "state unknown (undeclared, or declared unknown)")
    if info.fan_in == 0:
        if not isinstance(m.state, M.Partitioned):
            return Exclusion(name, "R1", "a source joins a region only as a parallel source (declared "
                                         "Partitioned(key)); replicating it otherwise repeats its stream")
        if not callable(getattr(info.op, "for_channel", None)):
            return Exclusion(name, "R1", "a partitioned source needs for_channel(i, n) to run as a parallel source")
    if info.fan_in > 1:
        return Exclusion(name, "R2", f"fan-in {info.fan_in} (a region has a single entry)")
    if info.fan_out > 1:
        return Exclusion(name, "R2", f"fan-out {info.fan_out} (a region has a single exit)")
    expecting = [p for p, v in m.punct_in.items() if v == M.EXPECTING]
    if getattr(info.op, "timer_driven", False) and m.emit_order != "unordered":
        return Exclusion(name, "R8", "emits on a timer: its outputs have no causing tuple, hence no seqno")
    if expecting and info.fan_out and m.emit_order != "unordered":
        return Exclusion(name, "R8", f"expects punctuations on '{expecting[0]}' and may emit when one arrives: "
                                     "no seqno orders those outputs (declare emit_order='unordered' if its "
                                     "output per window is a multiset)")
    if (info.fan_out and m.selectivity != M.EXACTLY_ONE and not getattr(info.op, "seq_aware", False)
            and not (info.fan_in == 0)):
        return Exclusion(name, "R9", f"selectivity {m.selectivity} without seq_aware: it cannot tell which input "
                                     "row caused each output row, so its outputs would carry no seqno (use "
                                     "ctx.send_derived and declare seq_aware = True)")
    return None


# ---------------------------------------------------------------------------------------
# formation


class _Forming:
    def __init__(self, infos, order):
        self.infos = infos
        self.order = order
        self.assigned: dict[str, int] = {}
        self.excluded: dict[str, Exclusion] = {}
        self.regions: list[Region] = []

    def run(self):
        for name in self.order:
            if name in self.assigned or name in self.excluded:
                continue
            info = self.infos[name]
            b = _blocker(info)
            if b is not None:
                self.excluded[name] = b
                continue
            self._form(name)

    def _grow(self, start: str):
        """Greedy growth from `start` (R1-R4): (ops, key, F, sel, ended_by)."""
        info = self.infos[start]
        m = info.model
        key = frozenset(m.key) if m.key else None
        # a parallel source's output is the region's entry: all its attributes count as forwarded
        F = _fwd_apply(("all", frozenset()), m) if info.fan_in else ("all", frozenset())
        sel = _sel_of(info)
        ops = [start]
        while True:
            t = self.infos[ops[-1]]
            if t.fan_out == 0:
                return ops, key, F, sel, f"'{t.name}' has no outputs (the region ends in a parallel sink)"
            s_name = t.succs[0]
            s = self.infos[s_name]
            if s_name in self.assigned or s_name in self.excluded:
                why = self.excluded.get(s_name)
                return ops, key, F, sel, (f"{why.rule}: successor '{s_name}' is not parallelised ({why.reason})"
                                          if why else f"successor '{s_name}' is already in region "
                                                      f"{self.assigned[s_name]}")
            b = _blocker(s)
            if b is not None:
                return ops, key, F, sel, f"{b.rule}: successor '{s_name}': {b.reason}"
            sm = s.model
            if sm.key:
                ks = frozenset(sm.key)
                if key is None:
                    k2 = _fwd_filter(F, ks)
                    if not k2:
                        return ops, key, F, sel, (f"R4: successor '{s_name}' is partitioned on "
                                                  f"{_names(ks)}, which the region does not forward unchanged "
                                                  "from its entry")
                else:
                    if not (key & ks):
                        return ops, key, F, sel, (f"R3: successor '{s_name}' is partitioned on {_names(ks)}: "
                                                  f"with the region key {_names(key)} the key would be empty")
                    k2 = _fwd_filter(F, key & ks)
                    if not k2:
                        return ops, key, F, sel, (f"R4: the shared key {_names(key & ks)} of successor "
                                                  f"'{s_name}' is not forwarded unchanged from the region entry")
                key = k2
            ops.append(s_name)
            F = _fwd_apply(F, sm)
            sel = _sel_mul(sel, _sel_of(s))

    def _violation(self, ops) -> tuple[int, Exclusion] | None:
        """The first member breaking R5 or R7 for a region of `ops`, with the reason."""
        members = set(ops)
        for i, name in enumerate(ops):
            info = self.infos[name]
            partners = set(info.model.fuse_with)
            partners |= {n for n, o in self.infos.items() if name in o.model.fuse_with}
            partners.discard(name)
            out = sorted(p for p in partners if p not in members)
            if out:
                return i, Exclusion(name, "R5", f"fused with '{out[0]}', which cannot be in the same region")
        for i, name in enumerate(ops):
            info = self.infos[name]
            if M.GENERATES not in info.model.punct_out.values():
                continue
            # Follow its punctuations downstream through the members that pass them on.
            j = i
            while True:
                if j == len(ops) - 1:
                    exit_to = self.infos[ops[j]].succs
                    where = f"'{exit_to[0]}' outside the region" if exit_to else "the region's exit"
                    return i, Exclusion(name, "R7", f"generates punctuations that would reach {where}; every "
                                                    "channel would emit its own copy")
                nxt = self.infos[ops[j + 1]].model
                port = self.infos[ops[j + 1]].op.inputs[0]
                if nxt.punct_in[port] == M.EXPECTING:
                    break  # consumed by a member of the region
                if M.PRESERVES not in nxt.punct_out.values():
                    break  # removed
                j += 1
        return None

    def _form(self, start: str):
        ops, key, F, sel, ended = self._grow(start)
        while True:
            v = self._violation(ops)
            if v is None:
                break
            i, excl = v
            self.excluded[ops[i]] = excl
            if i == 0:
                return  # the head itself: its successors are visited later (topological order)
            ops = ops[:i]
            ended = f"{excl.rule}: next operator '{excl.op}' is not parallelised ({excl.reason})"
            ops2, key, F, sel, _ = self._regrow(ops)
            ops = ops2
        idx = len(self.regions)
        info0 = self.infos[ops[0]]
        r = Region(idx, tuple(ops), tuple(sorted(key)) if key else None, sel, ended,
                   partitioned=key is not None)
        if info0.fan_in == 0:
            r.first_joint = PARALLEL_SOURCE
        if self.infos[ops[-1]].fan_out == 0:
            r.last_joint = PARALLEL_SINK
        r.window_groups = any(emits_window_groups(self.infos[n].model, self.infos[n].fan_out > 0) for n in ops)
        for n in ops:
            self.assigned[n] = idx
        self.regions.append(r)

    def _regrow(self, ops):
        """Key, forwarding and selectivity of the prefix `ops` (re-derived after truncation)."""
        info = self.infos[ops[0]]
        m = info.model
        key = frozenset(m.key) if m.key else None
        # a parallel source's output is the region's entry: all its attributes count as forwarded
        F = _fwd_apply(("all", frozenset()), m) if info.fan_in else ("all", frozenset())
        sel = _sel_of(info)
        for name in ops[1:]:
            sm = self.infos[name].model
            if sm.key:
                ks = frozenset(sm.key)
                key = _fwd_filter(F, ks if key is None else key & ks)
            F = _fwd_apply(F, sm)
            sel = _sel_mul(sel, _sel_of(self.infos[name]))
        return ops, key, F, sel, None


def _names(attrs) -> str:
    return "{" + ", ".join(sorted(attrs)) + "}"


def _table1(partitioned: bool, sel) -> str:
    lo, hi = sel
    if hi is INF or hi > 1:
        return RELAXED
    if lo == 1 and hi == 1:
        return SEQNO if partitioned else ROUND_ROBIN
    return STRICT


def _joints(rp: RegionPlan, infos) -> None:
    """Steps 6-8: strategies, shuffles, chains."""
    regions = rp.regions
    for r in regions:
        r.own_ordering = _table1(r.partitioned, r.selectivity)
    # adjacent pairs: tail of a -> head of b directly
    nxt = {}
    for a in regions:
        if a.last_joint == PARALLEL_SINK:
            continue
        succ = infos[a.tail].succs[0]
        b = rp.region(succ)
        if b is not None and b.head == succ:
            if not a.prolific:
                a.last_joint = SHUFFLE
                b.first_joint = SHUFFLE
                rp.shuffles.append((a.index, b.index))
                nxt[a.index] = b.index
            else:
                rp.sequential_points.append((a.index, b.index))
    starts = [r for r in regions if r.first_joint != SHUFFLE]
    for chain_id, first in enumerate(starts):
        chain = [first]
        while chain[-1].index in nxt:
            chain.append(regions[nxt[chain[-1].index]])
        unordered = first.first_joint == PARALLEL_SOURCE or chain[-1].last_joint == PARALLEL_SINK
        sel = (1, 1)
        part = False
        for r in chain:
            sel = _sel_mul(sel, r.selectivity)
            part = part or r.partitioned
        final = _table1(part, sel)
        if len(chain) > 1 and LATTICE.index(final) < LATTICE.index(SEQNO):
            final = SEQNO  # after a shuffle rows must carry seqnos
        pulses = len(chain) > 1 or final in (STRICT, RELAXED)
        for r in chain:
            r.chain = chain_id
            r.ordering = UNORDERED if unordered else (final if r is chain[-1] else STRICT)
            r.numbered = not unordered and (final != ROUND_ROBIN)
            r.pulses = not unordered and pulses


def analyze(plan) -> RegionPlan:
    """The parallel regions of `plan` (a ``bobox_sched.Plan``), with the reasons."""
    infos, order, _edges = _graph(plan)
    f = _Forming(infos, order)
    f.run()
    rp = RegionPlan(plan.name, f.regions, f.excluded, order)
    rp.region_of = {n: r.index for r in f.regions for n in r.ops}
    _joints(rp, infos)
    return rp


def explain(plan) -> str:
    return analyze(plan).explain()


__all__ = [
    "emits_window_groups",
    "Exclusion",
    "MERGE",
    "PARALLEL_SINK",
    "PARALLEL_SOURCE",
    "RULES",
    "Region",
    "RegionPlan",
    "SHUFFLE",
    "SPLIT",
    "analyze",
    "explain",
]
