"""Issue 32's goals table (the 2-core part) from run.sh's outputs (this folder, or the
folder given).

    python3 measurements/2026-11-28-domains-loans/table.py [FOLDER]
"""

import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def last_json(name):
    with open(os.path.join(D, name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])


dom, ring, ceil = last_json("bench-domains.txt"), last_json("bench-ring.txt"), last_json("ceiling.txt")
sc = lambda r: r["scheduler"]  # noqa: E731
def median_run(name):
    """The run of median wall time among run-sf1-<name>-<round>.txt (run.sh: ROUNDS each)."""
    runs = sorted((last_json(f) for f in os.listdir(D) if f.startswith(f"run-sf1-{name}-") and f.endswith(".txt")
                   and f[len(f"run-sf1-{name}-"):-4].isdigit()), key=lambda r: r["wall_s"])
    return runs[len(runs) // 2], [r["wall_s"] for r in runs]


runs = {n: median_run(n) for n in ("threads1", "threads2", "domains2", "threads2-par2", "domains2-par2")}
r1, r2, rd, p2, pd = (runs[n][0] for n in ("threads1", "threads2", "domains2", "threads2-par2", "domains2-par2"))
t1, t2, td = r1["wall_s"], r2["wall_s"], rd["wall_s"]
mib = lambda r, k: r[k] >> 20  # noqa: E731
vm = last_json("vm.txt") if os.path.exists(os.path.join(D, "vm.txt")) else None
rows = [
    ("gil_bound_speedup: 2 domains x 1 worker over 1 process x 2 workers (GIL-bound plan, a request per worker)",
     ">= 1.8", f"{dom['gil_bound_speedup']} ({dom['in_process_s']} s / {dom['domains_s']} s)",
     "bobox bench domains --json"),
    ("span_gil_speedup: one GIL-bound request in 2 lanes spanning 2 domains x 1 worker over 1 process x 2 workers",
     "(spanning works)", f"{dom['span_gil_speedup']} ({dom['span_in_process_s']} s / {dom['span_domains_s']} s)",
     "bobox bench domains --json"),
    ("domains_scaling_per_core: TPC-H mix SF 1, 2 domains x 1 worker over 1 worker, per core", ">= 0.95",
     f"{t1 / td / 2:.3f} (medians {t1} s / {td} s; one process x 2 workers: {t1 / t2 / 2:.3f}, {t2} s; walls: "
     f"1 worker {runs['threads1'][1]}, 2 domains {runs['domains2'][1]}, 2 threads {runs['threads2'][1]})",
     "bobox run --data data/tpch-sf1 --domains 2 --threads-per-node 1 --json (and --threads-per-node 1, 2)"),
    ("... where the time went: workers' CPU, their wait for a CPU, CPU of the run outside the workers (1 worker; "
     "2 threads; 2 domains); this machine's own 2-over-1 per core, nogil kernel", "-",
     "; ".join(f"{sc(r)['cpu_s']} / {sc(r)['cpu_wait_s']} / {sc(r)['outside_workers_cpu_s']} s" for r in (r1, r2, rd))
     + f"; compute {ceil['compute_per_core']}, memory scan {ceil['memory_per_core']}",
     "bobox run ... --json: scheduler.cpu_s, cpu_wait_s, outside_workers_cpu_s; python ceiling.py"),
    ("TPC-H mix SF 1, every query decomposed 2 ways: spanning 2 domains x 1 worker over 1 process x 2 workers",
     "-", f"{p2['wall_s'] / pd['wall_s']:.3f} ({p2['wall_s']} s / {pd['wall_s']} s); mismatches "
     f"{pd['mismatches'] or 'none'}", "bobox run ... --parallel 2 --json"),
    ("hop_us: descriptor hop between two processes, median one way (both spinning)", "<= 10 us",
     f"{ring['hop_us']} (p90 {ring['hop_p90_us']}; a sleeping consumer adds a wake-up, {ring['handoff_us']} us here)",
     "bobox bench ring --json"),
    ("a cross-domain edge: added time per one-row packet; bandwidth in 512 KiB packets", "-",
     f"{dom['channel_us_per_packet']} us ({dom['hop_packets']} packets); {dom['channel_gb_s']} GB/s (in one "
     f"process {dom['local_gb_s']} GB/s)", "bobox bench domains --json"),
    ("hop_copies: column data copied per hop", "0",
     f"{dom['hop_copies']} (counted by the channels over the timed spanning runs: {dom['hop_packets_lent']} packets "
     f"lent, {dom['hop_packets_copied']} copied; bobox_sched/domains/loans.py)", "bobox bench domains --json"),
    ("rss_ratio: peak memory of 2 domains over one process x 2 workers, SF 1 mix (PSS of every process of the run, "
     "summed: shared pages once)", "<= 1.2",
     f"{rd['peak_pss_bytes'] / r2['peak_pss_bytes']:.3f} ({mib(rd, 'peak_pss_bytes')} vs {mib(r2, 'peak_pss_bytes')} "
     f"MiB; over one process x 1 worker {rd['peak_pss_bytes'] / r1['peak_pss_bytes']:.3f}, "
     f"{mib(r1, 'peak_pss_bytes')} MiB; summed peak RSS, shared pages once per process: "
     f"{rd['peak_rss_bytes'] / r2['peak_rss_bytes']:.2f})", "bobox run ... --json: peak_pss_bytes"),
    ("a domain killed mid-mix: other requests' answers, leaked segments", "all equal; 0",
     f"{dom['crash_other_answers_equal']} ({dom['crash_completed']} completed, {dom['crash_failed']} failed with it; "
     f"after the restart {dom['crash_restarted_answers_equal']}); {dom['leaked_segments']}", "bobox bench domains --json"),
]
if vm is not None:
    rows.append(("NUMA VM, 2 nodes x 2 CPUs, domains=auto: consumed packets' pages on the consumer's node (move_pages)",
                 ">= 95 %", f"{100 * vm['local_fraction']:.1f} % of {vm['pages']} pages; domains on CPUs "
                 f"{[d['kernel_cpus'] for d in vm['domains']]}, memory policies {[d['policies'] for d in vm['domains']]}",
                 "python measurements/2026-11-28-domains-loans/vm.py (scripts/vm-run's guest)"))
print("| figure | goal | measured | command |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(c) for c in r) + " |")
