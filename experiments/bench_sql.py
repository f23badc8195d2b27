"""``bobox bench sql``: the SQL front end against DuckDB and against the hand-built plans,
side by side in one run (issue "Any query": its goals table).

Per query, on one worker (``parallel=1``) and DuckDB with one thread on tables loaded in
memory (the like-for-like case for the in-memory table store), interleaved, median of
`repeat`: our time, DuckDB's, their ratio; for the ten queries that also have a
hand-built plan (``operators.tpch``), that plan's time and the SQL plan's ratio to it.
Every SQL answer is compared with DuckDB's first (``compare_tables``).

Then the concurrent mix: `copies` copies of every query submitted at once on all
workers, against the same mix on DuckDB with all threads, one connection per request
(``bench._duckdb_mix``); the ratio ``duckdb_mix_s / mix_s`` is above 1 when we are faster.
"""

from __future__ import annotations

import statistics
import time

from experiments.bench import _duckdb_mix, _geomean, _log, _timed_mix, duckdb_over


def bench_sql(data, queries=None, repeat: int = 5, copies: int = 2, policy: str = "bobox",
              progress: bool = True) -> dict:
    import topology
    from bobox_sched import Scheduler
    from operators import tpch
    from operators.sql import sql_plan
    from operators.tpch_sql import QUERIES as SQL
    from operators.tpch_sql import compare_tables, duckdb_answer

    from experiments.workload import run_mix

    queries = list(queries or SQL)
    topo = topology.probe()
    one = topo.restrict(nodes=[topo.cpu_nodes[0].os_index], cpus=[topo.cpu_nodes[0].cpus[0]])
    mem = duckdb_over(data, "TABLE")
    per_query = {}
    plans1 = {q: sql_plan(SQL[q], data, 1, name=q) for q in queries}
    with Scheduler(topology=one, policy=policy) as s1:
        for i, q in enumerate(queries):
            got = s1.submit(plans1[q]).result()  # warm-up (kernels) and the answer check
            compare_tables(got, duckdb_answer(q, data), ordered="order by" in SQL[q].lower())
            hand = tpch.plan(q, data, 1) if q in tpch.QUERIES else None
            if hand is not None:
                s1.submit(hand).result()
            mem.execute(SQL[q]).fetchall()
            ts, th, td = [], [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                s1.submit(plans1[q]).result()
                ts.append(time.perf_counter() - t0)
                if hand is not None:
                    t0 = time.perf_counter()
                    s1.submit(hand).result()
                    th.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                mem.execute(SQL[q]).fetchall()
                td.append(time.perf_counter() - t0)
            s, d = statistics.median(ts), statistics.median(td)
            row = {"sql_s": round(s, 5), "duckdb_mem_s": round(d, 5), "ratio_duckdb": round(s / d, 3),
                   "answer_equal": True, "operators": len(plans1[q])}
            if hand is not None:
                h = statistics.median(th)
                row.update({"hand_s": round(h, 5), "ratio_hand": round(s / h, 3)})
            per_query[q] = row
            if progress:
                _log(f"[sql {i + 1}/{len(queries)}] {q}: SQL plan {s * 1e3:.1f} ms, DuckDB {d * 1e3:.1f} ms"
                     + (f", hand-built {row['hand_s'] * 1e3:.1f} ms" if hand is not None else ""))
    rounds = max(1, repeat // 2)
    with Scheduler(topology=topo, policy=policy) as sa:
        workers = len(sa.workers)
        run_mix(sa, plans1, 1)
        mix = _timed_mix(sa, plans1, copies, rounds)
    _duckdb_mix(mem, queries, 1, workers)  # warm-up
    td, tdc = min(_duckdb_mix(mem, queries, copies, workers) for _ in range(rounds))
    mem.close()
    hands = [r["ratio_hand"] for r in per_query.values() if "ratio_hand" in r]
    return {
        "policy": policy, "data": str(data), "queries": per_query, "repeat": repeat,
        "answered": sum(1 for r in per_query.values() if r["answer_equal"]),
        "geomean_ratio_duckdb": round(_geomean([r["ratio_duckdb"] for r in per_query.values()]), 3),
        "max_ratio_hand": max(hands) if hands else None,
        "geomean_ratio_hand": round(_geomean(hands), 3) if hands else None,
        "workers": workers, "mix_requests": copies * len(queries),
        "mix_s": round(mix["wall_s"], 4), "duckdb_mix_s": round(td, 4),
        "duckdb_mix_ratio": round(td / mix["wall_s"], 3),
        "mix_cpu_s": round(mix["cpu_s"], 3), "duckdb_mix_cpu_s": round(tdc, 3),
    }


def format_report(r: dict) -> str:
    lines = [f"{'query':<6}{'SQL ms':>9}{'DuckDB ms':>11}{'ratio':>7}{'hand ms':>9}{'SQL/hand':>10}{'ops':>5}"]
    for q, x in r["queries"].items():
        hand = (f"{x['hand_s'] * 1e3:>9.1f}{x['ratio_hand']:>10.2f}" if "hand_s" in x else f"{'':>9}{'':>10}")
        lines.append(f"{q:<6}{x['sql_s'] * 1e3:>9.1f}{x['duckdb_mem_s'] * 1e3:>11.1f}{x['ratio_duckdb']:>7.2f}"
                     f"{hand}{x['operators']:>5}")
    lines.append(f"{r['answered']}/{len(r['queries'])} answers equal DuckDB's; geomean SQL / DuckDB (1 worker, 1 "
                 f"thread, in memory): {r['geomean_ratio_duckdb']:.2f}")
    if r["max_ratio_hand"] is not None:
        lines.append(f"SQL plan / hand-built plan: geomean {r['geomean_ratio_hand']:.2f}, worst "
                     f"{r['max_ratio_hand']:.2f}")
    lines.append(f"concurrent mix of {r['mix_requests']} requests on {r['workers']} workers: {r['mix_s']} s; "
                 f"DuckDB {r['workers']} threads {r['duckdb_mix_s']} s: duckdb_mix_s / mix_s = "
                 f"{r['duckdb_mix_ratio']:.2f} (CPU: ours {r['mix_cpu_s']} s, DuckDB {r['duckdb_mix_cpu_s']} s)")
    return "\n".join(lines)


__all__ = ["bench_sql", "format_report"]
