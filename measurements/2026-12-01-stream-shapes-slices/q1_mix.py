"""Q1 (or another query) under the ordered policy, 2 workers, 150k rows: one warm-up, then the mean of 15 runs.

    python q1_mix.py QUERY SCHEME [P]
"""
import time, sys
from bobox_sched import Scheduler
from operators.stream.ordered_queries import query_plan, stream_for
q = sys.argv[1]; scheme = sys.argv[2]; p = int(sys.argv[3]) if len(sys.argv) > 3 else None
data = stream_for(q, 150000)
with Scheduler(policy="ordered", threads_per_node=2, pin=False, scheme=scheme) as s:
    s.submit(query_plan(q, data, 8192, partitions=p)).result(600)
    t = time.perf_counter()
    for rep in range(15):
        s.submit(query_plan(q, data, 8192, partitions=p)).result(600)
    print(scheme, (time.perf_counter() - t) / 15 * 1e3, "ms")
