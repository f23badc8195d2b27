"""Benchmarks of the scheduler itself: ``bobox bench overhead|speedup|locality|idle``.

Each prints human-readable lines and, with ``--json``, a JSON object as its last line.
Comparisons are measured side by side in one run (our machines are shared and noisy):
never compare figures from different runs.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

import topology
from bobox_sched import Operator, Packet, Plan, Scheduler, Source, StreamOperator


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# overhead: scheduling cost per task, against concurrent.futures.ThreadPoolExecutor


class _TinySource(Source):
    """Emits the same one-row packet `n` times: tasks that do (almost) nothing."""

    def __init__(self, n: int):
        self.n = n
        self.i = 0
        self.pkt = Packet({"x": np.zeros(1, np.int64)})

    def next_packet(self, ctx):
        if self.i >= self.n:
            return None
        self.i += 1
        return self.pkt


class _Pass(Operator):
    inputs = ("in",)
    outputs = ("out",)

    def process(self, ctx):
        p = ctx.recv("in")
        if p is not None:
            ctx.send("out", p)
        if ctx.at_eos("in"):
            ctx.close()
            ctx.finish()


class _Count(Operator):
    inputs = ("in",)
    outputs = ()

    def __init__(self):
        self.n = 0

    def process(self, ctx):
        if ctx.recv("in") is not None:
            self.n += 1
        if ctx.at_eos("in"):
            ctx.set_result(self.n)
            ctx.finish()


def chain_plan(packets: int, length: int) -> Plan:
    plan = Plan("tiny-chain")
    plan.add("src", _TinySource, packets)
    names = ["src"]
    for i in range(length):
        plan.add(f"p{i}", _Pass)
        names.append(f"p{i}")
    plan.add("sink", _Count)
    names.append("sink")
    plan.chain(*names)
    return plan


def _bobox_chain(sched: Scheduler, plan: Plan, requests: int, packets: int) -> tuple[float, int]:
    t_before = sched.stats()["tasks"]
    t0 = time.perf_counter()
    hs = [sched.submit(plan) for _ in range(requests)]
    for h in hs:
        if h.result() != packets:
            raise RuntimeError("tiny-chain lost packets")
    t = time.perf_counter() - t0
    return t, sched.stats()["tasks"] - t_before


def _threadpool_chain(ex: ThreadPoolExecutor, requests: int, packets: int, length: int) -> tuple[float, int]:
    """The same dataflow on a ThreadPoolExecutor: every operator run on a packet is one
    submitted task (with its Future), sources resubmit themselves once per packet."""
    done = threading.Event()
    left = [requests]
    lock = threading.Lock()
    pkt = Packet({"x": np.zeros(1, np.int64)})

    def stage(state, k, p):
        if k > length:  # the sink
            state[0] += 1
            if state[0] == packets:
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()
            return
        ex.submit(stage, state, k + 1, p)

    def source(state, i):
        if i < packets:
            ex.submit(stage, state, 1, pkt)
            ex.submit(source, state, i + 1)

    t0 = time.perf_counter()
    for _ in range(requests):
        ex.submit(source, [0], 0)
    done.wait()
    t = time.perf_counter() - t0
    tasks = requests * packets * (length + 2)
    return t, tasks


def bench_overhead(packets: int = 2000, length: int = 8, requests: int = 8, repeat: int = 5,
                   policy: str = "bobox", threads_per_node: int | None = None) -> dict:
    """Microseconds per task of the scheduler and of ThreadPoolExecutor on the same tiny
    tasks, same worker count, interleaved runs; the median of `repeat` runs each."""
    from bobox_sched.trace import Tracer

    plan = chain_plan(packets, length)
    b_runs, l_runs, t_runs, tr_runs = [], [], [], []
    # The same plan on a scheduler with task_stats=False (no clock read or step counter
    # per task), and on one that traces every task (Scheduler(trace=...): the traced worker
    # loop and counting ports; its records are kept in memory and never written),
    # interleaved with the others: what the statistics and the trace cost per task.
    with Scheduler(policy=policy, threads_per_node=threads_per_node) as sched, \
            Scheduler(policy=policy, threads_per_node=threads_per_node, task_stats=False) as lean, \
            Scheduler(policy=policy, threads_per_node=threads_per_node, trace=Tracer()) as traced:
        workers = len(sched.workers)
        with ThreadPoolExecutor(workers) as ex:
            _bobox_chain(sched, plan, 2, packets)  # warm-up (imports, pools)
            _bobox_chain(lean, plan, 2, packets)
            _bobox_chain(traced, plan, 2, packets)
            _threadpool_chain(ex, 2, packets // 4, length)
            for i in range(repeat):
                t, n = _bobox_chain(sched, plan, requests, packets)
                b_runs.append(t / n * 1e6)
                t, n = _bobox_chain(lean, plan, requests, packets)
                l_runs.append(t / n * 1e6)
                t, n = _bobox_chain(traced, plan, requests, packets)
                tr_runs.append(t / n * 1e6)
                t, n = _threadpool_chain(ex, requests, packets, length)
                t_runs.append(t / n * 1e6)
                _log(f"[overhead] run {i + 1}/{repeat}: {policy} {b_runs[-1]:.2f} us/task "
                     f"({l_runs[-1]:.2f} without task statistics, {tr_runs[-1]:.2f} traced), "
                     f"ThreadPoolExecutor {t_runs[-1]:.2f} us/task")
    b, lo, t = statistics.median(b_runs), statistics.median(l_runs), statistics.median(t_runs)
    tr = statistics.median(tr_runs)
    return {
        "policy": policy,
        "workers": workers,
        "tasks_per_run": n,
        "bobox_us_per_task": round(b, 3),
        "bobox_no_stats_us_per_task": round(lo, 3),
        "threadpool_us_per_task": round(t, 3),
        "ratio": round(t / b, 2),
        "ratio_no_stats": round(t / lo, 2),
        "bobox_traced_us_per_task": round(tr, 3),
        "trace_on_cost": round(tr / b, 3),  # traced over untraced, same plan, interleaved
    }


# ---------------------------------------------------------------------------------------
# speedup: a CPU-bound plan of numba kernels on 1 worker and on all workers


@njit(nogil=True, cache=True)
def _heavy_kernel(x, out, rounds):
    """A few FLOPs per element per round, no memory traffic to speak of: CPU-bound."""
    for i in range(x.shape[0]):
        v = x[i]
        acc = 0.0
        for _ in range(rounds):
            v = v * 1.000001 + 0.5
            acc += v * 0.25
            v -= acc * 1e-9
        out[i] = acc


class _FloatSource(Source):
    def __init__(self, packets: int):
        self.packets = packets
        self.i = 0

    def next_packet(self, ctx):
        if self.i >= self.packets:
            return None
        n = ctx.rows_for({"x": np.float64})
        p = ctx.new_packet({"x": np.float64}, n)
        p["x"][:] = self.i
        self.i += 1
        return p


class _Heavy(StreamOperator):
    def __init__(self, rounds: int):
        self.rounds = rounds

    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.float64}, pkt.nrows)
        _heavy_kernel(pkt["x"], out["x"], self.rounds)
        ctx.send("out", out)


class _FloatSum(StreamOperator):
    outputs = ()

    def __init__(self):
        self.total = 0.0

    def on_packet(self, ctx, port, pkt):
        self.total += float(pkt["x"].sum())

    def on_end(self, ctx):
        ctx.set_result(self.total)


def heavy_plan(packets: int, rounds: int, stages: int = 2) -> Plan:
    plan = Plan("cpu-bound")
    plan.add("src", _FloatSource, packets)
    names = ["src"]
    for i in range(stages):
        plan.add(f"k{i}", _Heavy, rounds)
        names.append(f"k{i}")
    plan.add("sink", _FloatSum)
    names.append("sink")
    plan.chain(*names)
    return plan


def _run_plan_copies(sched: Scheduler, plan: Plan, copies: int) -> tuple[float, list]:
    t0 = time.perf_counter()
    hs = [sched.submit(plan) for _ in range(copies)]
    res = [h.result() for h in hs]
    return time.perf_counter() - t0, res


def bench_speedup(packets: int = 24, rounds: int = 40, requests: int | None = None, repeat: int = 3,
                  policy: str = "bobox", packet_bytes: int | None = None) -> dict:
    """Same total work on 1 worker and on all workers; speedup = T(1) / T(all)."""
    topo = topology.probe()
    one = topo.restrict(nodes=[topo.cpu_nodes[0].os_index], cpus=[topo.cpu_nodes[0].cpus[0]])
    plan = heavy_plan(packets, rounds)
    times = {1: [], "all": []}
    with Scheduler(topology=one, policy=policy, packet_bytes=packet_bytes) as s1, \
            Scheduler(topology=topo, policy=policy, packet_bytes=packet_bytes) as sall:
        workers = len(sall.workers)
        copies = requests or 2 * workers
        _run_plan_copies(s1, heavy_plan(2, rounds), 1)  # warm-up: JIT, pools
        _run_plan_copies(sall, heavy_plan(2, rounds), workers)
        base = None
        for i in range(repeat):
            t1, r1 = _run_plan_copies(s1, plan, copies)
            ta, ra = _run_plan_copies(sall, plan, copies)
            if base is None:
                base = r1[0]
            if any(abs(x - base) > 1e-6 * abs(base) for x in r1 + ra):
                raise RuntimeError("cpu-bound plan gave different answers")
            times[1].append(t1)
            times["all"].append(ta)
            _log(f"[speedup] run {i + 1}/{repeat}: 1 worker {t1:.3f} s, {workers} workers {ta:.3f} s, "
                 f"speedup {t1 / ta:.2f}")
        tasks = sall.stats()["tasks"]
        busy = sum(d["busy_s"] for d in sall.stats()["busy_per_node"])
        pkt_bytes = sall.packet_bytes
    t1, ta = statistics.median(times[1]), statistics.median(times["all"])
    packets_total = copies * packets * 2  # two kernel stages
    return {
        "policy": policy,
        "workers": workers,
        "requests": copies,
        "packet_bytes": pkt_bytes,
        "t1_s": round(t1, 4),
        "tall_s": round(ta, 4),
        "speedup": round(t1 / ta, 3),
        "efficiency": round(t1 / ta / workers, 3),
        "kernel_ms_per_packet": round(t1 / packets_total * 1e3, 3),
        "busy_us_per_task": round(busy / max(tasks, 1) * 1e6, 2),
    }


# ---------------------------------------------------------------------------------------
# locality: where do consumed packets live, according to the kernel?


def bench_locality(requests: int = 16, packets: int = 64, rounds: int = 4, every: int = 1,
                   policy: str = "bobox", balance_interval: float | None = 0.1) -> dict:
    """Several concurrent requests; every `every`-th consumed packet's pages are looked
    up with move_pages and compared with the consuming worker's node."""
    if not topology.numa_available():
        raise RuntimeError("libnuma/NUMA support is not available: cannot ask the kernel where pages are")
    plan = heavy_plan(packets, rounds)
    with Scheduler(policy=policy, locality_sample=every, balance_interval=balance_interval) as s:
        _run_plan_copies(s, heavy_plan(2, rounds), 1)
        t, _ = _run_plan_copies(s, plan, requests)
        st = s.stats()
    loc = st["locality"]
    return {
        "policy": policy,
        "nodes": len(st["nodes"]),
        "workers": st["workers"],
        "requests": requests,
        "sampled_packets": loc["samples"],
        "pages": loc["pages"],
        "local_fraction": round(loc["local_fraction"], 4) if loc["local_fraction"] is not None else None,
        "migrations": st["migrations"],
        "shares": st["shares"],
        "seconds": round(t, 3),
    }


# ---------------------------------------------------------------------------------------
# idle: CPU used by a scheduler with no request


def bench_idle(seconds: float = 3.0, policy: str = "bobox") -> dict:
    import psutil

    proc = psutil.Process()
    with Scheduler(policy=policy) as s:
        s.submit(heavy_plan(4, 2)).result()  # run something first, then go idle
        time.sleep(0.3)  # let workers reach their sleep
        c0 = proc.cpu_times()
        t0 = time.perf_counter()
        time.sleep(seconds)
        c1 = proc.cpu_times()
        wall = time.perf_counter() - t0
        workers = len(s.workers)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return {"policy": policy, "workers": workers, "seconds": round(wall, 3),
            "idle_cpu_percent_of_one_core": round(100 * cpu / wall, 3)}


# ---------------------------------------------------------------------------------------
# packets: allocate + free of one packet from a node pool, counted in byte accounts


def bench_packets(count: int = 200_000, repeat: int = 7, rows: int = 1024) -> dict:
    """Microseconds per allocate + free (median of `repeat` runs of `count`), for 1 and 3
    int64 columns, counted in a request's byte account (what a worker's
    ``ctx.new_packet`` does: the only accounting level) and in none (the pool alone).
    Runs on the calling thread, no scheduler."""
    from bobox_sched.core.packet import ByteTotals, NodePool, PacketSpec, new_packet

    pool = NodePool(0, node_local=False)
    out = {}
    for cols in (1, 3):
        spec = PacketSpec({f"c{i}": np.int64 for i in range(cols)})
        for label, acct in (("", ByteTotals().new_account()), ("_noacct", None)):
            runs = []
            for _ in range(repeat):
                t = time.perf_counter()
                for _ in range(count):
                    p = new_packet(pool, spec, rows, acct)
                    del p  # the lease goes back to its size class's deque
                runs.append((time.perf_counter() - t) / count * 1e6)
            key = f"{cols}col{label}_us"
            out[key] = round(statistics.median(runs), 3)
            _log(f"[packets] {cols} column(s), {'no account' if acct is None else 'request account'}: "
                 f"{out[key]:.2f} us")
    return {"rows": rows, "count": count, **out}


# ---------------------------------------------------------------------------------------
# queries: this engine on 1 worker against DuckDB with one thread, and mix scaling


def _geomean(xs):
    xs = [x for x in xs if x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def _timed_mix(sched: Scheduler, plans: dict, copies: int, rounds: int) -> dict:
    """The fastest of `rounds` concurrent mixes, with what its workers did meanwhile:
    time in tasks and with the GIL released (the serial fraction, from wall and from
    CPU time), CPU time obtained and time spent waiting for a CPU."""
    from operators.released import serial_fraction

    from experiments.workload import run_mix

    best = None
    for _ in range(rounds):
        st = run_mix(sched, plans, copies)
        s = st.stats
        if best is None or st.wall_s < best["wall_s"]:
            best = {"wall_s": st.wall_s, "busy_s": s["busy_s"], "released_s": s["released_s"],
                    "serial_fraction": serial_fraction(s["busy_s"], s["released_s"]),
                    "serial_fraction_cpu": serial_fraction(s["cpu_s"], s["released_cpu_s"]),
                    "cpu_s": s["cpu_s"], "cpu_wait_s": s["cpu_wait_s"]}
    return best


def _duckdb_mix(con, queries: list[str], copies: int, threads: int) -> tuple[float, float]:
    """`copies` copies of every query at once on DuckDB: one connection (a cursor of the
    same in-memory database) and one client thread per request, `threads` DuckDB
    threads; DuckDB releases the GIL while it executes. Returns (wall seconds, CPU
    seconds of the whole process: DuckDB's threads run in it)."""
    from concurrent.futures import ThreadPoolExecutor

    from operators.tpch_sql import QUERIES as SQL

    con.execute(f"SET threads={threads}")
    jobs = [q for _ in range(copies) for q in queries]
    cursors = [con.cursor() for _ in jobs]

    def one(i):
        return cursors[i].execute(SQL[jobs[i]]).fetchall()

    with ThreadPoolExecutor(len(jobs)) as ex:
        c0 = time.process_time()
        t0 = time.perf_counter()
        list(ex.map(one, range(len(jobs))))
        t = time.perf_counter() - t0
        cpu = time.process_time() - c0
    for c in cursors:
        c.close()
    return t, cpu


def duckdb_over(data, kind: str):
    """A DuckDB connection, one thread, with each table of `data` as a ``VIEW`` over its
    Parquet files or a ``TABLE`` loaded in memory (`kind`)."""
    import duckdb

    from operators.data import find_tables

    con = duckdb.connect()
    con.execute("SET threads=1")
    for t, fs in find_tables(data).items():
        lst = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in fs) + "]"
        con.execute(f"CREATE {kind} {t} AS SELECT * FROM read_parquet({lst})")
    return con


def bench_queries(data, queries=None, repeat: int = 5, copies: int = 4, policy: str = "bobox",
                  packet_bytes: int | None = None, cpu_time: bool = False) -> dict:
    """Per query: median time of this engine on 1 worker (parallel=1) and of DuckDB with
    one thread, on the same Parquet files, interleaved in one run. DuckDB is measured
    twice: reading the Parquet files (views) and on tables loaded in memory first, the
    like-for-like case for our in-memory table store. Then the concurrent mix (`copies`
    copies of every query at once) on 1 worker and on all workers: the scaling; the
    serial fraction measured in both (``operators.released``) with Amdahl's prediction;
    and the same mix on DuckDB with all threads and one connection per request.
    `cpu_time`: also count CPU time in GIL-releasing calls (``released.enable(cpu=True)``,
    ~3 us per kernel call) for the serial fraction from CPU time."""
    from operators import released, tpch
    from operators.tpch_sql import QUERIES as SQL
    from operators.tpch_sql import compare_tables, duckdb_answer

    from experiments.workload import build_plans, run_mix

    queries = queries or tpch.DEFAULT_MIX
    topo = topology.probe()
    one = topo.restrict(nodes=[topo.cpu_nodes[0].os_index], cpus=[topo.cpu_nodes[0].cpus[0]])
    views = duckdb_over(data, "VIEW")
    mem = duckdb_over(data, "TABLE")
    per_query = {}
    with Scheduler(topology=one, policy=policy, packet_bytes=packet_bytes) as s1:
        plans1 = build_plans(queries, data, 1)
        for q in queries:
            got = s1.submit(plans1[q]).result()  # warm-up + correctness
            compare_tables(got, duckdb_answer(q, data))
            views.execute(SQL[q]).fetchall()
            mem.execute(SQL[q]).fetchall()
            tb, tv, tm = [], [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                s1.submit(plans1[q]).result()
                tb.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                views.execute(SQL[q]).fetchall()
                tv.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                mem.execute(SQL[q]).fetchall()
                tm.append(time.perf_counter() - t0)
            b, v, m = statistics.median(tb), statistics.median(tv), statistics.median(tm)
            per_query[q] = {"bobox_s": round(b, 5), "duckdb_s": round(v, 5), "duckdb_mem_s": round(m, 5),
                            "ratio": round(b / v, 3), "ratio_mem": round(b / m, 3)}
            _log(f"[queries] {q}: bobox {b * 1e3:.1f} ms, duckdb {v * 1e3:.1f} ms (in memory {m * 1e3:.1f} ms)")
    rounds = max(1, repeat // 2)
    was = released.enable(True, cpu=cpu_time)
    try:
        # the concurrent mix on one worker ...
        with Scheduler(topology=one, policy=policy, packet_bytes=packet_bytes) as s1:
            run_mix(s1, plans1, 1)
            m1 = _timed_mix(s1, plans1, copies, rounds)
        # ... and on all workers, with the same plans: the mix is parallel by itself (many
        # requests at once), so this measures the scheduler's scaling; decomposing each
        # query (parallel=workers) on top is reported separately.
        with Scheduler(topology=topo, policy=policy, packet_bytes=packet_bytes) as sa:
            workers = len(sa.workers)
            run_mix(sa, plans1, 1)
            ma = _timed_mix(sa, plans1, copies, rounds)
            plans_k = build_plans(queries, data, workers)
            run_mix(sa, plans_k, 1)
            tk = _timed_mix(sa, plans_k, copies, rounds)["wall_s"]
    finally:
        released.enable(was)
    t1, ta = m1["wall_s"], ma["wall_s"]
    _duckdb_mix(mem, queries, 1, workers)  # warm-up
    td, tdc = min(_duckdb_mix(mem, queries, copies, workers) for _ in range(rounds))
    views.close()
    mem.close()
    serial = m1["serial_fraction"]
    _log(f"[queries] mix of {copies}x{len(queries)} requests: 1 worker {t1:.3f} s, {workers} workers {ta:.3f} s "
         f"(each query decomposed {workers} ways: {tk:.3f} s); DuckDB {workers} threads {td:.3f} s")
    return {
        "policy": policy,
        "data": str(data),
        "queries": per_query,
        "geomean_ratio": round(_geomean([r["ratio"] for r in per_query.values()]), 3),
        "geomean_ratio_mem": round(_geomean([r["ratio_mem"] for r in per_query.values()]), 3),
        "mix_requests": copies * len(queries),
        "workers": workers,
        "mix_t1_s": round(t1, 4),
        "mix_tall_s": round(ta, 4),
        "mix_tall_decomposed_s": round(tk, 4),
        "scaling": round(t1 / ta, 3),
        "scaling_per_core": round(t1 / ta / workers, 3),
        # the share of task time holding the GIL, on 1 worker (no waits for the GIL: the
        # figure Amdahl's law wants) and on all workers (GIL waits outside kernels count
        # as serial there), and the prediction from the first
        "serial_fraction": _r(serial, 4),
        "serial_fraction_all": _r(ma["serial_fraction"], 4),
        "serial_fraction_cpu": _r(m1["serial_fraction_cpu"], 4),
        "serial_fraction_cpu_all": _r(ma["serial_fraction_cpu"], 4),
        "predicted_speedup_2": _r(released.predicted_speedup(serial, 2), 3),
        "predicted_speedup_16": _r(released.predicted_speedup(serial, 16), 2),
        "predicted_speedup_64": _r(released.predicted_speedup(serial, 64), 2),
        # what the workers got from the machine during the mixes: CPU seconds, and
        # seconds they were runnable but other processes had the CPUs
        "mix_t1_cpu_s": round(m1["cpu_s"], 3),
        "mix_t1_cpu_wait_s": round(m1["cpu_wait_s"], 3),
        "mix_tall_cpu_s": round(ma["cpu_s"], 3),
        "mix_tall_cpu_wait_s": round(ma["cpu_wait_s"], 3),
        "mix_tall_cores_used": round(ma["cpu_s"] / ta, 3) if ta else None,
        "duckdb_mix_s": round(td, 4),
        "duckdb_mix_ratio": round(td / ta, 3),
        # the CPU seconds each engine spent on the mix: comparable where wall times are
        # not (a shared machine gives each run a different share of its CPUs)
        "duckdb_mix_cpu_s": round(tdc, 3),
        "duckdb_mix_cpu_ratio": round(tdc / ma["cpu_s"], 3) if ma["cpu_s"] else None,
    }


def _r(x, digits):
    return None if x is None else round(x, digits)
