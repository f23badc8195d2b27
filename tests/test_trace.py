"""Traces of real runs (issue 34, bobox_sched/trace): the Chrome trace event format, its
checks, and its sums against the scheduler's own statistics."""

import json
import os

import pytest
from ops import CountSink, Double, Range

from bobox_sched import BoboxError, Plan, Scheduler
from bobox_sched.core.port import CountingPort, Port
from bobox_sched.trace import Tracer, chrome
from bobox_sched.trace.recorder import WorkerTrace

POLICIES = ["bobox", "simple", "ordered"]


def chain(n=20_000, rows=100, name="chain"):
    p = Plan(name)
    p.add("src", Range, n, rows)
    p.add("m", Double)
    p.add("sink", CountSink)
    p.chain("src", "m", "sink")
    return p


def slices(doc, cat="task"):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_traced_run_is_a_valid_trace_whose_busy_time_is_the_stats(policy):
    tr = Tracer()
    with Scheduler(policy=policy, threads_per_node=2, trace=tr) as s:
        hs = [s.submit(chain(name=f"c{i}")) for i in range(6)]
        assert all(h.result(60)["rows"] == 20_000 for h in hs)
    doc = tr.document()
    assert chrome.validate(doc) == []
    json.loads(json.dumps(doc))  # plain JSON all the way down
    busy = chrome.busy_by_worker(doc)
    for w in s.workers:
        traced_us = busy.get((chrome.node_pid(w.node_id), w.id), 0.0)
        n = sum(1 for e in slices(doc) if e["tid"] == w.id)
        assert n == w.tasks
        # the same clock reads, written with ns resolution: equal up to rounding per task
        assert abs(traced_us * 1000 - w.busy_ns) <= n + 1
    # every request has one async track from submit to its end
    reqs = [e for e in doc["traceEvents"] if e.get("cat") == "request"]
    assert sorted(e["name"] for e in reqs if e["ph"] == "b") == sorted(f"{h.id} c{i}" for i, h in enumerate(hs))
    assert sum(1 for e in reqs if e["ph"] == "e") == 6


@pytest.mark.parametrize("policy", ["bobox", "simple"])
def test_rows_are_the_rows_each_operator_took(policy):
    tr = Tracer()
    with Scheduler(policy=policy, threads_per_node=2, trace=tr) as s:
        hs = [s.submit(chain(n=12_345, rows=100)) for _ in range(3)]
        for h in hs:
            h.result(60)
    doc = tr.document()
    by_op: dict = {}
    for e in slices(doc):
        by_op[e["name"]] = by_op.get(e["name"], 0) + e["args"]["rows"]
    # the source takes no input; Double and the sink each take every row once per request
    assert by_op == {"src": 0, "m": 3 * 12_345, "sink": 3 * 12_345}


class BytesSink(CountSink):
    """Counts the bytes of the packets it takes, as ``Packet.nbytes`` says."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def on_packet(self, ctx, port, pkt):
        super().on_packet(ctx, port, pkt)
        self.bytes += pkt.nbytes

    def on_end(self, ctx):
        ctx.set_result({"rows": self.rows, "bytes": self.bytes})


@pytest.mark.parametrize("policy", ["bobox", "simple"])
def test_bytes_are_the_bytes_of_the_packets_each_operator_took(policy):
    """Range sends n int64 values (8 bytes a row) in packets of 100; Double takes them and
    sends as many; the sink counts what it took itself. Each task's bytes are those of the
    packets it popped: per operator they add up to what it took."""
    n = 12_345
    tr = Tracer()
    with Scheduler(policy=policy, threads_per_node=2, trace=tr) as s:
        hs = []
        for i in range(3):
            p = Plan(f"b{i}")
            p.add("src", Range, n, 100)
            p.add("m", Double)
            p.add("sink", BytesSink)
            p.chain("src", "m", "sink")
            hs.append(s.submit(p))
        took = [h.result(60)["bytes"] for h in hs]
    assert took == [8 * n] * 3
    doc = tr.document()
    assert chrome.validate(doc) == []
    by_op: dict = {}
    for e in slices(doc):
        assert e["args"]["bytes"] == 8 * e["args"]["rows"]  # one int64 column: per task, not only in all
        by_op[e["name"]] = by_op.get(e["name"], 0) + e["args"]["bytes"]
    assert by_op == {"src": 0, "m": sum(took), "sink": sum(took)}


def test_slice_args_split_task_time_into_gil_held_and_released():
    tr = Tracer()
    with Scheduler(policy="bobox", threads_per_node=1, trace=tr) as s:
        s.submit(chain()).result(60)
    for e in slices(tr.document()):
        a = e["args"]
        assert abs(a["gil_released_us"] + a["gil_held_us"] - e["dur"]) < 0.002
        assert a["step"] in (1, 2, 3, 4) and a["request_name"] == "chain"


def test_untraced_runs_use_plain_ports_and_no_buffers():
    with Scheduler(policy="bobox", threads_per_node=1) as s:
        h = s.submit(chain())
        req = h._request
        assert all(type(q) is Port for t in req.tasks.values() for q in t.inq)
        h.result(60)
        assert s.tracer is None and all(w.trace is None for w in s.workers)
    tr = Tracer()
    with Scheduler(policy="bobox", threads_per_node=1, trace=tr) as s:
        h = s.submit(chain())
        assert all(type(q) is CountingPort for t in h._request.tasks.values() for q in t.inq)
        h.result(60)


def test_a_trace_path_is_written_at_shutdown_and_checked_before_the_start(tmp_path):
    out = tmp_path / "run.json"
    with Scheduler(policy="bobox", threads_per_node=2, trace=out) as s:
        s.submit(chain()).result(60)
        assert not out.exists()  # written once the workers have ended
    doc = chrome.load(out)
    assert chrome.validate(doc) == [] and slices(doc)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary left behind
    with pytest.raises(BoboxError, match="does not exist"):
        Scheduler(trace=tmp_path / "missing" / "t.json")
    with pytest.raises(BoboxError, match="is a folder"):
        Scheduler(trace=tmp_path)


def test_policies_that_run_no_worker_loop_refuse_tracing():
    with pytest.raises(BoboxError, match="not available under the streams:manual policy"):
        Scheduler(policy="streams", model="manual", trace=Tracer())


def _tracer(tasks_by_worker, t0=0):
    tr = Tracer()
    tr.t0 = t0
    for wid, tasks in tasks_by_worker.items():
        wt = WorkerTrace(wid, 0, f"w{wid}")
        wt.tasks.extend(tasks)
        tr.workers.append(wt)
    return tr


def test_a_steal_is_an_arrow_from_the_victims_running_slice_to_the_thiefs_task():
    # worker 0 runs tasks at 1000-5000 and 6000-8000 ns; worker 1 steals from it at 3000 ns
    # (inside the first), at 6000 ns (as the second starts: inside it) and at 9000 ns
    # (after worker 0's last task ended: the arrow leaves from inside that last slice)
    tr = _tracer({0: [(1000, 5000, "a", 0, 1, 10, 80, 0, -1), (6000, 8000, "a", 0, 1, 10, 80, 0, -1)],
                  1: [(3000, 4000, "b", 0, 4, 10, 80, 0, 0), (6000, 6500, "b", 0, 4, 10, 80, 0, 0),
                      (9000, 9500, "c", 0, 4, 0, 0, 0, 0)]})
    doc = chrome.document(tr)
    assert chrome.validate(doc) == []
    s = sorted((e for e in doc["traceEvents"] if e.get("ph") == "s"), key=lambda e: e["id"])
    f = sorted((e for e in doc["traceEvents"] if e.get("ph") == "f"), key=lambda e: e["id"])
    assert [(e["tid"], e["ts"]) for e in s] == [(0, 3.0), (0, 6.0), (0, 7.999)]
    assert [(e["tid"], e["ts"], e["bp"]) for e in f] == [(1, 3.0, "e"), (1, 6.0, "e"), (1, 9.0, "e")]


def test_balancer_actions_are_arrows_between_nodes_and_the_window_cuts_a_warm_up():
    tr = _tracer({0: [(1000, 2000, "warm", 0, 3, 0, 0, 0, -1), (6000, 8000, "a", 1, 3, 0, 0, 0, -1)]})
    tr.requests = {0: ["warm", 500, 2500, "done"], 1: ["q1", 5000, 9000, "done"]}
    tr.actions = [(7000, "migrate", 1, 0, 1)]
    tr.window_ns = 5000
    doc = chrome.document(tr)
    assert chrome.validate(doc) == []
    assert [(e["name"], e["ts"]) for e in slices(doc)] == [("a", 1.0)]
    assert [e["name"] for e in doc["traceEvents"] if e.get("ph") == "b"] == ["1 q1"]
    bal = slices(doc, "balancer")
    assert sorted(e["pid"] for e in bal) == [1, 2] and all(e["tid"] == chrome.BALANCER_TID for e in bal)
    assert sorted(e["ph"] for e in doc["traceEvents"] if e.get("cat") == "migrate") == ["f", "s"]


def test_validate_names_what_is_wrong():
    ok = {"ph": "X", "name": "a", "pid": 1, "tid": 0, "ts": 0.0, "dur": 5.0}
    assert chrome.validate({"traceEvents": [ok]}) == []
    assert "overlap" in chrome.validate({"traceEvents": [ok, dict(ok, ts=2.0)]})[0]
    assert "missing dur" in chrome.validate({"traceEvents": [{k: v for k, v in ok.items() if k != "dur"}]})[0]
    assert "bad ts" in chrome.validate({"traceEvents": [dict(ok, ts=-1.0)]})[0]
    assert "unknown phase" in chrome.validate({"traceEvents": [dict(ok, ph="Q")]})[0]
    task = dict(ok, cat="task", args={"rows": 10, "bytes": 80})
    assert chrome.validate({"traceEvents": [task]}) == []
    assert chrome.validate({"traceEvents": [dict(task, args={"rows": 10})]}) == []  # a trace from before bytes
    assert "bad bytes -1" in chrome.validate({"traceEvents": [dict(task, args={"rows": 10, "bytes": -1})]})[0]
    assert "bad rows '10'" in chrome.validate({"traceEvents": [dict(task, args={"rows": "10"})]})[0]
    flow = {"ph": "s", "name": "steal", "cat": "steal", "id": 1, "pid": 1, "tid": 0, "ts": 1.0}
    assert "want one s and one f" in chrome.validate({"traceEvents": [ok, flow]})[0]
    assert chrome.validate([]) == ["not a JSON object with a traceEvents list"]


def test_bobox_trace_prints_the_summary_and_draws_the_timeline(tmp_path):
    from experiments.cli.main import main

    out = tmp_path / "t.json"
    with Scheduler(policy="bobox", threads_per_node=2, trace=out) as s:
        for h in [s.submit(chain(name=f"c{i}")) for i in range(3)]:
            h.result(60)
    assert main(["trace", str(out)]) == 0
    assert (tmp_path / "t.png").stat().st_size > 10_000


def test_bobox_trace_summary_counts_what_the_run_did(tmp_path, capsys):
    from experiments.cli.main import main

    out = tmp_path / "t.json"
    with Scheduler(policy="bobox", threads_per_node=2, trace=out) as s:
        for h in [s.submit(chain(name=f"c{i}")) for i in range(3)]:
            h.result(60)
    assert main(["trace", str(out), "--no-png", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["workers"]
    assert sum(r["tasks"] for r in rows) == sum(w.tasks for w in s.workers)
    assert sum(r["rows"] for r in rows) == 3 * 2 * 20_000
    assert sum(r["bytes"] for r in rows) == 3 * 2 * 20_000 * 8  # one int64 column
    assert sum(r["stolen"] for r in rows) == sum(w.steals for w in s.workers)
    assert not (tmp_path / "t.png").exists()


def test_bobox_trace_refuses_what_is_not_a_trace(tmp_path, capsys):
    from experiments.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["trace", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: trace") and "not a JSON trace" in err[0]
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 0, "ts": 0}]}))
    assert main(["trace", str(bad)]) == 2
    assert "missing dur" in capsys.readouterr().err
    assert main(["trace", str(tmp_path / "none.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_run_with_domains_is_one_trace_with_a_process_per_domain_and_node(tmp_path):
    out = tmp_path / "d.json"
    tr = Tracer(out)
    with Scheduler(domains=2, threads_per_node=1, trace=tr) as s:
        parts = s._core._trace_dir
        s.submit(chain(name="warm")).result(120)
        tr.begin_window()  # every domain leaves the warm-up out
        hs = [s.submit(chain(name=f"c{i}")) for i in range(4)]
        assert all(h.result(120)["rows"] == 20_000 for h in hs)
    doc = chrome.load(out)
    assert chrome.validate(doc) == []
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    workers = {procs[e["pid"]] for e in slices(doc)}
    assert len(workers) == 2 and all(n.startswith("domain ") for n in workers)
    names = sorted(e["name"].split(" ", 1)[1] for e in doc["traceEvents"] if e.get("ph") == "b")
    assert names == ["c0", "c1", "c2", "c3"]  # the warm-up is out of the window
    rows = sum(e["args"]["rows"] for e in slices(doc) if e["name"] == "sink")
    assert rows == 4 * 20_000
    assert min(e["ts"] for e in slices(doc)) >= 0
    assert not os.path.exists(parts)  # the domains' part files are gone
