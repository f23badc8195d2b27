"""The runtime keeps what it needs per operator in its own record (``core.task.Task``),
never on the user's operator: after a request under any policy, an operator carries the
attributes it set itself plus its ``name`` (the one field the runtime sets), and
nothing else (issue 31: "runtime state lives on the user's object")."""

from __future__ import annotations

import pytest

from bobox_sched import Plan, Scheduler
from bobox_sched.core.task import Task
from tests.ops import Double, Range, SumSink

# StreamOperator's own bookkeeping of which inputs ended (its process() keeps it on the
# instance: the operator class's state, not the runtime's)
OPERATOR_BASE_FIELDS = {"_eos_done"}

POLICIES = {
    "bobox": dict(policy="bobox"),
    "simple": dict(policy="simple"),
    "streams": dict(policy="streams", threads=2),
    "ordered": dict(policy="ordered"),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_run_sets_nothing_but_the_name_on_the_users_operators(policy):
    made = []  # (operator, its attributes as its constructor left them)

    def keep(cls, *args):
        def factory():
            op = cls(*args)
            made.append((op, set(vars(op))))
            return op
        return factory

    plan = Plan("record")
    plan.add("src", keep(Range, 1000, 100))
    plan.add("dbl", keep(Double))
    plan.add("sink", keep(SumSink))
    plan.chain("src", "dbl", "sink")
    with Scheduler(threads_per_node=2, pin=False, **POLICIES[policy]) as s:
        assert s.submit(plan).result(timeout=60) == 2 * sum(range(1000))
    assert [type(op).__name__ for op, _ in made] == ["Range", "Double", "SumSink"]
    for op, before in made:
        added = set(vars(op)) - before - OPERATOR_BASE_FIELDS
        assert added == {"name"}, f"{policy}: the run set {sorted(added - {'name'})} on operator {op.name!r}"


def test_a_task_record_refuses_fields_it_does_not_declare():
    """Slotted: a runtime field set by mistake (a typo, a policy's own state) raises
    instead of growing the record."""
    t = Task(SumSink(), "sink", request=None, buffer_packets=4)
    assert t.op.name == "sink" and t.inputs == ("in",) and len(t.inq) == 1 and t.inq[0].capacity == 4
    with pytest.raises(AttributeError):
        t.stage = object()
