"""Plan validation: unconnected ports, cycles, duplicate names, bad references."""

import pytest
from ops import Double, Range, SumSink

from bobox_sched import Operator, Plan


class Two(Operator):
    inputs = ("a", "b")
    outputs = ("out",)


def test_valid_plan():
    p = Plan("ok")
    p.add("src", Range, 10)
    p.add("d", Double)
    p.add("sink", SumSink)
    p.chain("src", "d", "sink")
    ops, edges = p.instantiate()
    assert set(ops) == {"src", "d", "sink"} and len(edges) == 2
    ops2, _ = p.instantiate()
    assert ops2["d"] is not ops["d"]  # fresh operators per request


def test_duplicate_name():
    p = Plan()
    p.add("x", Range, 1)
    with pytest.raises(ValueError, match="duplicate operator name 'x'"):
        p.add("x", Double)


def test_unconnected_input_names_operator():
    p = Plan()
    p.add("src", Range, 1)
    p.add("d", Double)
    p.add("sink", SumSink)
    p.connect("src", "sink")
    with pytest.raises(ValueError, match="operator 'd': input port 'in' is not connected"):
        p.validate()


def test_unconnected_output_names_operator():
    p = Plan()
    p.add("src", Range, 1)
    p.add("d", Double)
    p.connect("src", "d")
    with pytest.raises(ValueError, match="operator 'd': output port 'out' is not connected"):
        p.validate()


def test_cycle_names_operator():
    p = Plan()
    p.add("src", Range, 1)
    p.add("two", Two)
    p.add("d", Double)
    p.add("d2", Double)
    p.connect("src", "two.a")
    p.connect("two.out", "d")
    p.connect("d", "d2")
    p.connect("d2", "two.b")
    with pytest.raises(ValueError, match=r"cycle through operator '(two|d|d2)'"):
        p.validate()


def test_self_loop():
    p = Plan()
    p.add("d", Double)
    p.connect("d", "d")
    with pytest.raises(ValueError, match="cycle through operator 'd'"):
        p.validate()


def test_bad_references():
    p = Plan()
    p.add("src", Range, 1)
    p.add("two", Two)
    p.connect("src", "nope")
    with pytest.raises(ValueError, match="no operator named 'nope'"):
        p.validate()
    p = Plan()
    p.add("src", Range, 1)
    p.add("two", Two)
    p.connect("src", "two")
    with pytest.raises(ValueError, match="operator 'two': say which input port"):
        p.validate()
    p = Plan()
    p.add("src", Range, 1)
    p.add("two", Two)
    p.connect("src", "two.c")
    with pytest.raises(ValueError, match="operator 'two' has no input port 'c'"):
        p.validate()


def test_port_connected_twice():
    p = Plan()
    p.add("src", Range, 1)
    p.add("a", SumSink)
    p.add("b", SumSink)
    p.connect("src", "a")
    p.connect("src", "b")
    with pytest.raises(ValueError, match="operator 'src': output port 'out' is connected twice"):
        p.validate()


def test_empty_plan_and_bad_factory():
    with pytest.raises(ValueError, match="no operators"):
        Plan("e").validate()
    p = Plan()
    p.add("x", lambda: 42)
    with pytest.raises(ValueError, match="operator 'x': factory returned int"):
        p.validate()
    with pytest.raises(ValueError, match="non-empty string"):
        Plan().add("a.b", Range, 1)
