"""Checks run *inside* the NUMA-VM guest (see numa_vm.py). Each check prints one
`@@RESULT <name> <json>` line with what the kernel says; the host-side tests assert.

Usage (in the guest): python tests/vm_guest.py CHECK [CHECK...]
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def in_thread(fn):
    out = {}

    def run():
        try:
            out["v"] = fn()
        except BaseException:  # noqa: BLE001 - reported to the host
            out["e"] = traceback.format_exc()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise RuntimeError(out["e"])
    return out["v"]


@check
def topology():
    import topology as t

    return t.probe().to_json()


@check
def pinning():
    import topology as t

    topo = t.probe()
    res = {}
    for n in topo.nodes:
        res[str(n.os_index)] = in_thread(
            lambda n=n: sorted(t.pin_to_node(topo, n.os_index)) + [-1] + sorted(os.sched_getaffinity(0))
        )
    return res


@check
def alloc():
    import numpy as np

    import topology as t

    topo = t.probe()
    res = {}
    for n in topo.nodes:
        # allocate from a thread pinned to *another* node: placement must not depend on
        # where the allocating thread runs
        other = topo.nodes[(topo.nodes.index(n) + 1) % len(topo.nodes)].os_index

        def work(n=n, other=other):
            t.pin_to_node(topo, other)
            a = t.alloc_on_node(8 << 20, n.os_index, np.int64)
            a[:] = 1
            return {str(k): v for k, v in t.node_histogram(a).items()}

        res[str(n.os_index)] = in_thread(work)
    return res


def bobox_cli(*argv) -> str:
    """`bobox ARGV...` by the command's main() in this process (tests/clirun.py): each
    `python -m bobox_sched` in a new interpreter paid a start and the imports of numba,
    numpy and pyarrow again, about 100 s under emulation. Its stdout; a status other than
    0 raises with its stderr."""
    import clirun

    r = clirun.in_process(*argv)
    if r.returncode != 0:
        raise RuntimeError(f"bobox {' '.join(map(str, argv))}: exit {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


@check
def numa_factor():
    out = bobox_cli("topology", "--numa-factor", "--bytes", "4M", "--repeat", "1", "--json")
    return json.loads(out.strip().splitlines()[-1])


def _kernel_cpus(native_id):
    from topology.probe import parse_cpulist

    with open(f"/proc/self/task/{native_id}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return parse_cpulist(line.split(":", 1)[1])
    return None


@check
def sched_pinning():
    """Each worker's CPU mask as the kernel reports it (/proc/self/task/TID/status)."""
    from experiments.bench import heavy_plan

    from bobox_sched import Scheduler

    with Scheduler() as s:
        s.submit(heavy_plan(2, 1)).result(300)
        return [
            {"worker": w.id, "node": w.node_id, "node_cpus": list(w.node.cpus),
             "kernel_cpus": _kernel_cpus(w.thread.native_id)}
            for w in s.workers
        ]


@check
def sched_locality():
    from experiments.bench import bench_locality

    return bench_locality(requests=8, packets=12, rounds=1, every=1)


@check
def domains_numa():
    """Scheduler(domains="auto", domain_workers=2) on the 2-node guest: each domain's CPU
    mask and memory policy as the kernel reports them (/proc/PID/status, numa_maps), the
    tasks each ran, and the pages of consumed packets on the consuming worker's node."""
    from experiments.bench import heavy_plan

    from bobox_sched import Scheduler

    import numpy as np

    from bobox_sched.core.operator import Operator
    from topology.memory import page_nodes

    class PageProbe(Operator):
        """Reports, from inside its domain, the nodes of its (shared) array's pages."""

        inputs = ()
        outputs = ()

        def __init__(self, arr):
            self.arr = arr

        def process(self, ctx):
            int(self.arr.sum())  # map its pages here (move_pages says -ENOENT of a page never touched)
            ctx.set_result(sorted({int(n) for n in page_nodes(self.arr)}))
            ctx.finish()

    from bobox_sched import Plan

    with Scheduler(domains="auto", domain_workers=2, locality_sample=1) as s:
        plan = heavy_plan(12, 1)
        for h in [s.submit(plan) for _ in range(8)]:
            h.result(300)
        st = s.stats()
        probe = Plan("pages")
        probe.add("probe", PageProbe, np.arange(1 << 18, dtype=np.int64))  # 2 MiB: shared, a copy per node
        array_pages = [s.submit_to(i, probe).result(300) for i in range(len(s.domains))]
        doms = []
        for d in s.domains:
            with open(f"/proc/{d['pid']}/status") as f:
                allowed = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("Cpus_allowed_list"))
            with open(f"/proc/{d['pid']}/numa_maps") as f:
                policies = sorted({ln.split()[1] for ln in f if len(ln.split()) > 1})
            doms.append({**d, "kernel_cpus": allowed, "policies": policies})
    loc = st["locality"]
    return {"domains": doms, "tasks": [d["stats"]["tasks"] for d in st["domains"]], "pages": loc["pages"],
            "local_fraction": loc["local_fraction"], "array_pages": array_pages}


@check
def sched_balance():
    """Requests forced onto node 0 while the other nodes idle: what the balancer did."""
    import numpy as np

    from bobox_sched import Plan, Scheduler, Source, StreamOperator

    class Src(Source):
        def __init__(self):
            self.i = 0

        def next_packet(self, ctx):
            if self.i >= 60:
                return None
            self.i += 1
            p = ctx.new_packet({"x": np.int64}, 4)
            p["x"][:] = self.i
            return p

    class Slow(StreamOperator):
        outputs = ()

        def __init__(self):
            self.total = 0

        def on_packet(self, ctx, port, pkt):
            time.sleep(0.002)
            self.total += int(pkt["x"].sum())

        def on_end(self, ctx):
            ctx.set_result(self.total)

    plan = Plan("slow")
    plan.add("src", Src)
    plan.add("sink", Slow)
    plan.connect("src", "sink")
    with Scheduler(balance_interval=0.05) as s:
        hs = [s.submit(plan, node=0) for _ in range(6)]
        results = [h.result(600) for h in hs]
        st = s.stats()
        return {"results": results, "migrations": st["migrations"], "shares": st["shares"],
                "request_nodes": [h.stats["nodes"] for h in hs]}


@check
def experiments():
    """numa-factor and numa-placement on this (2-node) guest, through the CLI's main()."""
    import csv

    out = "/tmp/exp"
    data = os.environ["BOBOX_VM_DATA"]
    summary = {}
    for name, extra in (("numa-factor", ["--bytes", "4M"]), ("numa-placement", [])):
        # numa-factor's default array (64 MiB, 4 pairs) took most of this check's 323 s
        # under emulation; 4 MiB still measures every node pair on the kernel's pages
        t0 = time.perf_counter()
        stdout = bobox_cli("experiment", name, "--quick", "--repeat", "1", "--out", out, "--data", data,
                           "--no-progress", "--json", *extra)
        print(f"@@TIME experiments:{name} {time.perf_counter() - t0:.1f}", flush=True)
        with open(f"{out}/{name}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        with open(f"{out}/{name}.png", "rb") as f:
            png = f.read(8)
        summary[name] = {"json": json.loads(stdout.strip().splitlines()[-1]), "csv_rows": len(rows),
                         "png_ok": png == b"\x89PNG\r\n\x1a\n"}
    with open(f"{out}/report.md") as f:
        summary["report"] = f.read()
    return summary


@check
def regions_numa():
    """A partitioned region of 4 channels (Plan.place spreads channel c over node slot c):
    the node each channel's operator ran on (ctx.node) and where the kernel says its
    per-channel state's pages are."""
    import numpy as np

    from bobox_sched import Plan, Scheduler
    from bobox_sched.regions.fission import parallelize
    from experiments.region_ops import ArraySource, CountSink, RunningCount

    rng = np.random.default_rng(0)
    n = 40000
    cols = {"x": rng.integers(0, 1000, n), "k": rng.integers(0, 4096, n)}
    report = {}
    p = Plan("numa-region")
    p.add("src", ArraySource, cols, (1000,))
    p.add("cnt", RunningCount, "k", 4096, 64, "x", "cnt", "acc", report)
    p.add("sink", CountSink, "acc")
    p.chain("src", "cnt", "sink")
    with Scheduler(**_prime_shape()) as s:
        want = s.submit(p).result(600)
        got = s.submit(parallelize(p, 4)).result(600)
        nodes = [nd.os_index for nd in s.topology.cpu_nodes]
    return {"identical": want == got, "rows": got["rows"], "nodes": nodes,
            "channels": {str(k): v for k, v in report.items() if k != "sequential"}}


@check
def tstream_numa():
    """TStream on real NUMA nodes (GS, every numa_mode): the nodes of the state's pages as
    the kernel reports them (move_pages), where the pool tasks ran, and every run
    against the serial oracle. Numba's cache for this check was primed on the host for a
    generic CPU (BOBOX_VM_PRIMED_CACHE): compiling the chain kernels under emulation would
    take far too long."""
    import numpy as np

    from bobox_sched import Scheduler
    from bobox_sched.txn import TxnConfig
    from operators.txn import make_app, oracle_of, run_once, same_outputs

    app = make_app("gs", nkeys=4000, nparts=4)
    ev = app.events(3000, seed=3)
    dense, ref = oracle_of(app, app.make_store(), ev)
    out = {}
    with Scheduler(balance_interval=None, **_prime_shape()) as s:
        out["workers"] = [w.node_id for w in s.workers]
        for mode, steal in (("shared-nothing", False), ("shared-per-socket", False), ("shared-everything", True)):
            store = app.make_store()
            cfg = TxnConfig(store, len(s.workers), interval=150, numa_mode=mode, work_stealing=steal)
            r = run_once(s, app, store, ev, cfg, keep=True)
            g = r["group"]
            out[mode] = {
                "equal": bool(np.array_equal(store.dense(), dense) and same_outputs(r["outputs"], ref)),
                "segments": [[placed, hist] for placed, hist in store.page_nodes()],
                "pools": g["pools"],
                "placement_locality": g["placement_locality"],
                "page_locality": g["page_locality"],
            }
    return out


def _primed_cache() -> None:
    """Copy numba's cache primed on the host (BOBOX_VM_PRIMED_CACHE, compiled for a
    generic CPU: NUMBA_CPU_NAME=generic on both sides) into this guest's NUMBA_CACHE_DIR,
    before anything imports numba: compiling under emulation takes minutes a kernel
    set. Likewise matplotlib's font cache (BOBOX_VM_PRIMED_MPL into MPLCONFIGDIR): a
    process that finds none builds it, a minute under emulation, and the guest's home
    is not writable, so each experiment process built its own. Experiments run as
    subprocesses inherit the variables."""
    import shutil

    for src, dst in (("BOBOX_VM_PRIMED_CACHE", "NUMBA_CACHE_DIR"), ("BOBOX_VM_PRIMED_MPL", "MPLCONFIGDIR")):
        primed = os.environ.get(src)
        dest = os.environ.get(dst)
        if primed and dest and os.path.isdir(primed) and os.path.abspath(primed) != os.path.abspath(dest):
            shutil.copytree(primed, dest, dirs_exist_ok=True)


def _prime_shape() -> dict:
    """Scheduler options for a run on the host that primes the cache for a guest of
    BOBOX_VM_PRIME_NODES ("<nodes>x<CPUs per node>") as virtual nodes: the worker count
    picks which kernels run (GIL-holding or releasing twins, parallel plans) and the node
    count some argument types (one store segment per node), so another shape leaves the
    guest compiling. Empty in the guest itself."""
    prime = os.environ.get("BOBOX_VM_PRIME_NODES")
    if not prime:
        return {}
    from topology import probe
    from topology.virtual import virtual_topology

    nodes, per_node = (int(x) for x in prime.split("x"))
    return {"topology": virtual_topology(probe(), nodes), "threads_per_node": per_node, "pin": False}


@check
def tpch_mix():
    """The TPC-H mix of ``experiment numa-placement --quick``, once: run on the host to
    prime the guest's cache (the experiment itself skips on a one-node host)."""
    from types import SimpleNamespace

    from bobox_sched import Scheduler
    from experiments.locality import _mix_queries, _timed_mix
    from experiments.workload import build_plans, choose_parallel

    queries = _mix_queries(SimpleNamespace(quick=True))
    copies = 2
    with Scheduler(balance_interval=None, **_prime_shape()) as s:
        plans = build_plans(queries, os.environ["BOBOX_VM_DATA"], choose_parallel(copies * len(queries), len(s.workers)))
        _timed_mix(s, plans, 1)
        _timed_mix(s, plans, copies)
        workers = len(s.workers)
    return {"queries": queries, "workers": workers}


def _profiled(fn):
    """`fn()` under cProfile; its 40 most expensive calls (cumulative) as @@PROF lines."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    try:
        return prof.runcall(fn)
    finally:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
        for line in buf.getvalue().splitlines():
            print(f"@@PROF {line}", flush=True)


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def main(names):
    # @@TIME lines: where a guest's minutes go (run_guest prints them on stderr: pytest
    # shows them with -s or when a test fails): the kernel's uptime when this script
    # starts (boot and interpreter start), the cache copy, then each check's seconds.
    print(f"@@TIME start {_uptime():.1f}", flush=True)
    t0 = time.perf_counter()
    _primed_cache()
    print(f"@@TIME primed_cache {time.perf_counter() - t0:.1f}", flush=True)
    profile = os.environ.get("BOBOX_VM_PROFILE", "")  # a check run under cProfile: @@PROF lines
    for name in names:
        t0 = time.perf_counter()
        try:
            result = _profiled(CHECKS[name]) if name == profile else CHECKS[name]()
        except Exception:  # noqa: BLE001 - reported to the host
            result = {"error": traceback.format_exc()}
        print(f"@@TIME {name} {time.perf_counter() - t0:.1f}", flush=True)
        print(f"@@RESULT {name} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
