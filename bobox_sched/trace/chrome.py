"""Traces in the Chrome trace event format: what Perfetto (ui.perfetto.dev) and
``chrome://tracing`` open.

:func:`document` turns a :class:`~bobox_sched.trace.recorder.Tracer`'s records into the
JSON object form (``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``):

* one **process** per NUMA node (``pid`` = node + 1; "workers" for workers bound to no
  node), one **thread** per worker in it (``tid`` = worker id; named and sorted by
  metadata events ``M``), and a "balancer" thread (``tid`` = ``BALANCER_TID``) for the
  balancer's actions;
* a **complete event** (``ph: "X"``, category ``task``) per task: name = the operator,
  ``args``: request id and name, locality step, rows and bytes taken from its inputs,
  ``gil_released_us`` and ``gil_held_us`` (their sum is ``dur``); one per sleep
  (category ``sleep``);
* **flow arrows** (``ph: "s"`` then ``"f"`` with ``bp: "e"``): a steal, from the victim's
  slice running (or last ended) when the task was stolen to the thief's task; a
  migration or a share, from the balancer slice of the node it left to that of the node
  it went to;
* one **async track per request** in the "requests" process (``pid`` 0: ``b``/``e``
  events, category ``request``) from submit to end;
* **counters** (``ph: "C"``) in the "requests" process: ``packet bytes held`` (the
  scheduler's total) and ``held by request`` (one series per request: a stacked chart).

Times are microseconds since the tracer started, written with nanosecond resolution
(three decimals), so the per-worker sums of the ``task`` slices equal the scheduler's
``busy_s`` of the same run to the nanosecond (``tests/test_trace.py``).

:func:`validate` lists what is wrong with a document (required fields per phase,
non-negative times, a task slice's rows or bytes that are not a non-negative number,
slices of one thread that overlap, flows without both ends, async events unpaired),
:func:`busy_by_worker` sums the task slices, and :func:`write` writes a document
atomically (a private temporary file in the same folder, flushed, then renamed over the
target: a reader never sees half a trace).
"""

from __future__ import annotations

import bisect
import json
import os
import tempfile

BALANCER_TID = 1_000_000  # the balancer's thread in each node's process (no worker id is that high)
REQUESTS_PID = 0
STEP_NAMES = {1: "immediate", 2: "same request", 3: "node's requests", 4: "stolen"}


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def node_pid(node) -> int:
    return 1 if node is None else int(node) + 1


def document(tracer) -> dict:
    """The Chrome trace of `tracer`'s records (module doc)."""
    win = tracer.window_ns
    t0 = tracer.t0 if win is None else win
    cut = -1 if win is None else win  # records that ended before it are left out (Tracer.begin_window)
    ev: list[dict] = []
    requests = {rid: rec for rid, rec in tracer.requests.items() if rec[2] is None or rec[2] >= cut}
    names = {rid: rec[0] for rid, rec in requests.items()}
    pids = {}
    for wt in tracer.workers:
        pid = node_pid(wt.node)
        pids.setdefault(pid, "workers" if wt.node is None else f"node {wt.node}")
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": wt.wid, "args": {"name": wt.name}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": wt.wid, "args": {"sort_index": wt.wid}})
    for pid, label in sorted(pids.items()):
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    ev.append({"ph": "M", "name": "process_name", "pid": REQUESTS_PID, "tid": 0, "args": {"name": "requests"}})
    ev.append({"ph": "M", "name": "process_sort_index", "pid": REQUESTS_PID, "tid": 0, "args": {"sort_index": -1}})

    # slices
    starts: dict[int, list] = {}  # worker id -> sorted task start times (ns), for the steals' flows
    ends: dict[int, list] = {}
    pid_of = {wt.wid: node_pid(wt.node) for wt in tracer.workers}
    for wt in tracer.workers:
        pid, tid = node_pid(wt.node), wt.wid
        for a, b, name, rid, step, rows, nbytes, rel, _victim in wt.tasks:
            if b < cut:
                continue
            a = max(a, cut)  # a task running when the window began: its part inside it
            dur = b - a
            rel = min(rel, dur)
            ev.append({"ph": "X", "cat": "task", "name": name, "pid": pid, "tid": tid, "ts": _us(a - t0),
                       "dur": _us(dur) if dur >= 0 else 0.0,
                       "args": {"request": rid, "request_name": names.get(rid, ""), "step": step,
                                "step_name": STEP_NAMES.get(step, str(step)), "rows": rows,
                                "bytes": nbytes, "gil_released_us": _us(rel), "gil_held_us": _us(dur - rel)}})
        for a, b in wt.sleeps:
            if b < cut:
                continue
            a = max(a, cut)
            ev.append({"ph": "X", "cat": "sleep", "name": "sleep", "pid": pid, "tid": tid, "ts": _us(a - t0),
                       "dur": _us(b - a)})
        starts[tid] = [max(a, cut) for a, b, *_ in wt.tasks if b >= cut]
        ends[tid] = [b for _, b, *_ in wt.tasks if b >= cut]
    # steals: from the victim's slice at (or last before) the steal to the thief's task
    flow = 0
    for wt in tracer.workers:
        for a, b, _name, _rid, _step, _rows, _bytes, _rel, victim in wt.tasks:
            if victim < 0 or victim not in starts or a < cut:
                continue
            vs, ve = starts[victim], ends[victim]
            i = bisect.bisect_right(vs, a) - 1  # the victim's last task started by the steal
            if i < 0:
                continue
            at = a if ve[i] > a else max(vs[i], ve[i] - 1)  # inside that slice
            flow += 1
            ev.append({"ph": "s", "cat": "steal", "name": "steal", "id": flow, "pid": pid_of[victim], "tid": victim,
                       "ts": _us(at - t0)})
            ev.append({"ph": "f", "bp": "e", "cat": "steal", "name": "steal", "id": flow, "pid": pid_of[wt.wid],
                       "tid": wt.wid, "ts": _us(a - t0)})
    # balancer actions: a 1 us slice on each node's balancer track, joined by a flow
    balancer_pids = set()
    for t, kind, rid, src, dst in tracer.actions:
        if t < cut:
            continue
        flow += 1
        label = f"{kind} request {rid} ({names.get(rid, '')}) node {src} -> {dst}"
        for node, ph in ((src, "s"), (dst, "f")):
            pid = node_pid(node)
            balancer_pids.add(pid)
            ev.append({"ph": "X", "cat": "balancer", "name": label, "pid": pid, "tid": BALANCER_TID,
                       "ts": _us(t - t0), "dur": 1.0, "args": {"request": rid, "action": kind, "from": src, "to": dst}})
            e = {"ph": ph, "cat": kind, "name": kind, "id": flow, "pid": pid, "tid": BALANCER_TID, "ts": _us(t - t0)}
            if ph == "f":
                e["bp"] = "e"
            ev.append(e)
    for pid in sorted(balancer_pids):
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": BALANCER_TID, "args": {"name": "balancer"}})
    # requests: one async track each
    for rid, (name, sub, end, state) in sorted(requests.items()):
        sub = max(sub, cut)
        label = f"{rid} {name}".strip()
        ev.append({"ph": "b", "cat": "request", "name": label, "id": rid, "pid": REQUESTS_PID, "tid": 0,
                   "ts": _us(sub - t0)})
        if end is not None:
            ev.append({"ph": "e", "cat": "request", "name": label, "id": rid, "pid": REQUESTS_PID, "tid": 0,
                       "ts": _us(end - t0), "args": {"state": state}})
    # memory: every worker's samples, in time order
    samples = sorted((s for wt in tracer.workers for s in wt.memory if s[0] >= cut), key=lambda s: s[0])
    for t, held, by_req in samples:
        ev.append({"ph": "C", "name": "packet bytes held", "pid": REQUESTS_PID, "tid": 0, "ts": _us(t - t0),
                   "args": {"bytes": held}})
        if by_req:
            ev.append({"ph": "C", "name": "held by request", "pid": REQUESTS_PID, "tid": 0, "ts": _us(t - t0),
                       "args": {f"r{rid}": b for rid, b in sorted(by_req.items())}})
    other = {"tool": "bobox-sched", "wall_start_s": tracer.wall0, **tracer.meta,
             "window_ns": win, "base_ns": t0,
             "workers": [{"id": wt.wid, "node": wt.node, "tasks": sum(1 for _, b, *_ in wt.tasks if b >= cut),
                          "busy_ns": sum(b - max(a, cut) for a, b, *_ in wt.tasks if b >= cut)}
                         for wt in tracer.workers]}
    if tracer.label:
        other["label"] = tracer.label
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": other}


def merge(tracer) -> dict:
    """The trace of a run with domains: each domain's document (``tracer.parts``, written
    by the domain's own Scheduler), its processes renamed "domain D · ..." and numbered
    ``(D + 1) * 1000 + pid``, its flows' and requests' ids prefixed ``dD-`` (unique
    across domains), its times moved onto the front tracer's base: ``perf_counter_ns``
    is ``CLOCK_MONOTONIC``, one clock for every process of the machine, and each part
    says which reading its zero is (``otherData.base_ns``)."""
    win = tracer.window_ns
    base = tracer.t0 if win is None else win
    ev: list = []
    workers: list = []
    for d, doc in tracer.parts:
        shift = (doc["otherData"]["base_ns"] - base) / 1000.0
        off = (d + 1) * 1000
        for e in doc["traceEvents"]:
            e = dict(e, pid=off + e["pid"])
            if "ts" in e:
                e["ts"] = round(e["ts"] + shift, 3)
            if "id" in e:
                e["id"] = f"d{d}-{e['id']}"
            if e["ph"] == "M" and e["name"] == "process_name":
                e["args"] = {"name": f"domain {d} · {e['args']['name']}"}
            elif e["ph"] == "M" and e["name"] == "process_sort_index":
                e["args"] = {"sort_index": off + e["args"]["sort_index"]}
            ev.append(e)
        workers += [dict(w, domain=d) for w in doc["otherData"].get("workers", [])]
    other = {"tool": "bobox-sched", "wall_start_s": tracer.wall0, **tracer.meta, "window_ns": win, "base_ns": base,
             "domains": [d for d, _ in tracer.parts], "workers": workers}
    if tracer.label:
        other["label"] = tracer.label
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": other}


# -- checks -----------------------------------------------------------------------------

_REQUIRED = {
    "X": ("name", "pid", "tid", "ts", "dur"),
    "M": ("name", "pid", "args"),
    "s": ("name", "id", "pid", "tid", "ts"),
    "f": ("name", "id", "pid", "tid", "ts"),
    "b": ("name", "id", "pid", "ts", "cat"),
    "e": ("name", "id", "pid", "ts", "cat"),
    "C": ("name", "pid", "ts", "args"),
    "i": ("name", "pid", "ts"),
}


def validate(doc) -> list[str]:
    """What is wrong with `doc` as a Chrome trace (module doc): an empty list when nothing."""
    problems: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not a JSON object with a traceEvents list"]
    slices: dict[tuple, list] = {}
    flows: dict = {}
    asyncs: dict = {}
    for k, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph not in _REQUIRED:
            problems.append(f"event {k}: unknown phase {ph!r}")
            continue
        missing = [f for f in _REQUIRED[ph] if f not in e]
        if missing:
            problems.append(f"event {k} ({ph}): missing {', '.join(missing)}")
            continue
        if ph != "M":
            if not isinstance(e["ts"], (int, float)) or e["ts"] < 0:
                problems.append(f"event {k} ({ph}): bad ts {e['ts']!r}")
        if ph == "X":
            if not isinstance(e["dur"], (int, float)) or e["dur"] < 0:
                problems.append(f"event {k}: bad dur {e['dur']!r}")
                continue
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], k))
            if e.get("cat") == "task":
                args = e.get("args") or {}
                for f in ("rows", "bytes"):  # (absent in a trace written before slices had bytes)
                    v = args.get(f, 0)
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                        problems.append(f"event {k}: bad {f} {v!r}")
        elif ph in "sf":
            flows.setdefault((e.get("cat"), e["id"]), []).append(ph)
        elif ph in "be":
            asyncs.setdefault((e["cat"], e["id"]), []).append(ph)
        elif ph == "C" and not all(isinstance(v, (int, float)) for v in e["args"].values()):
            problems.append(f"event {k}: counter values must be numbers")
    for (pid, tid), ss in slices.items():
        ss.sort()
        for (a0, a1, ka), (b0, _b1, kb) in zip(ss, ss[1:]):
            if b0 < a1 - 1e-3:  # one thread runs one task at a time: slices never overlap
                problems.append(f"pid {pid} tid {tid}: slices {ka} and {kb} overlap ({a0}-{a1} and {b0})")
                break
    for key, phs in flows.items():
        if sorted(phs) != ["f", "s"]:
            problems.append(f"flow {key}: phases {phs}, want one s and one f")
    for key, phs in asyncs.items():
        if phs.count("b") != 1 or phs.count("e") > 1:
            problems.append(f"async {key}: phases {phs}")
    return problems


def busy_by_worker(doc) -> dict:
    """{(pid, tid): total microseconds of its ``task`` slices}."""
    out: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "task":
            key = (e["pid"], e["tid"])
            out[key] = out.get(key, 0.0) + e["dur"]
    return out


def write(doc: dict, path) -> None:
    """Write `doc` to `path` atomically (module doc)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load(path) -> dict:
    """A trace file (the object form, or the bare array form Chrome also accepts)."""
    with open(path) as f:
        doc = json.load(f)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


__all__ = ["BALANCER_TID", "REQUESTS_PID", "busy_by_worker", "document", "load", "merge", "node_pid", "validate",
           "write"]
