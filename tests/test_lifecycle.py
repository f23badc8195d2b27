"""The Scheduler's lifecycle, as ``concurrent.futures`` executors have it
(``bobox_sched/lifecycle.py``): a Scheduler dropped without ``shutdown()`` is collected
and its threads end; ``shutdown(wait=False)`` ends every thread without joining it;
runtime threads are not daemons, and the interpreter still exits (after the requests
that were running); process-wide settings come back at shutdown; a failing policy
backs off; runtime warnings are not pinning warnings.

Waits are bounded waits on a condition (``wait_for``), never a sleep and a look."""

import itertools
import threading
import time
import warnings
from pathlib import Path

import numpy as np
from ops import SumSink
from test_policy_bobox import make_topology

from bobox_sched import Plan, Scheduler, Source

REPO = Path(__file__).resolve().parent.parent
# The process-wide thread that stops the schedulers nobody shut down (lifecycle.py); it
# starts with the first Scheduler of the process and lives until exit.
REAPER = "bobox-reaper"


def wait_for(cond, timeout: float = 30.0) -> bool:
    """Poll `cond` until it holds (True) or `timeout` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Ticker(Source):
    """Emits 0..n-1, one row per run, each run `delay` seconds after the last
    (``ctx.reschedule(delay)``: the scheduler's timer thread)."""

    def __init__(self, n: int = 3, delay: float = 0.001):
        self.n = n
        self.delay = delay
        self.i = 0

    def process(self, ctx):
        if self.i >= self.n:
            ctx.close()
            ctx.finish()
            return
        p = ctx.new_packet({"x": np.int64}, 1)
        p["x"][:] = self.i
        self.i += 1
        ctx.send("out", p)
        ctx.reschedule(self.delay)


def ticker_plan(n: int = 3, delay: float = 0.001) -> Plan:
    p = Plan("ticker")
    p.add("src", Ticker, n, delay)
    p.add("sink", SumSink)
    p.chain("src", "sink")
    return p


# Every policy, with each kind of background thread it can have: bobox's balancer (two
# nodes), streams' elastic controller, sources' own threads (streams), port threads
# (dedicated); the ticker starts the timer thread under each.
CONFIGS = {
    "bobox": lambda: dict(policy="bobox", topology=make_topology(2, 1), balance_interval=0.01),
    "simple": lambda: dict(policy="simple", threads_per_node=1),
    "ordered": lambda: dict(policy="ordered", threads_per_node=1),
    "streams": lambda: dict(policy="streams", threads=2),
    "streams-elastic": lambda: dict(policy="streams", elastic=True, min_level=1, max_level=2, period_s=0.05),
    "streams-manual": lambda: dict(policy="streams", model="manual"),
    "streams-dedicated": lambda: dict(policy="streams", model="dedicated"),
}


def new_threads(before: set) -> set:
    return {t for t in threading.enumerate() if t not in before and t.name != REAPER}


def running(threads) -> list:
    return sorted(t.name for t in threads if t.is_alive())


def started_scheduler(config: str):
    """A scheduler of `config` that ran a ticker request, and the threads it started."""
    before = set(threading.enumerate())
    s = Scheduler(pin=False, **CONFIGS[config]())
    try:
        assert s.submit(ticker_plan()).result(60) == 0 + 1 + 2
    except BaseException:
        s.shutdown(cancel=True)
        raise
    threads = new_threads(before)
    assert any(t.name == "bobox-timers" for t in threads), "the ticker did not start the timer thread"
    return s, threads


# -- 4. runtime warnings -----------------------------------------------------------------


def test_runtime_warnings_are_scheduler_warnings_not_pinning_warnings(monkeypatch):
    from bobox_sched.policies.simple import SimplePolicy
    from topology import PinningWarning

    real = SimplePolicy.next_task
    calls = itertools.count()

    def flaky(self, w):
        if next(calls) == 0:
            raise RuntimeError("injected next_task failure")
        return real(self, w)

    monkeypatch.setattr(SimplePolicy, "next_task", flaky)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Scheduler(policy="simple", threads_per_node=1, pin=False) as s:
            assert wait_for(lambda: any("injected" in m for m in s.stats()["warnings"]))
    (w,) = [w for w in caught if "injected" in str(w.message)]
    assert issubclass(w.category, RuntimeWarning) and not issubclass(w.category, PinningWarning), w.category
    from bobox_sched import SchedulerWarning

    assert issubclass(w.category, SchedulerWarning)


