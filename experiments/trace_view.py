"""What a trace says without a trace viewer: a per-worker summary table and a timeline
PNG (workers x time, one row per worker grouped by node, each task a bar coloured by its
request, sleeps as thin grey bars, steals as arrows), from any Chrome trace this project
writes (``bobox_sched/trace/chrome.py``), of a real run or a simulated one.

``bobox run --trace FILE`` writes FILE's picture next to it (``FILE`` with ``.png``);
``bobox trace FILE`` checks a trace, prints its summary and draws its picture.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from bobox_sched.trace import chrome

# Bars drawn at most: past this the shortest tasks are left out of the picture (never out of
# the summary), so that a long run's PNG takes seconds to draw, not minutes. matplotlib's
# broken_barh draws ~200k rectangles in ~4 s on this project's 2-core VM.
MAX_BARS = 200_000


def summary(doc: dict) -> list[dict]:
    """One row per worker: node, tasks, busy ms, GIL-held ms, rows and bytes taken, steals
    in, sleeps (a trace written before slices had bytes counts 0 bytes)."""
    names: dict = {}
    rows: dict = defaultdict(lambda: {"tasks": 0, "busy_ms": 0.0, "gil_held_ms": 0.0, "rows": 0, "bytes": 0,
                                      "stolen": 0, "sleeps": 0, "sleep_ms": 0.0})
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if ph != "X" or e.get("tid") == chrome.BALANCER_TID:
            continue
        r = rows[(e["pid"], e["tid"])]
        if e.get("cat") == "task":
            a = e.get("args", {})
            r["tasks"] += 1
            r["busy_ms"] += e["dur"] / 1000
            r["gil_held_ms"] += a.get("gil_held_us", e["dur"]) / 1000
            r["rows"] += a.get("rows", 0)
            r["bytes"] += a.get("bytes", 0)
            r["stolen"] += a.get("step") == 4
        elif e.get("cat") == "sleep":
            r["sleeps"] += 1
            r["sleep_ms"] += e["dur"] / 1000
    out = []
    for (pid, tid), r in sorted(rows.items()):
        out.append({"node": names.get(pid, str(pid)), "worker": tid, **{k: (round(v, 3) if isinstance(v, float) else v)
                                                                        for k, v in r.items()}})
    return out


def format_summary(rows: list[dict]) -> str:
    head = ["node", "worker", "tasks", "busy ms", "GIL held ms", "rows", "bytes", "stolen", "sleeps", "asleep ms"]
    keys = ["node", "worker", "tasks", "busy_ms", "gil_held_ms", "rows", "bytes", "stolen", "sleeps", "sleep_ms"]
    table = [head] + [[str(r[k]) for k in keys] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table)


def timeline_png(doc: dict, path, title: str | None = None) -> Path:
    """Draw the timeline of `doc` to `path` (PNG, written atomically)."""
    from experiments.framework import pyplot

    plt = pyplot()
    proc_names: dict = {}
    thread_names: dict = {}
    tasks = defaultdict(list)  # (pid, tid) -> [(ts, dur, request)]
    sleeps = defaultdict(list)
    arrows = []  # ((pid, tid, ts) of s, of f)
    flows: dict = {}
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        if ph == "M":
            if e["name"] == "process_name":
                proc_names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif ph == "X" and e.get("tid") != chrome.BALANCER_TID and e["pid"] != chrome.REQUESTS_PID:
            key = (e["pid"], e["tid"])
            if e.get("cat") == "task":
                tasks[key].append((e["ts"], e["dur"], e.get("args", {}).get("request", 0)))
            elif e.get("cat") == "sleep":
                sleeps[key].append((e["ts"], e["dur"]))
        elif ph in ("s", "f") and e.get("cat") == "steal":
            flows.setdefault(e["id"], {})[ph] = (e["pid"], e["tid"], e["ts"])
    for f in flows.values():
        if "s" in f and "f" in f:
            arrows.append((f["s"], f["f"]))
    tracks = sorted(set(tasks) | set(sleeps))
    if not tracks:
        raise ValueError("the trace has no worker slices to draw")
    ypos = {k: i for i, k in enumerate(tracks)}
    nbars = sum(len(v) for v in tasks.values())
    cut = 0.0
    if nbars > MAX_BARS:  # leave the shortest out of the picture
        durs = sorted(d for v in tasks.values() for _, d, _ in v)
        cut = durs[nbars - MAX_BARS]
    reqs = sorted({r for v in tasks.values() for *_, r in v})
    cmap = plt.get_cmap("tab20")
    palette = [cmap(i) for i in range(20) if i not in (14, 15)]  # tab20's two greys are the sleeps' colour
    colour = {r: palette[i % len(palette)] for i, r in enumerate(reqs)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.45 * len(tracks)))
    for k, v in tasks.items():
        by_req = defaultdict(list)
        for ts, dur, r in v:
            if dur >= cut:
                by_req[r].append((ts / 1000, max(dur / 1000, 1e-4)))
        for r, bars in by_req.items():
            ax.broken_barh(bars, (ypos[k] - 0.4, 0.8), facecolors=colour[r], linewidth=0)
    for k, v in sleeps.items():
        ax.broken_barh([(ts / 1000, dur / 1000) for ts, dur in v], (ypos[k] - 0.05, 0.1), facecolors="0.75",
                       linewidth=0)
    for (sp, st, sts), (fp, ft, fts) in arrows[:2000]:
        if (sp, st) in ypos and (fp, ft) in ypos:
            ax.annotate("", xy=(fts / 1000, ypos[(fp, ft)]), xytext=(sts / 1000, ypos[(sp, st)]),
                        arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.6, "alpha": 0.6})
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([f"{proc_names.get(p, p)} · w{t}" for p, t in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms since the trace started)")
    other = doc.get("otherData", {})
    head = title or f"{other.get('policy', '')} · {len(tracks)} workers · {nbars} tasks"
    if cut:
        head += f" (tasks under {cut:.1f} us not drawn)"
    ax.set_title(head + " · colour: request, grey: asleep, arrow: steal")
    if 1 < len(reqs) <= 20:
        from matplotlib.patches import Patch

        names = {}
        for e in doc["traceEvents"]:
            if e.get("ph") == "b" and e.get("cat") == "request":
                names[e["id"]] = e["name"]
        ax.legend(handles=[Patch(color=colour[r], label=names.get(r, str(r))) for r in reqs], loc="upper left",
                  bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()
    return path


def png_beside(trace_path) -> Path:
    """Where ``bobox run --trace FILE`` puts FILE's picture: FILE with ``.png``."""
    p = Path(trace_path)
    return p.with_suffix(".png") if p.suffix == ".json" else p.with_name(p.name + ".png")


__all__ = ["MAX_BARS", "format_summary", "png_beside", "summary", "timeline_png"]
