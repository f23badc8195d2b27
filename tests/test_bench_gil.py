"""``bobox bench gil``: py-spy's GIL sampling as a cross-check of the runtime's serial
fraction (``experiments/gil_check.py``).

The sampling tests need py-spy (the 'test' extra installs it) and permission to read this
process; they skip, saying why, only where ptrace is not permitted. They check that the
method tells a worker holding the GIL from one in a nogil kernel, never a speed."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from bobox_sched import BoboxError, Plan, Scheduler, Source, StreamOperator
from experiments import gil_check

RAW = """\
thread (101): bobox-bobox-w0;Thread._bootstrap (threading.py:1002);Worker._main (worker.py:108);run_task (task.py:300);process (ops.py:10) 7
thread (101): bobox-bobox-w0;Thread._bootstrap (threading.py:1002);Worker._main (worker.py:103);next_task (bobox.py:50) 5
thread (0x66);Thread._bootstrap (threading.py:1002);run_task (task.py:310) 2
thread (103): MainThread;<module> (x.py:1);run_task (task.py:300) 11
garbage line without a count
"""


def test_parse_raw_and_busy_worker_samples():
    rows = gil_check.parse_raw(RAW)
    assert [(tid, n) for tid, _, n in rows] == [(101, 7), (101, 5), (102, 2), (103, 11)]
    assert rows[0][1][0] == "Thread._bootstrap (threading.py:1002)"  # the thread entry is not a frame
    # busy = inside run_task of task.py, and only the given threads count
    assert gil_check.worker_samples(rows, {101}) == 7
    assert gil_check.worker_samples(rows, {101, 102}) == 9
    assert gil_check.worker_samples(rows, {104}) == 0


@pytest.fixture(scope="module")
def pyspy():
    exe = gil_check.find_pyspy()  # the test extra installs it: missing is a failure
    try:
        gil_check.check_pyspy(exe)
    except BoboxError as e:
        if "ptrace not permitted" in str(e):
            pytest.skip(f"py-spy may not read this process here: {e}")
        raise
    return exe


class _Ticks(Source):
    """`n` one-row packets."""

    def __init__(self, n: int):
        self.n = n

    def next_packet(self, ctx):
        if self.n == 0:
            return None
        self.n -= 1
        p = ctx.new_packet({"x": np.float64}, 1)
        p["x"][:] = 1.0
        return p


class _PythonSpin(StreamOperator):
    """Pure-Python work per packet: holds the GIL the whole time."""

    outputs = ()

    def on_packet(self, ctx, port, pkt):
        s = 0
        for i in range(20_000):
            s += i
        self.s = s

    def on_end(self, ctx):
        ctx.set_result(True)


def _spin_plan():
    plan = Plan("spin")
    plan.add("src", _Ticks, 200)
    plan.add("spin", _PythonSpin)
    plan.chain("src", "spin")
    return plan


def _fraction(exe, plan):
    with Scheduler(threads_per_node=1) as sched:
        sched.submit(plan).result()  # warm-up (numba compile for the heavy plan)
        r = gil_check.sample(sched, lambda: sched.submit(plan).result(), exe, seconds=1, rate=100)
    assert r["workers"] >= 1 and r["runs"] >= 1
    assert r["busy_samples"] >= 20, r  # the worker was sampled inside its tasks
    assert 0 <= r["gil_samples"] <= r["busy_samples"] * 1.2 + 5, r
    return r


def test_pyspy_sees_a_gil_holding_worker(pyspy):
    r = _fraction(pyspy, _spin_plan())
    assert r["pyspy_fraction"] > 0.7, r


def test_pyspy_sees_a_nogil_kernel_release_the_gil(pyspy):
    from experiments.bench import heavy_plan

    r = _fraction(pyspy, heavy_plan(packets=4, rounds=400, stages=1))
    assert r["pyspy_fraction"] < 0.3, r


def test_bench_gil_cli_refuses_without_pyspy(monkeypatch):
    from bobox_sched import tools
    from experiments.cli import main as cli

    monkeypatch.setattr(tools, "find_tool", lambda name: None)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli.main(["bench", "gil", "--data", "/nonexistent"])
    assert rc == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: py-spy not found"), lines


def test_bench_gil_cli_refuses_bad_numbers():
    from experiments.cli import main as cli

    for args in (["--seconds", "0"], ["--rate", "0"], ["--copies", "0"], ["q99"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ex:
            rc = cli.main(["bench", "gil", *args])
            raise SystemExit(rc)
        assert ex.value.code == 2, args
        assert err.getvalue().strip().splitlines()[-1].startswith("error: "), (args, err.getvalue())


def test_pyspy_fraction_is_capped_when_the_gil_sampler_saw_more():
    """The two py-spy samplers are independent: a GIL-bound worker may get more GIL samples
    than busy samples (a CI run under 3.12 got a math domain error from the standard error)."""
    from experiments.gil_check import pyspy_fraction

    assert pyspy_fraction(210, 200) == (1.0, 0.0)
    frac, err = pyspy_fraction(50, 200)
    assert frac == 0.25 and abs(err - (0.25 * 0.75 / 200) ** 0.5) < 1e-12
    assert pyspy_fraction(3, 0) == (None, None)
