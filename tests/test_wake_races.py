"""The bobox policy's lock-free sleep/wake protocol (node.py's module doc) at every
preemption point: a worker going to sleep (``try_sleep``) and a task pusher, or a
lock-free waker and ``wake_all``, one running inside the other at each bytecode of the
runtime (``test_task_races.preempt_at``). Checked: a park is released at most once per
sleep (a second release of the worker's lock raises), and a worker never stays asleep
while its node has more tasks than running threads."""

from __future__ import annotations

import pytest
from test_policy_bobox import Op, Req, make_policy
from test_task_races import every_point, preempt_at


class Park:
    """A worker's binary semaphore as a count: release adds one, acquire takes one (a
    real acquire with nothing released would wait for the release that comes later)."""

    def __init__(self):
        self.releases = 0
        self.acquires = 0

    def release(self):
        if self.releases > self.acquires:
            raise RuntimeError("release unlocked lock")  # what threading.Lock raises
        self.releases += 1

    def acquire(self, blocking=True):
        self.acquires += 1
        return True


def node_of_two():
    p = make_policy(nodes=1, threads=2)
    node = p.nodes[0]
    w0, w1 = node.workers
    w0.park, w1.park = Park(), Park()
    return p, node, w0, w1, Req(p, 0)


def asleep(w, slept):
    """Does `w` sleep now: it decided to (try_sleep True) and no release is left for it
    to take; a release taken by try_sleep's own acquire (it changed its mind) is spent."""
    return slept and w.park.releases - w.park.acquires == 0


PUSHES = {
    # w0 runs and already queued one task: a second one needs another thread
    "second immediate": lambda p, r, w0: p.push_immediate(w0, Op(r, "b")),
    # w0 has an immediate task queued: a deferred one needs another thread
    "deferred by a busy worker": lambda p, r, w0: p.push_deferred(r, Op(r, "d"), w0),
    # a timer, a channel, submit
    "deferred from outside": lambda p, r, w0: p.push_deferred(r, Op(r, "d"), None),
    # an operator placed on this node
    "pinned": lambda p, r, w0: p.push_on(r, Op(r, "x"), node=0),
}


@pytest.mark.parametrize("push", list(PUSHES))
@pytest.mark.parametrize("sleeper_first", [True, False])
def test_sleep_and_push_every_preemption(push, sleeper_first):
    """w0 runs with one immediate task queued; w1 goes to sleep while w0 pushes a task
    that needs another thread: w1 ends awake, whoever ran first."""

    def case(n):
        p, node, w0, w1, r = node_of_two()
        p.push_immediate(w0, Op(r, "a"))
        slept = []

        def sleep():
            slept.append(p.try_sleep(w1))

        def do_push():
            PUSHES[push](p, r, w0)

        main, other = (sleep, do_push) if sleeper_first else (do_push, sleep)
        fired = preempt_at(n, main, other)
        where = f"{push}, {'try_sleep' if sleeper_first else 'push'} preempted at bytecode {n}"
        assert w1.park.releases - w1.park.acquires in (0, 1), where
        assert not asleep(w1, slept[0]), f"{where}: w1 sleeps with {node.pending_tasks()} tasks and w0 alone running"
        return fired

    assert every_point(case) > 10


def test_wake_one_and_wake_all_every_preemption_release_each_sleeper_once():
    """A pusher's lock-free wake_one and shutdown's wake_all racing over the same
    sleepers: each sleeper's park is released exactly once (a second release of a
    threading.Lock raises RuntimeError in the pusher)."""
    for order in (0, 1):

        def case(n):
            p, node, w0, w1, r = node_of_two()
            for w in (w0, w1):
                assert p.try_sleep(w)
            p.scheduler._stopping = True
            one, everyone = node.wake_one, p.wake_all
            main, other = (one, everyone) if order == 0 else (everyone, one)
            fired = preempt_at(n, main, other)
            for w in (w0, w1):
                assert w.park.releases == 1, f"order {order}, bytecode {n}: {w} released {w.park.releases} times"
            return fired

        assert every_point(case) > 3


@pytest.mark.parametrize("second", ["immediate", "deferred"])
def test_a_running_worker_with_two_tasks_queued_leaves_no_thread_asleep(second):
    """node.py's rule: the pusher's own next task needs no other thread, a second queued
    task does. A run that wakes a blocked sender (a deferred task: nobody woken, the
    pusher takes it next) and then sends a packet, or wakes a second blocked sender,
    has queued two tasks: one must wake the sleeper. (Before: the deferred task was not
    counted, and w1 slept while w0 had both to run, one after the other.)"""
    p, node, w0, w1, r = node_of_two()
    w0.last_req = r  # w0 is running a task of r (run_task sets it)
    assert p.try_sleep(w1)
    p.push_deferred(r, Op(r, "sender"), w0)
    assert w1.park.releases == 0  # one task: w0 runs it next
    if second == "immediate":
        p.push_immediate(w0, Op(r, "receiver"))
    else:
        p.push_deferred(r, Op(r, "other sender"), w0)
    assert w1.park.releases == 1 and node.idle == []
