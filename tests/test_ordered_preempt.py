"""The *real* reorder buffer and hybrid queue (``stream/reorder.py``, ``stream/hybrid.py``)
with a second worker's step injected before every bytecode of a first worker's call
(``test_task_races.preempt_at``): spec 000 T1, T4 and A5 on the shipped code.

``test_ordered_steps.py`` explores every interleaving of the paper's steps on models of
the two structures (``ordered_machines.py``); these tests check that the code itself
keeps the invariants at every point where a thread switch (or, in a free-threaded build,
another core) can come in:

* reorder buffer: every unit is emitted once, in serial order, a filter's empty unit
  too (R8); afterwards ``next`` = n + 1 and the window is empty (R1-R5, F4:L40 re-check);
* A5: a drain stopped by a full receiver is never lost, whenever the receiver's dequeue
  (which schedules a drain) comes in;
* hybrid queue: every unit runs once, each bucket's units in arrival order (H2), never
  by two workers (H1: a second active worker would run a bucket's units out of order or
  twice), and the counts are back to 0 (F7:L10-14).

Each scenario stays inside what the ordered policy allows: a worker holds unit t only
while t < next + capacity (credit-gated dequeue, spec A4), so an injected worker whose
unit is not admissible yet reports that it would wait (``preempt_at`` then tries at the
next bytecode)."""

from __future__ import annotations

import pytest
from test_task_races import every_point, preempt_at

from bobox_sched.policies.ordered.hybrid import HybridQueue
from bobox_sched.policies.ordered.reorder import EMPTY, ReorderBuffer

# (units sent before, units the preempted worker sends, units the injected worker sends)
REORDER_CASES = [
    ((), (1,), (2,)),
    ((), (2,), (1,)),
    ((2,), (1,), (3,)),
    ((), (1,), (2, 3)),
    ((1,), (2,), (3,)),
    ((3,), (1,), (2,)),
    ((), (1, 2), (3,)),
]
FILTERED = 2  # this unit's input produced no rows: a real object, not EMPTY (R8)


def _admissible(cap, before, mine, theirs) -> bool:
    """Inside the credit window (spec A4): the units sent before and the preempted
    worker's are below 1 + capacity, and the injected worker's below next + capacity
    once the preempted worker is done (it may come in after that)."""
    done = set(before + mine)
    after_mine = next(t for t in range(1, len(done) + 2) if t not in done)
    return max(before + mine) <= cap and max(theirs) < after_mine + cap


def _unit(t):
    return ("no rows", t) if t == FILTERED else ("rows", t)


@pytest.mark.parametrize("cap,before,mine,theirs", [
    (cap, *c) for cap in (1, 2, 3) for c in REORDER_CASES if _admissible(cap, *c)])
def test_reorder_buffer_every_preemption_point(cap, before, mine, theirs):
    n_units = len(before) + len(mine) + len(theirs)

    def case(n):
        sent = []
        rb = ReorderBuffer(cap, lambda o: sent.append(o) or True)
        for t in before:
            assert rb.send(t, _unit(t))

        def main():
            for t in mine:
                assert rb.send(t, _unit(t))

        def other():
            for t in theirs:
                if t >= rb.next + cap:  # no credit for it yet: this worker would wait
                    return False
            for t in theirs:
                assert rb.try_add(t, _unit(t))
                rb.send_pending()

        fired = preempt_at(n, main, other)
        assert [o[1] for o in sent] == list(range(1, n_units + 1)), (n, sent)
        assert sent[FILTERED - 1] == ("no rows", FILTERED)
        assert rb.next == n_units + 1 and rb.pending() == 0 and rb.buffer == [EMPTY] * cap
        assert not rb.flag.is_set()
        return fired

    assert every_point(case) > 10


def test_reorder_buffer_full_receiver_wakeup_is_never_lost():
    """A5: the drainer's emit finds the receiver full (it registers as waiter and
    returns False); the receiver's dequeue -- clear "full", and run a drain for the
    registered waiter, as the policy's drain task does -- comes in at every point of the
    drainer's send. Everything must be emitted in the end, with nobody left in send."""

    def case(n):
        sent = []
        st = {"full": True, "waiter": False, "dequeued": False}

        def emit(o):
            if st["full"]:
                st["waiter"] = True  # registered; the receiver's next dequeue drains us
                return False
            sent.append(o[1])
            return True

        rb = ReorderBuffer(2, emit, ready=lambda: not st["full"])
        rb.try_add(2, _unit(2))

        def main():
            rb.send(1, _unit(1))

        def other():
            if not st["waiter"]:
                return False  # nothing in the receiver to dequeue before we registered
            st["full"] = False
            st["dequeued"] = True
            st["waiter"] = False
            rb.send_pending()  # the drain task the dequeue scheduled

        fired = preempt_at(n, main, other)
        assert st["dequeued"]
        assert sent == [1, 2], (n, sent, rb.buffer, rb.next)
        assert rb.next == 3 and rb.pending() == 0 and not rb.flag.is_set()
        return fired

    assert every_point(case) > 10


def _hybrid(p, units):
    q = HybridQueue(p)
    for b, u in units:
        q.add(b, u)
    return q


def _check_hybrid(q, ran, added):
    """Every unit ran once; per bucket in arrival order (H2); counts 0; queues empty."""
    assert sorted(ran) == sorted(added), ran
    for b in {b for b, _ in added}:
        assert [u for bb, u in ran if bb == b] == [u for bb, u in added if bb == b], (b, ran)
    assert all(c.value == 0 for c in q.count)
    assert not q.master and not any(q.parts)


HYBRID_BEFORE = [(0, "a0"), (0, "a1"), (1, "b0"), (0, "a2"), (1, "b1")]


@pytest.mark.parametrize("quota", [1, 2, 10])
def test_hybrid_queue_two_consumers_every_preemption_point(quota):
    """Two workers allotted to the operator consume at once: one delegates to the other
    instead of running a bucket that has an active worker (F7:L10)."""

    def case(n):
        q = _hybrid(2, HYBRID_BEFORE)
        ran = []

        def run(u, b):
            ran.append((b, u))

        def consume():
            q.consume(lambda: True, lambda: None, run, quota)

        def other():
            if any(c._lock.locked() for c in q.count):
                return False  # inside a count's two-bytecode lock (core.sync.AtomicCounter): it would wait
            consume()

        fired = preempt_at(n, consume, other)
        while q.has_work():
            consume()
        _check_hybrid(q, ran, HYBRID_BEFORE)
        return fired

    assert every_point(case) > 10


def test_hybrid_queue_producer_and_consumer_every_preemption_point():
    """The producer adds while a worker consumes, and the other way round: a worker
    that took bucket b from the master queue always finds its unit (F7:L4 before L5)."""
    more = [(0, "a3"), (1, "b2")]

    for producer_preempted in (True, False):
        def case(n):
            q = _hybrid(2, HYBRID_BEFORE[:2])
            ran = []

            def run(u, b):
                ran.append((b, u))

            def produce():
                for b, u in more:
                    q.add(b, u)

            def consume():
                q.consume(lambda: True, lambda: None, run, 10)

            main, other = (produce, consume) if producer_preempted else (consume, produce)
            fired = preempt_at(n, main, other)
            while q.has_work():
                consume()
            _check_hybrid(q, ran, HYBRID_BEFORE[:2] + more)
            return fired

        assert every_point(case) > 3
