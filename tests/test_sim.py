"""The simulator (issue 34, bobox_sched/sim): the unchanged policies on virtual workers and
a virtual clock; determinism, the invariants over many seeds, planted bugs caught, the
trace format, machine descriptions, the command."""

import json

import pytest

from bobox_sched import policies  # noqa: F401 - registers the policies
from bobox_sched.core import extensions
from bobox_sched.policies.bobox.policy import BoboxPolicy
from bobox_sched.sim import Costs, Simulation, Violation, chain_mix, describe, machine, simulate
from bobox_sched.trace import chrome
from topology.errors import TopologyError

SIM_POLICIES = ["bobox", "simple"]


def run(spec="2x4", requests=6, seed=0, policy="bobox", **kw):
    plans = chain_mix(requests, length=3, packets=12, rows=1024, seed=seed)
    return simulate(describe(spec), plans, policy=policy, seed=seed, **kw)


def test_the_same_seed_gives_a_byte_identical_trace_and_another_seed_another():
    a = json.dumps(run(seed=7)[1])
    assert a == json.dumps(run(seed=7)[1])
    assert a != json.dumps(run(seed=8)[1])


@pytest.mark.parametrize("policy", SIM_POLICIES)
@pytest.mark.parametrize("spec", ["1x1", "1x2", "2x2", "2 nodes x 3 cores, smt 2", "4x2"])
def test_invariants_hold_over_random_seeds(policy, spec):
    for seed in range(8):
        out, doc = run(spec, requests=5, seed=seed, policy=policy,
                       arrivals_ns=[seed * 10_000 * k for k in range(5)])
        assert out["requests"] == 5 and out["tasks"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("policy", SIM_POLICIES)
def test_invariants_hold_over_1000_seeds_each(policy):
    specs = ["1x2", "2x2", "2 nodes x 2 cores, smt 2", "4x1", "3x3"]
    for seed in range(1000):
        spec = specs[seed % len(specs)]
        plans = chain_mix(1 + seed % 6, length=1 + seed % 4, packets=1 + seed % 9, rows=256, seed=seed)
        arrivals = [(seed * 7919 * k) % 3_000_000 for k in range(len(plans))]
        Simulation(describe(spec), plans, policy=policy, seed=seed, arrivals_ns=arrivals,
                   costs=Costs(jitter=0.5, balance_ns=2_000_000)).run()


def test_a_simulated_trace_is_valid_and_its_busy_time_is_the_workers():
    sim = Simulation(describe("2x4"), chain_mix(8, packets=10), seed=1)
    out = sim.run()
    doc = sim.document()
    assert chrome.validate(doc) == []
    busy = chrome.busy_by_worker(doc)
    for w in sim.workers:
        assert abs(busy.get((chrome.node_pid(w.node_id), w.id), 0.0) * 1000 - w.busy_ns) <= w.tasks + 1
    assert sum(1 for e in doc["traceEvents"] if e.get("ph") == "b") == 8
    assert out["tasks"] == sum(w.tasks for w in sim.workers) == len(
        [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "task"])


def test_the_gil_is_a_queue_more_workers_stop_helping():
    # GIL-bound chains (60 % of a task with the GIL held): past ~1 / 0.6 workers they wait for
    # each other, so 16 workers are barely faster than 4; nogil chains keep scaling
    def span(cores, share):
        plans = chain_mix(32, length=3, packets=16, rows=4096, seed=1, gil_share=share)
        # an ideal queue (no hand-off: test_the_gil_hand_off_costs_only_when_a_thread_waits)
        return Simulation(describe(f"1x{cores}"), plans, seed=1,
                          costs=Costs(jitter=0.0, gil_handoff_ns=0.0)).run()["makespan_ms"]

    assert span(4, 0.6) / span(16, 0.6) < 1.2
    assert span(4, 0.01) / span(16, 0.01) > 2.5


class LostWakeup(BoboxPolicy):
    """bobox with a planted bug: a new deferred task never wakes a sleeping worker."""

    def push_deferred(self, request, op, worker) -> None:
        request.deferred.append((op, None))


class RunsTwice(BoboxPolicy):
    """bobox with a planted bug: a task found is also left in another worker's list."""

    def find_task(self, w):
        op = super().find_task(w)
        if op is not None and w.last_step == 1:
            workers = self.scheduler.workers
            other = workers[(w.id + 1) % len(workers)]
            other.imm.append(op)
        return op


class GivesToSleepers(BoboxPolicy):
    """bobox with a planted bug: a new immediate task goes to a sleeping worker's list,
    unwoken (the sleeper's own list is only ever run by itself)."""

    def push_immediate(self, worker, op) -> None:
        idle = worker.node.idle
        if idle:
            idle[0].imm.append(op)
            return
        super().push_immediate(worker, op)


PLANTED = {"bobox-lost-wakeup": LostWakeup, "bobox-runs-twice": RunsTwice, "bobox-gives-to-sleepers": GivesToSleepers}


@pytest.fixture
def planted():
    for name, cls in PLANTED.items():
        extensions.register_policy(name, cls)
    yield
    for name in PLANTED:
        extensions.POLICIES._items.pop(name, None)


def test_planted_lost_wakeup_is_caught(planted):
    # the requests arrive once every worker fell asleep: only push_deferred's wake-up could start them
    with pytest.raises(Violation, match="lost wake-up"):
        run(policy="bobox-lost-wakeup", arrivals_ns=[1_000_000] * 6)
    run(policy="bobox", arrivals_ns=[1_000_000] * 6)  # the real one wakes them


def test_planted_double_run_is_caught(planted):
    with pytest.raises(Violation, match="handed to worker"):
        run(policy="bobox-runs-twice")


def test_planted_work_for_a_sleeper_is_caught(planted):
    with pytest.raises(Violation, match="sleeps with 1 tasks in its own list"):
        run(spec="1x4", policy="bobox-gives-to-sleepers", requests=2)


def test_policies_without_a_sleep_the_simulator_knows_are_refused():
    with pytest.raises(ValueError, match="cannot be simulated"):
        Simulation(describe("1x2"), chain_mix(1), policy="ordered")


def test_machine_descriptions():
    t = describe("4 nodes x 16 cores, smt 2, l2 512K, distances 10/32")
    assert len(t.cpu_nodes) == 4 and len(t.cpus) == 128
    assert t.nodes[0].distances == (10, 32, 32, 32) and t.cpu(1).siblings == (0, 1)
    assert all(c.size_bytes == 512 * 1024 for c in t.caches)
    assert describe("2x3").cpu_nodes[1].cpus == (3, 4, 5)
    for bad in ("4", "4x", "0x4", "2x2, smt 0", "2x2, l2 big", "2x2, color red", "2x2, distances 30/10"):
        with pytest.raises(TopologyError, match="machine description"):
            describe(bad)


def test_a_captured_machine_runs(hwloc_trees):
    topo = machine(str(hwloc_trees["16amd64-8n2c"]))
    assert len(topo.cpu_nodes) == 8
    out, doc = simulate(topo, chain_mix(8, packets=8, rows=512), seed=2)
    assert out["nodes"] == 8 and chrome.validate(doc) == []


def test_bobox_simulate_command(tmp_path, capsys):
    from experiments.cli.main import main

    out = tmp_path / "s.json"
    assert main(["simulate", "--machine", "2x2", "--requests", "4", "--packets", "4", "--seeds", "3",
                 "--trace", str(out), "--json", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(res["runs"]) == 3 and res["violations"] == 0 and [r["seed"] for r in res["runs"]] == [1, 2, 3]
    assert chrome.validate(chrome.load(out)) == [] and (tmp_path / "s.png").exists()
    assert main(["simulate", "--machine", "2 by 2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --machine: machine description")
    assert main(["simulate", "--machine", "2x2", "--trace", str(tmp_path / "no" / "t.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_gil_hand_off_costs_only_when_a_thread_waits():
    """One worker never waits for the GIL: a hand-off changes nothing. Eight workers on
    GIL-heavy chains queue for it, and each hand-off between them is time no one holds
    it: the run gets longer, by about one hand-off per taking of the GIL."""
    def run_(cores, handoff_us):
        plans = chain_mix(16, length=3, packets=8, rows=4096, seed=2, gil_share=0.3)
        sim = Simulation(describe(f"1x{cores}"), plans, seed=2, costs=Costs(jitter=0.0, gil_handoff_ns=handoff_us * 1e3))
        return sim.run()

    one0, one50 = run_(1, 0), run_(1, 50)
    assert one0["makespan_ms"] == one50["makespan_ms"]
    many0, many50 = run_(8, 0), run_(8, 50)
    # saturated: every task takes the GIL twice, and nearly every taking waits
    grew = many50["makespan_ms"] - many0["makespan_ms"]
    assert 0.5 * 2 * many0["tasks"] * 0.05 <= grew <= 2 * many0["tasks"] * 0.05 * 1.1


def _sim_trace(spec="1x1", requests=4, seed=3):
    sim = Simulation(describe(spec), chain_mix(requests, length=3, packets=6, rows=2048, seed=seed), seed=seed,
                     costs=Costs(jitter=0.0))
    sim.run()
    return sim.document()


def test_replay_keeps_each_operators_traced_cost_and_replays_to_the_same_time():
    """A trace (here a simulated one, the same format as a real run's) replayed: every
    traced operator costs, in all, what the trace says, and at one worker the replay
    takes the traced time, within the scheduler's per-task cost of the task count."""
    from bobox_sched.sim.replay import replay_plans, requests_of, totals

    doc = _sim_trace()
    reqs = requests_of(doc)
    plans = replay_plans(doc)
    assert len(plans) == len(reqs) == 4
    for plan, (rid, (name, ops)) in zip(plans, sorted(reqs.items())):
        assert plan.name == name
        order = sorted(ops.values(), key=lambda rec: rec[4])
        specs = list(plan._specs.values())  # (factory, args, kwargs) in chain order: src, ops, sink
        costs = [args[-1] for _, args, _ in specs]
        packets, rows_per = specs[0][1][:2]
        rows = packets * rows_per
        assert len(costs) == len(order)
        for c, rec in zip(costs, order):
            assert c.held_row_ns * rows == pytest.approx(rec[2]) and c.released_row_ns * rows == pytest.approx(rec[3])
    again = Simulation(describe("1x1"), plans, seed=3, costs=Costs(jitter=0.0))
    out = again.run()
    t = totals(doc)
    assert out["makespan_ms"] * 1e6 == pytest.approx(t["wall_ns"], rel=0.05)


def test_replay_refuses_what_is_not_a_task_trace(tmp_path, capsys):
    from bobox_sched.sim import ReplayError, replay_plans
    from experiments.cli.main import main

    with pytest.raises(ReplayError, match="no traceEvents"):
        replay_plans({"nothing": 1})
    with pytest.raises(ReplayError, match="no task slices"):
        replay_plans({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["simulate", "--machine", "1x2", "--replay", str(bad)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --replay:")
    assert main(["simulate", "--machine", "1x2", "--replay", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    good = tmp_path / "t.json"
    good.write_text(json.dumps(_sim_trace()))
    assert main(["simulate", "--machine", "1x2", "--replay", str(good), "--copies", "2", "--seeds", "2", "--json",
                 "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["requests"] for r in res["runs"]] == [8, 8] and res["violations"] == 0  # every seed replays the file
    # --trace writes the simulated run (not the trace it replayed)
    out = tmp_path / "sim.json"
    assert main(["simulate", "--machine", "1x2", "--replay", str(good), "--trace", str(out), "--no-progress"]) == 0
    written = chrome.load(out)
    assert written["otherData"].get("label", "").startswith("bobox ") and chrome.validate(written) == []
    assert "label" not in json.loads(good.read_text())["otherData"]  # (the replayed one has none)


def test_bobox_simulate_domains_command(capsys):
    from experiments.cli.main import main

    assert main(["simulate", "--machine", "2 nodes x 12 cores", "--domains", "auto", "--requests", "8",
                 "--packets", "4", "--json", "--no-progress"]) == 0
    run0 = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["runs"][0]
    assert run0["domains"] == 4 and run0["requests"] == 8 and run0["workers"] == 24
    assert main(["simulate", "--machine", "2x2", "--domains", "9"]) == 2
    assert "more domains than the 4 CPUs" in capsys.readouterr().err
    assert main(["simulate", "--machine", "2x2", "--domains", "2", "--trace", "x.json"]) == 2
    assert "not with --domains" in capsys.readouterr().err


def test_domains_each_have_their_own_gil_and_the_front_feeds_them():
    """A GIL-bound mix on 16 workers: one interpreter queues every task's Python on one
    GIL; four domains of four workers queue on four, and finish sooner. Every request
    runs, in the domain the front sent it to, and the front never sent a domain more
    than its limit per worker at once."""
    from bobox_sched.domains import front
    from bobox_sched.sim import DomainsSimulation
    from bobox_sched.sim import domains as simdom

    assert simdom.INFLIGHT_PER_WORKER == front.INFLIGHT_PER_WORKER
    plans = lambda: chain_mix(24, length=3, packets=8, rows=4096, seed=4, gil_share=0.3)  # noqa: E731
    one = DomainsSimulation(describe("1x16"), plans(), domains="off", seed=4, costs=Costs(jitter=0.0)).run()
    four = DomainsSimulation(describe("1x16"), plans(), domains=4, seed=4, costs=Costs(jitter=0.0)).run()
    assert one["domains"] == 1 and four["domains"] == 4
    assert one["requests"] == four["requests"] == 24 and sum(four["requests_per_domain"]) == 24
    assert all(p["workers"] == 4 for p in four["per_domain"])
    assert four["makespan_ms"] < 0.6 * one["makespan_ms"]
    # nogil work on an ideal GIL queue (no hand-off): the cut changes little -- the front
    # spreads the requests' work over the domains
    nogil = lambda: chain_mix(24, length=3, packets=8, rows=4096, seed=4, gil_share=0.01)  # noqa: E731
    ideal = Costs(jitter=0.0, gil_handoff_ns=0.0)
    a = DomainsSimulation(describe("1x16"), nogil(), domains="off", seed=4, costs=ideal).run()
    b = DomainsSimulation(describe("1x16"), nogil(), domains=4, seed=4, costs=ideal).run()
    assert 0.7 < b["makespan_ms"] / a["makespan_ms"] < 1.4


def test_domains_auto_cuts_per_node_like_the_runtime():
    from bobox_sched.domains.front import layout
    from bobox_sched.sim import DomainsSimulation

    topo = describe("2 nodes x 12 cores")
    sim = DomainsSimulation(topo, chain_mix(6, length=2, packets=4, rows=1024, seed=1), domains="auto", seed=1)
    assert sim.layout == layout(topo, "auto")
    out = sim.run()
    assert out["domains"] == 4 and out["requests"] == 6


def test_packets_on_a_remote_node_pay_the_numa_penalty_and_count_as_remote():
    """memory="remote" (the runtime's own setting, figure 2): every packet lives on the
    next node, so nearly no task finds its input on its own node, and with a NUMA
    penalty the run gets longer; without one (an emulated guest) it does not."""
    def run_(memory, numa):
        return Simulation(describe("2x2"), chain_mix(8, packets=10), seed=1, memory=memory,
                          costs=Costs(numa=numa, jitter=0.0)).run()

    local, remote = run_("local", 0.5), run_("remote", 0.5)
    assert local["local_fraction"] > 0.9 and remote["local_fraction"] < 0.1
    assert remote["makespan_ms"] > 1.1 * local["makespan_ms"]
    flat_l, flat_r = run_("local", 0.0), run_("remote", 0.0)
    assert abs(flat_r["makespan_ms"] / flat_l["makespan_ms"] - 1) < 0.05


# -- bytes and memory bandwidth shared per node ---------------------------------------------

def _readers(requests, rows=1_000_000, bytes_row=8.0):
    """`requests` plans of one packet each: a source that costs nothing, and a sink whose
    released part reads `bytes_row` bytes a row and computes almost nothing (1 ps a row)."""
    from bobox_sched.core.plan import Plan
    from bobox_sched.sim.workload import Cost, SimSink, SimSource

    out = []
    for r in range(requests):
        p = Plan(f"r{r}")
        p.add("src", SimSource, 1, rows, Cost(0.0, 0.0, 0.0))
        p.add("sink", SimSink, Cost(0.0, 0.0, 0.001, bytes_row=bytes_row))
        p.chain("src", "sink")
        out.append(p)
    return out


# no scheduler cost, wake-up, jitter or GIL hand-off: only the memory time is left
_BARE = dict(sched_ns=0.0, wake_ns=0.0, jitter=0.0, gil_handoff_ns=0.0)


def test_two_tasks_reading_one_node_at_once_share_its_bandwidth():
    """8 MB read at 10 GB/s (10 bytes per ns) take 0.8 ms alone. Two requests on two
    workers of one node read at the same time: the second reader shares the node with the
    first, and the run takes twice as long; without a bandwidth they run side by side in
    no time. On one worker the two reads come one after the other, each alone."""
    def run_(spec, requests, bw):
        sim = Simulation(describe(spec), _readers(requests), seed=0, costs=Costs(**_BARE, node_bandwidth_gbs=bw))
        return sim, sim.run()

    _, one = run_("1x2", 1, 10.0)
    assert one["makespan_ms"] == pytest.approx(8e6 / 10.0 / 1e6)  # bytes / (bytes per ns), in ms
    assert one["bytes"] == 8_000_000 and one["bandwidth_bound"] == 1
    sim, two = run_("1x2", 2, 10.0)
    assert two["makespan_ms"] == pytest.approx(2 * one["makespan_ms"])
    assert two["bytes"] == 16_000_000 and two["bandwidth_bound"] == 2
    sinks = [t for wt in sim.traces.values() for t in wt.tasks if t[2] == "sink" and t[6] > 0]
    assert len(sinks) == 2 and max(t[0] for t in sinks) < min(t[1] for t in sinks)  # they did read at once
    _, serial = run_("1x1", 2, 10.0)
    assert serial["makespan_ms"] == pytest.approx(2 * one["makespan_ms"])
    _, free1 = run_("1x2", 1, None)
    _, free2 = run_("1x2", 2, None)
    assert free1["makespan_ms"] == free2["makespan_ms"] < 0.01 * one["makespan_ms"]
    assert free2["bandwidth_bound"] == 0 and free2["bytes"] == 16_000_000


def test_without_a_bandwidth_bytes_change_nothing():
    """Bandwidth None is the model without memory: a mix whose operators read bytes runs as
    the same mix reading none (the same summary, the same trace but for the bytes), and so
    does a mix reading none under a bandwidth."""
    def run_(bytes_row, bw, memory="remote"):
        sim = Simulation(describe("2x2"), chain_mix(8, packets=10, seed=1, bytes_row=bytes_row), seed=1,
                         memory=memory, costs=Costs(node_bandwidth_gbs=bw))
        out = sim.run()
        doc = sim.document()
        for e in doc["traceEvents"]:
            if e.get("cat") == "task":
                e["args"].pop("bytes")
        return {k: v for k, v in out.items() if k != "bytes"}, json.dumps(doc)

    base = run_(0.0, None)
    assert run_(8.0, None) == base
    assert run_(0.0, 10.0) == base
    limited, _ = run_(8.0, 0.05)  # 32 KB a packet at 50 MB/s: 655 us, over the ~200 us of compute
    assert limited["bandwidth_bound"] > 0 and limited["makespan_ms"] > 1.5 * base[0]["makespan_ms"]


def test_domains_on_one_node_share_its_bandwidth():
    """Two domains of one worker each on one node: they read from the one node together,
    so two reads at once take twice as long as one, as in one interpreter."""
    from bobox_sched.sim import DomainsSimulation

    def span(requests):
        costs = Costs(**_BARE, node_bandwidth_gbs=10.0)
        return DomainsSimulation(describe("1x2"), _readers(requests), domains=2, seed=0, costs=costs).run()

    one, two = span(1), span(2)
    assert two["requests_per_domain"] == [1, 1] and two["bytes"] == 16_000_000
    assert two["makespan_ms"] - one["makespan_ms"] == pytest.approx(0.8)


def test_replay_keeps_the_bytes_each_operator_read():
    """A trace whose slices carry bytes (a simulated one: chain_mix reads 8 bytes a row in
    every operator but the source) replays with the bytes per row that make each operator
    read, in all, what it read in the trace: the replay's total is the trace's."""
    from bobox_sched.sim.replay import replay_plans, requests_of, totals

    doc = _sim_trace()
    t = totals(doc)
    assert t["bytes"] == 4 * 4 * 6 * 2048 * 8  # 4 requests x (3 operators and the sink) x 6 packets of 2048 rows
    plans = replay_plans(doc)
    for plan, (_rid, (_name, ops)) in zip(plans, sorted(requests_of(doc).items())):
        specs = list(plan._specs.values())
        packets, rows_per = specs[0][1][:2]
        order = sorted(ops.values(), key=lambda rec: rec[4])
        assert [args[-1].bytes_row * packets * rows_per for _, args, _ in specs] == pytest.approx(
            [rec[5] for rec in order])
    out = Simulation(describe("1x1"), plans, seed=3, costs=Costs(jitter=0.0)).run()
    assert out["bytes"] == t["bytes"]
    old = {"traceEvents": [dict(e, args={k: v for k, v in e["args"].items() if k != "bytes"})
                           if e.get("cat") == "task" else e for e in doc["traceEvents"]]}
    assert all(args[-1].bytes_row == 0 for p in replay_plans(old) for _, args, _ in p._specs.values())  # none: 0


def test_machine_descriptions_set_a_bandwidth():
    from bobox_sched.sim import bandwidth_of
    from bobox_sched.sim.machine import MAX_BANDWIDTH_GBS
    from experiments.cli import simulate as cli

    assert cli.MAX_BANDWIDTH_GBS == MAX_BANDWIDTH_GBS
    assert bandwidth_of("2 nodes x 4 cores, bandwidth 40G") == 40.0
    assert bandwidth_of("2x4, smt 2, bandwidth 12.5 GB/s") == 12.5 and bandwidth_of("2x4") is None
    assert bandwidth_of("live") is None
    assert len(describe("2x4, bandwidth 40G").cpu_nodes) == 2
    for bad in ("2x2, bandwidth 0", "2x2, bandwidth fast", "2x2, bandwidth", "2x2, bandwidth 1e9"):
        with pytest.raises(TopologyError, match="bandwidth"):
            describe(bad)


def test_bobox_simulate_bandwidth(capsys):
    import clirun

    r = clirun.in_process("simulate", "--machine", "1x2", "--bandwidth-gbs", "0")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "--bandwidth-gbs" in lines[0]
    common = ["--requests", "4", "--packets", "4", "--json", "--no-progress"]

    def sim(*args):
        r = clirun.in_process("simulate", *args, *common)
        assert r.returncode == 0, r.stderr
        return r.stderr, json.loads(r.stdout.strip().splitlines()[-1])["runs"][0]

    err, free = sim("--machine", "1x2")
    assert "memory bandwidth unlimited" in err and free["bandwidth_bound"] == 0 and free["bytes"] > 0
    # 32 KB packets at 100 MB/s: 330 us each, over their compute (~200 us): the machine's setting applies
    err, described = sim("--machine", "1x2, bandwidth 0.1G")
    assert "memory bandwidth 0.1 GB/s per node" in err
    assert described["bandwidth_bound"] > 0 and described["makespan_ms"] > free["makespan_ms"]
    err, given = sim("--machine", "1x2, bandwidth 0.1G", "--bandwidth-gbs", "1000")  # the option wins
    assert "memory bandwidth 1000 GB/s per node" in err and given["bandwidth_bound"] == 0
    assert clirun.in_process("simulate", "--machine", "1x2, bandwidth slow").returncode == 2


def test_bobox_simulate_out_writes_the_experiments_files(tmp_path):
    """--out: the long-format CSV, the JSON and a report.md section, as bobox experiment
    writes them, with the values of the runs (and the simulated machine in the report)."""
    import csv

    import clirun

    out = tmp_path / "sim"
    r = clirun.in_process("simulate", "--machine", "2x2", "--requests", "4", "--packets", "4", "--seeds", "2",
                          "--json", "--no-progress", "--out", str(out))
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert json.loads((out / "simulate.json").read_text()) == summary
    rows = list(csv.DictReader(open(out / "simulate.csv")))
    assert {row["experiment"] for row in rows} == {"simulate"}
    for run in summary["runs"]:
        got = {row["metric"]: float(row["value"]) for row in rows if row["x"] == str(run["seed"])}
        assert got["makespan_ms"] == run["makespan_ms"] and got["tasks"] == run["tasks"]
        assert got["bytes"] == run["bytes"]
    report = (out / "report.md").read_text()
    assert "<!-- bobox:simulate -->" in report and "CPU: simulated; 4 CPUs in 2 NUMA node(s)" in report
    median = sorted(run["makespan_ms"] for run in summary["runs"])
    assert f"| median | {round((median[0] + median[1]) / 2, 4)} |" in report
    bad = clirun.in_process("simulate", "--machine", "2x2", "--out", str(out / "simulate.csv" / "x"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: --out")


def test_gil_barging_fills_idle_hand_offs():
    """With barging (Costs.gil_barging), a thread that asks for the GIL while it lies idle
    in a hand-off takes it when it is done before the woken waiter runs: on eight workers
    queueing for the GIL the run is shorter than the FIFO queue's, by less than the
    hand-offs' whole idle time; one worker never waits, so it changes nothing; and the
    same seed still gives the same trace."""
    def run_(cores, barging):
        plans = chain_mix(16, length=3, packets=8, rows=4096, seed=2, gil_share=0.3)
        sim = Simulation(describe(f"1x{cores}"), plans, seed=2,
                         costs=Costs(jitter=0.0, gil_handoff_ns=50e3, gil_barging=barging))
        return sim.run(), sim.document()

    assert run_(1, True)[0]["makespan_ms"] == run_(1, False)[0]["makespan_ms"]
    (fifo, _), (barge, doc) = run_(8, False), run_(8, True)
    idle_ms = 2 * fifo["tasks"] * 0.05  # at most one hand-off per taking of the GIL
    assert 0 < fifo["makespan_ms"] - barge["makespan_ms"] < idle_ms
    assert json.dumps(run_(8, True)[1], sort_keys=True) == json.dumps(doc, sort_keys=True)
