"""experiments/handoff.py: the machine's thread wake-up cost that the streaming
experiments report beside their multi-thread figures. No timing assertions: only that the
figures are what the doc says (positive, ordered percentiles, one way = half a round trip
of the two threads) and that bad counts are refused before any thread starts."""

import threading

import pytest

from experiments import handoff
from experiments.handoff import describe, wake_us


def test_figures_are_positive_and_ordered():
    h = wake_us(200)
    assert h["round_trips"] == 200
    assert 0 < h["p10_us"] <= h["median_us"] <= h["p90_us"]


def test_one_way_is_half_the_round_trip(monkeypatch):
    """With a clock that advances 10 us per read, every round trip (two reads) measures
    10 us: the one-way figures are 5 us."""
    t = [0]

    def clock():
        t[0] += 10_000
        return t[0]

    monkeypatch.setattr(handoff.time, "perf_counter_ns", clock)
    h = wake_us(50)
    assert h == {"median_us": 5.0, "p10_us": 5.0, "p90_us": 5.0, "round_trips": 50}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10", handoff.MAX_ROUND_TRIPS + 1])
def test_bad_counts_are_refused_before_any_thread_starts(bad):
    before = threading.active_count()
    with pytest.raises(ValueError, match="round_trips must be an integer"):
        wake_us(bad)
    assert threading.active_count() == before


def test_partner_thread_is_gone_afterwards():
    wake_us(20)
    assert not [t for t in threading.enumerate() if t.name == "bobox-handoff-partner"]


def test_describe_says_what_was_measured():
    text = describe({"median_us": 33.4, "p10_us": 27.0, "p90_us": 47.5, "round_trips": 10})
    assert "33.4 us" in text and "27.0-47.5" in text and "experiments/handoff.py" in text
    assert describe(None) == "" and describe({}) == ""
