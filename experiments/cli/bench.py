"""Command line of ``bobox bench``: argument parsing stays light (no numba import) so that
``bobox --help`` is fast; the benchmarks themselves live in ``bench.py``."""

from __future__ import annotations

import json


# ---------------------------------------------------------------------------------------
# CLI


def add_arguments(p) -> None:
    from bobox_sched.core import limits as L
    from experiments.cli.argtypes import byte_size, count, path, real, scale_factor

    repeat = count(L.MAX_REPEAT)
    packets = count(L.MAX_PACKETS)
    requests = count(L.MAX_REQUESTS)
    sub = p.add_subparsers(dest="bench", metavar="BENCH")
    sub.required = True
    o = sub.add_parser("overhead", help="scheduling cost per task vs ThreadPoolExecutor")
    o.add_argument("--packets", type=packets, default=2000, help="packets per request (default 2000)")
    o.add_argument("--length", type=count(L.MAX_CHAIN), default=8, help="pass-through operators per chain (default 8)")
    o.add_argument("--requests", type=requests, default=8, help="concurrent requests (default 8)")
    o.add_argument("--repeat", type=repeat, default=5)
    s = sub.add_parser("speedup", help="CPU-bound numba plan on 1 worker vs all workers")
    s.add_argument("--packets", type=packets, default=24, help="packets per request (default 24)")
    s.add_argument("--rounds", type=count(L.MAX_ROUNDS), default=40, help="kernel rounds per element (default 40)")
    s.add_argument("--requests", type=requests, default=None, help="concurrent requests (default 2 x workers)")
    s.add_argument("--repeat", type=repeat, default=3)
    s.add_argument("--packet-bytes", type=byte_size(), default=None, help="packet size, e.g. 64K")
    loc = sub.add_parser("locality", help="share of consumed packets' pages on the consumer's node")
    loc.add_argument("--requests", type=requests, default=16)
    loc.add_argument("--packets", type=packets, default=64)
    loc.add_argument("--every", type=packets, default=1, help="sample every N-th consumed packet")
    qs = sub.add_parser("queries", help="TPC-H queries on 1 worker vs DuckDB (1 thread); mix scaling, serial "
                        "fraction, the mix on DuckDB")

    def query_bench(sp, default_queries: str, copies: int) -> None:
        """The arguments `bench queries` and `bench sql` share."""
        sp.add_argument("queries", nargs="*", metavar="QUERY", help=f"queries (default: {default_queries})")
        sp.add_argument("--data", type=path, metavar="DIR", help="TPC-H Parquet folder (default data/tpch-sf<SF>)")
        sp.add_argument("--sf", type=scale_factor, help="scale factor to generate if missing (default 0.1)")
        sp.add_argument("--repeat", type=repeat, default=5)
        sp.add_argument("--copies", type=requests, default=copies,
                        help=f"copies of each query in the concurrent mix (default {copies})")

    query_bench(qs, "the main job's mix", 4)
    qs.add_argument("--packet-bytes", type=byte_size(), default=None, help="packet size, e.g. 64K")
    qs.add_argument("--cpu-time", action="store_true",
                    help="also compute the serial fraction from CPU time (reads each worker's CPU clock around every "
                    "kernel call: a few microseconds each)")
    sq = sub.add_parser("sql", help="the SQL front end: all 22 TPC-H queries as SQL vs DuckDB (1 thread, in memory) "
                        "and vs the hand-built plans (1 worker), answers checked; the concurrent mix vs DuckDB")
    query_bench(sq, "q1 ... q22", 2)
    pk = sub.add_parser("packets", help="packet allocate + free, microseconds (1 and 3 columns, with and without the request's byte account)")
    pk.add_argument("--count", type=count(10_000_000), default=200_000, help="packets per run (default 200000)")
    pk.add_argument("--repeat", type=repeat, default=7)
    pk.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    gil = sub.add_parser("gil", help="serial fraction three ways: the runtime's, py-spy's GIL sampling, Amdahl from "
                         "the 1 -> 2 worker scaling (needs py-spy and ptrace)")
    gil.add_argument("queries", nargs="*", metavar="QUERY", help="queries (default: the main job's mix)")
    gil.add_argument("--data", type=path, metavar="DIR", help="TPC-H Parquet folder (default data/tpch-sf<SF>)")
    gil.add_argument("--sf", type=scale_factor, help="scale factor to generate if missing (default 0.1)")
    gil.add_argument("--copies", type=requests, default=2, help="copies of each query in the mix (default 2)")
    gil.add_argument("--repeat", type=repeat, default=3, help="timed mixes per worker count (default 3)")
    gil.add_argument("--seconds", type=real(L.MAX_SECONDS), default=6.0,
                     help="seconds py-spy samples per worker count (default 6)")
    gil.add_argument("--rate", type=count(1000), default=200, help="py-spy samples per second (default 200)")
    gil.add_argument("--packet-bytes", type=byte_size(), default=None, help="packet size, e.g. 64K")
    idle = sub.add_parser("idle", help="CPU used by an idle scheduler")
    idle.add_argument("--seconds", type=real(L.MAX_SECONDS), default=3.0,
                      help=f"seconds to measure (default 3, at most {L.MAX_SECONDS:g})")
    ring = sub.add_parser("ring", help="descriptor hop between two processes through the shared-memory ring "
                          "(what domains will hand packets over with): one-way microseconds, streaming ns")
    ring.add_argument("--rounds", type=count(10_000_000), default=20_000, help="round trips (default 20000)")
    ring.add_argument("--count", type=count(1_000_000_000), default=2_000_000,
                      help="descriptors streamed (default 2000000)")
    ring.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    dom = sub.add_parser("domains", help="several interpreters against one: a GIL-bound plan on domains (one worker "
                         "each) vs one process with as many workers, one such request spanning the domains, a "
                         "cross-domain edge's cost, the descriptor ring's hop, a domain killed mid-mix")
    dom.add_argument("--packets", type=packets, default=200, help="packets per request (default 200)")
    dom.add_argument("--loops", type=count(10_000_000), default=20_000,
                     help="Python loop iterations per packet (default 20000)")
    dom.add_argument("--requests", type=requests, default=None, help="concurrent requests (default 2 x CPUs)")
    dom.add_argument("--repeat", type=repeat, default=3)
    dom.add_argument("--hop-packets", type=count(10_000_000), default=20_000,
                     help="one-row packets through a cross-domain edge (default 20000)")
    dom.add_argument("--bulk-packets", type=count(100_000), default=200,
                     help="512 KiB packets through a cross-domain edge (default 200)")
    dom.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    for q in (o, s, loc, qs, sq, gil, idle):
        q.add_argument("--policy", choices=["bobox", "simple"], default="bobox")
        q.add_argument("--json", action="store_true", help="print a JSON object as the last line")


def run(args) -> int:
    from experiments.bench import bench_idle, bench_locality, bench_overhead, bench_packets, bench_queries, bench_speedup

    if args.bench == "overhead":
        r = bench_overhead(args.packets, args.length, args.requests, args.repeat, args.policy)
        print(f"{r['policy']}: {r['bobox_us_per_task']:.2f} us/task ({r['bobox_no_stats_us_per_task']:.2f} with "
              f"task_stats=False); ThreadPoolExecutor: {r['threadpool_us_per_task']:.2f} us/task; ratio "
              f"{r['ratio']:.2f}x ({r['ratio_no_stats']:.2f}x without task statistics; {r['workers']} workers, "
              f"{r['tasks_per_run']} tasks per run); traced: {r['bobox_traced_us_per_task']:.2f} us/task "
              f"({r['trace_on_cost']:.2f}x untraced)")
    elif args.bench == "speedup":
        r = bench_speedup(args.packets, args.rounds, args.requests, args.repeat, args.policy, args.packet_bytes)
        print(f"{r['policy']}: 1 worker {r['t1_s']} s, {r['workers']} workers {r['tall_s']} s: speedup "
              f"{r['speedup']:.2f} (efficiency {r['efficiency']:.2f}); kernel {r['kernel_ms_per_packet']} ms "
              f"per packet, busy {r['busy_us_per_task']} us per task")
    elif args.bench == "locality":
        r = bench_locality(args.requests, args.packets, every=args.every, policy=args.policy)
        print(f"{r['policy']}: {r['nodes']} node(s), {r['sampled_packets']} packets sampled, {r['pages']} pages: "
              f"local fraction {r['local_fraction']}")
    elif args.bench == "queries":
        from operators import tpch

        from experiments.cli.run import check_queries, check_requests
        from experiments.workload import check_data, ensure_data

        queries = check_queries(args.queries, tpch.QUERIES, tpch.DEFAULT_MIX, "--copies")
        check_requests(len(queries), args.copies, "--copies")
        data = ensure_data(args.data, args.sf)
        check_data(data)
        r = bench_queries(data, queries if args.queries else None, args.repeat, args.copies, args.policy,
                          args.packet_bytes, cpu_time=args.cpu_time)
        print(f"{'query':<7}{'bobox ms':>10}{'duckdb ms':>11}{'ratio':>8}{'duckdb mem ms':>15}{'ratio':>8}")
        for q, x in r["queries"].items():
            print(f"{q:<7}{x['bobox_s'] * 1e3:>10.1f}{x['duckdb_s'] * 1e3:>11.1f}{x['ratio']:>8.2f}"
                  f"{x['duckdb_mem_s'] * 1e3:>15.1f}{x['ratio_mem']:>8.2f}")
        print(f"geomean ratio (bobox 1 worker / DuckDB 1 thread): {r['geomean_ratio']:.2f} on Parquet, "
              f"{r['geomean_ratio_mem']:.2f} on in-memory tables")
        print(f"concurrent mix of {r['mix_requests']} requests: 1 worker {r['mix_t1_s']} s, {r['workers']} workers "
              f"{r['mix_tall_s']} s: scaling {r['scaling']:.2f} ({r['scaling_per_core']:.2f} per core); "
              f"queries decomposed {r['workers']} ways: {r['mix_tall_decomposed_s']} s")
        if r["serial_fraction"] is not None:
            cpu = (f"; from CPU time {r['serial_fraction_cpu']:.3f} and {r['serial_fraction_cpu_all']:.3f}"
                   if r["serial_fraction_cpu"] is not None else "")
            print(f"serial fraction {r['serial_fraction']:.3f} on 1 worker ({r['serial_fraction_all']:.3f} on "
                  f"{r['workers']}{cpu}): Amdahl speedup {r['predicted_speedup_2']:.2f}x on 2 workers, "
                  f"{r['predicted_speedup_16']:.1f}x on 16, {r['predicted_speedup_64']:.1f}x on 64; the {r['workers']} "
                  f"workers used {r['mix_tall_cores_used']:.2f} cores and waited {r['mix_tall_cpu_wait_s']:.2f} s for a "
                  f"CPU")
        print(f"the same mix on DuckDB ({r['workers']} threads, one connection per request): {r['duckdb_mix_s']} s; "
              f"duckdb_mix_s / mix_tall_s = {r['duckdb_mix_ratio']:.2f}; CPU time: DuckDB {r['duckdb_mix_cpu_s']} s, "
              f"bobox workers {r['mix_tall_cpu_s']} s")
    elif args.bench == "sql":
        from operators.tpch_sql import QUERIES

        from experiments.bench_sql import bench_sql, format_report
        from experiments.cli.run import check_queries, check_requests
        from experiments.workload import check_data, ensure_data

        queries = check_queries(args.queries, QUERIES, list(QUERIES), "--copies")
        check_requests(len(queries), args.copies, "--copies")
        data = ensure_data(args.data, args.sf)
        check_data(data)
        r = bench_sql(data, queries, args.repeat, args.copies, args.policy)
        print(format_report(r))
    elif args.bench == "gil":
        from operators import tpch

        from experiments.gil_check import bench_gil, check_pyspy, find_pyspy, format_report
        from experiments.cli.run import check_queries, check_requests
        from experiments.workload import check_data, ensure_data

        queries = check_queries(args.queries, tpch.QUERIES, tpch.DEFAULT_MIX, "--copies")
        check_requests(len(queries), args.copies, "--copies")
        exe = find_pyspy()
        check_pyspy(exe)  # before any data is generated or loaded
        data = ensure_data(args.data, args.sf)
        check_data(data)
        r = bench_gil(data, queries if args.queries else None, args.copies, args.repeat, args.seconds, args.rate,
                      args.policy, args.packet_bytes, exe=exe, checked=True)
        print(format_report(r))
    elif args.bench == "packets":
        r = bench_packets(args.count, args.repeat)
        print(f"packet allocate + free ({r['rows']} rows): "
              f"1 column {r['1col_us']:.2f} us ({r['1col_noacct_us']:.2f} without byte accounting), "
              f"3 columns {r['3col_us']:.2f} us ({r['3col_noacct_us']:.2f} without)")
    elif args.bench == "ring":
        from experiments.ring_bench import bench_ring

        r = bench_ring(args.rounds, args.count)
        print(f"descriptor hop between two processes ({r['descriptor_words']} words, ring of {r['capacity']}): "
              f"{r['hop_us']} us one way (median of {r['rounds']} round trips / 2; p10 {r['hop_p10_us']}, "
              f"p90 {r['hop_p90_us']}), both sides spinning; streaming {r['stream_ns_per_descriptor']} ns per "
              f"descriptor in batches of 64. Waking a sleeping thread costs {r['handoff_us']} us here (a consumer "
              f"that sleeps when its rings are empty pays that on top)")
    elif args.bench == "domains":
        from experiments.domains_bench import bench_domains

        r = bench_domains(args.packets, args.loops, args.requests, args.repeat, hop_packets=args.hop_packets,
                          bulk_packets=args.bulk_packets)
        print(f"GIL-bound plan, {r['requests']} requests: {r['domains']} domains x 1 worker {r['domains_s']} s, "
              f"1 process x {r['workers']} workers {r['in_process_s']} s: gil_bound_speedup "
              f"{r['gil_bound_speedup']:.2f} (median of {r['repeat']})")
        print(f"one GIL-bound request in {r['domains']} lanes, spanning {r['domains']} domains x 1 worker "
              f"{r['span_domains_s']} s, 1 process x {r['workers']} workers {r['span_in_process_s']} s: "
              f"span_gil_speedup {r['span_gil_speedup']:.2f}")
        print(f"a cross-domain edge: {r['channel_us_per_packet']} us more per one-row packet than in one process "
              f"({r['hop_packets']} packets); {r['channel_gb_s']} GB/s in 512 KiB packets (in one process "
              f"{r['local_gb_s']}); {r['hop_copies']} copies of the column data per hop")
        print(f"descriptor hop between two processes: {r['hop_us']} us one way (p90 {r['hop_p90_us']}), both sides "
              f"spinning; {r['stream_ns_per_descriptor']} ns per descriptor streamed; a sleeping thread's wake-up "
              f"costs {r['handoff_us']} us here")
        print(f"a domain killed mid-mix: {r['crash_failed']} requests failed with it, {r['crash_completed']} "
              f"completed (right answers: {r['crash_other_answers_equal']}); after its restart right answers: "
              f"{r['crash_restarted_answers_equal']}; shared-memory segments left: {r['leaked_segments']}")
    elif args.bench == "idle":
        r = bench_idle(args.seconds, args.policy)
        print(f"{r['policy']}: idle scheduler with {r['workers']} workers used "
              f"{r['idle_cpu_percent_of_one_core']}% of one core over {r['seconds']} s")
    else:  # pragma: no cover - argparse restricts the choices
        raise ValueError(args.bench)
    if args.json:
        print(json.dumps(r))
    return 0
