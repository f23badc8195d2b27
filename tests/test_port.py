"""The one input port (bobox_sched/core/port.py): its bounded hand-off, waiters, end of
stream and SPSC try-locks. The core's use of it (a sender waits on the port it sent to)
is in test_task_races.py, beside the other delivery interleavings."""

from collections import deque

import pytest

from bobox_sched.core.port import EMPTY, Port


class LookHook(deque):
    """A waiter list whose append runs `hook` right after the sender registered (a thread
    switch between the registration and the sender's second look)."""

    hook = None

    def append(self, x):
        super().append(x)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


def test_offer_into_a_full_port_registers_the_sender_and_refuses():
    p = Port(2)
    assert p.offer("a", "s1") and p.offer("b", "s1")
    assert not p.offer("c", "s1")
    assert list(p) == ["a", "b"] and list(p.waiters) == ["s1"]
    assert p.popleft() == "a"
    assert p.take_waiters() == ["s1"] and p.take_waiters() == []  # each waiter once


def test_offer_takes_room_that_appeared_while_the_sender_registered():
    """No sender waits for room that exists: the consumer pops (and drains the waiters,
    finding none yet) between the sender's full check and its registration."""
    p = Port(1)
    p.append("a")
    p.waiters = LookHook()
    p.waiters.hook = p.popleft  # the consumer takes "a" right after the registration
    assert p.offer("b", "s")
    assert list(p) == ["b"]


def test_capacity_must_be_a_positive_int():
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError):
            Port(bad)


def test_closed_port_ends_once_drained():
    p = Port(4)
    p.append("x")
    p.close()
    assert p.closed and not p.ended()
    p.popleft()
    assert p.ended()


def test_ports_compare_by_identity_not_contents():
    a, b = Port(1), Port(1)
    assert a != b and a not in [b] and len({a, b}) == 2
    assert a == a


def test_take_on_an_emptied_port_is_a_failed_pop():
    p = Port(3)
    assert p.push(1) and p.push(2)
    assert p.take() == 1
    p.clear()  # a request that ends empties it under the consumer
    assert p.take() is EMPTY


def test_a_producer_that_retries_is_registered_once():
    p = Port(1)
    p.append("a")
    assert not p.offer("b", "s") and not p.offer("b", "s") and not p.offer("b", "t")
    assert list(p.waiters) == ["s", "t"]


def test_fence_is_a_barrier_only_without_the_gil(monkeypatch):
    """sync.FENCED follows the interpreter: off under the GIL (the GIL orders every
    bytecode), on without it, where fence() takes and releases its lock."""
    import sys

    from bobox_sched.core import sync

    assert sync.FENCED is not sync._gil_enabled()
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert not sync._gil_enabled()
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    assert sync._gil_enabled()
    taken = []

    class SpyLock:
        def acquire(self):
            taken.append("acquire")

        def release(self):
            taken.append("release")

    monkeypatch.setattr(sync, "_fence_lock", SpyLock())
    sync.fence()
    assert taken == ([] if not sync.FENCED else ["acquire", "release"])
    monkeypatch.setattr(sync, "FENCED", True)
    sync.fence()
    assert taken[-2:] == ["acquire", "release"]


def test_drop_empties_the_buffer_and_the_waiters():
    p = Port(1)
    p.append("a")
    assert not p.offer("b", "s")
    p.drop()
    assert not p and not p.waiters
