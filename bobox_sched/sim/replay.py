"""Work replayed from a trace of a real run (``bobox run --trace``): each traced request
becomes a plan whose operators cost what the real ones cost.

From the trace's task slices (``bobox_sched/trace/chrome.py``: operator, request, rows,
bytes, GIL-held and released microseconds) each request's operators are taken in the
order they first ran, with their totals: GIL-held ns, GIL-released ns, bytes taken and
tasks. The replayed
request is a chain of them (a :class:`~bobox_sched.sim.workload.SimSource`, then
:class:`~bobox_sched.sim.workload.SimOp` s, then a
:class:`~bobox_sched.sim.workload.SimSink`) moving ``packets`` packets of ``rows``
rows, ``packets`` the mean number of tasks of its operators (so that it runs about as
many tasks as the trace shows, each taking the GIL as often); each operator's held and
released time and bytes per row (``Cost.bytes_row``: what its released part reads, which
a node's bandwidth limits, ``Costs.node_bandwidth_gbs``) are its totals over those rows,
so that every operator costs and reads, in all, what it did in the trace, however the
simulator's tasks take the packets. A trace written before slices had bytes replays
with none (no memory time).

What a chain does not keep: a real plan is a graph (a join's build side ends before its
probe side runs), so a replayed request can overlap its own operators more than the real
one did. In a mix of many more requests than workers -- what ``bobox run`` submits --
the requests themselves keep the workers busy, and each operator's own cost is what
decides the time.

Record the trace with one worker: its GIL-held time is then the Python itself, without
waits for the GIL, and the simulator adds the waits for the machine it plays.
"""

from __future__ import annotations

from bobox_sched.core.plan import Plan
from bobox_sched.sim.workload import Cost, SimOp, SimSink, SimSource


class ReplayError(ValueError):
    """A trace that holds no task to replay, or is not a task trace."""


def requests_of(doc: dict) -> dict:
    """``{request id: (name, {operator: [tasks, rows, held_ns, released_ns, first ts,
    bytes]})}`` from a trace document's task slices (bytes 0 where a slice has none)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ReplayError("not a Chrome trace: no traceEvents list")
    reqs: dict = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "task":
            continue
        a = e.get("args") or {}
        rid = a.get("request")
        if rid is None:
            continue
        name = a.get("request_name") or f"r{rid}"
        ops = reqs.setdefault(rid, (name, {}))[1]
        rec = ops.setdefault(e["name"], [0, 0, 0.0, 0.0, e["ts"], 0])
        rec[0] += 1
        rec[1] += int(a.get("rows", 0))
        rec[2] += float(a.get("gil_held_us", e.get("dur", 0.0))) * 1000.0
        rec[3] += float(a.get("gil_released_us", 0.0)) * 1000.0
        rec[4] = min(rec[4], e["ts"])
        rec[5] += int(a.get("bytes", 0))
    if not reqs:
        raise ReplayError("the trace holds no task slices (category 'task') to replay")
    return reqs


def replay_plans(doc: dict, rows: int = 4096, copies: int = 1) -> list[Plan]:
    """The traced requests as plans (module doc), `copies` times each (a mix larger
    than the one traced, with the same per-request work)."""
    out = []
    for rid, (name, ops) in sorted(requests_of(doc).items()):
        order = sorted(ops.items(), key=lambda kv: kv[1][4])
        packets = max(1, round(sum(rec[0] for _, rec in order) / len(order)))
        n = packets * rows
        costs = [Cost(held_task_ns=0.0, held_row_ns=rec[2] / n, released_row_ns=rec[3] / n, bytes_row=rec[5] / n)
                 for _, rec in order]
        if len(costs) == 1:
            costs.append(Cost(0.0, 0.0, 0.0))  # a sink that costs nothing
        for c in range(copies):
            p = Plan(f"{name}#{c}" if copies > 1 else name)
            names = ["src"]
            p.add("src", SimSource, packets, rows, costs[0])
            for k, cost in enumerate(costs[1:-1]):
                p.add(f"op{k}", SimOp, cost)
                names.append(f"op{k}")
            p.add("sink", SimSink, costs[-1])
            names.append("sink")
            p.chain(*names)
            out.append(p)
    return out


def totals(doc: dict) -> dict:
    """The trace's own totals: tasks, GIL-held and released ns, bytes taken, and the wall
    time from its first task's start to its last task's end (ns)."""
    t0, t1 = float("inf"), 0.0
    n, held, rel, nbytes = 0, 0.0, 0.0, 0
    for e in doc.get("traceEvents", ()):
        if e.get("ph") == "X" and e.get("cat") == "task":
            a = e.get("args") or {}
            n += 1
            held += float(a.get("gil_held_us", 0.0)) * 1000.0
            rel += float(a.get("gil_released_us", 0.0)) * 1000.0
            nbytes += int(a.get("bytes", 0))
            t0, t1 = min(t0, e["ts"]), max(t1, e["ts"] + e["dur"])
    return {"tasks": n, "held_ns": held, "released_ns": rel, "bytes": nbytes,
            "wall_ns": (t1 - t0) * 1000.0 if n else 0.0}


__all__ = ["ReplayError", "replay_plans", "requests_of", "totals"]
