"""Balancing across domains (``bobox_sched/domains/front.py``, "Placement and
balancing"): a domain gets at most ``INFLIGHT_PER_WORKER`` requests per worker, the rest
wait in the front and migrate to the domain that frees up first; a request that had not
started outlives the death of its domain; waiting requests can be cancelled, and a
shutdown sends or cancels them.

Each test holds domains busy with gate requests: a source that yields the worker every
few milliseconds until a file exists (so the domain keeps its other work going), which
the test creates when it is done looking."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Source
from bobox_sched.core.errors import RequestCancelled
from bobox_sched.domains.front import INFLIGHT_PER_WORKER, DomainDied
from ops import Range, SumSink

pytestmark = pytest.mark.slow


class Gate(Source):
    """Empty packets until `path` exists (or 120 s passed: a failing test still ends)."""

    def __init__(self, path: str):
        self.path = path
        self.deadline = None

    def next_packet(self, ctx):
        if self.deadline is None:
            self.deadline = time.monotonic() + 120
        if os.path.exists(self.path) or time.monotonic() > self.deadline:
            return None
        time.sleep(0.005)
        return ctx.new_packet({"x": np.int64}, 0)


def gate_plan(path) -> Plan:
    p = Plan("gate")
    p.add("src", Gate, str(path))
    p.add("sink", SumSink)
    p.chain("src", "sink")
    return p


def sum_plan(n: int) -> Plan:
    p = Plan(f"sum{n}")
    p.add("src", Range, n, 1000)
    p.add("sink", SumSink)
    p.chain("src", "sink")
    return p


def block(s, path, slots) -> list:
    """Fill each domain of `slots` with gate requests up to its limit."""
    return [s.submit_to(i, gate_plan(path)) for i in slots for _ in range(INFLIGHT_PER_WORKER)]


def test_waiting_requests_migrate_to_the_domain_that_frees_up(tmp_path):
    gate, gate1 = tmp_path / "open", tmp_path / "open1"
    with Scheduler(domains=2, threads_per_node=1) as s:
        front = s._core
        blockers = block(s, gate, [0])  # domain 0 full until the gate opens
        first = block(s, gate1, [1])  # domain 1 full until gate1 opens
        hs = [s.submit(sum_plan(1000 + i)) for i in range(8)]
        st = s.stats()  # placed by load, half on each, none started
        assert [d["waiting"] for d in st["domains"]] == [4, 4] and [h.domain for h in hs] == [0, 1] * 4
        gate1.touch()  # domain 1 frees up: it takes its own, then domain 0's
        assert [h.result(60) for h in hs] == [n * (n - 1) // 2 for n in range(1000, 1008)]
        assert [b.result(60) for b in first] == [0] * len(first)
        assert {h.domain for h in hs} == {1} and not any(b.done() for b in blockers)
        st = s.stats()
        assert st["requests_migrated"] == 4 and st["requests_waiting"] == 0
        assert all(h.stats["waiting_s"] >= 0 and h.stats["elapsed_s"] >= h.stats["waiting_s"] for h in hs)
        gate.touch()
        assert [b.result(60) for b in blockers] == [0] * len(blockers)
        assert front.migrated == st["requests_migrated"]


def test_requests_not_started_outlive_their_domains_death(tmp_path):
    gate = tmp_path / "open"
    with Scheduler(domains=2, threads_per_node=1) as s:
        front = s._core
        b0 = block(s, gate, [0])
        b1 = block(s, gate, [1])
        hs = [s.submit(sum_plan(2000 + i)) for i in range(4)]  # every domain full: all wait
        assert s.stats()["requests_waiting"] == 4
        os.kill(front.domains[0]["pid"], signal.SIGKILL)
        for b in b0:  # what ran there fails ...
            with pytest.raises(DomainDied, match="killed by SIGKILL"):
                b.result(60)
        # ... what waited for it runs elsewhere: on the restarted domain 0 (domain 1 is still held)
        assert [h.result(120) for h in hs] == [n * (n - 1) // 2 for n in range(2000, 2004)]
        assert {h.domain for h in hs} == {0} and front.restarts == 1
        assert not any(b.done() for b in b1)
        gate.touch()
        assert [b.result(60) for b in b1] == [0] * len(b1)


def test_cancel_and_shutdown_of_waiting_requests(tmp_path):
    gate = tmp_path / "open"
    s = Scheduler(domains=2, threads_per_node=1)
    blockers = block(s, gate, [0, 1])
    hs = [s.submit(sum_plan(3000 + i)) for i in range(4)]
    assert hs[0].cancel()
    with pytest.raises(RequestCancelled):
        hs[0].result(5)
    assert hs[0].state == "cancelled" and s.stats()["requests_waiting"] == 3
    s.shutdown(wait=False)  # the waiting ones are sent: they end as in-process, after the gate
    gate.touch()
    assert [h.result(60) for h in hs[1:]] == [n * (n - 1) // 2 for n in range(3001, 3004)]
    assert [b.result(60) for b in blockers] == [0] * len(blockers)
    s.shutdown()
    gate.unlink()
    s = Scheduler(domains=2, threads_per_node=1)
    blockers = block(s, gate, [0, 1])
    hs = [s.submit(sum_plan(10)) for _ in range(2)]
    gate.touch()
    s.shutdown(cancel=True)  # not started: cancelled
    for h in hs:
        with pytest.raises(RequestCancelled):
            h.result(5)
