"""Peak memory of a run, counted once: the proportional set size (PSS) of every process
of it, summed, sampled on a thread while the run lasts.

Why PSS: under domains the user's process and every domain map the same shared
segments (the table store, ``bobox_sched.domains.shared_arrays``); their resident sizes
(RSS) each count those pages in full, so a sum of RSS counts the tables once per
process. PSS divides each shared page among the processes that map it: summed over
them, every page counts once, which is what the machine holds. The kernel keeps no
peak of it (only of RSS: ``VmHWM``), hence the sampling (``psutil``'s
``memory_full_info``, read from ``/proc/<pid>/smaps_rollup``): the peak can be missed
by up to one interval's growth (the interval: ``INTERVAL_S`` to ``MAX_INTERVAL_S``, below).

Who touches what: the sampler thread writes ``peak`` and ``samples``; the thread that
made the sampler reads them after ``stop`` (which joins it).
"""

from __future__ import annotations

import threading
import time

import psutil

# Sampling period: at least INTERVAL_S, and at least OVERHEAD_X times what the last
# sample took, so that sampling costs the run at most 1/OVERHEAD_X of a core. Reading
# smaps_rollup walks the process's page tables: 7.8 ms per sample of the SF 1 mix's
# process (1.4 GiB resident, 2-core machine), so the fixed 50 ms period this had took
# 0.36 CPU-s of a 2.3 s run, 16 % of a core, from the workers it measured (found with
# psutil's per-thread CPU times, 2026-11-28). 50x: 2 %.
INTERVAL_S = 0.05
OVERHEAD_X = 50
MAX_INTERVAL_S = 0.25  # ... but at most this, so that a run of a second still has 4 samples (then >2 % a core)


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
        total = 0
        for pid in self._pids_fn():
            try:
                total += psutil.Process(pid).memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # a domain that ended between the listing and the read
        self.samples += 1
        self.peak = max(self.peak, total)
        return total

    def _run(self) -> None:
        clock = time.thread_time  # this thread's CPU: what a sample costs the run
        while True:
            t0 = clock()
            self.sample()
            if self._stop.wait(min(max(self._interval, OVERHEAD_X * (clock() - t0)), MAX_INTERVAL_S)):
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


__all__ = ["INTERVAL_S", "MAX_INTERVAL_S", "OVERHEAD_X", "PssPeak", "run_pids"]
