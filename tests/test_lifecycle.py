"""The Scheduler's lifecycle, as ``concurrent.futures`` executors have it
(``bobox_sched/core/lifecycle.py``): a Scheduler dropped without ``shutdown()`` is collected
and its threads end; ``shutdown(wait=False)`` ends every thread without joining it;
runtime threads are not daemons, and the interpreter still exits (after the requests
that were running); process-wide settings come back at shutdown; a failing policy
backs off; runtime warnings are not pinning warnings.

Waits are bounded waits on a condition (``wait_for``), never a sleep and a look."""

import gc
import inspect
import itertools
import os
import subprocess
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from ops import CountSink, SumSink
from test_policy_bobox import make_topology

from bobox_sched import Operator, Plan, Scheduler, Source

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


# -- 1. a Scheduler dropped without shutdown() ---------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_a_dropped_scheduler_is_collected_and_its_threads_end(config):
    s, threads = started_scheduler(config)
    ref = weakref.ref(s)
    policy = weakref.ref(s.policy)
    del s
    gc.collect()
    assert ref() is None, "the Scheduler outlived its last reference"
    assert wait_for(lambda: not running(threads)), f"threads of a dropped scheduler still run: {running(threads)}"
    # and the runtime behind it is freed once its threads are gone
    assert wait_for(lambda: gc.collect() is not None and policy() is None), "the dropped scheduler's policy leaked"


def test_a_dropped_scheduler_finishes_the_requests_whose_handles_are_held():
    """As an executor's pending futures: dropping the Scheduler refuses new requests
    but lets the running ones finish."""
    before = set(threading.enumerate())
    s = Scheduler(policy="simple", threads_per_node=1, pin=False)
    h = s.submit(ticker_plan(20, 0.005))
    del s
    gc.collect()
    assert h.result(60) == sum(range(20))
    threads = new_threads(before)
    assert wait_for(lambda: not running(threads)), f"still running: {running(threads)}"


# -- 2. shutdown(wait=False) --------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_shutdown_without_wait_still_ends_every_thread(config):
    s, threads = started_scheduler(config)
    try:
        s.shutdown(wait=False)
        assert wait_for(lambda: not running(threads)), f"still running after shutdown(wait=False): {running(threads)}"
    finally:
        s.shutdown()  # (s stays referenced until here: only shutdown may have stopped its threads)


def test_shutdown_waits_for_running_requests_of_a_model_without_workers():
    """streams' manual model has no worker to join: shutdown(wait=True) must still wait
    for the running request (it joined the source's thread for at most 5 s)."""
    s = Scheduler(policy="streams", model="manual", pin=False)
    gate = threading.Event()
    p = Plan("gated")
    p.add("src", Gated, gate)
    p.add("sink", CountSink)
    p.chain("src", "sink")
    h = s.submit(p)
    stopper = threading.Thread(target=s.shutdown)
    stopper.start()
    try:
        stopper.join(6.0)  # longer than the old code's 5 s join of the source's thread
        assert stopper.is_alive(), "shutdown() returned while a request was still running"
    finally:
        gate.set()
        stopper.join(60)
    assert h.done() and h.result() == {"packets": 1, "rows": 1}


class Gated(Operator):
    """A source that waits for `gate`, sends one row and finishes."""

    outputs = ("out",)

    def __init__(self, gate, entered=None):
        self.gate = gate
        self.entered = entered

    def process(self, ctx):
        if self.entered is not None:
            self.entered.set()
        self.gate.wait(60)
        p = ctx.new_packet({"x": np.int64}, 1)
        p["x"][:] = 1
        ctx.send("out", p)
        ctx.close()
        ctx.finish()


# -- 3. operator threads that do not end at shutdown -------------------------------------


def test_shutdown_warns_naming_an_operator_thread_that_does_not_end(monkeypatch):
    from bobox_sched.policies.streams import runtime as streams_runtime

    monkeypatch.setattr(streams_runtime, "OP_THREAD_JOIN_S", 0.05, raising=False)
    entered, gate = threading.Event(), threading.Event()
    s = Scheduler(policy="streams", model="manual", pin=False)
    p = Plan("stuck")
    p.add("src", Gated, gate, entered)
    p.add("sink", CountSink)
    p.chain("src", "sink")
    s.submit(p)
    try:
        assert entered.wait(30)
        with pytest.warns(RuntimeWarning, match=r"thread 'bobox-streams-src\d+-src'") as rec:
            s.shutdown(cancel=True)  # the source's process() is still waiting for the gate
    finally:
        gate.set()
        s.shutdown()
    from bobox_sched import SchedulerWarning

    assert [w.category for w in rec if "bobox-streams-src" in str(w.message)] == [SchedulerWarning]
    stuck = [t for t in threading.enumerate() if t.name.startswith("bobox-streams-src")]
    for t in stuck:
        t.join(30)
    assert running(stuck) == []


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


# -- 5. a policy whose next_task keeps raising -------------------------------------------


class FakeClock:
    """The worker's back-off sleep, without sleeping: time moves by what it sleeps."""

    def __init__(self):
        self.now = 0.0
        self.sleeps: list = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def run_worker(monkeypatch, next_task, task_stats=True, stopping=lambda: False):
    """Run a worker's loop (on its own thread, as in a scheduler) over a stub policy;
    returns the warnings it gave."""
    from bobox_sched.core import worker as worker_mod

    warned = []

    class Sched:
        _locality_sampler = None
        policy = SimpleNamespace(name="stub", next_task=next_task, run_task=lambda w, op: None)

        def __init__(self):
            self.task_stats = task_stats

        @property
        def _stopping(self):
            return stopping()

        def _warn(self, message, category=None):
            warned.append(message)

    w = worker_mod.Worker(Sched(), 0)
    t = threading.Thread(target=w._main)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the worker loop did not end"
    return warned


@pytest.mark.parametrize("task_stats", [True, False])
def test_a_failing_next_task_backs_off_exponentially_and_warns_once(monkeypatch, task_stats):
    from bobox_sched.core import worker as worker_mod

    clock = FakeClock()
    monkeypatch.setattr(worker_mod, "_sleep", clock.sleep, raising=False)
    calls = []

    def next_task(w):
        calls.append(clock.now)
        if clock.now >= 1.0 or len(calls) >= 1000:  # 1000: ends the old loop, which never sleeps
            return None
        raise RuntimeError("policy bug")

    warned = run_worker(monkeypatch, next_task, task_stats)
    # 1, 2, 4, ..., 64 ms, then 100 ms steps: one second of failures is 17 calls, not a spin
    assert len(calls) <= 20, f"{len(calls)} next_task calls in {clock.now:.3f} s of back-off"
    assert clock.sleeps[:8] == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1])
    assert max(clock.sleeps) == pytest.approx(0.1)
    assert len(warned) == 1 and "policy bug" in warned[0]


def test_the_back_off_starts_again_after_a_task(monkeypatch):
    from bobox_sched.core import worker as worker_mod

    clock = FakeClock()
    monkeypatch.setattr(worker_mod, "_sleep", clock.sleep, raising=False)
    script = iter(["raise", "raise", "raise", "task", "raise", "raise"])
    op = SimpleNamespace(req=SimpleNamespace(wsteps=[[0] * 6]))

    def next_task(w):
        step = next(script, None)
        if step == "raise":
            raise RuntimeError("transient")
        return op if step == "task" else None

    run_worker(monkeypatch, next_task)
    assert clock.sleeps == pytest.approx([0.001, 0.002, 0.004, 0.001, 0.002])


def test_a_worker_whose_next_task_raises_while_stopping_exits(monkeypatch):
    from bobox_sched.core import worker as worker_mod

    monkeypatch.setattr(worker_mod, "_sleep", FakeClock().sleep, raising=False)
    calls = []

    def next_task(w):
        calls.append(1)
        if len(calls) >= 1000:
            return None
        raise RuntimeError("broken policy")

    run_worker(monkeypatch, next_task, stopping=lambda: len(calls) >= 5)
    assert len(calls) == 5, "the worker went on calling a failing next_task after the scheduler stopped"


# -- 6. process-wide settings ------------------------------------------------------------


def stack_size() -> int:
    """``threading.stack_size()`` without changing it (called with no argument it sets the
    size back to 0, the platform's default, and returns the old one)."""
    size = threading.stack_size()
    threading.stack_size(size)
    return size


def deep_plan(depth: int = 40) -> Plan:
    from ops import Double

    p = Plan("deep")
    p.add("src", Ticker, 3, 0.001)
    names = ["src"]
    for i in range(depth):
        p.add(f"d{i}", Double)
        names.append(f"d{i}")
    p.add("sink", SumSink)
    p.chain(*names, "sink")
    return p


@pytest.mark.parametrize("how", ["wait", "no-wait", "dropped"])
def test_streams_gives_the_recursion_limit_and_stack_size_back(how):
    limit, stack = sys.getrecursionlimit(), stack_size()
    s = Scheduler(policy="streams", threads=2, pin=False)
    try:
        assert s.submit(deep_plan()).result(60) == 3 * 2**40
        assert sys.getrecursionlimit() > limit, "the test needs a plan deep enough to raise the limit"
    except BaseException:
        s.shutdown(cancel=True)
        raise
    if how == "wait":
        s.shutdown()
        assert sys.getrecursionlimit() == limit
    else:
        if how == "no-wait":
            s.shutdown(wait=False)
        else:
            del s
            gc.collect()
        assert wait_for(lambda: sys.getrecursionlimit() == limit), f"left at {sys.getrecursionlimit()}, was {limit}"
    assert stack_size() == stack


def test_deep_thread_starts_give_a_user_stack_size_back():
    """(This one held before too: the swap was already serialised and undone.)"""
    old = threading.stack_size(4 << 20)
    try:
        with Scheduler(policy="streams", threads=2, pin=False) as s:
            assert s.submit(ticker_plan()).result(60) == 3
            assert stack_size() == 4 << 20
        assert stack_size() == 4 << 20
    finally:
        threading.stack_size(old)


def test_the_recursion_limit_stays_raised_while_any_holder_needs_it(monkeypatch):
    from bobox_sched.policies.streams import threads as st

    base = sys.getrecursionlimit()
    a, b = object(), object()
    need = lambda depth: 1000 + st.FRAMES_PER_OPERATOR * depth  # noqa: E731
    st.ensure_recursion(100, a)
    assert sys.getrecursionlimit() == max(base, need(100))
    st.ensure_recursion(20, b)  # already enough: b relies on a's raise
    st.release_recursion(a)
    assert sys.getrecursionlimit() >= need(20), "b's need was dropped with a's hold"
    st.release_recursion(b)
    assert sys.getrecursionlimit() == base
    # a limit the user set meanwhile is theirs: left alone
    st.ensure_recursion(100, a)
    sys.setrecursionlimit(need(100) + 7)
    try:
        st.release_recursion(a)
        assert sys.getrecursionlimit() == need(100) + 7
    finally:
        sys.setrecursionlimit(base)


# -- 7. threads are not daemons; the interpreter still exits ------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_runtime_threads_are_not_daemons(config):
    s, threads = started_scheduler(config)
    try:
        assert [t.name for t in threads if t.daemon] == []
    finally:
        s.shutdown()


EXIT_SCRIPT = """
import numpy as np
from bobox_sched import Plan, Scheduler, Source, StreamOperator

""" + inspect.getsource(Ticker) + """
class Report(StreamOperator):
    outputs = ()

    def __init__(self):
        self.total = 0

    def on_packet(self, ctx, port, pkt):
        self.total += int(pkt["x"].sum())

    def on_end(self, ctx):
        print("request done:", self.total, flush=True)

idle = Scheduler(pin=False, **OPTIONS)  # never used, never shut down
s = Scheduler(pin=False, **OPTIONS)
p = Plan("at-exit")
p.add("src", Ticker, 20, 0.01)
p.add("sink", Report)
p.chain("src", "sink")
s.submit(p)  # not waited for, not shut down
print("main done", flush=True)
"""


@pytest.mark.parametrize("options", [dict(policy="bobox"), dict(policy="simple"), dict(policy="ordered"),
                                     dict(policy="streams", threads=2), dict(policy="streams", model="manual")],
                         ids=["bobox", "simple", "ordered", "streams", "streams-manual"])
def test_a_script_that_never_shuts_down_exits_after_its_requests(options):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    try:
        out = subprocess.run([sys.executable, "-c", f"OPTIONS = {options!r}\n" + EXIT_SCRIPT], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the interpreter did not exit: {e.stdout!r} {e.stderr!r}")
    assert out.returncode == 0, out.stderr
    # As an executor's pending work: the request submitted before exit completed.
    assert out.stdout.splitlines() == ["main done", f"request done: {sum(range(20))}"], (out.stdout, out.stderr)
