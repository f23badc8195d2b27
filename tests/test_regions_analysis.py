"""The parallel-region analyser (spec 001 section 1-2, T3): one positive and one negative
fixture per rule R1-R9, the golden results of the paper's Fig. 1 and Fig. 4 (rebuilt from
the text, [L92] and [L166]), the Table 1 mapping, shuffles vs sequential points (R6),
ordering overrides only up the lattice, and explain_regions' text."""

from __future__ import annotations

import pytest

from bobox_sched import Plan, StreamOperator
from bobox_sched.control import model as M
from bobox_sched.regions.fission import parallelize
from bobox_sched.regions.analysis import analyze


class Decl(StreamOperator):
    """An operator that only declares (never run here)."""

    def __init__(self, inputs=("in",), outputs=("out",), **decl):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        for k, v in decl.items():
            setattr(self, k, v)

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


class ParSrc(Decl):
    def __init__(self, key, **decl):
        super().__init__(inputs=(), state=M.Partitioned(key), **decl)

    def for_channel(self, i, n):
        return self


def src(p, name="src"):
    p.add(name, Decl, inputs=())  # an undeclared source: n.p.
    return name


def sink(p, name="sink"):
    p.add(name, Decl, outputs=())
    return name


def stateless(**kw):
    kw.setdefault("state", M.STATELESS)
    kw.setdefault("selectivity_bound", M.EXACTLY_ONE)
    kw.setdefault("forwarding", M.ALWAYS)
    return kw


def part(*key, **kw):
    kw.setdefault("selectivity_bound", M.EXACTLY_ONE)
    kw.setdefault("forwarding", M.ALWAYS)
    return {"state": M.Partitioned(*key), **kw}


def chain_plan(*decls, name="p"):
    """src -> op0 -> op1 ... -> sink, each op declared by a dict."""
    p = Plan(name)
    names = [src(p)]
    for i, d in enumerate(decls):
        p.add(f"o{i}", Decl, **d)
        names.append(f"o{i}")
    names.append(sink(p))
    p.chain(*names)
    return p


def regions_of(rp):
    return [list(r.ops) for r in rp.regions]


# ------------------------------------------------------------------------------- R1


def test_r1_undeclared_operator_is_not_parallelised():
    rp = analyze(chain_plan(stateless(), {}, stateless()))
    assert regions_of(rp) == [["o0"], ["o2"]]
    assert rp.excluded["o1"].rule == "R1"
    assert rp.regions[0].ended_by.startswith("R1: successor 'o1'")
    assert rp.excluded["src"].rule == "R1" and rp.excluded["sink"].rule == "R1"


def test_r1_declared_stateless_and_partitioned_join():
    rp = analyze(chain_plan(stateless(), part("k")))
    assert regions_of(rp) == [["o0", "o1"]]
    assert rp.regions[0].key == ("k",)


def test_r1_legacy_kind_maps_onto_the_model():
    rp = analyze(chain_plan({"kind": "stateless", "selectivity_bound": M.EXACTLY_ONE},
                            {"kind": "stateful", "selectivity_bound": M.EXACTLY_ONE}))
    assert regions_of(rp) == [["o0"]] and rp.excluded["o1"].rule == "R1"


@pytest.mark.parametrize("key, want", [("user", ("user",)), (["user"], ("user",)),
                                       (("user", "day"), ("user", "day"))])
def test_r1_legacy_partition_key_str_is_one_column(key, want):
    """``partition_key="user"`` is the column user, not the key ('u', 's', 'e', 'r')."""
    decl = {"kind": "partitioned", "partition_key": key, "selectivity_bound": M.EXACTLY_ONE,
            "forwarding": M.ALWAYS}
    assert M.model_of(Decl(**decl)).state == M.Partitioned(*want)
    rp = analyze(chain_plan(decl))
    assert regions_of(rp) == [["o0"]] and rp.regions[0].key == tuple(sorted(want))  # the region sorts its key


# ------------------------------------------------------------------------------- R2


def test_r2_fan_in_and_fan_out_end_regions():
    p = Plan("fan")
    src(p, "s1")
    src(p, "s2")
    p.add("a", Decl, **stateless())
    p.add("join", Decl, inputs=("l", "r"), **stateless())
    p.add("tee", Decl, outputs=("x", "y"), **stateless())
    p.add("b", Decl, **stateless())
    p.add("c", Decl, **stateless())
    sink(p, "k1")
    sink(p, "k2")
    p.connect("s1", "a")
    p.connect("a", "join.l")
    p.connect("s2", "join.r")
    p.connect("join", "tee")
    p.connect("tee.x", "b")
    p.connect("tee.y", "c")
    p.connect("b", "k1")
    p.connect("c", "k2")
    rp = analyze(p)
    assert regions_of(rp) == [["a"], ["b"], ["c"]]
    assert rp.excluded["join"].rule == "R2" and "fan-in 2" in rp.excluded["join"].reason
    assert rp.excluded["tee"].rule == "R2" and "fan-out 2" in rp.excluded["tee"].reason
    assert rp.regions[0].ended_by.startswith("R2: successor 'join'")


def test_r2_single_entry_single_exit_chain_is_one_region():
    rp = analyze(chain_plan(stateless(), stateless(), stateless()))
    assert regions_of(rp) == [["o0", "o1", "o2"]]


# ------------------------------------------------------------------------------- R3


def test_r3_incompatible_keys_split_regions():
    rp = analyze(chain_plan(part("a"), part("b")))
    assert regions_of(rp) == [["o0"], ["o1"]]
    assert rp.regions[0].ended_by.startswith("R3")
    assert rp.shuffles == [(0, 1)]  # not prolific: a shuffle joins them


def test_r3_compatible_keys_intersect():
    rp = analyze(chain_plan(part("a", "b"), stateless(), part("b", "c")))
    assert regions_of(rp) == [["o0", "o1", "o2"]]
    assert rp.regions[0].key == ("b",)  # coarser region key: the shared attribute


# ------------------------------------------------------------------------------- R4


def test_r4_key_not_forwarded_ends_region():
    rp = analyze(chain_plan(stateless(reassigns=frozenset({"k"})), part("k")))
    assert regions_of(rp) == [["o0"], ["o1"]]
    assert rp.regions[0].ended_by.startswith("R4")


def test_r4_unknown_forwarding_drops_every_key():
    rp = analyze(chain_plan(part("k"), stateless(forwarding=M.UNKNOWN), part("k")))
    assert regions_of(rp) == [["o0", "o1"], ["o2"]]
    assert rp.regions[0].ended_by.startswith("R4")


def test_r4_any_forwarding_keeps_the_key():
    agg = part("uid", forwarding=M.FunctionAny("uid"), selectivity_bound=M.AT_MOST_ONE, seq_aware=True)
    rp = analyze(chain_plan(agg, part("uid")))
    assert regions_of(rp) == [["o0", "o1"]]
    assert rp.regions[0].key == ("uid",)
    rp = analyze(chain_plan(part("uid", forwarding=M.FunctionAny("total")), part("uid")))
    assert regions_of(rp) == [["o0"], ["o1"]] and rp.regions[0].ended_by.startswith("R4")


def test_r4_forwarded_other_columns_do_not_matter():
    rp = analyze(chain_plan(stateless(reassigns=frozenset({"x"})), part("k")))
    assert regions_of(rp) == [["o0", "o1"]]


# ------------------------------------------------------------------------------- R5


def test_r5_fusion_partner_outside_excludes_the_member():
    p = Plan("fuse")
    src(p)
    p.add("a", Decl, **stateless())
    p.add("b", Decl, **stateless(fuse_with=("x",)))
    p.add("c", Decl, **stateless())
    p.add("x", Decl)  # undeclared: n.p.
    sink(p)
    p.chain("src", "a", "b", "c", "x", "sink")
    rp = analyze(p)
    assert regions_of(rp) == [["a"], ["c"]]
    assert rp.excluded["b"].rule == "R5" and "'x'" in rp.excluded["b"].reason
    assert rp.regions[0].ended_by.startswith("R5: next operator 'b'")


def test_r5_fused_pair_in_one_region():
    rp = analyze(chain_plan(stateless(fuse_with=("o1",)), stateless(), stateless()))
    assert regions_of(rp) == [["o0", "o1", "o2"]]


# ------------------------------------------------------------------------------- R6


def test_r6_prolific_region_ends_in_a_merge_not_a_shuffle():
    flat = part("a", selectivity_bound=M.UNKNOWN, seq_aware=True)
    rp = analyze(chain_plan(flat, part("b")))
    assert regions_of(rp) == [["o0"], ["o1"]]
    assert rp.shuffles == [] and rp.sequential_points == [(0, 1)]
    assert rp.regions[0].last_joint == "merge" and rp.regions[1].first_joint == "split"
    assert rp.regions[0].ordering == "relaxed"


def test_r6_selective_region_shuffles():
    rp = analyze(chain_plan(part("a", selectivity_bound=M.AT_MOST_ONE, seq_aware=True), part("b")))
    assert rp.shuffles == [(0, 1)] and rp.sequential_points == []
    r0, r1 = rp.regions
    assert (r0.last_joint, r1.first_joint) == ("shuffle", "shuffle")
    assert r0.ordering == "strict"  # its channels end at strict shuffle mergers
    assert r1.ordering == "strict"  # the chain's combined selectivity [0, 1]
    assert r0.numbered and r0.pulses and r1.pulses


# ------------------------------------------------------------------------------- R7


def test_r7_generated_punctuations_must_not_leave_the_region():
    rp = analyze(chain_plan(stateless(), stateless(punct_out=M.GENERATES), stateless()))
    assert rp.excluded["o1"].rule == "R7"
    assert regions_of(rp) == [["o0"], ["o2"]]


def test_r7_generated_punctuations_removed_inside_the_region_are_fine():
    rp = analyze(chain_plan(stateless(punct_out=M.GENERATES), stateless(punct_out=M.REMOVES)))
    assert regions_of(rp) == [["o0", "o1"]]


# ------------------------------------------------------------------------------- R8


def test_r8_operator_emitting_on_punctuation_is_not_parallelised():
    rp = analyze(chain_plan(stateless(punct_in=M.EXPECTING, selectivity_bound=M.AT_MOST_ONE, seq_aware=True)))
    assert rp.excluded["o0"].rule == "R8"
    rp = analyze(chain_plan(stateless(timer_driven=True)))
    assert rp.excluded["o0"].rule == "R8"


def test_r8_unordered_emission_may_join():
    rp = analyze(chain_plan(stateless(punct_in=M.EXPECTING, emit_order="unordered")))
    assert regions_of(rp) == [["o0"]]


# ------------------------------------------------------------------------------- R9


def test_r9_selective_operator_must_propagate_seqnos():
    rp = analyze(chain_plan(stateless(selectivity_bound=M.AT_MOST_ONE)))
    assert rp.excluded["o0"].rule == "R9"
    rp = analyze(chain_plan(stateless(selectivity_bound=M.AT_MOST_ONE, seq_aware=True)))
    assert regions_of(rp) == [["o0"]]


def test_library_filter_and_project_are_regionable():
    import numpy as np
    from operators import ops
    from operators.expr import Field, Schema, col

    sch = Schema([Field("x", "int", np.dtype(np.int64)), Field("k", "int", np.dtype(np.int64))])
    p = Plan("lib")
    p.add("src", ops.Values, sch, {"x": np.arange(10), "k": np.arange(10)}, 0, 10)
    p.add("filter", ops.Filter, sch, col("x") < 5)
    p.add("project", ops.Project, sch, [("x", col("x")), ("d", col("k") * 2)])
    sink(p)
    p.chain("src", "filter", "project", "sink")
    rp = p.regions()
    assert regions_of(rp) == [["filter", "project"]], rp.explain()
    assert rp.regions[0].ordering == "strict"


# ------------------------------------------------------------------------------- Table 1


@pytest.mark.parametrize("decl, want", [
    (stateless(), "round_robin"),
    (part("k"), "seqno"),
    (stateless(selectivity_bound=M.AT_MOST_ONE, seq_aware=True), "strict"),
    (part("k", selectivity_bound=M.AT_MOST_ONE, seq_aware=True), "strict"),
    (stateless(selectivity_bound=M.UNKNOWN, seq_aware=True), "relaxed"),
    (part("k", selectivity_bound=M.UNKNOWN, seq_aware=True), "relaxed"),
])
def test_table1_strategy(decl, want):
    (r,) = analyze(chain_plan(decl)).regions
    assert r.ordering == want
    assert r.routing == ("hash" if "Partitioned" in repr(decl["state"]) else "round-robin")
    assert r.numbered == (want != "round_robin") and r.pulses == (want in ("strict", "relaxed"))


def test_overrides_only_up_the_lattice():
    plan = chain_plan(part("k"))
    parallelize(plan, 2, ordering="strict")
    parallelize(plan, 2, ordering={0: "relaxed"})
    with pytest.raises(ValueError, match="only go up the lattice"):
        parallelize(plan, 2, ordering="round_robin")
    with pytest.raises(ValueError, match="not one of"):
        parallelize(plan, 2, ordering="fastest")
    with pytest.raises(ValueError, match="no region"):
        parallelize(plan, {"nope": 2})


# ------------------------------------------------------------------------------- goldens


def test_fig1_golden():
    """ParSrc{server} -> Aggregate{uid} (Any(uid)) -> Filter -> TCPSink [L92]. The
    aggregate is modelled as count-triggered (a time(5) trigger would be rule R8)."""
    p = Plan("fig1")
    p.add("ParSrc", ParSrc, "server")
    p.add("Aggregate", Decl, **part("uid", forwarding=M.FunctionAny("uid", "total"),
                                    selectivity_bound=M.AT_MOST_ONE, seq_aware=True))
    p.add("Filter", Decl, **stateless(selectivity_bound=M.AT_MOST_ONE, seq_aware=True))
    p.add("TCPSink", Decl, outputs=())
    p.chain("ParSrc", "Aggregate", "Filter", "TCPSink")
    rp = analyze(p)
    assert regions_of(rp) == [["ParSrc"], ["Aggregate", "Filter"]]
    r0, r1 = rp.regions
    assert r0.first_joint == "parallel source" and r0.key == ("server",)
    assert r0.ended_by.startswith("R3")
    assert rp.shuffles == [(0, 1)] and r0.last_joint == "shuffle" and r1.first_joint == "shuffle"
    assert r1.key == ("uid",) and r1.last_joint == "merge"
    assert r1.ordering == "unordered"  # a chain from a parallel source only routes
    assert rp.excluded["TCPSink"].rule == "R1"


def fig4():
    """Rebuilt from [L166]: {o1} (o8 has fan-in 2), {o2} (o3 n.p.), {o5, o6} (stateless +
    key k), {o9, o10} ending before o11 (the key would be empty), o12 in no region (fused
    with o14, o13 with fan-in 2 in the way)."""
    p = Plan("fig4")
    src(p, "s1")
    src(p, "s2")
    p.add("o1", Decl, **stateless())
    p.add("o2", Decl, **stateless())
    p.add("o3", Decl)  # n.p.
    p.add("o8", Decl, inputs=("a", "b"), **stateless())
    p.add("o4", Decl)  # n.p.
    p.add("o5", Decl, **stateless())
    p.add("o6", Decl, **part("k"))
    p.add("o7", Decl, outputs=("a", "b"), **stateless())
    p.add("o9", Decl, **part("k"))
    p.add("o10", Decl, **part("k", "l"))
    p.add("o11", Decl, **part("l"))
    p.add("o12", Decl, **stateless(fuse_with=("o14",)))
    p.add("o13", Decl, inputs=("a", "b"), **stateless())
    p.add("o14", Decl, **stateless())
    sink(p)
    p.chain("s1", "o1")
    p.connect("o1", "o8.a")
    p.chain("s2", "o2", "o3")
    p.connect("o3", "o8.b")
    p.chain("o8", "o4", "o5", "o6", "o7")
    p.connect("o7.a", "o9")
    p.chain("o9", "o10", "o11")
    p.connect("o11", "o13.a")
    p.connect("o7.b", "o12")
    p.connect("o12", "o13.b")
    p.chain("o13", "o14", "sink")
    return p


def test_fig4_golden():
    rp = analyze(fig4())
    assert regions_of(rp) == [["o1"], ["o2"], ["o5", "o6"], ["o9", "o10"], ["o11"]]
    by = {r.head: r for r in rp.regions}
    assert by["o1"].ended_by.startswith("R2: successor 'o8'")
    assert by["o2"].ended_by.startswith("R1: successor 'o3'")
    assert by["o5"].key == ("k",)
    assert by["o9"].key == ("k",) and by["o9"].ended_by.startswith("R3: successor 'o11'")
    assert rp.excluded["o12"].rule == "R5" and rp.excluded["o14"].rule == "R5"
    assert {rp.excluded[o].rule for o in ("o3", "o4")} == {"R1"}
    assert {rp.excluded[o].rule for o in ("o8", "o7", "o13")} == {"R2"}
    assert rp.shuffles == [(3, 4)]  # o10 -> o11: keys {k} vs {l}, not prolific


def test_explain_regions_text():
    text = fig4().explain_regions()
    assert text.startswith("plan 'fig4': 5 parallel region(s)")
    assert "region 2: o5 -> o6" in text
    assert "key: (k); routing: hash(k); selectivity: [1, 1]" in text
    assert "ended by: R3: successor 'o11'" in text
    assert "o12: R5 (region-local fusion): fused with 'o14'" in text
    assert "o3: R1 (state): state unknown" in text
    d = fig4().regions().to_dict()
    assert d["regions"][3]["ops"] == ["o9", "o10"] and d["excluded"]["o13"]["rule"] == "R2"
