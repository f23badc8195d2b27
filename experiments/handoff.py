"""What handing work to another thread costs on this machine, measured: the context the
multi-thread figures of the streaming experiments need.

Under the GIL, a run on 2 workers pays a thread wake-up wherever one worker gives a
sleeping one something to do (a pushed task, a resumed instance, a queued tuple) and
wherever a worker coming back from a nogil kernel finds the GIL taken (CPython's
``take_gil`` then sleeps on a futex until the holder drops it and signals it). The cost
of that wake-up belongs to the machine, not to the policy: on a virtual machine an idle
vCPU halts, and waking it goes through the hypervisor. It decides how much work a
hand-off must buy to pay for itself, so the experiments that compare 1 and 2 threads
report it, and figures from two machines can be read side by side.

``wake_us`` measures it the way a sleeping worker is woken (``worker.Worker.park``: a
lock used as a binary semaphore): two threads ping-pong through two such locks, each
blocked in ``acquire`` until the other releases it, then back in Python (so the GIL's
hand-off is included). One round trip is two wake-ups; the figure is half of it, the
median and spread over ``round_trips`` round trips. No other thread of this module runs
meanwhile; the measuring thread and the partner are left unpinned, like the caller's.

Measured on the 2-vCPU KVM machine of CI (2026-11-26, ``python -c "from
experiments.handoff import wake_us; print(wake_us())"``, three runs): medians 32-41 us
(p10 27-36, p90 47-49) per wake-up, against a raw cache-line round trip of 0.13 us
between the same two vCPUs (two nogil spinners, no sleep). A thread that spins in a
nogil kernel instead of sleeping does not avoid it: coming back, it waits for the GIL
like any other (alternating nogil calls of two threads: 20-25 us per take).
"""

from __future__ import annotations

import statistics
import threading
import time

DEFAULT_ROUND_TRIPS = 2000
MAX_ROUND_TRIPS = 1_000_000
TIMEOUT_S = 30.0  # a partner that never answers (a stalled machine): give up, say so


def wake_us(round_trips: int = DEFAULT_ROUND_TRIPS) -> dict:
    """Median, 10th and 90th percentile of one thread waking another that sleeps on a
    lock, in microseconds, one way (module doc): ``{"median_us", "p10_us", "p90_us",
    "round_trips"}``. Raises ValueError for a count outside 1..MAX_ROUND_TRIPS and
    RuntimeError if the partner thread stops answering for TIMEOUT_S."""
    if isinstance(round_trips, bool) or not isinstance(round_trips, int) or not 1 <= round_trips <= MAX_ROUND_TRIPS:
        raise ValueError(f"round_trips must be an integer in 1..{MAX_ROUND_TRIPS}, got {round_trips!r}")
    # Protocol: `ping` and `pong` start held. The measuring thread releases `ping` and
    # blocks on `pong`; the partner blocks on `ping`, then releases `pong`. Each lock has
    # one releaser and one acquirer, and every release follows the matching acquire of
    # the round before, so neither is released twice while held by nobody.
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()
    failed: list = []

    def partner() -> None:
        for _ in range(round_trips):
            if not ping.acquire(timeout=TIMEOUT_S):
                failed.append("the measuring thread stopped")
                return
            pong.release()

    th = threading.Thread(target=partner, name="bobox-handoff-partner", daemon=True)
    th.start()
    clock = time.perf_counter_ns
    rts = []
    for _ in range(round_trips):
        t0 = clock()
        ping.release()
        if not pong.acquire(timeout=TIMEOUT_S):
            raise RuntimeError(f"handoff: the partner thread did not answer within {TIMEOUT_S:.0f} s")
        rts.append(clock() - t0)
    th.join(TIMEOUT_S)
    if failed:
        raise RuntimeError(f"handoff: {failed[0]}")
    rts.sort()
    n = len(rts)
    one_way = [x / 2e3 for x in (statistics.median(rts), rts[n // 10], rts[(9 * n) // 10])]
    return {"median_us": round(one_way[0], 2), "p10_us": round(one_way[1], 2), "p90_us": round(one_way[2], 2),
            "round_trips": round_trips}


def describe(h: dict | None) -> str:
    """One sentence for a report: the measured wake-up and what it means."""
    if not h:
        return ""
    return (f"Waking a sleeping thread costs {h['median_us']:.1f} us here (median one way, p10-p90 "
            f"{h['p10_us']:.1f}-{h['p90_us']:.1f}; `experiments/handoff.py`): a hand-off to a worker that sleeps, "
            "and a return from a nogil kernel that finds the GIL taken, wait about that long, so a second worker "
            "helps only with work that outweighs it.")


__all__ = ["DEFAULT_ROUND_TRIPS", "MAX_ROUND_TRIPS", "describe", "wake_us"]
