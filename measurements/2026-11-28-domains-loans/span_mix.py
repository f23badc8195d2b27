"""The SF 1 mix, every query decomposed 2 ways, spanning 2 domains x 1 worker: warmed,
then the domains' pids (for a profiler), then three rounds of 4 copies of each query."""

import time

from bobox_sched import Scheduler
from operators import tpch as T

QUERIES = ["q1", "q3", "q5", "q6", "q10", "q12", "q14", "q18"]
with Scheduler(domains=2, threads_per_node=1) as s:
    plans = {q: T.plan(q, "data/tpch-sf1", 2) for q in QUERIES}
    [s.submit(p).result() for p in plans.values()]
    print("PIDS", " ".join(str(d["pid"]) for d in s.domains), flush=True)
    time.sleep(1)
    t0 = time.perf_counter()
    for _ in range(3):
        hs = [s.submit(p) for _ in range(4) for p in plans.values()]
        [h.result() for h in hs]
    print("mix x3", round(time.perf_counter() - t0, 2), flush=True)
