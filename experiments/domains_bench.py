"""``bobox bench domains``: what several interpreters buy over one (the domains issue's
figures that exist so far), measured side by side in one run.

* ``gil_bound_speedup``: a plan whose operator is pure Python (it holds the GIL all the
  time it works: ``PyWork``), ``requests`` copies at once, on one in-process runtime
  with every CPU as a worker against ``Scheduler(domains=<CPUs>)`` with one worker per
  domain. The runs alternate (in-process, domains, in-process, ...) ``repeat`` times;
  the ratio is the median in-process time over the median domains time. The domain
  processes start before the clock does (once per Scheduler, as in use);
* ``hop_us`` and ``stream_ns_per_descriptor``: the descriptor ring between two
  processes (``experiments/ring_bench.py``), what a packet crossing domains will pay;
* ``span_gil_speedup``: one request of the GIL-bound work decomposed into one lane per
  CPU (``lanes_plan``), in-process with every CPU as a worker against domains with one
  worker each, where the request *spans* the domains (``bobox_sched/domains/span.py``):
  its lanes run in different interpreters, joined through channels;
* ``channel_us_per_packet`` and ``channel_gb_s``: what a cross-domain edge adds. A
  request moves ``hop_packets`` one-row packets (and, for the bandwidth,
  ``bulk_packets`` packets of 512 KiB) from a lane in one domain to the home domain;
  the same plan in one process is timed beside it, and the difference per packet (or
  the bytes over the spanning run's time) is the figure. ``hop_copies``: the copies of
  column data per byte that crossed in those runs, counted by the channels themselves
  (``loans.totals()``: a lent packet none, a copied one two), with the packets lent
  and copied;
* a crash (``crash_check``): one of two domains killed while 8 requests run (their plan
  holds a 2 MiB array, so a shared segment exists): ``crash_failed`` /
  ``crash_completed`` requests, whether the completed ones and two requests after the
  restart gave the right answer, and ``leaked_segments`` after shutdown.

Every copy's answer is checked against the arithmetic (the plan sums a known series).
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from bobox_sched import Plan, Scheduler, Sink, Source, StreamOperator


class PyWork(StreamOperator):
    """Per packet, `loops` iterations of plain Python arithmetic, then the packet on:
    GIL-bound work (no kernel releases it)."""

    def __init__(self, loops: int):
        self.loops = loops

    def on_packet(self, ctx, port, pkt):
        acc = 0
        for i in range(self.loops):
            acc = (acc + i * i) % 1_000_003
        if acc < 0:  # never: keeps the loop's result used
            raise AssertionError
        ctx.send("out", pkt)


class Count(Source):
    """Packets of 64 rows, all holding the packet's number: 0, 1, ..., n-1."""

    def __init__(self, n):
        self.n, self.i = n, 0

    def next_packet(self, ctx):
        if self.i >= self.n:
            return None
        p = ctx.new_packet({"x": np.int64}, 64)
        p["x"][:] = self.i
        self.i += 1
        return p


class Total(Sink):
    def finalize(self, pkts):
        return int(sum(int(p["x"].sum()) for p in pkts))


def gil_plan(packets: int, loops: int) -> Plan:
    p = Plan("gil-bound")
    p.add("src", Count, packets)
    p.add("work", PyWork, loops)
    p.add("sink", Total)
    p.chain("src", "work", "sink")
    return p


def _mix(s, packets: int, loops: int, requests: int) -> float:
    want = 64 * packets * (packets - 1) // 2
    plan = gil_plan(packets, loops)  # one plan, submitted `requests` times (as a mix does)
    t0 = time.perf_counter()
    hs = [s.submit(plan) for _ in range(requests)]
    got = [h.result(600) for h in hs]
    dt = time.perf_counter() - t0
    if got != [want] * requests:
        raise RuntimeError(f"domains bench: wrong answers {got[:3]}... (want {want})")
    return dt


def crash_check(packets: int, loops: int, requests: int = 8) -> dict:
    """A domain killed (SIGKILL) while a mix runs on two: how many requests failed, whether
    every other one gave the right answer, whether the domain came back (a request after
    it), and how many of our shared-memory segments are left once the Scheduler is shut
    down (``shm.ours()``: this process's)."""
    import signal

    from bobox_sched.domains import shm
    from bobox_sched.domains.front import DomainDied

    want = 64 * packets * (packets - 1) // 2
    ok = died = wrong = 0
    with Scheduler(domains=2, threads_per_node=1) as s:
        big = np.arange(1 << 18, dtype=np.int64)  # a 2 MiB plan array: a shared segment exists during the crash
        plan = gil_plan(packets, loops)
        plan.add("ballast", _Ballast, big)
        hs = [s.submit(plan) for _ in range(requests)]
        os.kill(s.domains[0]["pid"], signal.SIGKILL)
        for h in hs:
            try:
                got = h.result(600)
            except DomainDied:
                died += 1
                continue
            ok += 1
            wrong += got != want
        deadline = time.monotonic() + 120
        while s.stats()["restarts"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = [s.submit_to(i, plan).result(600) for i in range(2)]
    return {"crash_failed": died, "crash_completed": ok, "crash_other_answers_equal": wrong == 0,
            "crash_restarted_answers_equal": after == [want, want], "leaked_segments": len(shm.ours())}


class _Ballast(StreamOperator):
    """An operator with no ports that only holds a large array (so the plan has one)."""

    inputs = ()
    outputs = ()

    def __init__(self, arr):
        self.arr = arr

    def process(self, ctx):
        ctx.finish()


class Rows(Source):
    """`n` packets of `rows` int64 rows, packet i holding i."""

    def __init__(self, n: int, rows: int):
        self.n, self.rows, self.i = n, rows, 0

    def next_packet(self, ctx):
        if self.i >= self.n:
            return None
        p = ctx.new_packet({"x": np.int64}, self.rows)
        p["x"][:] = self.i
        self.i += 1
        return p


class Gather(StreamOperator):
    """Every input's packets on: the home domain's end of the lanes."""

    def __init__(self, n: int):
        self.inputs = tuple(f"in{i}" for i in range(n))

    def on_packet(self, ctx, port, pkt):
        ctx.send("out", pkt)


def lanes_plan(lanes: list) -> Plan:
    """One lane per (source factory, args, work loops or 0), gathered into ``Total``."""
    p = Plan(f"lanes{len(lanes)}")
    p.add("gather", Gather, len(lanes))
    p.add("sink", Total)
    p.connect("gather", "sink")
    for i, (factory, args, loops) in enumerate(lanes):
        p.add(f"src{i}", factory, *args)
        p.lane(f"src{i}", i)
        last = f"src{i}"
        if loops:
            p.add(f"work{i}", PyWork, loops)
            p.lane(f"work{i}", i)
            p.connect(last, f"work{i}")
            last = f"work{i}"
        p.connect(last, f"gather.in{i}")
    return p


def _one(s, plan, want) -> float:
    t0 = time.perf_counter()
    h = s.submit(plan)
    got = h.result(600)
    dt = time.perf_counter() - t0
    if got != want:
        raise RuntimeError(f"domains bench: {plan.name} gave {got}, want {want}")
    return dt


def span_figures(one, many, ncpu: int, packets: int, loops: int, repeat: int, hop_packets: int,
                 bulk_packets: int) -> dict:
    """``span_gil_speedup`` and the channel's cost (module doc), on schedulers `one`
    (in-process, `ncpu` workers) and `many` (`ncpu` domains of one worker)."""
    per = max(1, packets // ncpu)
    gil = lanes_plan([(Count, (per,), loops)] * ncpu)
    gil_want = ncpu * 64 * per * (per - 1) // 2
    bulk_rows = (512 << 10) // 8
    hop = lanes_plan([(Rows, (0, 1), 0), (Rows, (hop_packets, 1), 0)])
    bulk = lanes_plan([(Rows, (0, 1), 0), (Rows, (bulk_packets, bulk_rows), 0)])
    hop_want = hop_packets * (hop_packets - 1) // 2
    bulk_want = bulk_rows * bulk_packets * (bulk_packets - 1) // 2
    for s in (one, many):  # warm: kernels, pools, the receivers
        _one(s, lanes_plan([(Count, (2,), 10)] * ncpu), ncpu * 64)
        _one(s, lanes_plan([(Rows, (0, 1), 0), (Rows, (4, bulk_rows), 0)]), bulk_rows * 6)
    crossed = many.stats()["channels"]
    t = {k: [] for k in ("gil_in", "gil_dom", "hop_in", "hop_dom", "bulk_in", "bulk_dom")}
    for _ in range(repeat):
        t["gil_in"].append(_one(one, gil, gil_want))
        t["gil_dom"].append(_one(many, gil, gil_want))
        t["hop_in"].append(_one(one, hop, hop_want))
        t["hop_dom"].append(_one(many, hop, hop_want))
        t["bulk_in"].append(_one(one, bulk, bulk_want))
        t["bulk_dom"].append(_one(many, bulk, bulk_want))
    after = many.stats()["channels"]
    data = after["data_bytes"] - crossed["data_bytes"]
    m = {k: statistics.median(v) for k, v in t.items()}
    return {
        "span_gil_speedup": round(m["gil_in"] / m["gil_dom"], 3),
        "span_in_process_s": round(m["gil_in"], 4),
        "span_domains_s": round(m["gil_dom"], 4),
        "channel_us_per_packet": round(1e6 * (m["hop_dom"] - m["hop_in"]) / hop_packets, 2),
        "channel_hop_s": round(m["hop_dom"], 4),
        "local_hop_s": round(m["hop_in"], 4),
        "hop_packets": hop_packets,
        "channel_gb_s": round(bulk_packets * bulk_rows * 8 / m["bulk_dom"] / 1e9, 3),
        "local_gb_s": round(bulk_packets * bulk_rows * 8 / m["bulk_in"] / 1e9, 3),
        "bulk_packets": bulk_packets,
        "hop_copies": round((after["copied_bytes"] - crossed["copied_bytes"]) / data, 3) if data else None,
        "hop_packets_lent": after["lent_packets"] - crossed["lent_packets"],
        "hop_packets_copied": after["copied_packets"] - crossed["copied_packets"],
    }


def bench_domains(packets: int = 200, loops: int = 20_000, requests: int | None = None, repeat: int = 3,
                  rounds: int = 20_000, hop_packets: int = 20_000, bulk_packets: int = 200) -> dict:
    from experiments.ring_bench import bench_ring

    ncpu = len(os.sched_getaffinity(0))
    requests = requests or 2 * ncpu
    t_in, t_dom = [], []
    with Scheduler(threads_per_node=ncpu) as one, Scheduler(domains=ncpu, threads_per_node=1) as many:
        _mix(one, 4, loops, 2)  # warm: imports, pools
        _mix(many, 4, loops, 2 * ncpu)
        for _ in range(repeat):
            t_in.append(_mix(one, packets, loops, requests))
            t_dom.append(_mix(many, packets, loops, requests))
        span = span_figures(one, many, ncpu, packets, loops, repeat, hop_packets, bulk_packets)
    ring = bench_ring(rounds, 500_000)
    crash = crash_check(packets, loops)
    a, b = statistics.median(t_in), statistics.median(t_dom)
    return {
        "gil_bound_speedup": round(a / b, 3),
        "in_process_s": round(a, 4),
        "domains_s": round(b, 4),
        "domains": ncpu,
        "workers": ncpu,
        "requests": requests,
        "packets": packets,
        "loops": loops,
        "repeat": repeat,
        "hop_us": ring["hop_us"],
        "hop_p90_us": ring["hop_p90_us"],
        "stream_ns_per_descriptor": ring["stream_ns_per_descriptor"],
        "handoff_us": ring["handoff_us"],
        **span,
        **crash,
    }


__all__ = ["Count", "Gather", "PyWork", "Rows", "Total", "bench_domains", "crash_check", "gil_plan", "lanes_plan",
           "span_figures"]
