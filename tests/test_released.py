"""The serial fraction, measured in the runtime: time in GIL-releasing calls per worker
(operators.released) against time in tasks, and where it is reported (bobox run's
summary, bench queries)."""

import math
import os
import threading

import pytest
from experiments.bench import bench_queries
from experiments.workload import build_plans, run_mix
from operators import released

from bobox_sched import Scheduler


@pytest.fixture
def timing():
    was = released.enable(True)
    yield
    released.enable(was)


def test_workers_count_released_time_only_while_on(tpch, timing):
    plans = build_plans(["q1", "q6"], tpch, 1)
    with Scheduler() as s:
        run_mix(s, plans, 1)
        st = s.stats()
        assert 0 < st["released_s"] < st["busy_s"]
        per_node = sum(d["released_s"] for d in st["busy_per_node"])
        assert math.isclose(per_node, st["released_s"], rel_tol=1e-9)
        released.enable(False)
        res = run_mix(s, plans, 2)
        assert res.stats["busy_s"] > 0 and res.stats["released_s"] == 0
        assert res.summary()["serial_fraction"] is None
        released.enable(True)  # without cpu=True: no CPU time counted
        assert run_mix(s, plans, 1).summary()["serial_fraction_cpu"] is None


def test_summary_reports_serial_fraction_and_memory(tpch, timing):
    released.enable(True, cpu=True)
    with Scheduler() as s:
        res = run_mix(s, build_plans(["q3", "q18"], tpch, 1), 2)
    sm = res.summary()
    assert 0 <= sm["serial_fraction"] < 1
    assert 0 <= sm["serial_fraction_cpu"] < 1  # (Linux: schedstat gives the workers' CPU time)
    assert 0 < sm["scheduler"]["released_cpu_s"] <= sm["scheduler"]["cpu_s"] + 0.01
    assert 1 <= sm["predicted_speedup_16"] <= sm["predicted_speedup_64"] <= 64
    assert sm["peak_rss_bytes"] > 50 * 2**20


def test_calls_outside_workers_count_nowhere(timing):
    import numpy as np

    from operators import kernels

    k = released.timed(kernels.partition_ids)
    assert k(np.zeros((1, 10), np.int64), 3).shape == (10,)  # main thread: no worker, no error
    assert released.call(np.add, 1, 2) == 3


def test_timed_namespace_counts_only_kernels_that_release_the_gil():
    """A kernel that keeps the GIL (a TStream kernel's _held twin, the registration
    copies) is serial time: timed_namespace leaves it unwrapped."""
    from bobox_sched.txn.funs import kernels

    K = kernels()
    ns = released.timed_namespace(K)
    assert ns.build_pool is not K.build_pool and ns.build_pool.__wrapped__ is K.build_pool
    assert ns.build_pool_held is K.build_pool_held and ns.append_ops is K.append_ops


def test_amdahl():
    assert released.predicted_speedup(0.0, 16) == 16
    assert released.predicted_speedup(1.0, 16) == 1
    assert math.isclose(released.predicted_speedup(0.05, 16), 1 / (0.05 + 0.95 / 16))
    assert released.predicted_speedup(None, 16) is None
    assert released.serial_fraction(2.0, 1.5) == 0.25
    assert released.serial_fraction(0.0, 0.0) is None


def test_bench_queries_reports_serial_fraction_and_duckdb_mix(tpch):
    r = bench_queries(tpch, ["q1", "q6"], repeat=1, copies=1, cpu_time=True)
    assert 0 <= r["serial_fraction"] < 1 and 0 <= r["serial_fraction_all"] < 1
    assert 0 <= r["serial_fraction_cpu"] < 1 and 0 <= r["serial_fraction_cpu_all"] < 1
    assert r["predicted_speedup_16"] >= 1 and r["predicted_speedup_64"] >= r["predicted_speedup_16"]
    ratio, d, t = r["duckdb_mix_ratio"], r["duckdb_mix_s"], r["mix_tall_s"]
    assert d > 0 and abs(ratio * t - d) <= 1e-4 * (1 + ratio) + 1e-3 * t  # (all three are rounded)
    assert r["duckdb_mix_cpu_s"] > 0
    # the workers' CPU time is read from schedstat: positive wherever the kernel keeps it
    if os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"):
        assert r["mix_tall_cpu_s"] > 0 and r["mix_tall_cores_used"] > 0
    else:
        assert r["mix_tall_cpu_s"] == r["mix_tall_cpu_wait_s"] == 0
    assert not released.enabled()  # the bench switched it back off
