"""One measured validation point of the simulator's memory-bandwidth model
(``Costs.node_bandwidth_gbs``, bobox_sched/sim/engine.py) on the 2-vCPU, one-node VM.

Usage (repository root):
  .venv/bin/python measurements/2026-12-02-sim-bandwidth/validate.py             # all four steps
  .venv/bin/python measurements/2026-12-02-sim-bandwidth/validate.py bandwidth   # bandwidth.json (~1 min)
  .venv/bin/python measurements/2026-12-02-sim-bandwidth/validate.py real        # real.json, trace-1w.json, trace-2w.json
  .venv/bin/python measurements/2026-12-02-sim-bandwidth/validate.py sim         # sim.json (bobox simulate --replay)
  .venv/bin/python measurements/2026-12-02-sim-bandwidth/validate.py table       # table.md from the three

bandwidth: the VM's read bandwidth, one thread and two at once (threading; the kernel is
numba ``@njit(nogil=True, fastmath=True)``, a sum of a float64 array, so the two run in
parallel), each thread its own ARRAY_GIB array, REPEATS times: GB/s of bytes read, best
and median; plus the same kernel over a 1 MiB array (in cache) to show that over a large
one it waits for memory, not for the adds.

real: a memory-bound plan on the real scheduler (bobox policy, with a Tracer and
``operators.released`` timing on): ``SliceSource`` sends PACKETS packets of PACKET_MIB
MiB, each a view (no copy) of a distinct slice of one BASE_GIB GiB float64 array,
chosen at random per request, so what the operator reads is never in cache; ``Sum``
runs the nogil sum kernel over every value of each packet (its time is memory time) and
sends a one-row packet of the sum; ``Sink`` checks the sums. REQUESTS requests submitted
at once, on 1 and 2 workers (threads_per_node 1 / 2 on this one node), RUNS runs each,
alternating; wall time from the first submit to the last result; the median run's trace
of each is kept.

sim: the median 1-worker trace replayed with ``bobox simulate --replay`` on
"1 nodes x 1 cores" and "1 nodes x 2 cores" (3 seeds, default GIL hand-off), with the
bandwidth unlimited, the measured 2-thread aggregate, the measured 1-thread figure, and
(not a prediction) twice the per-worker rate the sum kernel ran at in the 2-worker run.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
from numba import njit

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
BOBOX = os.path.join(TOP, ".venv", "bin", "bobox")
sys.path.insert(0, TOP)

ARRAY_GIB = 1  # per thread, bandwidth step
REPEATS = 9
BASE_GIB = 4  # the real runs' data (the VM reports a 480 MiB L3)
PACKET_MIB = 8
PACKETS = 32  # per request: 256 MiB read per request
REQUESTS = 96  # 24 GiB read per run
RUNS = 9
SEEDS = 3


@njit(nogil=True, fastmath=True)
def ksum(a):
    s = 0.0
    for i in range(a.size):
        s += a[i]
    return s


# ---------------------------------------------------------------------------- bandwidth
def _gbs(nbytes, secs):
    return nbytes / secs / 1e9


def bandwidth():
    n = ARRAY_GIB * 2**30 // 8
    arrays = [np.ones(n), np.ones(n)]  # np.ones writes every page: all resident
    ksum(arrays[0])  # compile
    small = np.ones(2**20 // 8)
    cache = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(100):
            ksum(small)
        cache.append(_gbs(100 * small.nbytes, time.perf_counter() - t))

    one = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        ksum(arrays[0])
        one.append(_gbs(arrays[0].nbytes, time.perf_counter() - t))

    two, per_thread = [], []
    for _ in range(REPEATS):
        barrier = threading.Barrier(2)
        spans = [None, None]

        def work(k):
            barrier.wait()
            t0 = time.perf_counter()
            ksum(arrays[k])
            spans[k] = (t0, time.perf_counter())

        ths = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        wall = max(s[1] for s in spans) - min(s[0] for s in spans)
        two.append(_gbs(2 * arrays[0].nbytes, wall))
        per_thread.append([_gbs(arrays[k].nbytes, spans[k][1] - spans[k][0]) for k in (0, 1)])

    def summ(xs):
        return {"best": round(max(xs), 2), "median": round(statistics.median(xs), 2), "all": [round(x, 2) for x in xs]}

    out = {"array_gib_per_thread": ARRAY_GIB, "repeats": REPEATS, "kernel": "numba njit(nogil, fastmath) sum of float64",
           "in_cache_1mib_1thread_gbs": summ(cache), "one_thread_gbs": summ(one),
           "two_threads_aggregate_gbs": summ(two), "two_threads_per_thread_gbs": per_thread}
    with open(os.path.join(HERE, "bandwidth.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"in cache (1 MiB) {out['in_cache_1mib_1thread_gbs']['median']} GB/s; 1 thread best "
          f"{out['one_thread_gbs']['best']} median {out['one_thread_gbs']['median']} GB/s; 2 threads aggregate best "
          f"{out['two_threads_aggregate_gbs']['best']} median {out['two_threads_aggregate_gbs']['median']} GB/s",
          file=sys.stderr)
    return out


# ---------------------------------------------------------------------------- the real runs
from bobox_sched import Plan, Scheduler, Source, StreamOperator  # noqa: E402
from bobox_sched.core.packet import Packet  # noqa: E402
from bobox_sched.trace import Tracer  # noqa: E402
from operators import released  # noqa: E402

KSUM = released.timed(ksum)  # its wall time counts as the task's GIL-released time
ROWS = PACKET_MIB * 2**20 // 8
BASE = None  # the data, made once by real()


class SliceSource(Source):
    """`slots` packets, each a view of one ROWS-row slice of BASE (no copy, no pool)."""

    def __init__(self, slots):
        self.slots, self.i = list(slots), 0

    def next_packet(self, ctx):
        if self.i >= len(self.slots):
            return None
        k = self.slots[self.i]
        self.i += 1
        return Packet({"x": BASE[k * ROWS:(k + 1) * ROWS]}, ROWS, None)


class Sum(StreamOperator):
    """The nogil sum of each packet's every value; sends it on as a one-row packet."""

    def on_packet(self, ctx, port, pkt):
        s = KSUM(pkt["x"])
        out = ctx.new_packet({"x": np.float64}, 1)
        out["x"][0] = s
        ctx.send("out", out)


class Sink(StreamOperator):
    outputs = ()

    def __init__(self):
        self.total, self.packets = 0.0, 0

    def on_packet(self, ctx, port, pkt):
        self.total += float(pkt["x"][0])
        self.packets += 1

    def on_end(self, ctx):
        ctx.set_result({"total": self.total, "packets": self.packets})


def plans(seed):
    rng = np.random.default_rng(seed)
    nslots = BASE_GIB * 2**30 // (ROWS * 8)
    out = []
    for r in range(REQUESTS):
        p = Plan(f"sum{r}")
        p.add("src", SliceSource, [int(k) for k in rng.choice(nslots, PACKETS, replace=False)])
        p.add("sum", Sum)
        p.add("sink", Sink)
        p.chain("src", "sum", "sink")
        out.append(p)
    return out


def one_run(workers, seed):
    tr = Tracer()
    with Scheduler(policy="bobox", threads_per_node=workers, trace=tr) as s:
        ps = plans(seed)
        t0 = time.perf_counter()
        hs = [s.submit(p) for p in ps]
        res = [h.result(600) for h in hs]
        wall = time.perf_counter() - t0
        stats = s.stats()
    assert all(r == {"total": float(PACKETS * ROWS), "packets": PACKETS} for r in res), res[:3]
    doc = tr.document()
    return wall, stats, doc, phases(doc)


def phases(doc):
    """Seconds from the first submit to the last (``submit_s``), to the first task's
    start (``idle_start_s``), and from the first task's start to the last one's end
    (``span_s``: the time the simulator's makespan stands for, all requests at time 0)."""
    ev = doc["traceEvents"]
    tasks = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "task"]
    subs = [e["ts"] for e in ev if e.get("cat") == "request" and e.get("ph") == "b"]
    t0, t1 = min(e["ts"] for e in tasks), max(e["ts"] + e["dur"] for e in tasks)
    return {"submit_s": (max(subs) - min(subs)) / 1e6, "idle_start_s": (t0 - min(subs)) / 1e6, "span_s": (t1 - t0) / 1e6}


def trace_check(doc):
    """Per operator: tasks, bytes taken, GIL-held and released s, and GB/s of the sum."""
    ops = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "task":
            a = e["args"]
            o = ops.setdefault(e["name"], {"tasks": 0, "bytes": 0, "held_s": 0.0, "released_s": 0.0,
                                            "bytes_per_task": set()})
            o["tasks"] += 1
            o["bytes"] += int(a.get("bytes", 0))
            o["held_s"] += float(a.get("gil_held_us", 0.0)) / 1e6
            o["released_s"] += float(a.get("gil_released_us", 0.0)) / 1e6
            if len(o["bytes_per_task"]) < 8:
                o["bytes_per_task"].add(int(a.get("bytes", 0)))
    for o in ops.values():
        o["bytes_per_task"] = sorted(o["bytes_per_task"])
        o["released_gbs"] = round(o["bytes"] / o["released_s"] / 1e9, 2) if o["released_s"] else None
    return ops


def real():
    global BASE
    released.enable()
    BASE = np.ones(BASE_GIB * 2**30 // 8)
    ksum(BASE[:ROWS])
    one_run(1, 0)  # warm-up (numba dispatch, pools, threads)
    runs = {1: [], 2: []}
    for i in range(RUNS):
        for w in (1, 2):
            wall, stats, doc, ph = one_run(w, 100 + i)
            runs[w].append((wall, stats, doc, ph))
            print(f"run {i} {w} worker(s): {wall:.3f} s (submitting {ph['submit_s']:.3f} s, first task after "
                  f"{ph['idle_start_s']:.3f} s, tasks span {ph['span_s']:.3f} s)", file=sys.stderr)
    out = {"requests": REQUESTS, "packets_per_request": PACKETS, "packet_mib": PACKET_MIB, "base_gib": BASE_GIB,
           "bytes_read_per_run": REQUESTS * PACKETS * ROWS * 8}
    for w in (1, 2):
        walls = [r[0] for r in runs[w]]
        med = sorted(range(RUNS), key=lambda k: walls[k])[RUNS // 2]
        wall, stats, doc, _ = runs[w][med]
        spans = [r[3]["span_s"] for r in runs[w]]
        path = os.path.join(HERE, f"trace-{w}w.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        out[str(w)] = {"wall_s": walls, "wall_s_median": statistics.median(walls), "median_run": med,
                       "phases": [r[3] for r in runs[w]], "span_s_median": statistics.median(spans),
                       "stats": {k: stats[k] for k in ("busy_s", "released_s") if k in stats},
                       "trace_ops": trace_check(doc)}
    with open(os.path.join(HERE, "real.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"median wall: 1 worker {out['1']['wall_s_median']:.3f} s, 2 workers {out['2']['wall_s_median']:.3f} s; "
          f"median task span: 1 worker {out['1']['span_s_median']:.3f} s, 2 workers {out['2']['span_s_median']:.3f} s",
          file=sys.stderr)


# ---------------------------------------------------------------------------- the simulations
def simulate(spec, workers, bw):
    cmd = [BOBOX, "simulate", "--replay", os.path.relpath(os.path.join(HERE, "trace-1w.json"), TOP),
           "--machine", spec, "--threads-per-node", str(workers), "--seeds", str(SEEDS), "--json", "--no-progress"]
    if bw is not None:
        cmd += ["--bandwidth-gbs", f"{bw:g}"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=TOP)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr[-2000:]}")
    summ = json.loads(p.stdout.strip().splitlines()[-1])
    r0 = summ["runs"][0]
    return {"command": "bobox " + " ".join(f"'{c}'" if " " in c else c for c in cmd[1:]),
            "makespan_ms_median": summ["makespan_ms_median"], "makespan_ms_seeds": [r["makespan_ms"] for r in summ["runs"]],
            "tasks": r0.get("tasks"), "bytes": r0.get("bytes"), "bandwidth_bound": r0.get("bandwidth_bound")}


def sim():
    with open(os.path.join(HERE, "bandwidth.json")) as f:
        bw = json.load(f)
    with open(os.path.join(HERE, "real.json")) as f:
        re_ = json.load(f)
    agg, one = bw["two_threads_aggregate_gbs"]["median"], bw["one_thread_gbs"]["median"]
    # not a prediction: twice the per-worker rate of the sum's kernel in the median 2-worker run
    # (the bandwidth the two workers' kernels actually shared), to see what the model needs
    fitted = round(2 * re_["2"]["trace_ops"]["sum"]["released_gbs"], 2)
    out = {"bandwidths_gbs": {"unlimited": None, "aggregate": agg, "one_thread": one, "fitted": fitted}}
    for name, b in out["bandwidths_gbs"].items():
        out[name] = {str(w): simulate(f"1 nodes x {w} cores", w, b) for w in (1, 2)}
        print(f"{name} ({b} GB/s): 1 worker {out[name]['1']['makespan_ms_median']:.1f} ms, "
              f"2 workers {out[name]['2']['makespan_ms_median']:.1f} ms", file=sys.stderr)
    with open(os.path.join(HERE, "sim.json"), "w") as f:
        json.dump(out, f, indent=1)


def table():
    with open(os.path.join(HERE, "bandwidth.json")) as f:
        bw = json.load(f)
    with open(os.path.join(HERE, "real.json")) as f:
        re_ = json.load(f)
    with open(os.path.join(HERE, "sim.json")) as f:
        si = json.load(f)
    cols = [("unlimited", "unlimited"), ("aggregate", f"{si['bandwidths_gbs']['aggregate']} GB/s (2-thread aggregate)"),
            ("one_thread", f"{si['bandwidths_gbs']['one_thread']} GB/s (1 thread)"),
            ("fitted", f"{si['bandwidths_gbs']['fitted']} GB/s (fitted: 2 x the 2-worker run's kernel rate)")]
    lines = ["| point (median of runs) | measured | " + " | ".join(f"simulated, {c[1]}" for c in cols) + " |",
             "|---|---|" + "---|" * len(cols)]

    def sim_s(name, w):
        return si[name][w]["makespan_ms_median"] / 1000

    for what, key in (("wall s, submit to last result", "wall_s_median"), ("task span s, first task to last", "span_s_median")):
        m1, m2 = re_["1"][key], re_["2"][key]
        for label, meas, w in ((f"1 worker, {what}", m1, "1"), (f"2 workers, {what}", m2, "2")):
            cells = [f"{sim_s(n, w):.3f} ({100 * (sim_s(n, w) / meas - 1):+.1f} %)" for n, _ in cols]
            lines.append(f"| {label} | {meas:.3f} | " + " | ".join(cells) + " |")
        cells = []
        for n, _ in cols:
            sp = sim_s(n, "1") / sim_s(n, "2")
            cells.append(f"{sp:.2f} ({100 * (sp / (m1 / m2) - 1):+.1f} %)")
        lines.append(f"| speedup 2 vs 1, {what.split(',')[0]} | {m1 / m2:.2f} | " + " | ".join(cells) + " |")
    sub = [statistics.median(p[k] for p in re_[w]["phases"]) for w in ("1", "2") for k in ("submit_s", "idle_start_s")]
    lines += ["", f"Submitting the {re_['requests']} requests took {sub[0] * 1000:.0f} ms at 1 worker (first task after "
              f"{sub[1] * 1000:.0f} ms), {sub[2] * 1000:.0f} ms at 2 workers (first task after {sub[3] * 1000:.0f} ms): "
              "medians over the runs."]
    ops = re_["1"]["trace_ops"]
    lines += [f"Read bandwidth (bandwidth.json, median of {bw['repeats']}): 1 thread "
              f"{bw['one_thread_gbs']['median']} GB/s (best {bw['one_thread_gbs']['best']}), 2 threads at once "
              f"{bw['two_threads_aggregate_gbs']['median']} GB/s aggregate (best {bw['two_threads_aggregate_gbs']['best']}), "
              f"in cache (1 MiB) {bw['in_cache_1mib_1thread_gbs']['median']} GB/s.",
              f"1-worker trace, sum operator: {ops['sum']['tasks']} tasks, {ops['sum']['bytes']} bytes "
              f"(per task {ops['sum']['bytes_per_task']}), released {ops['sum']['released_s']:.3f} s "
              f"= {ops['sum']['released_gbs']} GB/s, GIL held {ops['sum']['held_s']:.3f} s."]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(HERE, "table.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    steps = {"bandwidth": bandwidth, "real": real, "sim": sim, "table": table}
    todo = sys.argv[1:] or list(steps)
    for s in todo:
        steps[s]()
