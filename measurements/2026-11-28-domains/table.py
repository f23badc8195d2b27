"""Issue 32's goals table (the 2-core part) from run.sh's outputs (this folder, or the
folder given).

    python3 measurements/2026-11-28-domains/table.py [FOLDER]
"""

import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def last_json(name):
    with open(os.path.join(D, name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])


dom, ring = last_json("bench-domains.txt"), last_json("bench-ring.txt")
r1, r2, rd = (last_json(f"run-sf1-{n}.txt") for n in ("threads1", "threads2", "domains2"))
t1, t2, td = r1["wall_s"], r2["wall_s"], rd["wall_s"]
rows = [
    ("gil_bound_speedup: 2 domains x 1 worker over 1 process x 2 workers (GIL-bound plan)", ">= 1.8",
     f"{dom['gil_bound_speedup']} ({dom['in_process_s']} s / {dom['domains_s']} s)", "bobox bench domains --json"),
    ("domains_scaling_per_core: TPC-H mix SF 1, 2 domains x 1 worker over 1 worker, per core", ">= 0.95",
     f"{t1 / td / 2:.3f} ({t1} s / {td} s; one process x 2 workers: {t1 / t2 / 2:.3f}, {t2} s)",
     "bobox run --data data/tpch-sf1 --domains 2 --threads-per-node 1 --json (and --threads-per-node 1, 2)"),
    ("hop_us: descriptor hop between two processes, median one way (both spinning)", "<= 10 us",
     f"{ring['hop_us']} (p90 {ring['hop_p90_us']}; a sleeping consumer adds a wake-up, {ring['handoff_us']} us here)",
     "bobox bench ring --json"),
    ("hop_copies: column data copied per hop", "0",
     "0 by construction (a descriptor of 4 words travels; no packet crosses domains yet)", "-"),
    ("rss_ratio: peak RSS of 2 domains over one process, SF 1 mix", "<= 1.2",
     f"{rd['peak_rss_bytes'] / r2['peak_rss_bytes']:.2f} ({rd['peak_rss_bytes'] >> 20} vs {r2['peak_rss_bytes'] >> 20} MiB; "
     "the sum of each process's own peak, shared segments counted in every domain that maps them)",
     "bobox run ... --json: peak_rss_bytes"),
    ("a domain killed mid-mix: other requests' answers, leaked segments", "all equal; 0",
     f"{dom['crash_other_answers_equal']} ({dom['crash_completed']} completed, {dom['crash_failed']} failed with it; "
     f"after the restart {dom['crash_restarted_answers_equal']}); {dom['leaked_segments']}", "bobox bench domains --json"),
]
print("| figure | goal | measured | command |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(c) for c in r) + " |")
