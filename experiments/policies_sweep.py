"""``bobox experiment policies``, second part: where each policy wins. Every
configuration of ``policies.py`` also runs

* the same chain with tuples of 1 and 64 rows (``SIZES``; the first part's 4,096-row
  packets are the third point): with one-row tuples each hand-off carries one row, so a
  policy's Python per packet and per hand-off decides; with 4,096 rows the nogil kernels
  do and the policies differ in how they spread work. A small size runs fewer rows
  (``PACKETS`` packets: ``min(rows, size * PACKETS)``) so a run stays short; the event
  stream, the filter, the map and the windows are the same, only packed differently,
  and every run's digest is compared with the reference of its own size;
* TStream's grep-and-sum (GS, seed 002; ``operators/txn``): the parser dealing events to
  one transactional operator per worker, batches closed by a punctuation every
  ``GS_INTERVAL`` events, state access in dual mode (``cc="tstream"``), and under
  ``bobox`` also with the LOCK baseline (``cc="lock"``). Its result (the store and every
  output) must equal the serial timestamp-order run (``serial_equivalent``). A policy
  that cannot run transactional state (its tasks run ports, not state-access tasks:
  ``streams``; or only linear chains: ``ordered``) is excluded with its one-line reason.

Each workload runs every configuration once per round, ``ctx.repeat`` rounds, after
one untimed warm-up run (GS only: the chain's kernels are warm from the first part).
Throughput: rows (events for GS) over the request's time; ratios to ``bobox`` taken
within a round, then the median. ``best``: the configuration with the highest median
throughput among those equal to the reference.
"""

from __future__ import annotations

import sys

import numpy as np

from experiments.framework import Ctx, Recorder, error_line, md_table, median_or_none, pyplot, save_figure

SIZES = (1, 64, 4096)  # rows per tuple (packet); 4096 is the first part's chain
# Packets per run of a small size: one-row tuples through five operators cost ~0.1 ms
# each under the slowest policies here (``streams-manual`` 0.03 ms, ``ordered`` 0.15 ms
# measured on the 2-core VM), so 2,000 keep a quick run near 0.3 s.
PACKETS = {True: 2_000, False: 10_000}
GS_EVENTS = {True: 50_000, False: 200_000}  # tstream.py's quick default is 20k; GS runs ~0.8M events/s here
GS_INTERVAL = 500  # the paper's punctuation interval (TStream Fig. 12's middle point)
GS_LOCK = "bobox (cc=lock)"


def size_rows(size: int, rows: int, quick: bool) -> int:
    """Rows a run of `size`-row tuples takes (module doc)."""
    return rows if size >= SIZES[-1] else min(rows, size * PACKETS[quick])


def _ratios(runs: dict, key: str) -> dict:
    base = runs.get("bobox") or []
    out = {}
    for n, ms in runs.items():
        rs = [m[key] / b[key] for m, b in zip(ms, base) if b[key]]
        out[n] = None if not rs else round(median_or_none(rs), 3)
    return out


def _best(tp: dict, equal: dict):
    ok = {n: v for n, v in tp.items() if v and equal.get(n)}
    return max(ok, key=ok.get) if ok else None


# -- the chain at several tuple sizes -------------------------------------------------------

def chain_sweep(ctx: Ctx, rec: Recorder, cfgs: list, workers: int, rows: int, first: dict, bar, build_plan, reference,
                run_once) -> dict:
    """Every configuration on the chain at each of ``SIZES`` (module doc); `first` is the
    first part's summary (the 4,096-row point); `build_plan`, `reference` and `run_once`
    are ``policies.py``'s (passed in: that module imports this one)."""

    names = [c.name for c in cfgs]
    tp = {n: {} for n in names}
    ratio = {n: {} for n in names}
    equal = {n: {} for n in names}
    p99 = {n: {} for n in names}
    excluded: dict = {}
    nrows = {}
    for size in SIZES:
        key = str(size)
        if size == SIZES[-1]:  # the first part measured it
            nrows[key] = first["rows"]
            for n in names:
                tp[n][key] = first["throughput"].get(n)
                ratio[n][key] = first["ratio_to_bobox"].get(n)
                equal[n][key] = first["equal_to_reference"].get(n, False)
                p99[n][key] = first["latency_p99_ms"].get(n)
            continue
        r_s = nrows[key] = size_rows(size, rows, ctx.quick)
        plan = build_plan(r_s, workers, rows_per_packet=size)
        bar.set_postfix_str(f"{size}-row tuples: reference")
        ref = reference(ctx, plan)
        runs: dict = {n: [] for n in names}
        for r in range(ctx.repeat):
            for cfg in cfgs:
                if cfg.name in excluded.get(key, {}):
                    continue
                bar.set_postfix_str(f"{size}-row tuples, round {r + 1}/{ctx.repeat} {cfg.name}")
                try:
                    m = run_once(ctx, cfg, plan, r_s)
                except Exception as e:  # noqa: BLE001 - a configuration failing here is excluded, reported
                    excluded.setdefault(key, {})[cfg.name] = error_line(e)
                    print(f"[policies] {cfg.name} failed on {size}-row tuples, excluded: {error_line(e)}",
                          file=sys.stderr, flush=True)
                    runs.pop(cfg.name, None)
                    continue
                ok = m["digest"] == ref["digest"] and m["out_rows"] == ref["rows"] and m["windows"] == ref["windows"]
                equal[cfg.name][key] = equal[cfg.name].get(key, True) and ok
                runs[cfg.name].append(m)
                x = f"chain-{size}"
                rec.add(cfg.name, x, "rows_per_s", m["rows_per_s"], r, "rows/s")
                rec.add(cfg.name, x, "equal_to_reference", float(ok), r, "bool")
                if m["p99"] is not None:
                    rec.add(cfg.name, x, "latency_p99_ms", m["p99"], r, "ms")
            bar.update(1)
        rs = _ratios(runs, "rows_per_s")
        for n in names:
            ms = runs.get(n)
            tp[n][key] = None if not ms else round(median_or_none(m["rows_per_s"] for m in ms), 1)
            ratio[n][key] = rs.get(n)
            equal[n].setdefault(key, False)
            p99[n][key] = None if not ms else median_or_none(m["p99"] for m in ms)
            if ratio[n][key] is not None:
                rec.add(n, f"chain-{size}", "throughput_ratio_to_bobox", ratio[n][key], 0, "x")
    best = {str(s): _best({n: tp[n][str(s)] for n in names}, {n: equal[n][str(s)] for n in names}) for s in SIZES}
    return {"sizes": list(SIZES), "rows": nrows, "throughput": tp, "ratio_to_bobox": ratio, "equal": equal,
            "latency_p99_ms": p99, "best": best, "excluded": excluded}


# -- TStream's GS ---------------------------------------------------------------------------

def _gs_once(ctx: Ctx, cfg, cc: str, app, events: dict, workers: int) -> dict:
    from bobox_sched import Scheduler
    from bobox_sched.txn import TxnConfig
    from operators.txn.plan import build_plan

    store = app.make_store()
    with Scheduler(topology=ctx.topo, **cfg.kw) as s:
        tc = TxnConfig(store, workers, interval=GS_INTERVAL, cc=cc)
        plan = build_plan(app, tc, events, keep=True)
        h = s.submit(plan, parallelism=cfg.parallelism) if cfg.parallelism else s.submit(plan)
        res = h.result(timeout=600)
        elapsed = h._request.elapsed
    lat = res["latency_ns"] / 1e6
    return {"events": res["rows"], "rows_per_s": res["rows"] / elapsed if elapsed > 0 else 0.0,
            "p50": float(np.percentile(lat, 50)) if lat.size else None,
            "p99": float(np.percentile(lat, 99)) if lat.size else None,
            "store": store.dense(), "outputs": res["outputs"]}


def gs_workload(ctx: Ctx, rec: Recorder, cfgs: list, workers: int, bar) -> dict:
    """Every configuration on TStream's GS (module doc)."""
    from dataclasses import replace

    from operators.txn import make_app
    from operators.txn.plan import oracle_of, same_outputs

    app = make_app("gs")
    n_events = GS_EVENTS[ctx.quick]
    events = app.events(n_events, seed=1)
    dense, outs = oracle_of(app, app.make_store(), events, n_events)
    lock = next((c for c in cfgs if c.name == "bobox"), None)
    runs_of = [(c, "tstream") for c in cfgs]
    if lock is not None:
        runs_of.append((replace(lock, name=GS_LOCK, what="policy bobox, LOCK baseline"), "lock"))
    excluded: dict = {}
    active = []
    for cfg, cc in runs_of:  # warm-up: kernels of each scheme loaded; who cannot run it is excluded here
        bar.set_postfix_str(f"GS warm-up {cfg.name}")
        try:
            _gs_once(ctx, cfg, cc, app, events, workers)
            active.append((cfg, cc))
        except Exception as e:  # noqa: BLE001 - any failure excludes the configuration, reported
            excluded[cfg.name] = error_line(e)
    bar.update(1)
    runs: dict = {c.name: [] for c, _ in active}
    equal = {c.name: True for c, _ in active}
    for r in range(ctx.repeat):
        for cfg, cc in active:
            bar.set_postfix_str(f"GS round {r + 1}/{ctx.repeat} {cfg.name}")
            m = _gs_once(ctx, cfg, cc, app, events, workers)
            ok = m["events"] == n_events and bool(np.array_equal(m["store"], dense)) and same_outputs(m["outputs"], outs)
            equal[cfg.name] = equal[cfg.name] and ok
            runs[cfg.name].append(m)
            rec.add(cfg.name, "tstream-gs", "rows_per_s", m["rows_per_s"], r, "events/s")
            rec.add(cfg.name, "tstream-gs", "serial_equivalent", float(ok), r, "bool")
            for k in ("p50", "p99"):
                if m[k] is not None:
                    rec.add(cfg.name, "tstream-gs", f"latency_{k}_ms", m[k], r, "ms")
        bar.update(1)
    names = [c.name for c, _ in active]
    tp = {n: round(median_or_none(m["rows_per_s"] for m in runs[n]), 1) for n in names}
    return {"app": "gs", "events": n_events, "interval": GS_INTERVAL, "executors": workers, "configs": names,
            "cc": {c.name: cc for c, cc in active}, "throughput": tp,
            "ratio_to_bobox": _ratios(runs, "rows_per_s"),
            "latency_p50_ms": {n: _r(median_or_none(m["p50"] for m in runs[n])) for n in names},
            "latency_p99_ms": {n: _r(median_or_none(m["p99"] for m in runs[n])) for n in names},
            "serial_equivalent": equal, "best": _best(tp, equal), "excluded": excluded}


def _r(x, k: int = 3):
    return None if x is None else round(float(x), k)


# -- outputs --------------------------------------------------------------------------------

def _f(x, fmt) -> str:
    return "-" if x is None else format(x, fmt)


def text(sw: dict, gs: dict) -> str:
    """What the command prints under the first table."""
    sizes = [str(s) for s in sw["sizes"]]
    head = ["config"] + [f"{s}-row x bobox" for s in sizes] + ["GS events/s", "x bobox"]
    rows = []
    for n in sw["throughput"]:
        cells = [n] + [_f(sw["ratio_to_bobox"][n][s], ".2f") + ("" if sw["equal"][n][s] else " NO")
                       for s in sizes]
        if n in gs["throughput"]:
            cells += [_f(gs["throughput"][n], ",.0f") + ("" if gs["serial_equivalent"][n] else " NO"),
                      _f(gs["ratio_to_bobox"][n], ".2f")]
        else:
            cells += ["excluded", "-"]
        rows.append(cells)
    for n in gs["throughput"]:
        if n not in sw["throughput"]:
            rows.append([n] + ["-"] * len(sizes) + [_f(gs["throughput"][n], ",.0f"), _f(gs["ratio_to_bobox"][n], ".2f")])
    w = [max(len(str(x)) for x in c) for c in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i])  # noqa: E731
                                   for i, c in enumerate(cells))
    best = ", ".join(f"{s}-row: {sw['best'][s]}" for s in sizes) + f"; GS: {gs['best']}"
    return "\n".join([line(head)] + [line(r) for r in rows] + [f"best: {best}"])


def report(sw: dict, gs: dict) -> str:
    """The report's second part (markdown)."""
    sizes = [str(s) for s in sw["sizes"]]
    rows = []
    for n in sw["throughput"]:
        rows.append([n] + [f"{_f(sw['throughput'][n][s], ',.0f')} ({_f(sw['ratio_to_bobox'][n][s], '.2f')})"
                           + ("" if sw["equal"][n][s] else " **NO**") for s in sizes])
    rows_gs = [[n, gs["cc"][n], _f(gs["throughput"][n], ",.0f"), _f(gs["ratio_to_bobox"][n], ".2f"),
                _f(gs["latency_p50_ms"][n], ".2f"), _f(gs["latency_p99_ms"][n], ".2f"),
                "yes" if gs["serial_equivalent"][n] else "**NO**"] for n in gs["configs"]]
    excl = "".join(f"\n- `{k}`: excluded on {s}-row tuples: {v}" for s, d in sw["excluded"].items() for k, v in d.items())
    excl_gs = "".join(f"\n- `{k}`: {v}" for k, v in gs["excluded"].items())
    return "\n".join([
        "### Where each policy wins: tuple size and a transactional workload",
        "",
        "The same chain with tuples (packets) of " + ", ".join(sizes) + " rows ("
        + ", ".join(f"{int(sw['rows'][s]):,}" for s in sizes) + " rows per run): rows/s and, in brackets, the "
        "ratio to `bobox` (median of the rounds). Small tuples put the runtime's Python per hand-off in front; "
        "large ones the nogil kernels. Every run's digest equals its size's reference unless marked **NO**.",
        "",
        md_table(["config"] + [f"{s}-row tuples" for s in sizes], rows),
        "",
        "Best (highest throughput, equal to the reference): "
        + ", ".join(f"{s}-row `{sw['best'][s]}`" for s in sizes) + "." + excl,
        "",
        f"TStream's grep-and-sum (GS, seed 002): {gs['events']:,} events, a punctuation every {gs['interval']} "
        f"events, {gs['executors']} transactional operator(s) (one per worker); `cc` the state-access scheme. "
        "Serially equivalent: the store and every output equal the serial timestamp-order run.",
        "",
        md_table(["config", "cc", "events/s", "x bobox", "p50 ms", "p99 ms", "serially equivalent"], rows_gs),
        "",
        f"Best: `{gs['best']}`. Excluded (they cannot run this plan):" + (excl_gs or " none."),
        "",
        "![where each policy wins](policies-sweep.png)",
    ])


def plot(ctx: Ctx, sw: dict, gs: dict) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.2))
    ax = axes[0]
    xs = sw["sizes"]
    cmap = plt.get_cmap("tab20")
    for i, (n, by) in enumerate(sw["ratio_to_bobox"].items()):
        ys = [by[str(s)] if by[str(s)] is not None else np.nan for s in xs]
        ax.plot(xs, ys, marker="osD^v<>"[i % 7], color=cmap(i % 20), label=n)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(s) for s in xs])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("rows per tuple")
    ax.set_ylabel("throughput / bobox")
    ax.set_title("the chain at three tuple sizes")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    names = gs["configs"]
    x = np.arange(len(names))
    ax.bar(x, [gs["throughput"][n] or 0 for n in names],
           color=["tab:blue" if gs["serial_equivalent"][n] else "tab:red" for n in names])
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("events/s")
    ax.set_title(f"TStream GS, {gs['events']:,} events (excluded: {len(gs['excluded'])})")
    fig.tight_layout()
    save_figure(fig, ctx, "policies-sweep")


__all__ = ["GS_INTERVAL", "PACKETS", "SIZES", "chain_sweep", "gs_workload", "plot", "report", "size_rows", "text"]
