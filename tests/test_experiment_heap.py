"""``experiments/framework.py``'s frozen heap: inside ``frozen_heap()`` the collection
before each measured run freezes what survives (so the next one walks only the new
objects), outside it nothing is frozen, and on exit the collector gets every object
back, also after an error; ``bobox experiment`` runs each experiment inside it."""

from __future__ import annotations

import gc

import pytest

from experiments import framework
from experiments.cli import experiment as experiment_cli
from experiments.framework import collect_before_run, frozen_heap


@pytest.fixture(autouse=True)
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_heap_is_frozen_inside_and_given_back_on_exit():
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the imports' objects (numba's, pyarrow's) at least
        keep = [[i] for i in range(5000)]  # made after the freeze: the collector still sees them
        collect_before_run()
        assert gc.get_freeze_count() >= frozen + len(keep)  # the survivors are frozen too
    assert gc.get_freeze_count() == 0


def test_outside_a_frozen_heap_a_collection_freezes_nothing():
    collect_before_run()
    assert gc.get_freeze_count() == 0


def test_nested_and_failing_runs_give_the_heap_back():
    with pytest.raises(ZeroDivisionError):
        with frozen_heap():
            with frozen_heap():
                pass
            assert gc.get_freeze_count() > 0  # the inner exit leaves the outer one frozen
            1 / 0
    assert gc.get_freeze_count() == 0


def test_bobox_experiment_runs_the_experiment_in_a_frozen_heap(monkeypatch):
    seen = []

    def fake_run(args):
        seen.append((framework._frozen[0], gc.get_freeze_count() > 0))
        return {"ok": True}

    import experiments.regions

    monkeypatch.setattr(experiments.regions, "run_experiment", fake_run)
    args = type("Args", (), {"name": "regions"})()
    assert experiment_cli._dispatch(args) == {"ok": True}
    assert seen == [(1, True)] and gc.get_freeze_count() == 0
