"""Locality experiments: the Bobox paper's table 1 and figures 1-3 on this machine, and
the balancer. ``bobox experiment NAME --out DIR`` writes, per experiment:

* ``DIR/<name>.csv`` -- every measurement, in the experiments' long format
  (``experiments/framework.py``: ``experiment, host, run_id, series, x, metric, value,
  repeat, unit``, one row per measurement);
* ``DIR/<name>.png`` -- the plot;
* a section of ``DIR/report.md`` (replaced when the experiment is run again) stating the
  machine, the command and the result; the report starts with the machine summary.

Each point is measured ``--repeat`` times (default 5, 3 with ``--quick``); plots, report
and JSON use the median.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import topology as T
from topology.virtual import virtual_topology

from experiments.framework import (Ctx, Recorder, fmt_bytes, make_scheduler, md_table, pyplot,
                                   save_figure, write_section)


# ---------------------------------------------------------------------------------------
# table 1: NUMA factor


def exp_numa_factor(ctx: Ctx) -> dict:
    from topology.numa_factor import measure

    rec = Recorder(ctx, "numa-factor")
    bar = ctx.bar(ctx.repeat, "numa-factor")
    runs = []
    for r in range(ctx.repeat):
        nf = measure(ctx.topo, ctx.array_bytes, repeat=1)  # default 4 x L3 at least: memory, not cache
        runs.append(nf)
        for i, c in enumerate(nf.cpu_nodes):
            for j, m in enumerate(nf.mem_nodes):
                rec.add(c, m, "seconds", nf.seconds[i][j], r, "s")
        bar.update(1)
    bar.close()
    rows, cols = runs[0].cpu_nodes, runs[0].mem_nodes
    sec = [[statistics.median(run.seconds[i][j] for run in runs) for j in range(len(cols))] for i in range(len(rows))]
    fac = []
    for i, c in enumerate(rows):
        base = sec[i][cols.index(c)] if c in cols else min(sec[i])
        fac.append([round(s / base, 3) for s in sec[i]])
        for j, m in enumerate(cols):
            rec.add(c, m, "factor", fac[i][j], 0, "x")
    rec.write()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(cols), 1.0 + 0.8 * len(rows)))
    im = ax.imshow(np.array(fac), cmap="Reds", vmin=1.0, vmax=max(1.5, max(max(r) for r in fac)))
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, f"{fac[i][j]:.2f}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(cols)), [str(m) for m in cols])
    ax.set_yticks(range(len(rows)), [str(c) for c in rows])
    ax.set_xlabel("memory node")
    ax.set_ylabel("CPU node")
    ax.set_title("NUMA factor: array reversal time / local time")
    fig.colorbar(im, ax=ax, fraction=0.046)
    save_figure(fig, ctx, "numa-factor")
    size = runs[0].nbytes
    body = (f"Time to reverse a {size >> 20} MiB int64 array (numba, GIL released) by a thread pinned to each CPU "
            f"node, the array on each memory node (`numa_alloc_onnode`), divided by the local time of the row "
            f"(table 1 of the paper).\n\n"
            + md_table(["CPU \\ memory"] + [str(m) for m in cols],
                        [[str(c)] + [f"{x:.2f}" for x in fac[i]] for i, c in enumerate(rows)])
            + "\n\n![NUMA factor](numa-factor.png)\n")
    if len(ctx.topo.nodes) == 1:
        body += "\nOne NUMA node: the matrix is 1x1; run on a multi-socket host to see remote costs.\n"
    write_section(ctx, "numa-factor", "Table 1: NUMA factor", body)
    return {"cpu_nodes": rows, "mem_nodes": cols, "factors": fac,
            "max_factor": max(max(r) for r in fac), "bytes": size}


# ---------------------------------------------------------------------------------------
# figure 1: packet size


def _mix_queries(ctx: Ctx) -> list[str]:
    from operators import tpch

    return ["q1", "q6", "q12", "q14"] if ctx.quick else list(tpch.DEFAULT_MIX)


def _timed_mix(sched, plans, copies) -> tuple[float, dict]:
    from experiments.workload import run_mix

    res = run_mix(sched, plans, copies, check_equal=False)
    return res.wall_s, res.stats


def packet_sizes(topo: T.Topology, quick: bool) -> list[int]:
    """Powers of two from 4 KiB (8 KiB quick) to 4x the L2 (2x quick), plus L2/2."""
    l2 = topo.cache_bytes(2) or 2 * topo.packet_bytes
    lo = 8 << 10 if quick else 4 << 10
    hi = (2 if quick else 4) * l2
    step = 4 if quick else 2
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= step
    sizes.append(topo.packet_bytes)
    if quick:
        sizes += [l2, 2 * l2]
    return sorted(set(sizes))


def exp_packet_size(ctx: Ctx) -> dict:
    from experiments.workload import build_plans, choose_parallel

    rec = Recorder(ctx, "packet-size")
    queries = _mix_queries(ctx)
    copies = 2 if ctx.quick else 4
    sizes = packet_sizes(ctx.topo, ctx.quick)
    data = ctx.data
    bar = ctx.bar(len(sizes) * ctx.repeat, "packet-size")
    tput = {}
    for ps in sizes:
        with make_scheduler(ctx, packet_bytes=ps) as s:
            plans = build_plans(queries, data, choose_parallel(copies * len(queries), len(s.workers)))
            _timed_mix(s, plans, 1)  # warm-up: kernels and this size's pools
            for r in range(ctx.repeat):
                wall, st = _timed_mix(s, plans, copies)
                q = copies * len(plans) / wall
                rec.add("bobox", ps, "throughput_qps", q, r, "queries/s")
                rec.add("bobox", ps, "tasks", st["tasks"], r, "")
                bar.update(1)
        tput[ps] = rec.median("bobox", ps, "throughput_qps")
    bar.close()
    rec.write()
    l1, l2, l3 = (ctx.topo.cache_bytes(k) for k in (1, 2, 3))
    default = ctx.topo.packet_bytes
    peak = max(tput, key=tput.get)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = sorted(tput)
    ax.plot(xs, [tput[x] for x in xs], "o-", color="tab:blue", label="throughput (median)")
    ax.set_xscale("log", base=2)
    for size, label, color in ((l1, "L1d", "tab:green"), (l2, "L2", "tab:orange"), (l3, "L3", "tab:red")):
        if size:
            ax.axvline(size, color=color, ls="--", lw=1)
            ax.text(size, ax.get_ylim()[1], f" {label} {fmt_bytes(size)}", color=color, va="top", fontsize=8,
                    rotation=90)
    ax.plot([default], [tput[default]], "s", color="black", label=f"default L2/2 = {fmt_bytes(default)}")
    ax.plot([peak], [tput[peak]], "*", ms=14, color="gold", mec="black", label=f"peak {fmt_bytes(peak)}")
    ax.set_xticks(xs, [fmt_bytes(x) for x in xs], rotation=45, fontsize=8)
    ax.set_xlabel("packet size")
    ax.set_ylabel("queries per second")
    ax.set_title(f"Figure 1: packet size vs throughput ({copies} copies of {len(queries)} TPC-H queries at once)")
    ax.legend(fontsize=8, loc="lower center")
    save_figure(fig, ctx, "packet-size")
    ratio = tput[default] / tput[peak]
    in_range = l2 is not None and l2 / 8 <= peak <= 2 * l2
    body = (f"The same concurrent mix ({copies} copies each of {', '.join(queries)}; data `{data}`) with the packet "
            f"size swept from {fmt_bytes(sizes[0])} to {fmt_bytes(sizes[-1])}.\n\n"
            + md_table(["packet", "queries/s", "tasks"],
                        [[fmt_bytes(x), f"{tput[x]:.2f}", int(rec.median('bobox', x, 'tasks'))] for x in xs])
            + f"\n\nPeak at {fmt_bytes(peak)} ({'inside' if in_range else 'outside'} L2/8 .. 2xL2); the default "
            f"(L2/2 = {fmt_bytes(default)}) reaches {100 * ratio:.1f} % of the peak.\n\n![packet size](packet-size.png)\n")
    write_section(ctx, "packet-size", "Figure 1: packet size", body)
    return {"points": [{"packet_bytes": x, "throughput": round(tput[x], 4)} for x in xs], "l2_bytes": l2,
            "default_packet_bytes": default, "peak_packet_bytes": peak, "default_vs_peak": round(ratio, 4),
            "peak_in_l2_range": in_range}


# ---------------------------------------------------------------------------------------
# figure 2: memory placement


def exp_numa_placement(ctx: Ctx) -> dict:
    rec = Recorder(ctx, "numa-placement")
    if len(ctx.topo.cpu_nodes) < 2:
        reason = ("this machine has one NUMA node: there is no remote memory to compare with "
                  "(run on a multi-socket host, or in the NUMA VM: scripts/vm-run --nodes 2 -- bobox experiment "
                  "numa-placement)")
        rec.write()
        write_section(ctx, "numa-placement", "Figure 2: memory placement", f"Skipped: {reason}.\n")
        return {"skipped": True, "reason": reason}
    from experiments.workload import build_plans, choose_parallel

    queries = _mix_queries(ctx)
    copies = 2 if ctx.quick else 4
    data = ctx.data
    bar = ctx.bar(2 * ctx.repeat, "numa-placement")
    times = {}
    for mode in ("local", "remote"):
        with make_scheduler(ctx, memory=mode, balance_interval=None) as s:
            plans = build_plans(queries, data, choose_parallel(copies * len(queries), len(s.workers)))
            _timed_mix(s, plans, 1)
            for r in range(ctx.repeat):
                wall, _ = _timed_mix(s, plans, copies)
                rec.add(mode, "mix", "seconds", wall, r, "s")
                bar.update(1)
        times[mode] = rec.median(mode, "mix", "seconds")
    bar.close()
    rec.write()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.bar(["local", "remote"], [times["local"], times["remote"]], color=["tab:green", "tab:red"])
    ax.set_ylabel("seconds (median)")
    ax.set_title("Figure 2: packets on the worker's node vs a remote node")
    save_figure(fig, ctx, "numa-placement")
    slow = times["remote"] / times["local"]
    body = (f"The same requests ({copies} copies each of {', '.join(queries)}) with every packet allocated on the "
            f"worker's own node (local) and on the next node (remote); balancer off, so requests stay where "
            f"placed. The input tables themselves live wherever they were loaded.\n\n"
            + md_table(["memory", "seconds"], [["local", f"{times['local']:.3f}"], ["remote", f"{times['remote']:.3f}"]])
            + f"\n\nRemote / local: {slow:.3f}.\n\n![placement](numa-placement.png)\n")
    write_section(ctx, "numa-placement", "Figure 2: memory placement", body)
    return {"local_s": round(times["local"], 4), "remote_s": round(times["remote"], 4), "remote_over_local": round(slow, 4)}


# ---------------------------------------------------------------------------------------
# figure 3: bobox vs simple


def mixes(quick: bool) -> list[tuple[int, int]]:
    if quick:
        return [(1, 1), (2, 2), (4, 4), (4, 16)]
    return [(1, 1), (1, 2), (2, 2), (2, 4), (4, 4), (4, 8), (4, 16)]


def exp_schedulers(ctx: Ctx) -> dict:
    from operators import tpch

    from experiments.workload import build_plans, choose_parallel, run_mix

    rec = Recorder(ctx, "schedulers")
    data = ctx.data
    queries = list(tpch.DEFAULT_MIX)
    ms = mixes(ctx.quick)
    # series: the paper's two schedulers; plus the simple policy at bobox's packet size,
    # to tell the policy's share of the difference from the packet size's.
    series = [("bobox", {}), ("simple", {"policy": "simple"}),
              ("simple-L2/2", {"policy": "simple", "packet_bytes": ctx.topo.packet_bytes})]
    bar = ctx.bar(len(series) * len(ms) * ctx.repeat, "schedulers")
    steps = {}
    for name, kw in series:
        with make_scheduler(ctx, **kw) as s:
            by_par = {}
            for n, m in ms:
                k = n * m
                par = choose_parallel(k, len(s.workers))
                if par not in by_par:
                    by_par[par] = build_plans(queries, data, par)
                    run_mix(s, by_par[par], 1, check_equal=False)  # warm-up
                plans = by_par[par]
                # k requests, the mix's queries in turn (the paper: N x M copies of one plan)
                chosen = {f"{queries[i % len(queries)]}#{i}": plans[queries[i % len(queries)]] for i in range(k)}
                for r in range(ctx.repeat):
                    res = run_mix(s, chosen, 1, check_equal=False)
                    rec.add(name, f"{n}x{m}", "seconds", res.wall_s, r, "s")
                    rec.add(name, f"{n}x{m}", "peak_bytes", res.stats["peak_bytes_held"], r, "B")
                    st = res.stats["steps"]
                    tot = sum(int(v) for key, v in st.items() if key != "5") or 1
                    for key in ("1", "2", "3", "4"):
                        rec.add(name, f"{n}x{m}", f"step{key}_share", int(st.get(key, 0)) / tot, r, "")
                    bar.update(1)
            steps[name] = {key: rec.median(name, f"{ms[-1][0]}x{ms[-1][1]}", f"step{key}_share")
                           for key in ("1", "2", "3", "4")}
    bar.close()
    rec.write()
    labels = [f"{n}x{m}" for n, m in ms]
    t = {name: [rec.median(name, lab, "seconds") for lab in labels] for name, _ in series}
    peak = {name: [rec.median(name, lab, "peak_bytes") for lab in labels] for name, _ in series}
    ratios = [t["simple"][i] / t["bobox"][i] for i in range(len(labels))]
    ratios_same = [t["simple-L2/2"][i] / t["bobox"][i] for i in range(len(labels))]
    geo = float(np.exp(np.mean(np.log(ratios))))
    geo_same = float(np.exp(np.mean(np.log(ratios_same))))
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    x = np.arange(len(labels))
    wdt = 0.27
    colors = {"bobox": "tab:blue", "simple": "tab:red", "simple-L2/2": "tab:orange"}
    for i, (name, _) in enumerate(series):
        axes[0].bar(x + (i - 1) * wdt, t[name], wdt, label=name, color=colors[name])
        axes[1].bar(x + (i - 1) * wdt, [p / 2**20 for p in peak[name]], wdt, label=name, color=colors[name])
    axes[0].set_xticks(x, labels)
    axes[0].set_ylabel("seconds (median)")
    axes[0].set_title("Figure 3: N x M concurrent queries")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[1].set_xticks(x, labels)
    axes[1].set_ylabel("peak MiB held by packets")
    axes[1].set_title("Peak packet memory")
    bottom = np.zeros(len(series))
    for key, color in (("1", "tab:blue"), ("2", "tab:cyan"), ("3", "tab:purple"), ("4", "tab:gray")):
        vals = np.array([steps[name][key] or 0 for name, _ in series])
        axes[2].bar([name for name, _ in series], vals, bottom=bottom, color=color, label=f"step {key}")
        bottom += vals
    axes[2].set_title(f"Tasks by locality step ({labels[-1]})")
    axes[2].legend(fontsize=8)
    save_figure(fig, ctx, "schedulers")
    rows = [[lab, f"{t['bobox'][i]:.3f}", f"{t['simple'][i]:.3f}", f"{ratios[i]:.2f}", f"{t['simple-L2/2'][i]:.3f}",
             f"{ratios_same[i]:.2f}", f"{peak['bobox'][i] / 2**20:.1f}", f"{peak['simple'][i] / 2**20:.1f}"]
            for i, lab in enumerate(labels)]
    step_rows = [[name] + [f"{100 * (steps[name][k] or 0):.1f} %" for k in ("1", "2", "3", "4")] for name, _ in series]
    body = (f"N x M requests submitted at once (the TPC-H mix {', '.join(queries)} in turn; data `{data}`), with the "
            f"bobox policy (L2/2 packets) and the paper's simple scheduler (FIFO lists, round-robin stealing, one "
            f"global semaphore, constant {fmt_bytes(_simple_packet())} packets); `simple-L2/2` is the simple "
            f"policy with bobox's packet size, to separate the policy from the packet size.\n\n"
            + md_table(["mix", "bobox s", "simple s", "simple/bobox", "simple-L2/2 s", "ratio", "bobox peak MiB",
                         "simple peak MiB"], rows)
            + f"\n\nGeomean simple/bobox: **{geo:.2f}** (paper: 1.08-1.12); with equal packet sizes: "
            f"{geo_same:.2f}.\n\nShare of tasks by the locality step that found them, {labels[-1]} mix:\n\n"
            + md_table(["policy", "1 own newest", "2 last request", "3 oldest request", "4 stolen"], step_rows)
            + "\n\n![schedulers](schedulers.png)\n")
    write_section(ctx, "schedulers", "Figure 3: bobox vs simple scheduler", body)
    return {"mixes": {lab: {"bobox_s": round(t["bobox"][i], 4), "simple_s": round(t["simple"][i], 4),
                            "simple_same_packets_s": round(t["simple-L2/2"][i], 4),
                            "bobox_peak_bytes": int(peak["bobox"][i]), "simple_peak_bytes": int(peak["simple"][i])}
                      for i, lab in enumerate(labels)},
            "geomean_ratio": round(geo, 4), "geomean_ratio_same_packets": round(geo_same, 4),
            "peak_bytes_lower_on_largest_mix": bool(peak["bobox"][-1] < peak["simple"][-1]),
            "steps_largest_mix": steps}


def _simple_packet() -> int:
    from bobox_sched.policies.simple import SIMPLE_PACKET_BYTES

    return SIMPLE_PACKET_BYTES


# ---------------------------------------------------------------------------------------
# the balancer


def exp_balancer(ctx: Ctx) -> dict:
    from operators import tpch

    from experiments.workload import build_plans

    rec = Recorder(ctx, "balancer")
    topo = ctx.topo
    note = ""
    if len(topo.cpu_nodes) < 2:
        k = ctx.virtual_nodes or 2
        if len(topo.cpus) < k:
            reason = f"one NUMA node with {len(topo.cpus)} CPU(s): cannot make {k} virtual nodes"
            rec.write()
            write_section(ctx, "balancer", "Load balancer", f"Skipped: {reason}.\n")
            return {"skipped": True, "reason": reason}
        topo = virtual_topology(topo, k)
        note = (f"This machine has one NUMA node: its CPUs were split into {k} virtual nodes (the balancer acts on "
                f"the scheduler's nodes; memory placement plays no part here).\n\n")
    from experiments.bench import heavy_plan

    data = ctx.data
    copies = 2 if ctx.quick else 4
    first_node = topo.cpu_nodes[0].os_index
    # Two workloads: the TPC-H mix, and a CPU-bound numba plan (GIL released for almost
    # all of its time) that shows what moving work to idle nodes can give when the
    # workers are not serialised by the interpreter lock.
    workloads = {"tpch": build_plans(list(tpch.DEFAULT_MIX), data, 1),
                 "kernel": {f"k{i}": heavy_plan(6 if ctx.quick else 12, 20) for i in range(4)}}
    bar = ctx.bar(2 * len(workloads) * ctx.repeat, "balancer")
    first_action = {w: [] for w in workloads}
    for mode, interval in (("on", 0.1), ("off", None)):
        from bobox_sched import Scheduler

        with Scheduler(topology=topo, threads_per_node=ctx.threads_per_node, balance_interval=interval) as s:
            for wl, plans in workloads.items():
                for p in plans.values():
                    s.submit(p, node=first_node).result()  # warm-up
                for r in range(ctx.repeat):
                    log0 = len(s.policy.balancer.log) if s.policy.balancer else 0
                    before = s.stats()
                    t0 = time.perf_counter()
                    hs = [s.submit(p, node=first_node) for _ in range(copies) for p in plans.values()]
                    for h in hs:
                        h.result()
                    wall = time.perf_counter() - t0
                    after = s.stats()
                    rec.add(mode, wl, "throughput_qps", len(hs) / wall, r, "requests/s")
                    moved = (after["migrations"] - before["migrations"]) + (after["shares"] - before["shares"])
                    rec.add(mode, wl, "actions", moved, r, "")
                    if mode == "on" and s.policy.balancer:
                        acts = s.policy.balancer.log[log0:]
                        if acts:
                            t_first = acts[0][0] - (t0 - s.policy.balancer._t0)
                            rec.add(mode, wl, "first_action_s", t_first, r, "s")
                            first_action[wl].append(t_first)
                    busy = {d["node"]: d["busy_s"] for d in after["busy_per_node"]}
                    busy0 = {d["node"]: d["busy_s"] for d in before["busy_per_node"]}
                    for node, b in busy.items():
                        rec.add(mode, f"{wl}:node{node}", "busy_s", b - busy0.get(node, 0), r, "s")
                    bar.update(1)
    bar.close()
    rec.write()
    nodes = [n.os_index for n in topo.cpu_nodes]
    res = {}
    for wl in workloads:
        on, off = rec.median("on", wl, "throughput_qps"), rec.median("off", wl, "throughput_qps")
        first = statistics.median(first_action[wl]) if first_action[wl] else None
        busy = {mode: [rec.median(mode, f"{wl}:node{n}", "busy_s") or 0 for n in nodes] for mode in ("on", "off")}
        res[wl] = {"on": on, "off": off, "first": first, "busy": busy,
                   "actions": rec.median("on", wl, "actions")}
    plt = pyplot()
    fig, axes = plt.subplots(1, 1 + len(workloads), figsize=(5 + 4 * len(workloads), 3.8))
    wls = list(workloads)
    x = np.arange(len(wls))
    axes[0].bar(x - 0.2, [res[w]["on"] / res[w]["off"] for w in wls], 0.4, color="tab:blue", label="on / off")
    axes[0].axhline(1.0, color="black", lw=0.8)
    axes[0].set_xticks(x, wls)
    axes[0].set_ylabel("throughput, balancer on / off")
    axes[0].set_title(f"Requests all arriving on node {first_node}")
    for k, wl in enumerate(wls):
        ax = axes[k + 1]
        xn = np.arange(len(nodes))
        ax.bar(xn - 0.2, res[wl]["busy"]["on"], 0.4, label="on", color="tab:blue")
        ax.bar(xn + 0.2, res[wl]["busy"]["off"], 0.4, label="off", color="tab:gray")
        ax.set_xticks(xn, [f"node {n}" for n in nodes])
        ax.set_ylabel("busy seconds per run")
        ax.set_title(f"Where the work ran: {wl}")
        ax.legend()
    save_figure(fig, ctx, "balancer")
    rows = []
    for wl in wls:
        r = res[wl]
        rows.append([wl, f"{r['on']:.2f}", f"{r['off']:.2f}", f"{r['on'] / r['off']:.2f}",
                     f"{r['first'] * 1000:.0f} ms" if r["first"] is not None else "none", f"{r['actions']:g}"])
    body = (note + f"All requests submitted at once and placed on node {first_node} (`submit(plan, node=...)`), the "
            f"other nodes idle; balancer every 100 ms (on) or disabled (off). Workloads: `tpch` = {copies} copies of "
            f"each query of the mix; `kernel` = {copies} x 4 CPU-bound numba plans (`bobox bench speedup`'s).\n\n"
            + md_table(["workload", "on req/s", "off req/s", "on/off", "first migration/share", "actions/run"], rows)
            + "\n\n![balancer](balancer.png)\n")
    write_section(ctx, "balancer", "Load balancer", body)
    return {wl: {"throughput_on": round(res[wl]["on"], 4), "throughput_off": round(res[wl]["off"], 4),
                 "on_over_off": round(res[wl]["on"] / res[wl]["off"], 4),
                 "first_action_s": round(res[wl]["first"], 4) if res[wl]["first"] is not None else None}
            for wl in wls} | {"virtual_nodes": bool(note)}


# ---------------------------------------------------------------------------------------

EXPERIMENTS = {
    "numa-factor": exp_numa_factor,
    "packet-size": exp_packet_size,
    "numa-placement": exp_numa_placement,
    "schedulers": exp_schedulers,
    "balancer": exp_balancer,
}


def run_experiment(args) -> dict:
    ctx = Ctx.from_args(args, data=True, threads=True, virtual_nodes=True)
    out = ctx.out
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    summary = {}
    for name in names:
        t0 = time.perf_counter()
        print(f"[experiment] {name} ...", file=sys.stderr, flush=True)
        summary[name] = EXPERIMENTS[name](ctx)
        print(f"[experiment] {name} done in {time.perf_counter() - t0:.1f} s -> {out}/{name}.csv, "
              f"{name}.png, report.md", file=sys.stderr, flush=True)
    print(f"report: {out / 'report.md'}")
    return summary if args.name == "all" else summary[args.name]


__all__ = ["EXPERIMENTS", "run_experiment"]
