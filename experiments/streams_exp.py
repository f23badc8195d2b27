"""``bobox experiment streams``: IBM Streams' threading models on this machine (Schneider &
Wu section 5: Figs. 8, 9 and 10; spec 004 section 4).

For each graph shape (``experiments/streams_ops.py``: pure pipeline, pure data parallel,
mixed 10 x depth) and each cost per tuple, the same graph runs under

* ``manual`` (one thread runs the graph: the source's),
* ``dedicated`` (one thread and one queue per input port),
* ``dynamic-T``: dynamic static with T scheduler threads, T swept,
* ``elastic``: dynamic elastic with the CPU cap (the faithful setting, 80 %), and
  ``elastic-nocap`` (``cpu_limit=1.0``): on a small machine the source thread plus one busy
  scheduler thread already fill the CPUs, and the cap then blocks every increase.

Each run lasts a fixed time; the sink's tuple count is sampled every ``sample_s`` seconds
(5 s as in the paper, 1 s with ``--quick``). Static runs report the median sample after
the first (queues filling); elastic runs the mean of the last 5 samples (L564). Per run
also: context switches of the process (psutil), the 1-minute load average, the settled
level, and for elastic runs the controller's trace (throughput across all operators and
the level per period: Fig. 10). A run ends by cancelling its request (queues of 1,000
tuples per port can hold more than can be drained quickly); order is checked at the sink
on every port (``fifo_ok``), exactly-once delivery is the unit tests' business. Once,
before the runs: what waking a sleeping thread costs on this machine (JSON ``handoff``,
``experiments/handoff.py``), the price of every hand-off between threads.

The elastic runs use ``min_level=1`` on every machine, a deviation recorded in the
report. The deadlock rule (``1 + the most input ports``) exists for operators that may
block (spec 2.6); these graphs have none, and their Snk takes one input port per
upstream stream where the paper's has a single port fed by all of them, so the rule
would set the minimum to 11 on the mixed graph and to ``--ops`` + 1 on dp: on 16 CPUs
it pinned elastic at 11 and 16 threads while the best static point was 1 to 4 (the
GIL), measured on 2026-11-26. The OSS lowers ``min`` the same way when a thread count
is asked for, which is how the 1-thread static runs exist. On a machine with fewer
than 3 CPUs ``max_level = 2 x CPUs`` (oversubscribed, so that elastic has room to
move), also recorded as a deviation. A last run per
mode changes the load in the middle (the mixed graph's cost drops 1000x) to see how many
periods the elastic level needs to settle again.

``--shapes`` (``shapes=``) runs a subset of the shapes, in ``SHAPES`` order: the figures,
the summary and the report then cover those shapes only; the data-parallel goal needs
``dp``, and the mixed-graph goal and the load-change runs need ``mixed``.

``--tuple-rows N`` (``rows=``) makes every tuple a packet of N rows (default 1, the
paper's tuples), each row costing the shape's FLOPs; throughput is then counted in rows
(the JSON keys, the CSV metrics and ``run_once``'s ``tuples`` keep their names; the CSV's
unit column says rows). Queues stay sized in tuples, so heavier tuples take longer to fill
them: a static run's first sample is left out for that.
Under the GIL a hand-off between operators costs microseconds of Python whatever a tuple
carries, so the models compare as in the paper only where a tuple's work outweighs its
hand-off: with N rows that is N times sooner (streams_ops module doc).
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import numpy as np

from bobox_sched import Scheduler
from bobox_sched.core.errors import RequestCancelled

from experiments.framework import Ctx, Recorder, collect_before_run, md_table, panel_grid, panel_rows, save_figure, write_section
from bobox_sched.policies.streams.batching import DEFAULT_BATCH, DEFAULT_LATENCY_S
from experiments.handoff import describe, wake_us
from experiments.streams_ops import (COSTS, RELEASE_FLOPS, SHAPES, Cost, Meter, build, burn, burn_held, burn_rows, burn_rows_held,
                                     check_rows, n_workers, row_ids)

QUEUE = 1000  # tuples per input port: [OSS] ScheduledQueue::queueSize
# Tuples the whole graph may hold in its queues. The sink sees a steady flow only once the
# queues have filled: with [OSS]'s 1000 per port a 1,000-operator pipeline holds a million
# tuples, about 500 million operator executions to fill (minutes in C++, hours in Python
# at about 1e5 executions/s per core), and a 100-wide data-parallel graph at 100k FLOPs a
# tuple holds a minute of work. So every port gets GRAPH_SLOTS // (input ports of the
# graph) slots (at least 1, at most 1000): 1 for the 1,000-operator graphs, 9-10 for the
# 100-operator pipeline and mixed graphs, 4 for 100-wide data parallel. RESCHED_LIMIT
# stays a quarter of the queue.
GRAPH_SLOTS = 1000


def input_ports(shape: str, n_ops: int) -> int:
    from experiments.streams_ops import MIXED_WIDTH

    n = n_workers(shape, n_ops)
    return {"pipeline": n + 1, "dp": 1 + 2 * n, "mixed": 1 + n + MIXED_WIDTH}[shape]


def queue_for(shape: str, n_ops: int, batch: int = 1) -> int:
    """Queue capacity per input port: in tuples, or with batched ports in batches of
    `batch` (at least 2, so that a sender fills one while the receiver runs the other)."""
    tuples = max(1, min(QUEUE, GRAPH_SLOTS // input_ports(shape, n_ops)))
    return tuples if batch == 1 else max(2, -(-tuples // batch))


def settings_for(quick: bool, ncpu: int, n_ops: int | None, rows: int | None = None,
                 batch: int | None = None) -> dict:
    sweep = [t for t in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128) if t <= ncpu]
    if 2 * ncpu not in sweep and (not quick or ncpu <= 4):
        sweep.append(2 * ncpu)  # one oversubscribed point (4 on 2 cores, 32 on 16)
    small = ncpu < 3
    return {
        "ops": n_ops or (100 if quick else 1000),
        "tuple_rows": rows or 1,
        "batch": batch or DEFAULT_BATCH,
        "sample_s": 1.0 if quick else 5.0,
        "static_s": 4.0 if quick else 30.0,
        "period_s": 1.5 if quick else 10.0,
        "elastic_s": 15.0 if quick else 180.0,
        "sweep": sweep,
        "min_level": 1,  # on every machine: the module doc (the deadlock rule pinned 16 CPUs at 11/16)
        "max_level": 2 * ncpu if small else ncpu,
        "small_machine": small,
        "costs": {k: tuple(v) for k, v in COSTS.items()},
    }


def _usage() -> tuple[int, float]:
    """Context switches (voluntary + involuntary) and CPU seconds (user + system) of every
    thread of this process, ended ones included (getrusage RUSAGE_SELF; /proc/self/status
    counts the main thread only)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_nvcsw + r.ru_nivcsw, r.ru_utime + r.ru_stime


def run_once(shape: str, n_ops: int, flops: int, sched_kw: dict, duration_s: float, sample_s: float,
             change_at: float | None = None, change_to: int | None = None, rows: int = 1, batch: int = 1) -> dict:
    """One run of one graph under one threading model, with tuples of `rows` rows (the
    sink counts rows) handed off `batch` at a time (1: one by one); see the module doc."""
    meter, stop, cost = Meter(), threading.Event(), Cost(flops)
    plan = build(shape, n_ops, cost, meter, stop, rows, batched=batch > 1)
    sched_kw = dict(sched_kw, batch=batch)
    cs0, cpu0 = _usage()
    samples = []
    with Scheduler(policy="streams", **sched_kw) as s:
        h = s.submit(plan)
        t0 = last_t = time.perf_counter()
        last_n = 0
        k = 0
        while True:
            k += 1
            due = t0 + k * sample_s
            if due - t0 > duration_s + 1e-9:
                break
            time.sleep(max(0.0, due - time.perf_counter()))
            now, n = time.perf_counter(), meter.count
            samples.append((now - t0, (n - last_n) / (now - last_t)))
            last_n, last_t = n, now
            if change_at is not None and now - t0 >= change_at and cost.flops != change_to:
                cost.flops = change_to
        load = os.getloadavg()[0]
        pd = s.stats()["policy_detail"]
        cs1, cpu1 = _usage()
        n_end, t_end = meter.count, time.perf_counter()
        stop.set()
        h.cancel()
        try:
            h.result(60)
        except RequestCancelled:
            pass
    el = pd.get("elastic")
    return {
        "samples": samples,
        "violations": meter.violations,
        "tuples": meter.count,
        "ctx_switches": cs1 - cs0,
        "cpu_s": cpu1 - cpu0,
        "tuples_per_cpu_s": n_end / max(cpu1 - cpu0, 1e-9),
        "wall_s": t_end - t0,
        "loadavg": load,
        "model": pd.get("model"),
        "elastic": el is not None,
        "level": pd.get("level"),
        "threads": pd.get("threads"),
        "trace": el["trace"] if el else [],
        "start": t0,
    }


def unit_word(rows: int) -> str:
    """What costs and the sink's throughput count: tuples, or rows where a tuple has
    several."""
    return "tuple" if rows == 1 else "row"


def sink_unit(rows: int) -> str:
    return f"{unit_word(rows)}s/s"


def static_value(samples) -> float:
    vals = [v for _, v in samples[1:]] or [v for _, v in samples]
    return statistics.median(vals) if vals else 0.0


def elastic_value(samples) -> float:
    vals = [v for _, v in samples[-5:]]
    return statistics.fmean(vals) if vals else 0.0


def settle_periods(trace, t_change: float) -> int | None:
    """Periods after `t_change` until the level stopped changing for good (None: never)."""
    after = [(t, lvl) for t, _thput, lvl, _ev in trace if t >= t_change]
    if len(after) < 2:
        return None
    final = after[-1][1]
    last_change = 0
    for i, (_t, lvl) in enumerate(after):
        if lvl != final:
            last_change = i + 1
    if last_change >= len(after) - 1:
        return None  # still moving at the end of the run
    return last_change


def chosen_shapes(shapes) -> tuple[str, ...]:
    """`shapes` (names, any order; None: all) as a tuple in ``SHAPES`` order."""
    if shapes is None:
        return SHAPES
    names = list(shapes)
    bad = [s for s in names if s not in SHAPES]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"shapes must be distinct names among {', '.join(SHAPES)}, got {names!r}")
    return tuple(s for s in SHAPES if s in names)


def exp_streams(ctx, n_ops: int | None = None, overrides: dict | None = None, shapes=None,
                rows: int | None = None, batch: int | None = None) -> dict:
    """Run the experiment; `overrides` replaces settings (tests shrink the run lengths);
    `shapes` picks graph shapes (default all), `rows` the rows per tuple (default 1),
    `batch` the tuples per hand-off (default ``DEFAULT_BATCH``; see the module doc)."""
    shapes = chosen_shapes(shapes)
    if rows is not None:
        check_rows(rows)
    if batch is not None and batch < 1:
        raise ValueError(f"tuples per batch must be at least 1, got {batch}")
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cfg = settings_for(ctx.quick, ncpu, n_ops, rows, batch)
    cfg.update(overrides or {})
    COSTS = cfg["costs"]  # noqa: N806 - the module constant, or the overridden cost sets
    ops, rows, batch = cfg["ops"], cfg["tuple_rows"], cfg["batch"]
    rec = Recorder(ctx, "streams")
    burn(1.0, 10)  # compile (cached) before any clock runs
    burn_held(1.0, 10)
    one = np.zeros(1, np.int64)
    burn_rows(one, 10)
    burn_rows_held(one, 10)
    row_ids(0, 1)
    # Full collections walk every object of the process (numba's are many); operators that
    # nest deeply (manual, reSchedule) promote young objects and make them frequent. One
    # freeze after the imports keeps that cost out of every series alike (framework's
    # frozen heap: given back when the experiment ends).
    collect_before_run()
    handoff = wake_us()  # the machine's hand-off cost, before the runs (experiments/handoff.py)
    el_kw = {"elastic": True, "max_level": cfg["max_level"], "period_s": cfg["period_s"]}
    if cfg["min_level"] is not None:
        el_kw["min_level"] = cfg["min_level"]
    series = [("manual", {"model": "manual"}, False), ("dedicated", {"model": "dedicated"}, False)]
    series += [(f"dynamic-{t}", {"threads": t}, False) for t in cfg["sweep"]]
    series += [("elastic", dict(el_kw, cpu_limit=0.8), True), ("elastic-nocap", dict(el_kw, cpu_limit=1.0), True)]
    runs = [(shape, c, name, kw, el) for shape in shapes for c in COSTS[shape] for name, kw, el in series]
    # Batched: the mixed graph once more with the paper's one-tuple hand-off (manual and
    # dynamic static), side by side with the batched runs.
    one_series = [(f"{name}:1t", kw) for name, kw, el in series if not el and name != "dedicated"] \
        if batch > 1 and "mixed" in shapes else []
    one_runs = [("mixed", c, name, kw) for c in COSTS["mixed"] for name, kw in one_series] if one_series else []
    # The load-change runs use the mixed graph.
    change_forms = (("elastic-nocap", "oss"), ("elastic-nocap-paper", "paper")) if "mixed" in shapes else ()
    bar = ctx.bar(len(runs) + len(one_runs) + len(change_forms), "streams")
    res: dict = {}
    fifo_ok = True
    for shape, c, name, kw, el in runs:
        dur = cfg["elastic_s"] if el else cfg["static_s"]
        r = run_once(shape, ops, c, {"queue_capacity": queue_for(shape, ops, batch), **kw}, dur, cfg["sample_s"],
                     rows=rows, batch=batch)
        val = elastic_value(r["samples"]) if el else static_value(r["samples"])
        fifo_ok = fifo_ok and r["violations"] == 0
        res[(shape, c, name)] = dict(r, value=val)
        x = f"{shape}:{c}"
        rec.add(name, x, "tuples_per_s", val, unit=sink_unit(rows))
        rec.add(name, x, "ctx_switches", r["ctx_switches"])
        rec.add(name, x, "cpu_s", r["cpu_s"], unit="s")
        rec.add(name, x, "tuples_per_cpu_s", r["tuples_per_cpu_s"], unit=f"{unit_word(rows)}s/CPU-s")
        rec.add(name, x, "loadavg", r["loadavg"])
        rec.add(name, x, "order_violations", r["violations"])
        if r["level"] is not None:
            rec.add(name, x, "level", r["level"], unit="threads")
        for t, v in r["samples"]:
            rec.add(f"{name}:sink", f"{x}:{t:.1f}", "tuples_per_s", v, unit=sink_unit(rows))
        for t, thput, lvl, ev in r["trace"]:
            rec.add(f"{name}:trace", f"{x}:{t:.1f}", "throughput_all", thput, unit="tuples/s")
            rec.add(f"{name}:trace", f"{x}:{t:.1f}", "level", lvl, unit="threads")
        bar.update(1)
    one: dict = {}
    for shape, c, name, kw in one_runs:
        r = run_once(shape, ops, c, {"queue_capacity": queue_for(shape, ops), **kw}, cfg["static_s"],
                     cfg["sample_s"], rows=rows, batch=1)
        fifo_ok = fifo_ok and r["violations"] == 0
        one[(c, name)] = static_value(r["samples"])
        rec.add(name, f"{shape}:{c}", "tuples_per_s", one[(c, name)], unit=sink_unit(rows))
        rec.add(name, f"{shape}:{c}", "tuples_per_cpu_s", r["tuples_per_cpu_s"], unit=f"{unit_word(rows)}s/CPU-s")
        bar.update(1)
    # A change of load (mixed graph, cost 1000 -> 1 half-way): how fast elastic settles.
    changes = {}
    for name, form in change_forms:
        kw = dict(el_kw, cpu_limit=1.0, form=form)
        half = cfg["elastic_s"] / 2
        r = run_once("mixed", ops, 1000, {"queue_capacity": queue_for("mixed", ops, batch), **kw}, cfg["elastic_s"],
                     cfg["sample_s"], change_at=half, change_to=1, rows=rows, batch=batch)
        fifo_ok = fifo_ok and r["violations"] == 0
        changes[form] = {"trace": r["trace"], "settle_periods": settle_periods(r["trace"], half),
                         "level": r["level"], "levels_after": [lvl for t, _x, lvl, _e in r["trace"] if t >= half]}
        for t, thput, lvl, ev in r["trace"]:
            rec.add(f"loadchange-{form}:trace", f"mixed:{t:.1f}", "throughput_all", thput, unit="tuples/s")
            rec.add(f"loadchange-{form}:trace", f"mixed:{t:.1f}", "level", lvl, unit="threads")
        bar.update(1)
    bar.close()
    rec.write()
    return _summarize(ctx, cfg, ncpu, res, fifo_ok, changes, series, shapes, handoff, one)


def _summarize(ctx, cfg, ncpu, res, fifo_ok, changes, series, shapes=SHAPES, handoff=None, one=None) -> dict:
    COSTS = cfg["costs"]  # noqa: N806

    def v(shape, c, name):
        return res[(shape, c, name)]["value"]

    static_names = [n for n, _, el in series if n.startswith("dynamic-")]
    # dynamic_vs_*: the mixed-graph goal, only when the mixed graph runs.
    keys = ["static", "elastic", "elastic_uncapped", "manual", "dedicated", "elastic_vs_best_static",
            "elastic_uncapped_vs_best_static"] + (["dynamic_vs_dedicated", "dynamic_vs_manual"]
                                                  if "mixed" in shapes else []) + [
        "ctx_switches", "loadavg", "tuples_per_cpu_s"]
    out = {"fifo_ok": fifo_ok, "shapes": list(shapes)} | {k: {} for k in keys}
    for shape in shapes:
        for key in ("static", "elastic", "elastic_uncapped", "manual", "dedicated", "elastic_vs_best_static",
                    "elastic_uncapped_vs_best_static", "ctx_switches", "loadavg", "tuples_per_cpu_s"):
            out[key][shape] = {}
        for c in COSTS[shape]:
            st = {int(n.split("-")[1]): round(v(shape, c, n), 2) for n in static_names}
            out["static"][shape][str(c)] = {str(t): x for t, x in st.items()}
            best = max(st.values()) or 1e-9
            for key, name in (("elastic", "elastic"), ("elastic_uncapped", "elastic-nocap")):
                r = res[(shape, c, name)]
                out[key][shape][str(c)] = {"level": r["level"], "throughput": round(r["value"], 2)}
                out[f"{key}_vs_best_static"][shape][str(c)] = round(r["value"] / best, 3)
            out["manual"][shape][str(c)] = round(v(shape, c, "manual"), 2)
            out["dedicated"][shape][str(c)] = round(v(shape, c, "dedicated"), 2)
            out["ctx_switches"][shape][str(c)] = {n: res[(shape, c, n)]["ctx_switches"] for n, _, _ in series}
            out["loadavg"][shape][str(c)] = {n: round(res[(shape, c, n)]["loadavg"], 2) for n, _, _ in series}
            out["tuples_per_cpu_s"][shape][str(c)] = {n: round(res[(shape, c, n)]["tuples_per_cpu_s"], 1)
                                                      for n, _, _ in series}
            if shape == "mixed":
                out["dynamic_vs_dedicated"][str(c)] = round(best / max(v(shape, c, "dedicated"), 1e-9), 3)
                out["dynamic_vs_manual"][str(c)] = round(best / max(v(shape, c, "manual"), 1e-9), 3)
    if one:
        # The one-tuple hand-off on the mixed graph, beside the batched runs (dynamic:
        # the best static point of each).
        dyn = [n for n in static_names]
        out["one_tuple"] = {}
        for c in COSTS["mixed"]:
            best1 = max(one[(c, f"{n}:1t")] for n in dyn)
            best_b = max(v("mixed", c, n) for n in dyn)
            out["one_tuple"][str(c)] = {
                "manual": round(one[(c, "manual:1t")], 2), "dynamic_best": round(best1, 2),
                "dynamic_vs_manual": round(best1 / max(one[(c, "manual:1t")], 1e-9), 3),
                "batched_vs_one_tuple_manual": round(v("mixed", c, "manual") / max(one[(c, "manual:1t")], 1e-9), 3),
                "batched_vs_one_tuple_dynamic": round(best_b / max(best1, 1e-9), 3)}
    if changes:
        out["load_change"] = {form: {"settle_periods": d["settle_periods"], "level": d["level"],
                                     "levels_after": d["levels_after"]} for form, d in changes.items()}
    out["settings"] = {k: cfg[k] for k in ("ops", "tuple_rows", "batch", "sample_s", "static_s", "period_s",
                                           "elastic_s", "sweep", "min_level", "max_level")} | {
        "cpus": ncpu, "placement": "fill",
        "queue_capacity": {s: queue_for(s, cfg["ops"], cfg["batch"]) for s in shapes},
        "gil_release_flops": RELEASE_FLOPS}
    out["handoff"] = handoff
    _plot(ctx, res, series, static_names, changes, cfg, shapes)
    _report(ctx, out, cfg, ncpu, res, static_names, shapes)
    return out


def _plot(ctx, res, series, static_names, changes, cfg, shapes=SHAPES) -> tuple:
    """``streams.png`` (a row per shape, a panel per cost: Figs. 8-9) and
    ``streams-elastic.png`` (Fig. 10: a panel per shape and per load-change run); each
    figure has exactly those panels. Returns both figures, saved and closed."""
    COSTS = cfg["costs"]  # noqa: N806
    fig, axes = panel_rows([len(COSTS[s]) for s in shapes], panel_size=(4.7, 11 / 3))
    for i, shape in enumerate(shapes):
        for k, c in enumerate(COSTS[shape]):
            ax = axes[i][k]
            ts = [int(n.split("-")[1]) for n in static_names]
            ax.plot(ts, [res[(shape, c, n)]["value"] for n in static_names], "o-", color="tab:blue",
                    label="dynamic static")
            for name, color in (("manual", "tab:gray"), ("dedicated", "tab:red")):
                ax.axhline(res[(shape, c, name)]["value"], color=color, ls="--", label=name)
            for name, marker in (("elastic", "*"), ("elastic-nocap", "P")):
                r = res[(shape, c, name)]
                ax.plot([r["level"]], [r["value"]], marker, ms=12, color="tab:green",
                        label=f"{name} (settled level)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("scheduler threads")
            ax.set_ylabel(f"sink {sink_unit(cfg['tuple_rows'])}")
            ax.set_title(f"{shape}, {c} FLOP/{unit_word(cfg['tuple_rows'])}")
            if i == 0 and k == 0:
                ax.legend(fontsize=7)
    fig.suptitle(f"IBM Streams threading models, {cfg['ops']} operators (Figs. 8-9)")
    fig.tight_layout()
    save_figure(fig, ctx, "streams")
    # Fig. 10: single elastic runs over time, plus the load-change runs.
    picks = [(s, COSTS[s][0] if s == "pipeline" else COSTS[s][-1]) for s in shapes]
    elastic, axes = panel_grid(len(picks) + len(changes), ncols=3, panel_size=(16 / 3, 3.75))  # 5: 3 + 2
    for ax, (shape, c) in zip(axes, picks):
        tr = res[(shape, c, "elastic-nocap")]["trace"]
        _trace(ax, tr, f"{shape}, {c} FLOP/{unit_word(cfg['tuple_rows'])} (no CPU cap)")
    for ax, (form, d) in zip(axes[len(picks):], changes.items()):
        _trace(ax, d["trace"], f"mixed, cost 1000 -> 1 at {cfg['elastic_s'] / 2:g} s ({form})")
        ax.axvline(cfg["elastic_s"] / 2, color="black", lw=0.8)
    elastic.suptitle("Elastic runs: throughput across all operators and thread level per period (Fig. 10)")
    elastic.tight_layout()
    save_figure(elastic, ctx, "streams-elastic")
    return fig, elastic


def _trace(ax, tr, title) -> None:
    t = [x[0] for x in tr]
    ax.plot(t, [x[1] for x in tr], "-", color="tab:blue")
    ax.set_xlabel("seconds")
    ax.set_ylabel("tuples/s, all operators", color="tab:blue")
    ax2 = ax.twinx()
    ax2.step(t, [x[2] for x in tr], where="post", color="tab:orange")
    ax2.set_ylabel("thread level", color="tab:orange")
    ax2.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title, fontsize=9)


def _report(ctx, out, cfg, ncpu, res, static_names, shapes=SHAPES) -> None:
    COSTS = cfg["costs"]  # noqa: N806
    n_points = sum(len(COSTS[s]) for s in shapes)
    rows = []
    for shape in shapes:
        for c in COSTS[shape]:
            st = out["static"][shape][str(c)]
            best_t = max(st, key=lambda t: st[t])
            e, en = out["elastic"][shape][str(c)], out["elastic_uncapped"][shape][str(c)]
            rows.append([shape, c, out["manual"][shape][str(c)], out["dedicated"][shape][str(c)],
                         " / ".join(f"{t}: {x:g}" for t, x in st.items()), best_t,
                         f"{e['throughput']:g} @ {e['level']}", f"{en['throughput']:g} @ {en['level']}",
                         out["elastic_vs_best_static"][shape][str(c)],
                         out["elastic_uncapped_vs_best_static"][shape][str(c)]])
    cs_rows = []
    for shape in shapes:
        c = COSTS[shape][-1]
        d = out["ctx_switches"][shape][str(c)]
        la = out["loadavg"][shape][str(c)]
        cs_rows.append([f"{shape}:{c}"] + [f"{d[n]} / {la[n]}" for n in ("manual", "dedicated", static_names[-1],
                                                                            "elastic")])
    eff_rows = []
    for shape in shapes:
        for c in COSTS[shape]:
            e = out["tuples_per_cpu_s"][shape][str(c)]
            eff_rows.append([shape, c] + [f"{e[n]:g}" for n in ["manual", "dedicated", *static_names, "elastic-nocap"]])
    within = sum(1 for s in shapes for c in COSTS[s] if out["elastic_uncapped_vs_best_static"][s][str(c)] >= 0.9)
    within_cap = sum(1 for s in shapes for c in COSTS[s] if out["elastic_vs_best_static"][s][str(c)] >= 0.9)
    goals = [f"- elastic within 10 % of the best static point: {within_cap}/{n_points} with the CPU cap, "
             f"{within}/{n_points} without;"]
    if "mixed" in shapes:
        mixed_ok = all(out["dynamic_vs_dedicated"][k] >= 1 and out["dynamic_vs_manual"][k] >= 1
                       for k in out["dynamic_vs_dedicated"])
        goals.append(f"- mixed graph, dynamic (best static) >= dedicated and >= manual at every cost: "
                     f"{'yes' if mixed_ok else 'no'} (dynamic/dedicated {out['dynamic_vs_dedicated']}, "
                     f"dynamic/manual {out['dynamic_vs_manual']});")
    if "dp" in shapes:
        c1 = str(COSTS["dp"][0])
        dp1 = out["static"]["dp"][c1]
        dp1_manual_best = out["manual"]["dp"][c1] >= max(dp1.values()) and \
            out["manual"]["dp"][c1] >= out["dedicated"]["dp"][c1]
        goals.append(f"- data parallel at cost {c1}: manual best: {'yes' if dp1_manual_best else 'no'}; elastic "
                     f"level {out['elastic']['dp'][c1]['level']} (cap) / "
                     f"{out['elastic_uncapped']['dp'][c1]['level']} (no cap), minimum {cfg['min_level'] or 'default'};")
    if "load_change" in out:
        lc = out["load_change"]
        goals.append(f"- load change (mixed, cost 1000 -> 1 half-way, no cap): levels in the periods after it "
                     f"{lc['oss']['levels_after']}, last change after {lc['oss']['settle_periods']} periods (OSS form: "
                     f"its noise filter needs 6 periods in a row to see a change) and {lc['paper']['levels_after']}, "
                     f"{lc['paper']['settle_periods']} (paper form; None: still moving when the run ended);")
    goals.append(f"- per-edge order held in every run: {'yes' if out['fifo_ok'] else 'NO'}.")
    if cfg["tuple_rows"] != 1:
        goals.append(f"\nThese runs use tuples of {cfg['tuple_rows']} rows (`--tuple-rows`); the paper's figures, "
                     "and so the goals, are for one-row tuples.")
    notes = []
    per = unit_word(cfg["tuple_rows"])
    if tuple(shapes) != SHAPES:
        notes.append(f"Graph shapes run: {', '.join(shapes)} only (`--shapes`); the goals of the other shapes are "
                     "not measured.")
    if cfg["min_level"] is not None:
        notes.append(f"Elastic runs use `min_level={cfg['min_level']}`, a deviation from the paper's `min = 1 + input "
                     "ports` (spec 2.6): these operators never block, and the Snk takes one port per upstream "
                     "stream (the paper's takes one), so the rule would keep elastic at 11 threads or more.")
    if cfg["small_machine"]:
        notes.append(f"This machine has {ncpu} CPUs: elastic runs use `max_level={cfg['max_level']}` (2 x CPUs, "
                     "oversubscribed), a deviation from the paper's `max = CPUs` (spec section 4).")
    if out.get("handoff"):
        notes.append(describe(out["handoff"]) + " Dynamic hands each tuple to a queue that another thread may drain; "
                     "manual calls the next operator directly.")
    loads = [x for sh in out["loadavg"].values() for d in sh.values() for x in d.values()]
    if loads:
        busy = max(loads) > ncpu
        notes.append(f"1-minute load average during the runs: {min(loads):.1f} to {max(loads):.1f} on {ncpu} CPUs"
                     + (": the machine was shared with other work, so each run got a share of the CPUs that grew "
                        "with its number of runnable threads; absolute figures and ratios carry that noise (the "
                        f"{per}s-per-CPU-second table does not)." if busy else "."))
    queues_txt = ", ".join(f"{queue_for(s, cfg['ops'])} ({s})" for s in shapes)
    b = cfg["batch"]
    if b > 1:
        notes.append(f"Batched ports: each hand-off between operators carries up to {b} tuples (`--batch`; "
                     "`bobox_sched/policies/streams/batching.py`: a batch leaves full, at a punctuation, when its "
                     "sender has nothing more queued, or when its oldest tuple is "
                     f"{DEFAULT_LATENCY_S * 1e3:g} ms old); queues hold "
                     + ", ".join(f"{queue_for(s, cfg['ops'], b)} ({s})" for s in shapes)
                     + f" batches; the operators take and send a batch at once (one kernel call per batch). The "
                     "paper's one-tuple hand-off is the `--batch 1` run.")
    body = (
        f"{cfg['ops']} worker operators per graph (plus Src, Snk and, for the parallel shapes, Split); "
        + ("one-row tuples" if cfg["tuple_rows"] == 1 else
           f"tuples of {cfg['tuple_rows']} rows (`--tuple-rows`; the paper's have one), each row costing the FLOPs "
           "below, and throughput counted in sink rows/s")
        + f"; queues of {queues_txt} "
        f"tuples per input port (deviation: [OSS] uses {QUEUE}; here a graph's queues hold at most about "
        f"{GRAPH_SLOTS} tuples, so that they fill in seconds at Python's speed and the sink sees the steady "
        f"state); cost per row run by a numba kernel that releases the GIL from {RELEASE_FLOPS:,} FLOPs per tuple on "
        "(deviation: the spec has every kernel release it; below that a release costs more than it buys, "
        "because each one hands the GIL to a waiting thread on another core: `streams_ops.RELEASE_FLOPS`). "
        f"Static runs {cfg['static_s']:g} s (median of {cfg['sample_s']:g} s sink samples after the first), "
        f"elastic runs {cfg['elastic_s']:g} s with a {cfg['period_s']:g} s period (mean of the last 5 samples, "
        f"OSS form, power-of-two steps). Scheduler threads pinned per NUMA node, placement `fill` (fill one "
        f"node's CPUs first). `gc.freeze()` once before the runs (module doc).\n\n"
        + " ".join(notes) + "\n\n"
        "Known deviation (spec section 4): in Python, `dedicated` is not expected to win on a pipeline (the paper's "
        "result rests on synchronisation-free C++ hand-off between 1,000 threads; here they contend for the GIL).\n\n"
        + md_table(["shape", f"FLOP/{per}", "manual", "dedicated", f"dynamic static (threads: {per}s/s)",
                     "best T", "elastic (cap 0.8) @ level", "elastic (no cap) @ level", "elastic/best",
                     "no-cap/best"], rows)
        + f"\n\nSink {per}s per CPU-second of the process (user + system, all threads): what each model "
        "gets out of the CPU it was given, independent of how much the other processes on the machine left "
        "it (a run with more runnable threads gets a larger share of a loaded machine):\n\n"
        + md_table(["shape", f"FLOP/{per}", "manual", "dedicated", *static_names, "elastic (no cap)"], eff_rows)
        + (("\n\nThe mixed graph with the paper's one-tuple hand-off (`:1t`) beside the batched runs (sink "
            f"{per}s/s; dynamic: its best static point):\n\n"
            + md_table(["FLOP/" + per, "manual 1t", "dynamic 1t", "dynamic/manual 1t", "batched/1t manual",
                        "batched/1t dynamic"],
                       [[c, d["manual"], d["dynamic_best"], d["dynamic_vs_manual"], d["batched_vs_one_tuple_manual"],
                         d["batched_vs_one_tuple_dynamic"]] for c, d in out["one_tuple"].items()]))
           if out.get("one_tuple") else "")
        + "\n\nContext switches / load average, highest cost per shape:\n\n"
        + md_table(["run", "manual", "dedicated", static_names[-1], "elastic"], cs_rows)
        + "\n\nGoals (issue 13):\n\n" + "\n".join(goals) + "\n\n"
        "![figs 8-9](streams.png)\n\n![fig 10](streams-elastic.png)\n")
    write_section(ctx, "streams", "IBM Streams threading models (Schneider & Wu, Figs. 8-10)", body)





def parse_shapes(v: str | None) -> tuple[str, ...] | None:
    """--shapes LIST of the streams experiment: the named graph shapes in the order of
    ``streams_ops.SHAPES`` (None: all); a one-line error for a bad list."""
    from bobox_sched.core.errors import BoboxError

    from experiments.streams_ops import SHAPES

    if v is None:
        return None
    xs = [x.strip() for x in v.split(",")]
    bad = [x for x in xs if x not in SHAPES]
    if bad:
        raise BoboxError(f"--shapes: {bad[0]!r} is not a graph shape; pick from {', '.join(SHAPES)}, comma separated")
    dup = next((x for x in SHAPES if xs.count(x) > 1), None)
    if dup:
        raise BoboxError(f"--shapes: {dup!r} is named twice in {v!r}")
    return tuple(x for x in SHAPES if x in xs)


def run(args) -> dict:
    """``bobox experiment streams``: build the experiment context
    (``experiments/framework.py``), run, print where the files are."""
    import sys

    ctx = Ctx.from_args(args, repeat=1)
    out = ctx.out
    t0 = time.perf_counter()
    print("[experiment] streams ...", file=sys.stderr, flush=True)
    summary = exp_streams(ctx, args.ops, shapes=parse_shapes(getattr(args, "shapes", None)),
                          rows=getattr(args, "tuple_rows", None), batch=getattr(args, "batch", None))
    print(f"[experiment] streams done in {time.perf_counter() - t0:.1f} s -> {out}/streams.csv, streams.png, "
          f"streams-elastic.png, report.md", file=sys.stderr, flush=True)
    print(f"report: {out / 'report.md'}")
    return summary
__all__ = ["exp_streams", "run", "run_once", "settings_for"]
