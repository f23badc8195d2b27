"""``bobox experiment policies``: every scheduling policy side by side on one stream
workload (the same plan, the same worker count, one run of the command).

The workload is one linear chain every policy can run::

    EventSource (seeded, Zipf keys, a latency marker every 2nd packet)
      -> Filter (value < 80: ~80 % of the rows)
      -> Map (a nogil numba kernel: ITERS iterations of ordered_micro's 4x4 rotation per row)
      -> WindowAggregate (count and sum per key, tumbling windows of event time)
      -> DigestSink (the output's digest)

Configurations (rows of the comparison), all with the same number of workers (default:
the CPUs this process may use; ``--workers N``):

* ``bobox``, ``simple``: the two Bobox policies (``policies/bobox.py``, ``simple.py``);
* ``bobox+regions``: ``bobox`` with ``submit(plan, parallelism=workers)``: the plan's
  parallel region (``filter -> map``, see ``plan.explain_regions()``) as that many
  channels (``bobox_sched/regions/fission.py``);
* ``ordered-ct``/``-lp``/``-et``/``-qst``: Prasaad et al.'s ordered execution under each
  heuristic (``policies/ordered.py``). Filter and Map declare ``max_parallelism =
  workers`` (the stateless operators' declaration that policy reads; the other policies
  ignore it), so ordered may run them on every worker at once;
* ``streams-dynamic`` (``threads = workers``, batched ports: ``streams/batching.py``),
  ``streams-dynamic-1t`` (the same with ``batch=1``, the paper's one-tuple hand-off),
  ``streams-elastic`` (the level between
  ``min_level`` and ``workers``, found by the controller) and ``streams-manual`` (the
  source's thread runs the graph: one thread by design): IBM Streams' threading
  (``policies/streams.py``).

TStream (``bobox_sched/txn``) is a scheme for transactional access to shared state, not
a thread scheduler: it has nothing to run this chain with. The second part
(``policies_sweep.py``) runs every configuration on the chain with 1-, 64- and 4,096-row
tuples and on TStream's GS application, so a user can see where each policy wins.

Measuring: one warm-up run per configuration (kernels loaded, pools filled; a
configuration that fails here is excluded, with its error in the report), then
``--repeat`` rounds, each running every configuration once in turn (round-robin), so a
change of machine load hits all of them. Every run gets a fresh scheduler (not timed):
its throughput is the source's rows over the request's elapsed time (submit to end),
its efficiency the rows per CPU-second of the process (user + system, all threads,
``getrusage``) over the same span, its latency the p50/p99 of the markers
(``handle.stats["latency"]``: queueing and processing delay along the path, not the
time a row waits for its window). Ratios to ``bobox`` are taken within a round, then
the median over rounds. Every run's output digest is compared with the reference: the
plan under ``bobox`` on one worker (one request, sequential). Recorded with them: the
load average, and before and after the runs what two plain threads running a nogil
kernel get over one (``regions.ceiling``): on a shared machine, the most a second worker
could give any policy; and before the runs, what waking a sleeping thread costs here
(JSON ``handoff``, ``experiments/handoff.py``), the price of each hand-off between workers.

The output of a window is a multiset (``WindowAggregate.emit_order = "unordered"``): the
digest sorts each window's rows by key before hashing, and includes the sequence of
window punctuations, so two runs are equal exactly when they emit the same windows in the
same order with the same rows (floating-point sums bit for bit).

Writes ``DIR/policies.csv`` (long format, ``experiments/framework.py``),
``DIR/policies.png`` and the ``policies`` section of ``DIR/report.md``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from bobox_sched import Plan, StreamOperator
from bobox_sched.core.errors import BoboxError
from bobox_sched.control import model as M
from bobox_sched.control.punct import Window
from bobox_sched.policies.streams.batching import DEFAULT_BATCH
from operators.stream.ordered_micro import _iterate

from experiments.framework import (Ctx, Recorder, collect_before_run, error_line, md_table, median_or_none, output_folder,
                                   pyplot, save_figure, write_section)
from experiments.handoff import describe, wake_us
from experiments import policies_sweep

NAME = "policies"

# Per-row work of the Map: ITERS iterations of ordered_micro's rotation (16 dependent
# multiply-adds each), ~3.5 ns per iteration measured here (``ns_per_iteration()``), so
# ~0.45 us per row and ~1.8 ms per 4096-row packet: the kernel, not the runtime's Python
# per packet and operator (tens of us, ``python -m experiments.stream_ops_bench``), dominates,
# and the policies are compared on how they spread work over the workers.
ITERS = 128
ROWS_PER_PACKET = 4096  # fixed: every policy sees the same packets (simple's own size is 64 KiB)
N_KEYS = 1000
SKEW = 1.0  # Zipf's law: key 0 the most frequent
MEAN_GAP = 10.0  # event-time ticks between rows (EventSource's default)
WINDOW_TICKS = 100_000  # ~10,000 rows per tumbling window: ~2.4 packets
MARKER_EVERY = 2  # a latency marker after every 2nd packet
THRESHOLD = 80.0  # Filter keeps value < 80 of values uniform in [0, 100)
SEED = 2024
# Elastic control period. The paper's 10 s suits runs of minutes; a run here lasts about
# a second, so 0.1 s (the value tests/test_streams_experiment.py uses) gives the
# controller several periods to move within one run.
ELASTIC_PERIOD_S = 0.1
ROWS_DEFAULT = 2_000_000  # ~1 s per run on one worker (4.5e-7 s x 0.8 x rows + the rest)
ROWS_QUICK = 300_000
HEURISTICS = ("ct", "lp", "et", "qst")


@njit(nogil=True, cache=True)
def work(value, out):
    """The Map's per-row computation: ITERS rotations seeded by the value."""
    for i in range(value.shape[0]):
        out[i] = _iterate(value[i] * 0.01, ITERS)


class DigestSink(StreamOperator):
    """Egress: keeps the window rows (copies: packets go back to their pools) and the
    ``Window`` punctuations in order; at the end, ``{"rows", "windows", "digest"}``: a
    SHA-256 over the punctuations and every column with each window's rows sorted by
    (window start, key) (a window's rows are a multiset, module doc).

    Its lists need no lock: under every policy one thread at a time runs an operator
    (the task token; ordered runs the egress on one worker; streams' port lock), and
    ``on_end`` comes after the last ``on_packet``/``on_punct``."""

    outputs = ()
    punct_in = M.EXPECTING  # the Window punctuations come to on_punct

    def __init__(self):
        self.parts: list = []
        self.wids: list = []
        self.rows = 0

    def on_packet(self, ctx, port, pkt):
        self.rows += pkt.nrows
        self.parts.append({c: np.array(pkt[c]) for c in pkt.names})

    def on_punct(self, ctx, port, p):
        if isinstance(p, Window):
            self.wids.append(-1 if p.wid is None else int(p.wid))

    def on_end(self, ctx):
        h = hashlib.sha256()
        h.update(np.asarray(self.wids, np.int64).tobytes())
        if self.parts:
            names = sorted(self.parts[0])
            cols = {c: np.concatenate([p[c] for p in self.parts]) for c in names}
            order = np.lexsort((cols["key"], cols["window_start"]))
            for c in names:
                h.update(c.encode())
                h.update(np.ascontiguousarray(cols[c][order]).view(np.uint8))
        ctx.set_result({"rows": self.rows, "windows": len(self.wids), "digest": h.hexdigest()})


def _declared(cls, parallelism: int, *args, **kw):
    """A factory for a stateless operator that declares ``max_parallelism``."""

    def make():
        op = cls(*args, **kw)
        op.max_parallelism = parallelism
        return op

    make.__name__ = cls.__name__
    return make


def build_plan(rows: int, workers: int, rows_per_packet: int = ROWS_PER_PACKET) -> Plan:
    """The workload (module doc): `rows` events through filter, map and a tumbling
    window aggregate into a DigestSink, in tuples of `rows_per_packet` rows."""
    from operators.expr import col
    from operators.stream import EventSource, Filter, Map, Tumbling, WindowAggregate

    s = EventSource.schema
    mapped = Map(s, kernel=work, args=["value"], out=[("w", np.float64)]).schema
    aggs = [("n", "count", None), ("total", "sum", "w")]
    p = Plan(NAME)
    p.add("events", EventSource, rows, seed=SEED, n_keys=N_KEYS, skew=SKEW, mean_gap=MEAN_GAP,
          rows_per_packet=rows_per_packet, marker_every=MARKER_EVERY)
    p.add("filter", _declared(Filter, workers, s, col("value") < THRESHOLD))
    p.add("map", _declared(Map, workers, s, kernel=work, args=["value"], out=[("w", np.float64)]))
    p.add("window", WindowAggregate, mapped, ["key"], aggs, Tumbling("ts", WINDOW_TICKS))
    p.add("sink", DigestSink)
    p.chain("events", "filter", "map", "window", "sink")
    return p


# ---------------------------------------------------------------------------------------
# configurations


@dataclass
class Config:
    name: str
    what: str  # how it is set up, for the report
    kw: dict = field(default_factory=dict)  # Scheduler(...) arguments
    parallelism: int | None = None  # submit(plan, parallelism=...)
    threads: str = ""  # worker threads, for the report


def configs(workers: int, per_node: int | None) -> list[Config]:
    """Every configuration with `workers` workers (`per_node` per NUMA node for the
    node-based policies; None: one per CPU)."""
    tpn = {"threads_per_node": per_node}
    el = {"elastic": True, "max_level": workers, "period_s": ELASTIC_PERIOD_S}
    if workers < 3:
        el["min_level"] = 1  # the deadlock rule's 2 would equal max_level: nothing to adapt (as streams_exp)
    out = [
        Config("bobox", "policy bobox", {"policy": "bobox", **tpn}, threads=str(workers)),
        Config("simple", "policy simple (paper's baseline)", {"policy": "simple", **tpn}, threads=str(workers)),
        Config("bobox+regions", f"policy bobox, submit(parallelism={workers})", {"policy": "bobox", **tpn},
               parallelism=workers, threads=str(workers)),
    ]
    out += [Config(f"ordered-{h}", f"policy ordered, heuristic {h}", {"policy": "ordered", "heuristic": h, **tpn},
                   threads=str(workers)) for h in HEURISTICS]
    out += [
        Config("streams-dynamic", f"policy streams, threads={workers}, batches of {DEFAULT_BATCH} packets per hand-off",
               {"policy": "streams", "threads": workers}, threads=str(workers)),
        Config("streams-dynamic-1t", f"policy streams, threads={workers}, batch=1 (the paper's one-tuple hand-off)",
               {"policy": "streams", "threads": workers, "batch": 1}, threads=str(workers)),
        Config("streams-elastic", "policy streams, elastic, " + ", ".join(f"{k}={v}" for k, v in el.items()
                                                                          if k != "elastic"),
               {"policy": "streams", **el}, threads=f"{el.get('min_level', 2)}..{workers}"),
        Config("streams-manual", "policy streams, model manual", {"policy": "streams", "model": "manual"},
               threads="1 (the source's)"),
    ]
    return out


# ---------------------------------------------------------------------------------------
# measuring


def _cpu_s() -> float:
    """CPU seconds (user + system) of every thread of this process, ended ones included."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_once(ctx: Ctx, cfg: Config, plan: Plan, rows: int) -> dict:
    """One request of `plan` under `cfg` on a fresh scheduler; see the module doc."""
    from bobox_sched import Scheduler
    from operators.stream import stream_report

    with Scheduler(topology=ctx.topo, **cfg.kw) as s:
        c0 = _cpu_s()
        h = s.submit(plan, parallelism=cfg.parallelism) if cfg.parallelism else s.submit(plan)
        rep = stream_report(h, rows=rows, timeout=3600)
        cpu = _cpu_s() - c0
        res = h.result()
        pd = s.stats().get("policy_detail") or {}
    return {"rows_per_s": rep["rows_per_s"], "seconds": rep["seconds"], "cpu_s": cpu,
            "rows_per_cpu_s": rows / max(cpu, 1e-9), "p50": rep["latency_p50_ms"], "p99": rep["latency_p99_ms"],
            "markers": rep["markers"], "digest": res["digest"], "out_rows": res["rows"], "windows": res["windows"],
            "level": pd.get("level") if isinstance(pd, dict) else None}


def reference(ctx: Ctx, plan: Plan) -> dict:
    """The plan under bobox on one worker (one node: a virtual one on multi-node machines)."""
    from bobox_sched import Scheduler
    from topology.virtual import virtual_topology

    topo = ctx.topo if len(ctx.topo.cpu_nodes) == 1 else virtual_topology(ctx.topo, 1)
    with Scheduler(topology=topo, policy="bobox", threads_per_node=1) as s:
        return s.submit(plan).result(3600)


def exp_policies(ctx: Ctx, workers: int, per_node: int | None, rows: int) -> dict:
    import traceback

    rec = Recorder(ctx, NAME)
    plan = build_plan(rows, workers)
    cfgs = configs(workers, per_node)
    from experiments.regions import ceiling

    load_before = os.getloadavg()
    ceil_before = ceiling(ctx.repeat)
    handoff = wake_us()  # the machine's hand-off cost (experiments/handoff.py)
    bar = ctx.bar(1 + len(cfgs) * (ctx.repeat + 1) + (len(policies_sweep.SIZES) - 1) * ctx.repeat + 1 + ctx.repeat,
                  NAME)
    bar.set_postfix_str("reference")
    ref = reference(ctx, plan)
    bar.update(1)
    # Full collections walk every object of the process (numba's are many): one freeze
    # after the imports and the first run keeps that cost out of every configuration alike
    # (framework's frozen heap: given back when the experiment ends).
    collect_before_run()
    excluded: dict = {}
    active = []
    for cfg in cfgs:  # warm-up; a configuration that cannot run the chain is excluded here
        bar.set_postfix_str(f"warm-up {cfg.name}")
        try:
            run_once(ctx, cfg, plan, rows)
            active.append(cfg)
        except Exception as e:  # noqa: BLE001 - any failure excludes the configuration, reported
            excluded[cfg.name] = error_line(e)
            tb = traceback.format_exception(e)
            print(f"[policies] {cfg.name} cannot run the chain, excluded: {excluded[cfg.name]}\n"
                  + "".join(tb[-6:]), file=sys.stderr, flush=True)
        bar.update(1)
    runs: dict = {c.name: [] for c in active}
    equal = {c.name: True for c in active}
    for r in range(ctx.repeat):
        for cfg in active:
            bar.set_postfix_str(f"round {r + 1}/{ctx.repeat} {cfg.name}")
            m = run_once(ctx, cfg, plan, rows)
            ok = m["digest"] == ref["digest"] and m["out_rows"] == ref["rows"] and m["windows"] == ref["windows"]
            equal[cfg.name] = equal[cfg.name] and ok
            runs[cfg.name].append(m)
            for metric, unit in (("rows_per_s", "rows/s"), ("rows_per_cpu_s", "rows/CPU-s"), ("seconds", "s"),
                                 ("cpu_s", "s")):
                rec.add(cfg.name, workers, metric, m[metric], r, unit)
            for metric, key in (("latency_p50_ms", "p50"), ("latency_p99_ms", "p99")):
                if m[key] is not None:
                    rec.add(cfg.name, workers, metric, m[key], r, "ms")
            rec.add(cfg.name, workers, "equal_to_reference", float(ok), r, "bool")
            if m["level"] is not None:
                rec.add(cfg.name, workers, "threads_at_end", m["level"], r, "threads")
            bar.update(1)
    load_after = os.getloadavg()
    ceil_after = ceiling(ctx.repeat)
    names = [c.name for c in active]
    base = runs.get("bobox")
    ratio, ratio_cpu, ratio_p99 = {}, {}, {}
    for n in names:
        if base is None:
            break
        tr = [m["rows_per_s"] / b["rows_per_s"] for m, b in zip(runs[n], base)]
        cr = [m["rows_per_cpu_s"] / b["rows_per_cpu_s"] for m, b in zip(runs[n], base)]
        lr = [m["p99"] / b["p99"] for m, b in zip(runs[n], base) if m["p99"] and b["p99"]]
        ratio[n], ratio_cpu[n], ratio_p99[n] = median_or_none(tr), median_or_none(cr), median_or_none(lr)
        for r, (a, b, c) in enumerate(zip(tr, cr, lr + [None] * (len(tr) - len(lr)))):
            rec.add(n, workers, "throughput_ratio_to_bobox", a, r, "x")
            rec.add(n, workers, "cpu_efficiency_ratio_to_bobox", b, r, "x")
            if c is not None:
                rec.add(n, workers, "latency_p99_ratio_to_bobox", c, r, "x")
    rec.add("ceiling", "before", "speedup", ceil_before, 0, "x")
    rec.add("ceiling", "after", "speedup", ceil_after, 0, "x")
    for i, v in enumerate(load_before):
        rec.add("machine", "before", f"loadavg_{(1, 5, 15)[i]}min", v, 0, "")
    for i, v in enumerate(load_after):
        rec.add("machine", "after", f"loadavg_{(1, 5, 15)[i]}min", v, 0, "")

    def rnd(x, k=3):
        return None if x is None else round(float(x), k)

    summary = {
        "configs": names,
        "throughput": {n: rnd(median_or_none(m["rows_per_s"] for m in runs[n]), 1) for n in names},
        "rows_per_cpu_s": {n: rnd(median_or_none(m["rows_per_cpu_s"] for m in runs[n]), 1) for n in names},
        "cpu_cores_used": {n: rnd(median_or_none(m["cpu_s"] / m["seconds"] for m in runs[n]), 2) for n in names},
        "latency_p50_ms": {n: rnd(median_or_none(m["p50"] for m in runs[n])) for n in names},
        "latency_p99_ms": {n: rnd(median_or_none(m["p99"] for m in runs[n])) for n in names},
        "equal_to_reference": equal,
        "ratio_to_bobox": {n: rnd(ratio.get(n)) for n in names},
        "cpu_efficiency_ratio_to_bobox": {n: rnd(ratio_cpu.get(n)) for n in names},
        "latency_p99_ratio_to_bobox": {n: rnd(ratio_p99.get(n)) for n in names},
        "threads": {c.name: c.threads for c in active},
        "elastic_level_at_end": median_or_none(m["level"] for m in runs.get("streams-elastic", [])),
        "load_avg": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "ceiling_before_after": [round(ceil_before, 3), round(ceil_after, 3)],
        "handoff": handoff,
        "excluded": excluded,
        "workers": workers,
        "cpus": len(ctx.topo.cpus),
        "rows": rows,
        "repeat": ctx.repeat,
        "reference": {"rows": ref["rows"], "windows": ref["windows"], "digest": ref["digest"][:16]},
        "regions": plan.explain_regions(),
    }
    # Second part: where each policy wins (policies_sweep.py)
    summary["sweep"] = policies_sweep.chain_sweep(ctx, rec, active, workers, rows, summary, bar, build_plan, reference,
                                                  run_once)
    summary["gs"] = policies_sweep.gs_workload(ctx, rec, active, workers, bar)
    bar.close()
    rec.write()
    _plot(ctx, summary)
    policies_sweep.plot(ctx, summary["sweep"], summary["gs"])
    _report(ctx, summary, active)
    return summary


# ---------------------------------------------------------------------------------------
# outputs


def table(s: dict) -> str:
    """The comparison as aligned text (what the command prints)."""
    head = ("config", "threads", "rows/s", "x bobox", "cores", "rows/CPU-s", "x bobox", "p50 ms", "p99 ms",
            "p99 x bobox", "equal")

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    rows = [(n, s["threads"][n], f(s["throughput"][n], ",.0f"), f(s["ratio_to_bobox"][n], ".2f"),
             f(s["cpu_cores_used"][n], ".2f"), f(s["rows_per_cpu_s"][n], ",.0f"),
             f(s["cpu_efficiency_ratio_to_bobox"][n], ".2f"),
             f(s["latency_p50_ms"][n], ".2f"), f(s["latency_p99_ms"][n], ".2f"),
             f(s["latency_p99_ratio_to_bobox"][n], ".2f"), "yes" if s["equal_to_reference"][n] else "NO")
            for n in s["configs"]]
    w = [max(len(str(x)) for x in c) for c in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i])  # noqa: E731
                                   for i, c in enumerate(cells))
    return "\n".join([line(head)] + [line(r) for r in rows])


def _plot(ctx: Ctx, s: dict) -> None:
    plt = pyplot()
    names = s["configs"]
    x = np.arange(len(names))
    fig, axes = plt.subplots(1, 3, figsize=(19, 5.2))
    ax = axes[0]
    tp = [s["throughput"][n] or 0 for n in names]
    bars = ax.bar(x, tp, color=["tab:red" if not s["equal_to_reference"][n] else "tab:blue" for n in names])
    for b, n in zip(bars, names):
        r = s["ratio_to_bobox"].get(n)
        if r is not None:
            ax.annotate(f"{r:.2f}x", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=8)
    ax.set_title(f"throughput (median of {s['repeat']}; label: ratio to bobox)")
    ax.set_ylabel("ingress rows/s")
    ax = axes[1]
    ax.bar(x, [s["rows_per_cpu_s"][n] or 0 for n in names], color="tab:green")
    ax.set_title("rows per CPU-second of the process")
    ax.set_ylabel("rows / CPU-s")
    ax = axes[2]
    p50 = [s["latency_p50_ms"][n] or np.nan for n in names]
    p99 = [s["latency_p99_ms"][n] or np.nan for n in names]
    ax.bar(x - 0.2, p50, 0.4, label="p50", color="tab:orange")
    ax.bar(x + 0.2, p99, 0.4, label="p99", color="tab:purple")
    ax.set_yscale("log")
    ax.set_title("processing latency of the markers")
    ax.set_ylabel("ms")
    ax.legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    fig.suptitle(f"every policy on one stream chain: {s['rows']:,} rows, {_n(s['workers'], 'worker')} "
                 f"(load average {s['load_avg']['before'][0]:.2f} -> {s['load_avg']['after'][0]:.2f} "
                 f"on {s['cpus']} CPUs)")
    fig.tight_layout()
    save_figure(fig, ctx, NAME)


def _report(ctx: Ctx, s: dict, active: list[Config]) -> None:
    la = s["load_avg"]
    busy = max(la["before"][0], la["after"][0]) > s["cpus"]
    rows = [[n, next(c.what for c in active if c.name == n), s["threads"][n],
             _fmt(s["throughput"][n], ",.0f"), _fmt(s["ratio_to_bobox"][n], ".2f"),
             _fmt(s["cpu_cores_used"][n], ".2f"), _fmt(s["rows_per_cpu_s"][n], ",.0f"),
             _fmt(s["cpu_efficiency_ratio_to_bobox"][n], ".2f"),
             _fmt(s["latency_p50_ms"][n], ".2f"), _fmt(s["latency_p99_ms"][n], ".2f"),
             _fmt(s["latency_p99_ratio_to_bobox"][n], ".2f"), "yes" if s["equal_to_reference"][n] else "**NO**"]
            for n in s["configs"]]
    excl = "".join(f"\n- `{k}`: excluded, it failed on this chain: {v}" for k, v in s["excluded"].items())
    body = "\n".join([
        f"One stream chain, {s['rows']:,} rows: `EventSource` (seed {SEED}, {N_KEYS} Zipf keys, skew {SKEW:g}, "
        f"{ROWS_PER_PACKET}-row packets, a latency marker every {MARKER_EVERY} packets) -> `Filter` (value < "
        f"{THRESHOLD:g}) -> `Map` (nogil kernel, {ITERS} rotations per row) -> `WindowAggregate` (count and sum per "
        f"key, tumbling windows of {WINDOW_TICKS:,} ticks) -> a digest sink. {_n(s['workers'], 'worker')} for every "
        f"configuration ({s['cpus']} CPUs), a fresh scheduler per run, every configuration once per round, "
        f"{s['repeat']} round(s); medians, ratios to `bobox` taken within a round. Throughput: source rows over "
        "the request's time; efficiency: rows per CPU-second of the process (user + system) over the same span "
        "(cores used: those CPU-seconds per second); "
        "latency: the markers' queueing and processing delay along the path (not a row's wait for its window).",
        "",
        md_table(["config", "set-up", "threads", "rows/s", "x bobox", "cores used", "rows/CPU-s", "x bobox",
                   "p50 ms", "p99 ms", "p99 x bobox", "equal to reference"], rows),
        "",
        f"Reference: the plan under `bobox` on one worker, one request: {s['reference']['rows']:,} window rows in "
        f"{s['reference']['windows']} windows (digest `{s['reference']['digest']}`). Equality: the same windows in "
        "the same order, each window's rows as a multiset (the operator declares its rows per window unordered), "
        "sums bit for bit.",
        "",
        f"1-minute load average {la['before'][0]:.2f} before, {la['after'][0]:.2f} after, on {s['cpus']} CPUs"
        + (": the machine was shared with other work, so throughput carries that noise (rows per CPU-second less "
           "so)." if busy else ".")
        + f" Two plain threads running a nogil kernel got {s['ceiling_before_after'][0]:.2f}x / "
        f"{s['ceiling_before_after'][1]:.2f}x the work of one (before / after, `experiments.regions.ceiling`): "
        "the most any policy could gain from a second worker during the run. " + describe(s.get("handoff")),
        "",
        "Notes:",
        "",
        "- TStream (`bobox_sched/txn`) is a scheme for transactional access to shared state, not a thread "
        "scheduler: it is the second workload below (its GS application), run by each policy that can.",
        "- `streams-manual` runs the whole graph on the source's thread (one thread by design): its markers "
        "measure one synchronous pass, hence its tiny latency. `streams` model `dedicated` (a thread per input "
        "port: more threads than the others' workers) is left out.",
        f"- `streams-elastic` starts each run at its minimum level and moves every {ELASTIC_PERIOD_S:g} s; "
        f"median level at the end of a run: {s['elastic_level_at_end']}."
        + (" `min_level=1` on this small machine (the deadlock rule's 2 would leave nothing to adapt)."
           if s["workers"] < 3 else ""),
        "- `ordered-*`: Filter and Map declare `max_parallelism` = workers (what the ordered policy reads to run "
        "a stateless operator on many workers; the other policies ignore it); the window aggregate is a plain "
        "operator keyed by `key`, run on one worker at a time.",
        "- `bobox+regions`: the plan's parallel regions (`plan.explain_regions()`):",
        "",
        "```",
        s["regions"],
        "```",
    ]) + excl + f"\n\n![policies]({NAME}.png)\n\n" + policies_sweep.report(s["sweep"], s["gs"]) + "\n"
    write_section(ctx, NAME, "Every policy on one stream workload", body)


def _n(k: int, word: str) -> str:
    return f"{k} {word}" + ("" if k == 1 else "s")


def _fmt(x, fmt) -> str:
    return "-" if x is None else format(x, fmt)


# ---------------------------------------------------------------------------------------


def _workers(ctx: Ctx, arg: str | None) -> tuple[int, int | None]:
    """(workers, threads per node or None) from ``--workers`` (one positive integer, a
    multiple of the NUMA nodes with CPUs); default: one per CPU."""
    nodes = len(ctx.topo.cpu_nodes)
    if arg is None:
        return len(ctx.topo.cpus), None
    from bobox_sched.core import limits as L

    try:
        n = int(arg)
    except ValueError:
        raise BoboxError(f"--workers takes one positive integer for the policies experiment, got {arg!r}") from None
    if n < 1 or n > L.MAX_THREADS_PER_NODE * nodes:
        raise BoboxError(f"--workers {n}: must be between 1 and {L.MAX_THREADS_PER_NODE * nodes}")
    if n % nodes:
        raise BoboxError(f"--workers {n}: must be a multiple of the {nodes} NUMA nodes (the same threads on each)")
    return n, n // nodes


def check_args(args) -> None:
    """Bad ``--workers`` for this experiment: a one-line error before any work."""
    v = getattr(args, "workers", None)
    if v is None:
        return
    try:
        n = int(v)
    except ValueError:
        raise BoboxError(f"--workers takes one positive integer for the policies experiment, got {v!r}") from None
    if n < 1:
        raise BoboxError(f"--workers takes one positive integer for the policies experiment, got {v!r}")


def run_experiment(args) -> dict:
    """``bobox experiment policies``: build the experiments' context, run, print the table."""
    ctx = Ctx.from_args(args, make_folder=False)
    out = ctx.out
    workers, per_node = _workers(ctx, getattr(args, "workers", None))  # before any work
    rows = getattr(args, "rows", None) or (ROWS_QUICK if args.quick else ROWS_DEFAULT)
    output_folder(out)
    t0 = time.perf_counter()
    print(f"[experiment] {NAME}: {rows:,} rows, {_n(workers, 'worker')}, {_n(ctx.repeat, 'round')} ...",
          file=sys.stderr, flush=True)
    summary = exp_policies(ctx, workers, per_node, rows)
    print(f"[experiment] {NAME} done in {time.perf_counter() - t0:.1f} s -> {out}/{NAME}.csv, {NAME}.png, "
          "report.md", file=sys.stderr, flush=True)
    print(f"every policy on one stream chain: {rows:,} rows, {_n(workers, 'worker')}, median of {ctx.repeat} "
          f"(load average {summary['load_avg']['before'][0]:.2f} -> {summary['load_avg']['after'][0]:.2f} on "
          f"{summary['cpus']} CPUs; two threads got {summary['ceiling_before_after'][0]:.2f}x / "
          f"{summary['ceiling_before_after'][1]:.2f}x one, before / after)")
    print(table(summary))
    for k, v in summary["excluded"].items():
        print(f"{k}: excluded: {v}")
    print(f"where each policy wins: throughput / bobox at {', '.join(map(str, policies_sweep.SIZES))} rows per "
          f"tuple, and TStream's GS ({summary['gs']['events']:,} events)")
    print(policies_sweep.text(summary["sweep"], summary["gs"]))
    for k, v in summary["gs"]["excluded"].items():
        print(f"{k}: excluded from GS: {v}")
    print(f"report: {out / 'report.md'}")
    return summary


__all__ = ["DigestSink", "build_plan", "check_args", "configs", "exp_policies", "run_experiment", "table"]
