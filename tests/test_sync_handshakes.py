"""The handshakes of ``core/sync.py``'s inventory, on the free-threaded code path.

Under the GIL ``sync.FENCED`` is False and every ``if FENCED: fence()`` is skipped, so
no other test runs the branches a free-threaded interpreter takes (none can be installed
on the CI machine). Here they are turned on: where the fences fall in the reorder
buffer's two handshakes, the ordered policy's wake-up and TStream's unlocked batch
reads (each side: store, fence, load), then the ordered policy, TStream and the bobox
policy end to end with every module's fences on, against their sequential answers."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from bobox_sched.core import sync
from bobox_sched.policies.ordered import policy as ordered_policy
from bobox_sched.policies.ordered import reorder
from bobox_sched.txn import coordinator


class _LoggingLock:
    """A reorder buffer flag's raw lock that logs (and grants or refuses) each try."""

    def __init__(self, log, grant=True):
        self.log, self.grant = log, grant

    def acquire(self, blocking=True):
        self.log.append("try-flag")
        return self.grant

    def release(self):
        self.log.append("release-flag")


def _logged_buffer(monkeypatch, log, emit_ok=True, grant=True, ready=None):
    monkeypatch.setattr(reorder, "FENCED", True)
    monkeypatch.setattr(reorder, "fence", lambda: log.append("fence"))

    def emit(o):
        log.append(f"emit {o}")
        return emit_ok

    rb = reorder.ReorderBuffer(4, emit, ready=ready)
    lock = _LoggingLock(log, grant)
    rb.flag = SimpleNamespace(raw=lambda: lock)
    return rb


def test_reorder_adder_fences_between_its_slot_and_the_flag_and_drainer_after_the_release(monkeypatch):
    log = []
    rb = _logged_buffer(monkeypatch, log)
    assert rb.send(1, "a")
    # the adder's slot store, fence, its try of the flag; the drainer's release, fence,
    # its second look at the slot of next (F4:L40), which finds it empty
    assert log == ["fence", "try-flag", "emit a", "release-flag", "fence"]
    assert rb.next == 2 and rb.pending() == 0


def test_reorder_adder_that_finds_the_flag_taken_fenced_before_looking(monkeypatch):
    log = []
    rb = _logged_buffer(monkeypatch, log, grant=False)
    assert rb.send(1, "a")
    assert log == ["fence", "try-flag"]
    assert rb.contended == 1 and rb.pending() == 1


def test_reorder_blocked_drainer_fences_between_its_release_and_asking_ready(monkeypatch):
    log = []

    def ready():
        log.append("ready")
        return False

    rb = _logged_buffer(monkeypatch, log, emit_ok=False, ready=ready)
    rb.send(1, "a")
    assert log == ["fence", "try-flag", "emit a", "release-flag", "fence", "ready"]
    assert rb.blocked == 1 and rb.next == 1


class _Logged:
    """An object whose attribute stores are logged."""

    def __init__(self, log, **kw):
        object.__setattr__(self, "_log", log)
        self.__dict__.update(kw)

    def __setattr__(self, name, value):
        self._log.append(f"store {name}")
        object.__setattr__(self, name, value)


class _Idle(list):
    """The ordered policy's idle list, logging each look at whether it is empty."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def __bool__(self):
        self.log.append("look idle")
        return False


def test_ordered_work_makers_fence_between_publishing_and_looking_at_idle(monkeypatch):
    log = []
    monkeypatch.setattr(ordered_policy, "FENCED", True)
    monkeypatch.setattr(ordered_policy, "fence", lambda: log.append("fence"))
    op = object()
    stage = _Logged(log, wants=False)
    drains = SimpleNamespace(append=lambda st: log.append("publish drain"))
    fake = SimpleNamespace(_source_stages={id(op): stage}, idle=_Idle(log), drains=drains,
                           wake_one=lambda st=None: log.append("wake"))
    P = ordered_policy.OrderedPolicy
    P.push_deferred(fake, None, op, None)
    assert log == ["store wants", "fence", "look idle"] and stage.wants
    log.clear()
    P.push_drain(fake, stage)
    assert log == ["publish drain", "fence", "look idle"]
    log.clear()
    P.stage_finished(fake, stage)
    assert log == ["fence", "look idle"]


def test_txn_gate_fences_after_its_unlocked_read_of_open_batch(monkeypatch):
    log = []
    monkeypatch.setattr(coordinator, "FENCED", True)
    monkeypatch.setattr(coordinator, "fence", lambda: log.append("fence"))

    class Group:
        lookahead = coordinator.LOOKAHEAD

        @property
        def open_batch(self):
            log.append("load open_batch")
            return 3

    assert coordinator.Group.gate(Group(), 3, op=None)
    assert log == ["load open_batch", "fence"]


@pytest.fixture
def fenced(monkeypatch):
    """FENCED on in every runtime module that imported it; the fences counted by
    "module:function" of the call (and still real: the shared lock's acquire and
    release)."""
    import bobox_sched.core.port  # noqa: F401
    import bobox_sched.core.task  # noqa: F401
    import bobox_sched.policies.bobox.policy  # noqa: F401
    import bobox_sched.policies.ordered.stage  # noqa: F401
    import bobox_sched.txn.operator  # noqa: F401

    calls: dict[str, int] = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("bobox_sched.") or mod is sync or getattr(mod, "fence", None) is not sync.fence:
            continue

        def counted(name=name):
            where = f"{name}:{sys._getframe(1).f_code.co_name}"  # module:function of the call
            calls[where] = calls.get(where, 0) + 1
            sync._fence_lock.acquire()
            sync._fence_lock.release()

        monkeypatch.setattr(mod, "FENCED", True)
        monkeypatch.setattr(mod, "fence", counted)
    monkeypatch.setattr(sync, "FENCED", True)
    return calls


def test_ordered_policy_with_fences_gives_the_sequential_egress(fenced):
    from ordered_ops import build, make_items, sequential

    chain = [("sl", "filter", {"mod": 4, "rem": 1}), ("ps", {"skip": 3, "dup": True}), ("sf",)]
    items = make_items(40, 30, 30, np.random.default_rng(3), zipf=1.4, empty_every=7, window_every=5)
    ref = sequential(chain, items, row_order="exact")
    from bobox_sched import Scheduler

    with Scheduler(policy="ordered", threads_per_node=2, pin=False) as s:
        res = s.submit(build(chain, items, run_id="fenced")).result(120)
    res, ref = ({"sink": r} if "rows" in r else r for r in (res, ref))
    assert res["sink"]["rows"] == ref["sink"]["rows"] and res["sink"]["k"] == ref["sink"]["k"]
    assert res["sink"]["puncts"] == ref["sink"]["puncts"]
    for where in ("reorder:send_pending", "stage:accept", "stage:_advanced", "policy:next_task"):
        assert fenced.get(f"bobox_sched.policies.ordered.{where}", 0) > 0, (where, fenced)


def test_tstream_and_the_bobox_policy_with_fences_are_serially_equivalent(fenced):
    from txn_workload import make_events, make_store, run_oracle, run_scheduled, same

    from bobox_sched.txn import TxnConfig

    store = make_store(200, seed=1)
    ev = make_events(400, 200, 0.8, seed=1)
    dense_ref, out_ref = run_oracle(make_store(200, seed=1), ev)
    dense, out, _, _ = run_scheduled(store, ev, TxnConfig(store, 4, interval=50), policy="bobox", threads=2)
    assert np.array_equal(dense, dense_ref)
    assert same(out, out_ref) is None
    for where in ("txn.coordinator:gate", "txn.coordinator:_finish", "txn.operator:_run_dual", "core.task:run_task"):
        assert fenced.get(f"bobox_sched.{where}", 0) > 0, (where, fenced)
