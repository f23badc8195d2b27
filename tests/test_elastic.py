"""The elasticity algorithm of policy ``streams`` (Schneider & Wu Fig. 7, spec 004 section
3) as a pure function: synthetic throughput curves in, thread levels out. The oracles of
spec section 3.4, the six rules one at a time, load changes, the CPU cap, the bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bobox_sched.policies.streams.elastic import CpuGuard, Elasticity


def visit(curve, periods=30, cpu_ok=lambda: True, **kw):
    """Levels visited: the starting level, then the level after each period."""
    e = Elasticity(**kw)
    seq = [e.level]
    for _ in range(periods):
        seq.append(e.update_thread_level(curve(e.level), cpu_ok))
    return seq, e


def dedup(seq):
    out = [seq[0]]
    for x in seq[1:]:
        if x != out[-1]:
            out.append(x)
    return out


def peak8(L):
    return 100 * L if L <= 8 else 800 - 30 * (L - 8)


LINEAR = dict(min_level=1, max_level=16, form="paper", steps="linear")


# -- the oracles of spec 3.4 (a simulation of Fig. 7: linear steps, min 1, max 16) ----------

def test_peak_at_8_settles_at_8():
    seq, _ = visit(peak8, **LINEAR)
    assert dedup(seq) == list(range(1, 10)) + [8]
    assert seq[-10:] == [8] * 10


def test_plateau_from_6_settles_at_6():
    seq, _ = visit(lambda L: 100 * min(L, 6), **LINEAR)
    assert dedup(seq) == list(range(1, 8)) + [6]
    assert seq[-10:] == [6] * 10


def test_increasing_goes_to_max():
    seq, _ = visit(lambda L: 100 * L, **LINEAR)
    assert dedup(seq) == list(range(1, 17))
    assert seq[-10:] == [16] * 10


def test_decreasing_goes_to_1():
    seq, _ = visit(lambda L: 1000 / L, **LINEAR)
    assert dedup(seq) == [1, 2, 1]
    assert seq[-10:] == [1] * 10


def test_power_of_two_steps_settle_at_10():
    seq, _ = visit(lambda L: 100 * L if L <= 9 else 900 - 40 * (L - 9), min_level=1, max_level=176,
                   form="oss", steps="pow2")
    assert dedup(seq) == [1, 2, 4, 8, 16, 12, 10]
    assert seq[-10:] == [10] * 10


def test_pow2_bisects_down_16_12_10_9_8():
    seq, _ = visit(peak8, min_level=1, max_level=16, form="oss", steps="pow2")
    assert dedup(seq) == [1, 2, 4, 8, 16, 12, 10, 9, 8]


@pytest.mark.parametrize("form", ["oss", "paper"])
def test_both_forms_agree_on_the_linear_oracles_without_load_change(form):
    for curve, want in [(peak8, 8), (lambda L: 100 * min(L, 6), 6), (lambda L: 100 * L, 16),
                        (lambda L: 1000 / L, 1)]:
        seq, _ = visit(curve, min_level=1, max_level=16, form=form, steps="linear")
        assert seq[-5:] == [want] * 5


# -- the rules one at a time ---------------------------------------------------------------

def state(level, below, above, recs, **kw):
    """An Elasticity at `level` with the given records {level: (last_thput, trusted)},
    clock far from 0 and the current level not visited last period (no load change)."""
    e = Elasticity(min_level=kw.pop("min_level", 1), max_level=kw.pop("max_level", 16),
                   form=kw.pop("form", "paper"), steps=kw.pop("steps", "linear"))
    e.level, e.below, e.above, e.time = level, below, above, 10
    for lv, (thput, trusted) in recs.items():
        r = e.recs[lv]
        r.last_thput = r.first_thput = thput
        r.trusted = trusted
        r.last_time = 0
    return e


def test_rule1_trend_from_below_and_above_untrusted_goes_up():
    e = state(4, 3, 5, {3: (300, True)})
    assert e.update_thread_level(400) == 5


def test_rule2_trend_towards_above_goes_up():
    e = state(4, 3, 5, {3: (390, True), 5: (500, True)})  # no trend below (400 vs 390 < 5 %)
    assert e.update_thread_level(400) == 5


def test_rule3_at_the_minimum_with_above_untrusted_goes_up():
    e = state(1, 0, 2, {})
    assert e.update_thread_level(100) == 2
    e = state(3, 2, 4, {}, min_level=3)  # E4: the kick-off tests level == min
    assert e.update_thread_level(100) == 4


def test_rule4_below_untrusted_goes_down():
    e = state(4, 3, 5, {5: (100, True)})  # above trusted and lower: no reason to go up
    assert e.update_thread_level(400) == 3


def test_rule5_no_trend_from_below_goes_down():
    e = state(4, 3, 5, {3: (400, True), 5: (400, True)})
    assert e.update_thread_level(405) == 3


def test_rule6_trend_below_and_nothing_above_stays():
    e = state(4, 3, 5, {3: (300, True), 5: (390, True)})
    assert e.update_thread_level(400) == 4


def test_trends_use_sens():
    e = state(4, 3, 5, {3: (381, True), 5: (390, True)})  # 400 vs 381: +4.99 %: no trend
    assert e.update_thread_level(400) == 3
    e = state(4, 3, 5, {3: (380, True), 5: (390, True)})  # +5.26 %: trend, stays
    assert e.update_thread_level(400) == 4


# -- CPU cap (E7) -------------------------------------------------------------------------

def test_cpu_cap_blocks_increases_oss_does_nothing_else():
    seq, e = visit(lambda L: 100 * L, cpu_ok=lambda: False, min_level=1, max_level=16, form="oss",
                   steps="pow2")
    assert set(seq) == {1}


def test_cpu_cap_paper_form_falls_through_to_decrease():
    calls = []
    # rule 2 wants to grow (trend towards above), no trend from below
    e = state(4, 3, 5, {3: (390, True), 5: (500, True)})
    assert e.update_thread_level(400, lambda: calls.append(1) or False) == 3  # E7: && then else-branch
    assert calls == [1]
    e = state(4, 3, 5, {3: (390, True), 5: (500, True)}, form="oss")
    assert e.update_thread_level(400, lambda: False) == 4


def test_cpu_is_asked_only_when_the_rules_want_to_grow():
    calls = []
    e = state(4, 3, 5, {3: (400, True), 5: (400, True)})
    e.update_thread_level(405, lambda: calls.append(1) or True)
    assert calls == []


def test_cpu_guard_reads_proc_stat_and_is_false_until_it_has_an_interval(tmp_path, monkeypatch):
    """A fake ``/proc/stat`` (psutil's ``PROCFS_PATH``, its documented seam) with known
    jiffies: usage is ``(user + nice + system) / total`` over the interval, where the
    kernel's guest time is already inside user (guest_nice inside nice) and counts once."""
    import psutil

    stat = tmp_path / "stat"
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))

    def jiffies(user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice):
        stat.write_text(f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} {guest} {guest_nice}\n"
                        "cpu0 0 0 0 0 0 0 0 0 0 0\n")

    g = CpuGuard(0.8)
    jiffies(1000, 200, 300, 5000, 100, 10, 10, 0, 400, 50)
    assert g.acceptable() is False
    assert g.sample() is None and g.acceptable() is False  # one reading: no interval yet
    # +600 user (150 of it guest), +100 nice (50 guest_nice), +300 system, +800 idle,
    # +100 iowait, +100 irq: busy 1000 of 2000 (the guest jiffies not counted twice)
    jiffies(1600, 300, 600, 5800, 200, 110, 10, 0, 550, 100)
    assert g.sample() == pytest.approx(0.5) and g.acceptable() is True
    # +900 busy (user, system), +100 idle: 0.9 > 0.8
    jiffies(2000, 300, 1100, 5900, 200, 110, 10, 0, 550, 100)
    assert g.sample() == pytest.approx(0.9) and g.acceptable() is False
    # no time passed (same reading): no interval, so not acceptable
    assert g.sample() is None and g.acceptable() is False
    assert CpuGuard(1.0).limit == 1.0
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"cpu_limit must be in \(0, 1\]"):
            CpuGuard(bad)


# -- load changes --------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["paper", "oss"])
def test_load_change_untrusts_every_level_and_re_explores(form):
    e = Elasticity(min_level=1, max_level=16, form=form, steps="linear")
    for _ in range(25):
        e.update_thread_level(peak8(e.level))
    assert e.level == 8 and len(e.trusted_levels()) >= 3
    half = lambda L: 100 * L if L <= 4 else 400 - 30 * (L - 4)  # noqa: E731 - the load changed
    seen = []
    untrusted_at = None
    for k in range(40):
        prev = e.level
        lvl = e.update_thread_level(half(prev))
        seen.append(lvl)
        # all history forgotten: nothing trusted but (paper) the sample just recorded
        if untrusted_at is None and e.trusted_levels() in ([], [prev]):
            untrusted_at = k
    # detected: at once (paper), after the noise filter's 5 periods (oss)
    assert untrusted_at == (0 if form == "paper" else 5)
    assert seen[-5:] == [4] * 5
    assert min(seen) <= 4 < 8


def test_oss_noise_filter_ignores_short_blips():
    e = Elasticity(min_level=1, max_level=16, form="oss", steps="linear")
    for _ in range(25):
        e.update_thread_level(peak8(e.level))
    trusted = e.trusted_levels()
    for k in range(12):  # a blip of 3 periods, then back, repeatedly: never 6 in a row
        e.update_thread_level(400.0 if k % 4 < 3 else 800.0)
    assert e.level == 8 and e.trusted_levels() == trusted


def test_no_load_change_in_the_first_two_samples_oss():
    e = Elasticity(min_level=2, max_level=2, form="oss")
    assert e.update_thread_level(1000.0) == 2
    assert e.update_thread_level(10.0) == 2  # time 1: ignored (queues filling)
    assert e.recs[2].trusted


# -- bounds and the fixed point ------------------------------------------------------------

curves = st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(curves, st.integers(1, 8), st.integers(0, 40), st.sampled_from(["oss", "paper"]),
       st.sampled_from(["pow2", "linear"]), st.integers(0, 10**6))
def test_level_stays_within_min_max_and_below_level_above(values, lo, span, form, steps, seed):
    import random

    hi = lo + span
    rnd = random.Random(seed)
    e = Elasticity(min_level=lo, max_level=hi, form=form, steps=steps)
    for _ in range(60):
        lvl = e.update_thread_level(values[e.level % len(values)] * (1 + 0.1 * rnd.random()), lambda: rnd.random() < 0.8)
        assert lo <= lvl <= hi
        assert e.below < e.level and (e.above > e.level or e.level == hi)


@pytest.mark.parametrize("steps", ["pow2", "linear"])
def test_fixed_point_is_stable(steps):
    seq, e = visit(peak8, periods=200, min_level=1, max_level=16, form="oss", steps=steps)
    assert len(set(seq[-150:])) == 1
    lvl = seq[-1]
    assert e.recs[e.below].trusted and e.recs[e.above].trusted  # both neighbours trusted
    assert e.trend_below(peak8(lvl)) and not e.trend_above(peak8(lvl))


def test_records_start_untrusted_with_oss_sentinels():
    e = Elasticity(min_level=3, max_level=8, form="oss")
    assert e.level == 3 and e.below == 1 and e.above == 6
    assert all(e.recs[i].trusted and e.recs[i].last_thput == 0 for i in (0, 1, 2, 9))
    assert not any(e.recs[i].trusted for i in range(3, 9))
    r = Elasticity(min_level=1, max_level=4, form="paper").recs[2]
    assert r.last_time == -1 and math.isnan(r.first_thput) and r.last_thput == math.inf and not r.trusted


def test_bad_arguments():
    with pytest.raises(ValueError):
        Elasticity(min_level=3, max_level=2)
    with pytest.raises(ValueError):
        Elasticity(form="x")
    with pytest.raises(ValueError):
        Elasticity(steps="x")
