"""``experiments/framework.py``'s frozen heap: inside ``frozen_heap()`` the collection
before each measured run freezes what survives (so the next one walks only the new
objects), outside it nothing is frozen, and on exit the collector gets every object
back, also after an error; ``bobox experiment`` runs each experiment inside it.

Frozen means out of the collector's sight: absent from ``gc.get_objects()``, which lists
the generations the collector walks. (``gc.get_freeze_count()`` is not usable for this:
CPython 3.12.1 reports 375 frozen objects after ``unfreeze()`` and a collection.)"""

from __future__ import annotations

import gc

import pytest

from experiments import framework
from experiments.cli import experiment as experiment_cli
from experiments.framework import collect_before_run, frozen_heap


def seen(x) -> bool:
    """The collector walks `x` (it is not frozen)."""
    return any(o is x for o in gc.get_objects())


@pytest.fixture(autouse=True)
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_heap_is_frozen_inside_and_given_back_on_exit():
    before = [[0]]  # made before: frozen with the heap
    with frozen_heap():
        assert not seen(before)
        kept = [[1]]  # made inside: the collector still sees it until the next collection
        assert seen(kept)
        collect_before_run()
        assert not seen(kept)  # a survivor of the collection before a run is frozen too
    assert seen(before) and seen(kept)


def test_outside_a_frozen_heap_a_collection_freezes_nothing():
    kept = [[2]]
    collect_before_run()
    assert seen(kept)


def test_nested_and_failing_runs_give_the_heap_back():
    kept = [[3]]
    with pytest.raises(ZeroDivisionError):
        with frozen_heap():
            with frozen_heap():
                pass
            assert not seen(kept)  # the inner exit leaves the outer one frozen
            1 / 0
    assert seen(kept)


def test_bobox_experiment_runs_the_experiment_in_a_frozen_heap(monkeypatch):
    kept = [[4]]
    seen_inside = []

    def fake_run(args):
        seen_inside.append((framework._frozen[0], seen(kept)))
        return {"ok": True}

    import experiments.regions

    monkeypatch.setattr(experiments.regions, "run_experiment", fake_run)
    args = type("Args", (), {"name": "regions"})()
    assert experiment_cli._dispatch(args) == {"ok": True}
    assert seen_inside == [(1, False)] and seen(kept)
