"""Elastic thread levels (Schneider & Wu section 4.2, Figs. 6-7): find the number of
scheduler threads that maximises throughput, from one throughput sample per period.

:class:`Elasticity` is the algorithm and nothing else: ``update_thread_level(thput,
cpu_ok)`` takes a sample (tuples per second over the last period) and a callable that
says whether total CPU usage allows growing, and returns the new level. No clock, no
threads, no I/O, so tests drive it with synthetic throughput curves. The policy
(``streams.py``) measures, calls it once per period and applies the level.
:class:`CpuGuard` is ``isCPUUsageAcceptable`` over ``/proc/stat`` (through psutil).

Two forms, behind ``form``:

``"paper"``
    Fig. 7 as printed. ``changeInLoad`` (not given in the paper, "similar to Alg. 3 of
    Gedik et al.", using SENS, L531): the current level was visited in the previous
    period too and the sample differs from its first trusted throughput by more than
    SENS; then every level is untrusted and the update goes on (record, decide). The CPU
    test is part of the increase condition (``cond && cpuOK``), so an unacceptable CPU
    falls through to the decrease branch (E7). No boundary sentinels: ``levelAbove`` is
    clamped to ``max`` (E8).
``"oss"`` (default)
    IBM's open-source runtime (``ElasticThreadAdapter.cpp``, 2021): load-change detection
    against the first trusted throughput with sensitivity 0.2 and a noise filter (the
    first 5 consecutive detections are ignored and change nothing; the 6th untrusts every
    level >= min, resets the clock and keeps the level), none in the first two samples
    (the first one counts queues filling up); an unacceptable CPU blocks an increase and
    does nothing else (E7); levels below ``min`` and above ``max`` are sentinels, trusted
    with throughput 0.

Both forms test ``level == min`` where Fig. 7 tests ``level == 1`` in the kick-off rule
and in ``trustBelow`` (E4; the same when ``min`` is 1, which Fig. 6 assumes);
``trendBelow`` keeps ``level == 1``. One deviation from the OSS code: a load change
untrusts the levels in ``[min, max]`` only, so the sentinels stay what they are.

Steps, behind ``steps``: ``"pow2"`` (OSS: up to the next power of two, or to the trusted
level above; down by bisecting ``(2^(k-1), 2^k]`` to the first untried level, e.g.
16 -> 12 -> 10 -> 9 -> 8; levels 3 and 2 step by one) or ``"linear"`` (+-1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Fig. 7's SENS: react to throughput differences of more than 5 % (L531).
SENS = 0.05
# [OSS] LOAD_CHANGE_SENSITIVITY and NOISE_LIMIT of ElasticThreadAdapter.cpp.
LOAD_CHANGE_SENS = 0.2
NOISE_LIMIT = 5
# [OSS] MAX_USAGE, the paper's 80 % of system capacity (L550).
CPU_LIMIT = 0.8

FORMS = ("oss", "paper")
STEPS = ("pow2", "linear")


@dataclass
class ThreadRecord:
    """Fig. 6: what is known about one thread level."""

    last_time: int = -1
    first_thput: float = math.nan
    last_thput: float = math.inf
    trusted: bool = False


class Elasticity:
    """The state of Figs. 6-7 and ``updateThreadLevel``. Levels run from `min_level`
    to `max_level`; the search starts at `start` (default `min_level`; E4: OSS starts
    at the active thread count, Fig. 6 at 1)."""

    def __init__(self, min_level: int = 1, max_level: int = 1, start: int | None = None, sens: float = SENS,
                 form: str = "oss", steps: str = "pow2", load_sens: float = LOAD_CHANGE_SENS,
                 noise_limit: int = NOISE_LIMIT):
        if form not in FORMS:
            raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
        if steps not in STEPS:
            raise ValueError(f"steps must be one of {', '.join(STEPS)}, got {steps!r}")
        if not (isinstance(min_level, int) and isinstance(max_level, int) and 1 <= min_level <= max_level):
            raise ValueError(f"need 1 <= min_level <= max_level, got {min_level!r}, {max_level!r}")
        if not (0 < sens < 1):
            raise ValueError(f"sens must be in (0, 1), got {sens!r}")
        self.form = form
        self.steps = steps
        self.sens = sens
        self.load_sens = load_sens
        self.noise_limit = noise_limit
        self.reset(min_level, max_level, start)

    def reset(self, min_level: int, max_level: int, start: int | None = None) -> None:
        """Forget everything (also: ``min`` raised by the driver, OSS ``initialize``)."""
        self.min = min_level
        self.max = max_level
        level = min(max(start if start is not None else min_level, min_level), max_level)
        self.level = level
        if self.steps == "pow2":
            self.below, self.above = level // 2, level * 2
        else:
            self.below, self.above = level - 1, level + 1
        self.time = 0
        self.noise = self.noise_limit
        self.recs: list[ThreadRecord] = []
        self._grow(max(self.above, max_level + 1))
        self.above = self._clamp_above(self.above)
        self.below = max(0, min(self.below, level - 1))

    # -- records -------------------------------------------------------------------------
    def _grow(self, top: int) -> None:
        while len(self.recs) <= top:
            i = len(self.recs)
            r = ThreadRecord()
            if self.form == "oss" and (i < self.min or i > self.max):
                r.trusted, r.first_thput, r.last_thput = True, 0.0, 0.0  # boundary sentinel
            self.recs.append(r)

    def _clamp_above(self, above: int) -> int:
        if self.form == "paper":
            return min(above, self.max)  # E8: never past max (then trendAbove is false)
        return min(above, self.max + 1)  # the sentinel above max

    def trusted_levels(self) -> list[int]:
        return [i for i in range(self.min, self.max + 1) if self.recs[i].trusted]

    # -- Fig. 7 --------------------------------------------------------------------------
    def trend_below(self, thput: float) -> bool:
        if self.level == 1:
            return False
        b = self.recs[self.below]
        if not b.trusted:
            return False
        return thput > b.last_thput and thput - b.last_thput > self.sens * b.last_thput

    def trend_above(self, thput: float) -> bool:
        a = self.recs[self.above]
        if not a.trusted or self.above == self.level:
            return False
        return a.last_thput > thput and a.last_thput - thput > self.sens * thput

    def trust_below(self) -> bool:
        if self.level == self.min:  # E4 (Fig. 7: level == 1)
            return False
        return self.recs[self.below].trusted

    def trust_above(self) -> bool:
        if self.level == self.max:  # Fig. 7: level == recs.size() - 1
            return False
        return self.recs[self.above].trusted

    def change_in_load(self, thput: float) -> str | None:
        """None, "noise" (OSS: a detection the noise filter swallows) or "change"."""
        cur = self.recs[self.level]
        if self.form == "oss" and self.time in (0, 1):
            return None  # the first sample counts queues filling up
        if not cur.trusted or cur.last_time != self.time - 1:
            self.noise = self.noise_limit
            return None
        old = cur.first_thput
        sens = self.sens if self.form == "paper" else self.load_sens
        d = thput - old
        changed = (-d > sens * thput) if d < 0 else (d > sens * old)
        if not changed:
            self.noise = self.noise_limit
            return None
        if self.form == "paper":
            return "change"
        if self.noise > 0:
            self.noise -= 1
            return "noise"
        self.noise = self.noise_limit
        return "change"

    def untrust_all(self) -> None:
        for i in range(self.min, self.max + 1):
            self.recs[i].trusted = False

    def update_thread_level(self, thput: float, cpu_ok=lambda: True) -> int:
        """One period's sample in, the level for the next period out (Fig. 7).
        `cpu_ok()` (``isCPUUsageAcceptable``) is called only when the rules want to grow."""
        change = self.change_in_load(thput)
        if change == "noise":
            return self.level
        if change == "change":
            self.untrust_all()
            if self.form == "oss":
                self.time = 0
                return self.level
        rec = self.recs[self.level]
        rec.last_time = self.time
        self.time += 1
        rec.last_thput = thput
        if not rec.trusted:
            rec.first_thput = thput
        rec.trusted = True

        trend_below = self.trend_below(thput)
        grow = ((trend_below and not self.trust_above()) or self.trend_above(thput)
                or (self.level == self.min and not self.trust_above()))
        if self.form == "paper":
            if grow and cpu_ok():
                self.increase_level()
            elif not self.trust_below() or not trend_below:
                self.decrease_level()
        else:
            if grow:
                if cpu_ok():
                    self.increase_level()
            elif not self.trust_below() or not trend_below:
                self.decrease_level()
        return self.level

    # -- steps ---------------------------------------------------------------------------
    def increase_level(self) -> None:
        level = self.level
        if level >= self.max:
            return
        if self.steps == "linear":
            self.below, self.level = level, level + 1
            self.above = self._clamp_above(level + 2)
            return
        self.below = level
        above_pow2 = 2 * (1 << (level.bit_length() - 1))  # the next power of two above level
        if self.recs[self.above].trusted and self.above <= self.max:
            new = self.above
            self.level = new
            if above_pow2 > len(self.recs):
                self.above = above_pow2
            elif above_pow2 == new:
                self.above = above_pow2 * 2
            else:
                a = new + 1
                for i in range(new + 1, above_pow2 + 1):
                    a = i
                    if self.recs[i].trusted:
                        break
                self.above = max(a, new + 1)
        elif level > 2:
            if above_pow2 <= self.max:
                self.level, self.above = above_pow2, above_pow2 * 2
            else:
                self.level, self.above = self.max, self.max + 1
        else:
            if level * 2 <= self.max:
                self.level, self.above = level * 2, self.above * 2
            else:
                self.level, self.above = self.max, self.max + 1
        self._grow(self.above)
        self.above = self._clamp_above(self.above)

    def decrease_level(self) -> None:
        level = self.level
        if level <= self.min:
            return
        if self.steps == "linear":
            self.above, self.level = level, level - 1
            self.below = level - 2
            return
        if level > 3:
            self.above = level
            below_pow2 = 1 << (math.ceil(math.log2(level)) - 1)
            above_pow2 = below_pow2 * 2
            step = below_pow2 // 2
            old = level
            i = above_pow2 - below_pow2 // 2
            new = level
            while i > below_pow2:
                if i <= self.min:
                    new = self.min
                    self.below = self.min - 1
                    break
                new = i
                step = max(1, step // 2)
                if i < old and not self.recs[i].trusted:
                    self.below = below_pow2
                    break
                i -= step
            if new == below_pow2 + 1:
                if not self.recs[below_pow2 + 1].trusted:
                    if below_pow2 >= self.min:
                        self.below, new = below_pow2, below_pow2 + 1
                    else:
                        self.below, new = self.min - 1, self.min
                else:
                    if below_pow2 >= self.min:
                        self.below, new = below_pow2 // 2, below_pow2
                    else:
                        self.below, new = self.min - 1, self.min
            self.level = new
            if self.below >= new:  # keep below < level < above
                self.below = new - 1
            if self.above <= new:
                self.above = self._clamp_above(new + 1)
        elif level == 3:
            if self.min <= 2:
                self.below, self.level, self.above = 1, 2, 3
        else:  # level 2
            if self.min == 1:
                self.below, self.level, self.above = 0, 1, 2


class CpuGuard:
    """``isCPUUsageAcceptable``: total system CPU usage, ``(user + nice + system) /
    total`` between two readings of ``/proc/stat`` (psutil's ``cpu_times``), at most
    `limit`. ``sample()`` takes a reading and returns the usage since the previous one
    (None at the first); ``acceptable()`` answers for the last sampled interval (False
    until there is one, like OSS's first call)."""

    def __init__(self, limit: float = CPU_LIMIT):
        if not (0 < limit <= 1):
            raise ValueError(f"cpu_limit must be in (0, 1], got {limit!r}")
        self.limit = limit
        self._last = None
        self.usage: float | None = None

    @staticmethod
    def _read():
        import psutil

        t = psutil.cpu_times()
        busy = t.user + t.nice + t.system
        total = sum(t)
        # psutil's guest times are already part of user time on Linux
        total -= getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)
        return busy, total

    def sample(self) -> float | None:
        cur = self._read()
        last, self._last = self._last, cur
        if last is None or cur[1] <= last[1]:
            self.usage = None
        else:
            # clamped: the two sums are rounded separately (usage came out 1.0000000001)
            self.usage = min(1.0, max(0.0, (cur[0] - last[0]) / (cur[1] - last[1])))
        return self.usage

    def acceptable(self) -> bool:
        return self.usage is not None and (self.limit >= 1.0 or self.usage <= self.limit)


__all__ = ["CPU_LIMIT", "CpuGuard", "Elasticity", "FORMS", "LOAD_CHANGE_SENS", "NOISE_LIMIT", "SENS", "STEPS",
           "ThreadRecord"]
