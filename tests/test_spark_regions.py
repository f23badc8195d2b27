"""A parallel region's channels as Spark partitions (``experiments/spark/regions.py``),
Spark tier: the ordered output equals the sequential bobox run's -- rows and
punctuations, in order -- in local mode, with the channels' outputs reaching the driver's
merger in random interleavings. The same check on a standalone master with two workers on
127.0.0.1 (channels then run in other processes) is in ``test_spark.py``, on the cluster
that module starts anyway."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler
from bobox_sched.control.punct import Window
from experiments.region_ops import ArraySource, FlatMap, Record, RunningCount, Work, WorkFilter, same_output
from experiments.spark.regions import spark_region_run
from experiments.spark.session import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def plans():
    rng = np.random.default_rng(11)
    n = 6000
    cols = {"x": rng.integers(-500, 500, n).astype(np.int64), "k": rng.integers(0, 64, n).astype(np.int64)}
    marks = [(i, Window(wid=i)) for i in range(0, n, 700)]
    p = Plan("spark-region")
    p.add("src", ArraySource, cols, (250, 0, 900), marks)
    p.add("w", Work, 8)
    p.add("cnt", RunningCount, "k", 64, 4)
    p.add("f", WorkFilter, 0, 3, 2)
    p.add("flat", FlatMap, 2)
    p.add("sink", Record)
    p.chain("src", "w", "cnt", "f", "flat", "sink")
    q = Plan("spark-rr")
    q.add("src", ArraySource, cols, (300,), marks)
    q.add("w", Work, 16)
    q.add("sink", Record)
    q.chain("src", "w", "sink")
    return {"relaxed": p, "round_robin": q}


@pytest.fixture(scope="module")
def sched():
    with Scheduler(threads_per_node=2, pin=False) as s:
        yield s


def sequential_outputs(sched) -> dict:
    """Each plan's output on the bobox scheduler: what every Spark run must equal."""
    return {k: sched.submit(p).result(120) for k, p in plans().items()}


@pytest.fixture(scope="module")
def wanted(sched):
    return sequential_outputs(sched)


def check(spark, sched, wanted, degrees=(1, 3)):
    hosts = set()
    for name, p in plans().items():
        for n in degrees:
            res = spark_region_run(p, n, spark=spark, scheduler=sched, shuffle_arrivals=random.Random(n))
            assert res["ordering"] == name
            assert same_output(wanted[name], res["result"]), (name, n)
            assert sorted(res["hosts"]) == list(range(n))
            hosts |= set(res["hosts"].values())
    return hosts


def test_local_mode_ordered_output_identical(sched, wanted):
    spark = spark_session("local[2]")
    check(spark, sched, wanted)
    assert len(wanted["relaxed"]["puncts"]) == 9


def test_override_and_errors(sched, wanted):
    from bobox_sched.core.errors import BoboxError

    spark = spark_session("local[2]")
    p = plans()["round_robin"]
    res = spark_region_run(p, 2, spark=spark, scheduler=sched, ordering="strict")
    assert res["ordering"] == "strict" and same_output(wanted["round_robin"], res["result"])
    with pytest.raises(BoboxError, match="only up the lattice"):
        spark_region_run(plans()["relaxed"], 2, spark=spark, scheduler=sched, ordering="seqno")
