"""The query workload: many TPC-H requests submitted at once to one scheduler.

Used by ``bobox run`` (the main job), ``bobox bench queries`` and the experiments.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from operators.released import predicted_speedup, serial_fraction
from operators.tpch_sql import compare_tables

DEFAULT_SF = 0.1
DEFAULT_DATA = Path("data") / "tpch-sf0.1"


def default_data_dir(sf: float) -> Path:
    return Path("data") / f"tpch-sf{sf:g}"


def ensure_data(data: str | os.PathLike | None, sf: float | None, progress: bool = True) -> Path:
    """The data folder to use: `data` if given (it must hold the 8 tables unless `sf` is
    given too, then it is generated there if missing), else ``data/tpch-sf<sf>``
    generated on first use."""
    from operators.data import DataError, find_tables
    from experiments.datagen import datagen

    if data is None:
        sf = DEFAULT_SF if sf is None else sf
        out = default_data_dir(sf)
        datagen(sf, out, progress=progress)
        return out
    data = Path(data)
    if sf is not None:
        datagen(sf, data, progress=progress)
        return data
    if not data.exists():
        raise DataError(f"data folder not found: {data} (generate it with: bobox datagen --sf 0.1 --out {data})")
    find_tables(data)  # one-line DataError naming what is missing
    return data


def check_data(data) -> None:
    """Refuse, before any query runs, a data folder whose columns are not typed as TPC-H
    says (``l_shipdate`` as text or ``l_orderkey`` as float gave wrong answers, exit 0):
    one-line DataError naming the table, column, file, expected and found types."""
    from operators.data import check_data_types

    check_data_types(data)


@dataclass
class RunResult:
    wall_s: float
    latencies: dict = field(default_factory=dict)  # query -> [seconds]
    rows: dict = field(default_factory=dict)  # query -> rows of the result
    results: dict = field(default_factory=dict)  # query -> first result (pyarrow Table)
    stats: dict = field(default_factory=dict)  # scheduler stats after the run
    request_stats: list = field(default_factory=list)
    operators: dict = field(default_factory=dict)  # query -> operators per request
    mismatches: list = field(default_factory=list)  # queries whose copies disagreed
    peak_rss: int | None = None  # under domains: this process's and every domain's peak, summed
    peak_pss: int | None = None  # during the mix: this process's and every domain's PSS, summed (experiments.memory)

    @property
    def n_requests(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def summary(self) -> dict:
        q = {}
        for name, lat in self.latencies.items():
            q[name] = {
                "requests": len(lat),
                "operators": self.operators.get(name),
                "rows": self.rows.get(name),
                "median_s": round(statistics.median(lat), 5),
                "min_s": round(min(lat), 5),
                "max_s": round(max(lat), 5),
            }
        st = self.stats
        serial = serial_fraction(st.get("busy_s", 0.0), st.get("released_s", 0.0))
        return {
            "wall_s": round(self.wall_s, 4),
            "requests": self.n_requests,
            "throughput_qps": round(self.n_requests / self.wall_s, 3) if self.wall_s else None,
            "queries": q,
            "scheduler": {
                "policy": st.get("policy"),
                "workers": st.get("workers"),
                "packet_bytes": st.get("packet_bytes"),
                "tasks": st.get("tasks"),
                "steps": st.get("steps"),
                "steals": st.get("steals"),
                "sleeps": st.get("sleeps"),
                "wakeups": st.get("wakeups"),
                "migrations": st.get("migrations"),
                "shares": st.get("shares"),
                "packets": st.get("packets"),
                "peak_bytes_held": st.get("peak_bytes_held"),
                "busy_s": _round(st.get("busy_s"), 4),
                "released_s": _round(st.get("released_s"), 4),
                "cpu_s": _round(st.get("cpu_s"), 4),
                "cpu_wait_s": _round(st.get("cpu_wait_s"), 4),
                "released_cpu_s": _round(st.get("released_cpu_s"), 4),
                # CPU of every process of the run over the mix; the part outside the workers
                "run_cpu_s": _round(st.get("run_cpu_s"), 4),
                "outside_workers_cpu_s": _round(st["run_cpu_s"] - st["cpu_s"], 4)
                if st.get("run_cpu_s") is not None and st.get("cpu_s") is not None else None,
            },
            # the share of task time spent holding the GIL, and what Amdahl's law makes of
            # it (operators.released; None unless its timing was on)
            "serial_fraction": _round(serial, 4),
            # the same from CPU time (worker threads' CPU time, all of it, against their
            # CPU time in GIL-releasing calls): what a thread preempted by another
            # process does not inflate
            "serial_fraction_cpu": _round(serial_fraction(st.get("cpu_s", 0.0), st.get("released_cpu_s", 0.0)), 4),
            "predicted_speedup_16": _round(predicted_speedup(serial, 16), 2),
            "predicted_speedup_64": _round(predicted_speedup(serial, 64), 2),
            "peak_rss_bytes": self.peak_rss if self.peak_rss is not None else peak_rss_bytes(),
            "peak_pss_bytes": self.peak_pss,
            "mismatches": self.mismatches,
        }


def _round(x, digits):
    return None if x is None else round(x, digits)


def peak_rss_bytes() -> int:
    """The most resident memory this process has had so far (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker_cpu(sched) -> tuple[float, float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one, CPU seconds in
    GIL-releasing calls) summed over the scheduler's worker threads (under domains, the
    domain processes' workers; the third is then 0: not collected across processes). The
    first two come from /proc/<pid>/task/<tid>/schedstat (0 where the kernel lacks it): waiting for a
    CPU is time other processes took, which on a shared machine, not the GIL, keeps N
    workers from N-fold speed."""
    from operators.released import released_cpu_ns

    of_domains = getattr(sched, "worker_cpu", None)  # Scheduler(domains=...): each domain reports its own
    if of_domains is not None:
        cpu, wait = of_domains()
        return cpu, wait, 0.0
    from bobox_sched.core.worker import thread_schedstat

    cpu = wait = rel = 0
    for w in sched.workers:
        tid = w.thread.native_id
        rel += released_cpu_ns(tid)
        a, b = thread_schedstat(tid)
        cpu += a
        wait += b
    return cpu / 1e9, wait / 1e9, rel / 1e9


def run_cpu_s(sched) -> float:
    """CPU seconds (user + system) used so far by every process of the run: this one and
    the domain processes of `sched`. Over a mix, less the workers' ``cpu_s``, it is what
    the rest of the run (the front, the domains' receivers and senders, the samplers)
    took: on a machine with as many CPUs as workers, the time the workers then wait for
    a CPU (``cpu_wait_s``)."""
    from experiments.memory import run_pids, summed

    return summed(run_pids(sched), lambda p: sum(p.cpu_times()[:2]))  # user + system


def choose_parallel(requests: int, workers: int) -> int:
    """How many ways to decompose each query: 1 when the requests alone can keep every
    worker busy, else one way per worker. Each split adds operators, packets and
    shuffles: 32 concurrent requests on 2 workers ran 1.9x slower decomposed 2 ways than
    not at all (bobox bench queries, this 2-core machine)."""
    return 1 if requests >= workers else workers


def build_plans(queries: list[str], data: Path, parallel: int) -> dict:
    from operators import tpch

    return {q: tpch.plan(q, data, parallel) for q in queries}


def run_mix(sched, plans: dict, copies: int, progress: bool = False, check_equal: bool = True) -> RunResult:
    """Submit `copies` requests of every plan at once; wait for all. Latency = submit to
    done, per request. Copies of one query must give the same answer (checked)."""
    sched.reset_peak()
    before = sched.stats()
    cpu0 = worker_cpu(sched)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=copies * len(plans), desc="requests", unit="req", file=sys.stderr, leave=False)
    from experiments.memory import PssPeak, run_pids

    run0 = run_cpu_s(sched)
    with PssPeak(lambda: run_pids(sched)) as mem:  # asked at each sample: a restarted domain has a new pid
        t0 = time.perf_counter()
        handles = []
        for i in range(copies):
            for name, plan in plans.items():
                h = sched.submit(plan)
                if bar is not None:
                    h.add_done_callback(lambda _h: bar.update(1))
                handles.append((name, h))
        tables = [(name, h.result()) for name, h in handles]
        wall = time.perf_counter() - t0
    run1 = run_cpu_s(sched)
    res = RunResult(wall)
    res.peak_pss = mem.peak
    if bar is not None:
        bar.close()
    for (name, h), (_, table) in zip(handles, tables):
        res.latencies.setdefault(name, []).append(h.stats["elapsed_s"])
        res.request_stats.append(h.stats)
        if name not in res.results:
            res.results[name] = table
            res.rows[name] = table.num_rows
        elif check_equal and not _same(res.results[name], table) and name not in res.mismatches:
            res.mismatches.append(name)
    after = sched.stats()
    cpu1 = worker_cpu(sched)
    res.stats = _diff_stats(before, after)
    res.stats["cpu_s"], res.stats["cpu_wait_s"], res.stats["released_cpu_s"] = (b - a for a, b in zip(cpu0, cpu1))
    res.stats["run_cpu_s"] = run1 - run0
    res.operators = {name: len(plan) for name, plan in plans.items()}
    of_domains = getattr(sched, "peak_rss_bytes", None)  # Scheduler(domains=...)
    if of_domains is not None:
        res.peak_rss = peak_rss_bytes() + of_domains()
    return res


def _same(a: pa.Table, b: pa.Table) -> bool:
    try:
        compare_tables(a, b, rel_tol=1e-9)
        return True
    except AssertionError:
        return False


def _diff_stats(before: dict, after: dict) -> dict:
    out = dict(after)
    for k in ("tasks", "steals", "sleeps", "wakeups", "migrations", "shares", "packets", "bytes_allocated", "busy_s",
              "released_s"):
        out[k] = after.get(k, 0) - before.get(k, 0)
    out["steps"] = {k: after["steps"][k] - before["steps"].get(k, 0) for k in after["steps"]}
    out["peak_bytes_held"] = after["peak_bytes_held"]
    return out


def format_table(res: RunResult) -> str:
    s = res.summary()
    lines = [f"{'query':<8}{'reqs':>6}{'ops':>6}{'rows':>7}{'median ms':>12}{'min ms':>10}{'max ms':>10}"]
    for name, q in s["queries"].items():
        lines.append(f"{name:<8}{q['requests']:>6}{q['operators']:>6}{q['rows']:>7}{q['median_s'] * 1e3:>12.1f}"
                     f"{q['min_s'] * 1e3:>10.1f}{q['max_s'] * 1e3:>10.1f}")
    sc = s["scheduler"]
    steps = sc["steps"] or {}
    total = sum(int(v) for k, v in steps.items() if k != "5") or 1
    lines.append("")
    lines.append(f"{s['requests']} requests in {s['wall_s']:.3f} s ({s['throughput_qps']:.1f} queries/s); policy "
                 f"{sc['policy']}, {sc['workers']} workers, packets of {sc['packet_bytes'] // 1024} KiB")
    lines.append("tasks by locality step: " + ", ".join(
        f"{k}:{100 * int(steps.get(k, 0)) / total:.1f}%" for k in ("1", "2", "3", "4")) + f"; sleeps {steps.get('5', 0)}")
    lines.append(f"tasks {sc['tasks']}, steals {sc['steals']}, wake-ups {sc['wakeups']}, migrations "
                 f"{sc['migrations']}, shares {sc['shares']}, packets {sc['packets']}, peak held "
                 f"{sc['peak_bytes_held'] / 2**20:.1f} MiB")
    if s["serial_fraction"] is not None:
        lines.append(f"serial fraction {s['serial_fraction']:.3f} (GIL held in {100 * s['serial_fraction']:.1f}% of "
                     f"{sc['busy_s']:.2f} s in tasks): Amdahl speedup {s['predicted_speedup_16']:.1f}x on 16 workers, "
                     f"{s['predicted_speedup_64']:.1f}x on 64")
    if sc["cpu_s"]:
        cpu = s["serial_fraction_cpu"]
        lines.append((f"serial fraction from CPU time {cpu:.3f}; " if cpu is not None else "")
                     + f"the workers ran {sc['cpu_s']:.2f} CPU-s and waited {sc['cpu_wait_s']:.2f} s for a CPU held "
                     "by other processes")
    lines.append(f"peak RSS {s['peak_rss_bytes'] / 2**30:.2f} GiB" + (
        f"; peak PSS during the mix {s['peak_pss_bytes'] / 2**30:.2f} GiB (every process of the run, shared pages "
        "counted once)" if s.get("peak_pss_bytes") else ""))
    if s["mismatches"]:
        lines.append(f"WARNING: copies of {', '.join(s['mismatches'])} gave different answers")
    return "\n".join(lines)


def write_results(results: dict, out_dir, command=None) -> list[Path]:
    """``DIR/<query>.parquet`` for every result, each written atomically (temporary file,
    then rename), then ``DIR/_bobox_results.json`` listing them: a complete set
    (``experiments.cli.outputs.ResultSet``). OutputError, one line, where a file cannot be
    written (a full disk): the folder then holds no manifest."""
    import pyarrow.parquet as pq

    from experiments.cli.outputs import ResultSet

    paths = []
    with ResultSet(out_dir, command=command) as rs:
        for name, table in results.items():
            paths.append(rs.write(f"{name}.parquet", lambda tmp, t=table: pq.write_table(t, tmp)))
    return paths
