"""Where a query's time goes, per operator: the SQL plan and the hand-built plan of one
TPC-H query, each run `repeat` times on one worker under a tracer; prints each operator's
busy milliseconds per run (the trace's task slices summed), heaviest first, and the
median wall time.

    .venv/bin/python measurements/2026-12-02-sql/operator_times.py /tmp/tpch/sf1 q10 q18
"""

import statistics
import sys
import time
from collections import defaultdict

import topology
from bobox_sched import Scheduler
from bobox_sched.trace import Tracer
from operators import tpch
from operators.sql import sql_plan
from operators.tpch_sql import QUERIES


def run(plan, one, repeat):
    tr = Tracer(label="operator_times")
    with Scheduler(topology=one, trace=tr) as s:
        s.submit(plan).result()  # warm-up: kernels, pools
        tr.begin_window()
        walls = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            s.submit(plan).result()
            walls.append(time.perf_counter() - t0)
    busy = defaultdict(float)
    for e in tr.document()["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "task":
            busy[e["name"]] += e["dur"] / 1000.0 / repeat
    return statistics.median(walls) * 1000, dict(busy)


def main():
    data, queries = sys.argv[1], sys.argv[2:]
    topo = topology.probe()
    one = topo.restrict(nodes=[topo.cpu_nodes[0].os_index], cpus=[topo.cpu_nodes[0].cpus[0]])
    for q in queries:
        for kind, plan in (("sql", sql_plan(QUERIES[q], data, 1, name=q)), ("hand", tpch.plan(q, data, 1))):
            wall, busy = run(plan, one, 5)
            print(f"{q} {kind}: {wall:.1f} ms a run (median of 5, traced); busy ms per operator:")
            for name, ms in sorted(busy.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.1f}  {name}")


if __name__ == "__main__":
    main()
