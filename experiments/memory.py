"""Peak memory of a run, counted once: the proportional set size (PSS) of every process
of it, summed, sampled on a thread while the run lasts.

Why PSS: under domains the user's process and every domain map the same shared
segments (the table store, ``bobox_sched.domains.shared_arrays``); their resident sizes
(RSS) each count those pages in full, so a sum of RSS counts the tables once per
process. PSS divides each shared page among the processes that map it: summed over
them, every page counts once, which is what the machine holds. The kernel keeps no
peak of it (only of RSS: ``VmHWM``), hence the sampling (``psutil``'s
``memory_full_info``, read from ``/proc/<pid>/smaps_rollup``): the peak can be missed
by up to ``GROWTH`` of the summed RSS (below: when it takes a sample).

Who touches what: the sampler thread writes ``peak`` and ``samples``; the thread that
made the sampler reads them after ``stop`` (which joins it).
"""

from __future__ import annotations

import threading
import time

import psutil

# How the sampler spends its CPU. Reading PSS (smaps_rollup) walks a process's page
# tables: 7.8 ms a sample of the SF 1 mix's 1.4 GiB process here (2-core machine), so a
# fixed 50 ms period took 0.36 CPU-s of a 2.3 s run, 16 % of a core, from the workers it
# measured (psutil per-thread CPU times, 2026-11-28). RSS (statm) costs microseconds.
# So: RSS every INTERVAL_S; PSS only when the summed RSS passes the last PSS sample's
# by GROWTH (the peak of PSS is where RSS peaks: PSS moves with RSS, shared pages only
# divided), and besides at most once per OVERHEAD_X times what the last PSS sample took
# (2 % of a core): a run of ~1 GiB growing by 40 % takes ~20 growth samples.
INTERVAL_S = 0.05
GROWTH = 1.02
OVERHEAD_X = 50


def summed(pids, read):
    """`read(psutil.Process(pid))` summed over `pids`, skipping a process that ended
    between the listing and the read (a domain that died)."""
    total = 0
    for pid in pids:
        try:
            total += read(psutil.Process(pid))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


class PssPeak:
    """``with PssPeak(pids_fn) as m: ...``; then ``m.peak`` (bytes; the largest summed
    PSS sampled) and ``m.samples``. `pids_fn` returns the pids to sum, asked at each
    sample (domains restart under a new pid)."""

    def __init__(self, pids_fn, interval: float = INTERVAL_S):
        self._pids_fn = pids_fn
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak = 0
        self.samples = 0

    def sample(self) -> int:
        """One PSS sample now (summed over the pids); the peak follows it."""
        total = summed(self._pids_fn(), lambda p: p.memory_full_info().pss)
        self.samples += 1
        self.peak = max(self.peak, total)
        return total

    def rss(self) -> int:
        return summed(self._pids_fn(), lambda p: p.memory_info().rss)

    def _run(self) -> None:
        clock, now = time.thread_time, time.monotonic  # this thread's CPU: what a sample costs the run
        base = 0  # summed RSS at the last PSS sample
        cost = 0.0
        last = float("-inf")
        while True:
            rss = self.rss()
            if rss > base * GROWTH or now() - last >= OVERHEAD_X * cost:  # module constants' comment
                t0 = clock()
                self.sample()
                cost = clock() - t0
                last = now()
                base = max(base, rss)
            if self._stop.wait(self._interval):
                break

    def __enter__(self) -> "PssPeak":
        self._thread = threading.Thread(target=self._run, name="bobox-pss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # the end state too: a run shorter than one interval still has a figure


def run_pids(sched) -> list[int]:
    """This process, and the domain processes of `sched` when it has any."""
    import os

    doms = getattr(sched, "domains", None)
    return [os.getpid()] + ([d["pid"] for d in doms] if isinstance(doms, list) else [])


__all__ = ["GROWTH", "INTERVAL_S", "OVERHEAD_X", "PssPeak", "run_pids", "summed"]
