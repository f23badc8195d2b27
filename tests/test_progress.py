"""``bobox_sched/control/progress.py``: a Passage completes exactly once per punctuation,
on the last participant's pass; ended participants count as passed for every later
punctuation; a participant passing twice is an error (it would end the wait early). A
request completes when every operator passed End, and a transaction group's barrier
opens when every instance passed its batch (both run end to end in their own tests;
here the counting itself, and the request's response to an operator that finishes
twice)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bobox_sched import Operator, Plan, Scheduler
from bobox_sched.control.progress import Passage


def test_completes_on_the_last_pass_only():
    p = Passage(3)
    assert [p.pass_("a"), p.pass_("b")] == [False, False] and p.waiting_for == 1 and not p.complete
    assert p.pass_("c") is True and p.complete


def test_passing_twice_is_an_error():
    p = Passage(2)
    p.pass_(0)
    with pytest.raises(RuntimeError, match="participant 0 passed the same punctuation twice"):
        p.pass_(0)
    assert p.waiting_for == 1


def test_ended_participants_have_passed_every_later_punctuation():
    p = Passage(3)
    p.pass_(0, final=True)
    p.pass_(1)
    assert p.pass_(2) is True and not p.all_ended
    p.next()
    assert p.waiting_for == 2  # 0 ended: it has passed this one already
    with pytest.raises(RuntimeError):
        p.pass_(0)
    p.pass_(1, final=True)
    assert p.pass_(2, final=True) is True and p.all_ended
    p.next()
    assert p.complete  # nobody is left to wait for


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.data())
def test_a_random_schedule_completes_each_round_exactly_once(n, data):
    """Rounds of passes in any order, participants ending at random: each round
    completes on exactly its last pass, and rounds go on until everyone ended."""
    p = Passage(n)
    ended: set = set()
    for _ in range(10):
        order = data.draw(st.permutations([i for i in range(n) if i not in ended]))
        for k, who in enumerate(order):
            final = data.draw(st.booleans())
            assert p.pass_(who, final) is (k == len(order) - 1)
            if final:
                ended.add(who)
        assert p.complete and p.all_ended is (len(ended) == n)
        if p.all_ended:
            break
        p.next()
        assert p.waiting_for == n - len(ended)


class _Src(Operator):
    outputs = ("out",)

    def process(self, ctx):
        ctx.finish()


class _Sink(Operator):
    inputs = ("in",)

    def process(self, ctx):
        while ctx.recv("in") is not None:
            pass
        if ctx.at_eos("in"):
            ctx.set_result("ok")
            ctx.finish()


def test_an_operator_that_finishes_twice_fails_its_request(monkeypatch):
    """The request fails naming the error instead of completing early or hanging."""
    from bobox_sched.core import request as request_mod

    real = request_mod.Request.op_finished

    def twice(self, op):
        real(self, op)
        if op.name == "src":
            real(self, op)

    monkeypatch.setattr(request_mod.Request, "op_finished", twice)
    p = Plan("twice")
    p.add("src", _Src)
    p.add("sink", _Sink)
    p.chain("src", "sink")
    with Scheduler(threads_per_node=1, pin=False) as s:
        h = s.submit(p)
        with pytest.raises(RuntimeError, match="participant 'src' passed the same punctuation twice"):
            h.result(60)
