"""``Scheduler(domains=...)`` (``bobox_sched/domains/front.py``, ``process.py``): the
layout on real machines' captures, plans run in domain processes (operators from a test
module, from this module, and from a ``__main__`` script), errors and cancellation
across the process boundary, a domain killed mid-run, shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Source, StreamOperator
from bobox_sched.core.errors import RequestCancelled, SchedulerShutdown
from bobox_sched.domains.front import DomainDied, DomainFront, layout
from ops import Boom, CountSink, Endless, Range, Slow, SumSink

pytestmark = pytest.mark.slow


class Triple(StreamOperator):
    """Defined here: a domain imports this test module by the path the front sends."""

    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.int64}, pkt.nrows)
        np.multiply(pkt["x"], 3, out=out["x"])
        ctx.send("out", out)


def sum_plan(n: int) -> Plan:
    p = Plan("sum3")
    p.add("src", Range, n, 1000)
    p.add("t", Triple)
    p.add("sink", SumSink)
    p.chain("src", "t", "sink")
    return p


def chain(name: str, *ops) -> Plan:
    """A linear plan of (operator name, factory, args...) steps."""
    p = Plan(name)
    for op, factory, *args in ops:
        p.add(op, factory, *args)
    p.chain(*[op for op, *_ in ops])
    return p


def endless_plan() -> Plan:
    return chain("endless", ("src", Endless), ("sink", CountSink))


def slow_plan(rows: int, delay: float) -> Plan:
    """`rows` rows in 100-row packets, each packet held `delay` seconds: a request that
    is still running a while after it was submitted."""
    return chain("slow", ("src", Range, rows, 100), ("slow", Slow, delay), ("sink", SumSink))


# -- layout ---------------------------------------------------------------------------------

def _topo(hwloc_trees, name):
    import topology

    return topology.probe(hwloc_trees[name])


def test_layout_on_captured_machines(hwloc_trees):
    t = _topo(hwloc_trees, "16amd64-8n2c")  # 8 nodes x 2 CPUs
    assert layout(t, "auto", 8) == [([0, 1], 0), ([2, 3], 1), ([4, 5], 2), ([6, 7], 3), ([8, 9], 4),
                                    ([10, 11], 5), ([12, 13], 6), ([14, 15], 7)]
    assert layout(t, "auto", 16) is None  # 16 CPUs: one in-process runtime
    assert layout(t, "off") is None and layout(t, None) is None
    assert layout(t, 2) == [(list(range(8)), None), (list(range(8, 16)), None)]  # 4 nodes each: no binding
    assert [len(c) for c, _ in layout(t, 16)] == [1] * 16
    t4 = _topo(hwloc_trees, "40intel64-4n10c+pci-conflicts")  # 4 nodes x 10 CPUs
    places = layout(t4, "auto", 8)
    assert [len(c) for c, _ in places] == [5] * 8 and [n for _, n in places] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert sorted(c for cs, _ in places for c in cs) == sorted(c for n in t4.cpu_nodes for c in n.cpus)
    assert [len(c) for c, _ in layout(t4, 6)] == [5, 5, 5, 5, 10, 10]  # 2, 2, 1, 1 domains per node
    ht = _topo(hwloc_trees, "16em64t-4s2c2t")  # one node, 8 cores x 2 threads
    cores = {}
    for c in ht.cpus:
        cores.setdefault((c.package, c.core), set()).add(c.os_index)
    for cpus, node in layout(ht, "auto", 4):  # 4 domains of 2 cores: a core's two threads together
        assert node == 0 and len(cpus) == 4
        assert all(sib <= set(cpus) or not (sib & set(cpus)) for sib in cores.values())


@pytest.mark.parametrize("domains, workers, words", [
    (0, None, "positive integer"), ("two", None, "'auto', 'off' or a positive integer"),
    (True, None, "positive integer"), (99, None, "more domains than"), ("auto", 0, "domain_workers"),
])
def test_bad_layouts_are_one_line_errors(hwloc_trees, domains, workers, words):
    t = _topo(hwloc_trees, "16amd64-8n2c")
    with pytest.raises(ValueError, match=words) as e:
        layout(t, domains, workers)
    assert "\n" not in str(e.value)


# -- runs in domain processes ---------------------------------------------------------------

@pytest.fixture(scope="module")
def two():
    with Scheduler(domains=2, threads_per_node=1) as s:
        yield s


def test_two_domains_run_plans_from_modules(two):
    assert isinstance(two._core, DomainFront)
    doms = two._core.domains
    assert len(doms) == 2 and {d["pid"] for d in doms}.isdisjoint({os.getpid()})
    assert sorted(c for d in doms for c in d["cpus"]) == sorted(os.sched_getaffinity(0))
    slow = slow_plan(1000, 0.02)  # still running when the next request is placed
    first = two.submit(slow)
    hs = [two.submit(sum_plan(10_000 + i)) for i in range(6)]
    assert [h.result(60) for h in hs] == [3 * (n * (n - 1) // 2) for n in range(10_000, 10_006)]
    assert first.result(60) == 1000 * 999 // 2
    assert first.domain == 0 and hs[0].domain == 1  # the least loaded gets the next request
    st = two.stats()
    assert st["workers"] == 2 and len(st["domains"]) == 2 and st["completed"] >= 6
    assert all(isinstance(d["stats"], dict) and d["stats"]["workers"] == 1 for d in st["domains"])


def test_stats_add_up_over_the_domains(two):
    """The front's stats() has the in-process keys, summed: per-domain task counts add up
    to the total, and a reset of the peak and the workers' CPU time reach every domain."""
    two.reset_peak()
    for h in [two.submit(sum_plan(5000)) for _ in range(4)]:
        h.result(60)
    st = two.stats()
    per = [d["stats"] for d in st["domains"]]
    assert st["policy"] == "bobox" and st["workers"] == 2 and st["nodes"] == sorted(set(st["nodes"]))
    assert st["tasks"] == sum(p["tasks"] for p in per) and st["tasks"] > 0
    assert st["steps"] == {k: sum(p["steps"][k] for p in per) for k in per[0]["steps"]}
    assert st["requests_done"] == sum(p["requests_done"] for p in per)
    cpu, wait = two._core.worker_cpu()
    assert cpu > 0 and wait >= 0 and two._core.peak_rss_bytes() > 0
    h = two.submit(sum_plan(100))
    h.result(60)
    assert h.stats["elapsed_s"] > 0 and h.stats["operators"] == 3 and h.failed_operator is None
    hs = [two.submit_to(1, sum_plan(100)) for _ in range(3)]  # whatever the load: domain 1
    assert [h.result(60) for h in hs] == [3 * 4950] * 3 and {h.domain for h in hs} == {1}
    with pytest.raises(ValueError, match="domain must be 0 to 1, got 2"):
        two.submit_to(2, sum_plan(10))


def _mark_domain():
    os.environ["BOBOX_TEST_DOMAIN_INIT"] = "ran"


class EnvSink(CountSink):
    def on_end(self, ctx):
        ctx.set_result(os.environ.get("BOBOX_TEST_DOMAIN_INIT"))


def test_domain_init_runs_in_every_domain_before_its_runtime():
    os.environ.pop("BOBOX_TEST_DOMAIN_INIT", None)
    with Scheduler(domains=2, threads_per_node=1, domain_init=_mark_domain) as s:
        p = Plan("env")
        p.add("src", Range, 10, 10)
        p.add("sink", EnvSink)
        p.chain("src", "sink")
        hs = [s.submit_to(i, p) for i in range(2)]
        assert [h.result(60) for h in hs] == ["ran", "ran"]
    assert "BOBOX_TEST_DOMAIN_INIT" not in os.environ  # it ran there, not here

    def broken():
        raise OSError("no such device")

    with pytest.raises(ValueError, match="domain_init failed: OSError: no such device"):
        Scheduler(domains=2, threads_per_node=1, domain_init=broken)


def test_errors_and_cancel_cross_the_boundary(two):
    h = two.submit(chain("boom", ("src", Range, 10_000, 100), ("b", Boom, 3), ("sink", CountSink)))
    with pytest.raises(KeyError, match="boom at packet 3"):
        h.result(60)
    assert h.state == "failed"
    e = endless_plan()
    h = two.submit(e)
    time.sleep(0.2)  # let it start in its domain (cancelling before works too; this covers a running one)
    assert h.cancel()
    with pytest.raises(RequestCancelled):
        h.result(60)
    assert two.submit(sum_plan(100)).result(60) == 3 * 4950  # the domains go on


def test_a_plan_fed_from_this_process_is_refused_in_one_line(two):
    from bobox_sched.core.sources import QueueSource, StreamChannel

    p = Plan("fed")
    p.add("src", QueueSource, StreamChannel(capacity=4))
    p.add("sink", CountSink)
    p.chain("src", "sink")
    with pytest.raises(ValueError, match="plan 'fed' cannot run in a domain process: .*StreamChannel") as e:
        two.submit(p)
    assert "\n" not in str(e.value)


MAIN_SCRIPT = textwrap.dedent("""
    import numpy as np
    from bobox_sched import Plan, Scheduler, Source, Sink

    class Squares(Source):          # defined in __main__: cloudpickle sends it by value
        def __init__(self, n):
            self.n, self.i = n, 0
        def next_packet(self, ctx):
            if self.i >= self.n:
                return None
            p = ctx.new_packet({"x": np.int64}, 1)
            p["x"][0] = self.i * self.i
            self.i += 1
            return p

    class Total(Sink):
        def finalize(self, packets):
            return int(sum(int(p["x"].sum()) for p in packets))

    if __name__ == "__main__":
        p = Plan("main")
        p.add("src", Squares, 50)
        p.add("sink", Total)
        p.chain("src", "sink")
        with Scheduler(domains=2, threads_per_node=1) as s:
            print("result", s.submit(p).result(60), len(s._core.domains))
""")


def test_a_plan_built_in_main_runs_in_domains(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(MAIN_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["result", str(sum(i * i for i in range(50))), "2"]


def test_a_killed_domain_fails_only_its_requests_and_comes_back():
    """SIGKILL to the domain running an endless request: that request fails with
    DomainDied naming the domain and the signal; the other domain's request (slow,
    running meanwhile) gives its right answer; the domain is restarted on the same CPUs
    and later requests run on both."""
    with Scheduler(domains=2, threads_per_node=1) as s:
        front = s._core
        e = endless_plan()
        victim = s.submit(e)  # the least loaded: domain 0, then domain 1
        slow = slow_plan(3000, 0.05)
        other = s.submit(slow)
        assert (victim.domain, other.domain) == (0, 1)
        pid = front.domains[0]["pid"]
        cpus = front.domains[0]["cpus"]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(DomainDied, match=rf"domain 0 \(pid {pid}, CPUs .*\) died: killed by SIGKILL"):
            victim.result(60)
        assert other.result(120) == 3000 * 2999 // 2
        deadline = time.monotonic() + 120
        while front.restarts < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert front.restarts == 1 and [d["cpus"] for d in front.domains][0] == cpus
        assert pid not in {d["pid"] for d in front.domains}
        hs = [s.submit_to(i % 2, sum_plan(1000)) for i in range(4)]
        assert [h.result(60) for h in hs] == [3 * 499500] * 4


def test_shutdown_ends_the_processes_and_refuses_requests():
    s = Scheduler(domains=2, threads_per_node=1)
    front = s._core
    procs = [d.proc for d in front._slots]
    assert s.submit(sum_plan(100)).result(60) == 3 * 4950
    s.shutdown()
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(SchedulerShutdown):
        s.submit(sum_plan(10))


def test_in_process_where_the_layout_has_no_domains():
    with Scheduler(domains="off") as s:
        assert not isinstance(s._core, DomainFront)
        assert s.submit(sum_plan(100)).result(60) == 3 * 4950
    with Scheduler(domains="auto") as s:  # 2 CPUs <= the default 8 workers per domain
        assert not isinstance(s._core, DomainFront)


def test_topology_command_shows_the_domains(hwloc_trees):
    import json

    import clirun

    root = str(hwloc_trees["40intel64-4n10c+pci-conflicts"])
    r = clirun.bobox("topology", "--root", root, "--domains", "auto", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("domains='auto': 8 domain processes")
    assert lines[i + 1].startswith("  domain 0: CPUs ") and "(5), node 0's memory preferred" in lines[i + 1]
    assert "node 3's memory preferred" in lines[i + 8]
    r = clirun.bobox("topology", "--root", root, "--domains", "2", "--json", timeout=120)
    doms = json.loads(r.stdout)["domains"]
    assert [(d["domain"], len(d["cpus"]), d["node"]) for d in doms] == [(0, 20, None), (1, 20, None)]
    r = clirun.bobox("topology", "--root", root, "--domains", "99", timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "more domains than the 40 CPUs" in r.stderr
    r = clirun.bobox("topology", "--domains", "x", timeout=120)
    assert r.returncode == 2 and "--domains takes auto, off or 1 to" in r.stderr


def test_bench_domains_command():
    import json

    import clirun

    r = clirun.bobox("bench", "domains", "--packets", "20", "--loops", "2000", "--repeat", "1", "--hop-packets", "200",
                     "--bulk-packets", "4", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["domains"] == out["workers"] == len(os.sched_getaffinity(0)) and out["requests"] == 2 * out["domains"]
    assert out["in_process_s"] > 0 and out["domains_s"] > 0
    # the ratio of the medians (the printed times are rounded to the millisecond)
    assert abs(out["gil_bound_speedup"] / (out["in_process_s"] / out["domains_s"]) - 1) < 0.05
    assert "gil_bound_speedup" in r.stdout.splitlines()[0]
    assert out["crash_failed"] + out["crash_completed"] == 8 and out["crash_other_answers_equal"] is True
    assert out["crash_restarted_answers_equal"] is True and out["leaked_segments"] == 0
    assert abs(out["span_gil_speedup"] / (out["span_in_process_s"] / out["span_domains_s"]) - 1) < 0.05
    assert out["hop_packets"] == 200 and out["bulk_packets"] == 4
    # every packet of the timed runs was made by ctx.new_packet in a domain: the 512 KiB
    # ones are lent, the one-row ones copied (under loans.LEND_MIN_BYTES): by bytes,
    # almost no copy (a copied stream would read 2.0)
    assert out["hop_packets_lent"] >= 4 and out["hop_packets_copied"] >= 200 and out["hop_copies"] < 0.05
    assert out["channel_gb_s"] > 0 and "span_gil_speedup" in r.stdout and "cross-domain edge" in r.stdout


def test_a_plan_travels_once_per_domain_and_changes_are_seen(two):
    """A plan resubmitted unchanged is pickled once and its bytes go to each domain once
    (later requests name it); a plan changed after a submit travels again; more distinct
    plans than a domain keeps (``PLAN_CACHE``) evict the oldest on both sides alike, so
    resubmitting an evicted one still works."""
    from bobox_sched.domains.process import PLAN_CACHE

    front = two._core
    p = sum_plan(2000)
    hs = [two.submit_to(i % 2, p) for i in range(6)]  # to each domain (placement alone may pick one)
    assert [h.result(60) for h in hs] == [3 * 1999000] * 6
    pid = front._plans[id(p)][2]
    assert all(pid in d.cached for d in front._slots)  # each domain got it (once: the mirror says so)
    q = Plan("changed")
    q.add("src", Range, 2000, 1000)
    q.add("t", Triple)
    q.add("t2", Triple)
    q.add("sink", SumSink)
    q.chain("src", "t", "t2", "sink")
    assert two.submit(q).result(60) == 9 * 1999000
    pid_q = front._plans[id(q)][2]
    q.place("t2", 0)  # a change the fingerprint sees: a new plan id
    assert two.submit(q).result(60) == 9 * 1999000 and front._plans[id(q)][2] not in (pid, pid_q)
    many = [sum_plan(10 + i) for i in range(2 * PLAN_CACHE + 60)]  # alternately to both domains
    for i in range(0, len(many), 40):
        for h in [two.submit_to(k % 2, m) for k, m in enumerate(many[i:i + 40], i)]:
            h.result(60)
    assert all(len(d.cached) == PLAN_CACHE for d in front._slots)
    first = [two.submit_to(k % 2, m) for k, m in enumerate(many[:10])]  # evicted on both sides: sent again
    assert [h.result(60) for h in first] == [3 * (n * (n - 1) // 2) for n in range(10, 20)]


class ArraySource(Source):
    """Emits a (large) array given at plan time, in 64k-row packets."""

    def __init__(self, x):
        self.x, self.i = x, 0

    def next_packet(self, ctx):
        if self.i >= len(self.x):
            return None
        k = min(65536, len(self.x) - self.i)
        p = ctx.new_packet({"x": np.int64}, k)
        p["x"][:] = self.x[self.i:self.i + k]
        self.i += k
        return p


class Writer(StreamOperator):
    """Tries to write into the plan's array: it must be read-only in a domain."""

    def __init__(self, x):
        self.x = x

    def on_packet(self, ctx, port, pkt):
        self.x[0] = 1
        ctx.send("out", pkt)


def test_large_arrays_travel_once_through_shared_memory():
    from bobox_sched.domains import shm
    from bobox_sched.domains.shared_arrays import SHARE_BYTES

    x = np.arange(SHARE_BYTES // 8 * 3, dtype=np.int64)  # 3 MiB: shared
    small = np.arange(1000, dtype=np.int64)  # by value
    with Scheduler(domains=2, threads_per_node=1) as s:
        front = s._core
        plans = []
        for k in range(3):  # three plans holding the same array object
            p = Plan(f"arr{k}")
            p.add("src", ArraySource, x)
            p.add("sink", SumSink)
            p.chain("src", "sink")
            plans.append(p)
        hs = [s.submit(p) for p in plans for _ in range(2)]
        assert [h.result(60) for h in hs] == [int(x.sum())] * 6
        assert front._share.bytes_shared == x.nbytes  # copied once for all plans and domains
        names = [n for n in shm.ours() if n.endswith("-array")]
        assert len(names) == 1
        w = Plan("writer")
        w.add("src", ArraySource, small)
        w.add("w", Writer, x)
        w.add("sink", SumSink)
        w.chain("src", "w", "sink")
        with pytest.raises(ValueError, match="read-only"):
            s.submit(w).result(60)
    assert not [n for n in shm.ours() if n.endswith("-array")]  # unlinked with the Scheduler
    assert x[0] == 0


def test_a_bad_option_fails_as_in_process_and_leaves_no_process():
    from bobox_sched.core.errors import BoboxError

    with pytest.raises(BoboxError, match="unknown policy 'nope'") as here:
        Scheduler(policy="nope")
    with pytest.raises(BoboxError, match="unknown policy 'nope'") as there:
        Scheduler(domains=2, policy="nope")
    assert str(there.value) == str(here.value)
    out = subprocess.run(["ps", "-eo", "ppid,args"], capture_output=True, text=True).stdout
    assert not [ln for ln in out.splitlines() if ln.split(None, 1)[0] == str(os.getpid()) and "sched_setaffinity" in ln]


def _boom():
    raise ZeroDivisionError("factory failed in the domain")


def test_submit_errors_do_not_stop_a_domain(two):
    """A bad `ordering` is refused by submit() itself, as in-process; a plan whose
    operator cannot be made fails its request (in the domain) without taking the domain's
    reader down; the next requests run."""
    with pytest.raises(ValueError, match="ordering= needs parallelism="):
        two.submit(sum_plan(10), ordering="rows")
    p = Plan("bad-factory")
    p.add("src", Range, 10, 10)
    p.add("x", _boom)
    p.add("sink", SumSink)
    p.chain("src", "x", "sink")
    for _ in range(2):  # twice: the second names the cached plan
        with pytest.raises(ZeroDivisionError, match="factory failed in the domain"):
            two.submit(p).result(60)
    assert [two.submit(sum_plan(100)).result(60) for _ in range(3)] == [3 * 4950] * 3
    h = two.submit(sum_plan(10))
    assert h.state in ("active", "done") and (h.result(60), h.state) == (135, "done")


def test_shutdown_twice_and_from_a_done_callback():
    import threading

    s = Scheduler(domains=2, threads_per_node=1)
    slow = slow_plan(2000, 0.02)
    long = s.submit(slow)
    ended = threading.Event()

    def stop(_h):  # runs on the front's reader thread of the short request's domain
        s.shutdown(wait=True)
        ended.set()

    short = s.submit(sum_plan(10))
    short.add_done_callback(stop)
    assert ended.wait(120) and long.done() and long.result(0) == 2000 * 1999 // 2
    s.shutdown(wait=False)  # again, both ways: no deadlock
    s.shutdown(wait=True)


def test_with_block_that_raises_cancels_what_runs():
    e = endless_plan()
    with pytest.raises(KeyError):
        with Scheduler(domains=2, threads_per_node=1) as s:
            h = s.submit(e)
            raise KeyError("leave")
    with pytest.raises(RequestCancelled):
        h.result(60)


def test_shared_structured_arrays_keep_their_fields_and_stay_read_only():
    import pickle

    from bobox_sched.domains.shared_arrays import ArrayShare, dumps

    share = ArrayShare()
    try:
        x = np.zeros(100_000, dtype=[("a", "<i8"), ("b", "<f8")])  # 1.6 MB: shared
        x["a"] = np.arange(100_000)
        back = pickle.loads(dumps({"x": x}, share))["x"]
        assert back.dtype == x.dtype and np.array_equal(back["a"], x["a"])
        with pytest.raises(ValueError):
            back.flags.writeable = True  # the mapping itself is read-only
    finally:
        share.close()
    with pytest.raises(RuntimeError, match="closed"):
        dumps({"x": x}, share)
