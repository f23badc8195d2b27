"""``bobox experiment policies``: every scheduling policy side by side on one stream
workload (design §8: "users compare all the policies side by side on one workload").

The workload is one linear chain every policy can run: ``EventSource`` (seeded events,
Zipf-skewed keys, a latency marker every few packets) -> ``Filter`` (value > 0, about half
the rows) -> ``Map`` (a few arithmetic columns per row, one generated nogil kernel per
packet) -> a sink that keeps the rows it receives, in order. The configurations:

* ``bobox``, ``simple``: the Bobox scheduler and its paper's baseline;
* ``bobox+regions``: bobox with safe data parallelism (seed 001): the Filter -> Map
  region run as one channel per worker, with its ordered merger;
* ``ordered-ct``, ``ordered-lp``: Prasaad et al.'s central allotment (seed 000);
* ``streams``, ``streams-elastic``, ``streams-manual``: IBM Streams' dynamic threading at
  a fixed level, elastic, and the manual model (seed 004).

TStream (seed 002) is a scheme for shared state, not a thread scheduler: it is measured
by ``bobox experiment tstream``, under bobox and simple.

Every configuration runs the same rows with the same worker count; the configurations
are interleaved within each repeat (a change of machine load hits them all), and each
output is compared with the reference (bobox, one request alone): rows equal, in order.
Reported per configuration: throughput (rows/s, submit to end), rows per CPU-second of
the process, latency p50/p99 of the markers, and the ratio of its throughput to bobox's.
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

CONFIGS = ("bobox", "simple", "bobox+regions", "ordered-ct", "ordered-lp", "streams", "streams-elastic",
           "streams-manual")


def _scheduler_kwargs(config: str, workers: int) -> tuple[dict, int | None]:
    """(Scheduler keyword arguments, parallelism) of a configuration."""
    base = {"pin": False, "threads_per_node": workers}
    if config in ("bobox", "simple"):
        return {**base, "policy": config}, None
    if config == "bobox+regions":
        return {**base, "policy": "bobox"}, workers
    if config.startswith("ordered-"):
        return {**base, "policy": "ordered", "heuristic": config.split("-")[1]}, None
    if config == "streams":
        return {**base, "policy": "streams", "threads": workers}, None
    if config == "streams-elastic":
        return {**base, "policy": "streams", "elastic": True}, None
    if config == "streams-manual":
        return {**base, "policy": "streams", "model": "manual"}, None
    raise ValueError(config)


def make_plan(rows: int, rows_per_packet: int, seed: int = 7):
    from bobox_sched import Plan, StreamOperator
    from bobox_sched.stream import model as M
    from operators.expr import col
    from operators.stream import EventSource, Filter, Map

    class Keep(StreamOperator):
        """The sink: keeps every row it receives, in order (the comparison needs them)."""

        outputs = ()
        state = M.UNKNOWN

        def __init__(self):
            self.parts = []
            self.rows = 0

        def on_packet(self, ctx, port, pkt):
            self.parts.append({k: np.array(v) for k, v in pkt.columns.items() if not k.startswith("__")})
            self.rows += pkt.nrows

        def on_end(self, ctx):
            cols = {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]} if self.parts else {}
            ctx.set_result({"rows": self.rows, "columns": cols})

    schema = EventSource.schema
    plan = Plan("policies")
    plan.add("events", EventSource, rows, seed=seed, n_keys=1000, skew=1.1, rows_per_packet=rows_per_packet,
             marker_every=4)
    plan.add("filter", Filter, schema, col("value") > 0)
    plan.add("map", Map, schema, [("score", col("value") * 3 + col("key")), ("key2", col("key") * 2)])
    plan.add("sink", Keep)
    plan.chain("events", "filter", "map", "sink")
    return plan


def _same(a: dict, b: dict) -> bool:
    ca, cb = a["columns"], b["columns"]
    return a["rows"] == b["rows"] and set(ca) == set(cb) and all(np.array_equal(ca[k], cb[k]) for k in ca)


def _one_run(config: str, plan, workers: int, rows: int) -> dict:
    from bobox_sched import Scheduler
    from operators.stream import stream_report

    kw, parallelism = _scheduler_kwargs(config, workers)
    with Scheduler(**kw) as s:
        c0 = time.process_time()  # the process's CPU clock (ns resolution; psutil's ticks are 10 ms)
        h = s.submit(plan, parallelism=parallelism) if parallelism else s.submit(plan)
        rep = stream_report(h, rows=rows, timeout=600)
        cpu = time.process_time() - c0
        result = h.result()
    return {"rows_per_s": rep["rows_per_s"], "rows_per_cpu_s": rows / cpu if cpu > 0 else None,
            "p50_ms": rep["latency_p50_ms"], "p99_ms": rep["latency_p99_ms"], "result": result}


def exp_policies(ctx, rows: int) -> dict:
    import psutil

    from .locality import Recorder, _md_table, _plt, _save, write_section

    workers = ctx.threads_per_node or (psutil.cpu_count() or 1)
    rec = Recorder(ctx, "policies")
    rows_per_packet = 4096
    plan = make_plan(rows, rows_per_packet)
    ref = _one_run("bobox", plan, 1, rows)["result"]  # the reference: sequential bobox, also the warm-up
    equal = {c: True for c in CONFIGS}
    failed: dict = {}
    load = []
    total = ctx.repeat * len(CONFIGS)
    bar = ctx.bar(total, "policies")
    for r in range(ctx.repeat):
        load.append(os.getloadavg()[0])
        for config in CONFIGS:
            if config in failed:
                bar.update(1)
                continue
            try:
                m = _one_run(config, plan, workers, rows)
            except Exception as e:  # noqa: BLE001 - a policy that cannot run it is reported, not hidden
                failed[config] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                bar.update(1)
                continue
            equal[config] = equal[config] and _same(m["result"], ref)
            rec.add(config, workers, "throughput", m["rows_per_s"], r, "rows/s")
            if m["rows_per_cpu_s"]:
                rec.add(config, workers, "rows_per_cpu_s", m["rows_per_cpu_s"], r, "rows/CPU-s")
            for k in ("p50_ms", "p99_ms"):
                if m[k] is not None:
                    rec.add(config, workers, f"latency_{k}", m[k], r, "ms")
            bar.update(1)
    bar.close()
    ran = [c for c in CONFIGS if c not in failed]
    thr = {c: rec.median(c, workers, "throughput") for c in ran}
    cpu = {c: rec.median(c, workers, "rows_per_cpu_s") for c in ran}
    p50 = {c: rec.median(c, workers, "latency_p50_ms") for c in ran}
    p99 = {c: rec.median(c, workers, "latency_p99_ms") for c in ran}
    ratio = {c: (thr[c] / thr["bobox"]) if thr.get("bobox") else None for c in ran}
    rec.write()

    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = np.arange(len(ran))
    a1.bar(xs, [thr[c] / 1e6 for c in ran], color="tab:blue")
    a1.set_xticks(xs, ran, rotation=35, ha="right")
    a1.set_ylabel("million rows/s (median)")
    a1.set_title(f"Throughput, {workers} workers, {rows:,} rows")
    a2.bar(xs - 0.2, [p50[c] or 0 for c in ran], 0.4, label="p50")
    a2.bar(xs + 0.2, [p99[c] or 0 for c in ran], 0.4, label="p99")
    a2.set_xticks(xs, ran, rotation=35, ha="right")
    a2.set_ylabel("marker latency, ms")
    a2.set_title("Processing latency")
    a2.legend()
    _save(fig, ctx, "policies")

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    table = _md_table(["configuration", "rows/s", "x bobox", "rows/CPU-s", "p50 ms", "p99 ms", "output = reference"],
                      [[c, f(thr[c], ",.0f"), f(ratio[c], ".2f"), f(cpu[c], ",.0f"), f(p50[c], ".2f"),
                        f(p99[c], ".2f"), equal[c]] for c in ran])
    body = (f"One chain (EventSource -> Filter -> Map -> sink, {rows:,} rows in packets of {rows_per_packet}) "
            f"under every policy with {workers} workers; configurations interleaved per repeat, medians of "
            f"{ctx.repeat}. Load average during the runs: {statistics.median(load):.2f}. TStream is a scheme "
            f"for shared state, compared in its own experiment (`bobox experiment tstream`).\n\n{table}\n\n"
            f"![policies](policies.png)\n")
    if failed:
        body += "\nNot run: " + "; ".join(f"{c}: {why}" for c, why in failed.items()) + "\n"
    write_section(ctx, "policies", "Policies side by side", body)
    print(table)
    return {"configs": ran, "workers": workers, "rows": rows, "throughput": thr, "rows_per_cpu_s": cpu,
            "latency_p50_ms": p50, "latency_p99_ms": p99, "equal_to_reference": {c: equal[c] for c in ran},
            "ratio_to_bobox": ratio, "failed": failed, "load_avg": statistics.median(load)}


def run_experiment(args) -> dict:
    import topology as T
    from bobox_sched.errors import BoboxError

    from .locality import Ctx

    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BoboxError(f"cannot create output folder {out}: {e.strerror or e}") from None
    repeat = args.repeat or (2 if args.quick else 5)
    ctx = Ctx(out=out, repeat=repeat, quick=args.quick, data_arg=None, sf=None, threads_per_node=None,
              virtual_nodes=None, progress=not args.no_progress,
              command="bobox " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    ctx.topo = T.probe()
    rows = 2_000_000 if args.quick else 20_000_000
    t0 = time.perf_counter()
    print("[experiment] policies ...", file=sys.stderr, flush=True)
    summary = exp_policies(ctx, rows)
    print(f"[experiment] policies done in {time.perf_counter() - t0:.1f} s -> {out}/policies.csv, policies.png, "
          "report.md", file=sys.stderr, flush=True)
    return summary


__all__ = ["CONFIGS", "exp_policies", "make_plan", "run_experiment"]
