"""Every TPC-H query's answer equals DuckDB's on the same SF 0.01 Parquet files, under
the bobox, simple and streams policies, decomposed 1, 3 and 8 ways, with the default packet size and with tiny
packets and one-packet buffers (many packets, full buffers, back-pressure everywhere).
The same query mix run concurrently gives the same answers as run alone."""

import pytest
from operators import tpch as T
from operators.tpch_sql import compare_tables, duckdb_answer, output_columns

from bobox_sched import Scheduler

QUERIES = list(T.QUERIES)


@pytest.fixture(scope="module")
def answers(tpch):
    return {q: duckdb_answer(q, tpch) for q in QUERIES}


CONFIGS = [
    # (policy, packet_bytes, buffer_packets, parallel)
    ("bobox", None, 4, 1),
    ("simple", None, 4, 1),
    ("bobox", 2048, 1, 3),
    ("simple", 2048, 1, 3),
    ("bobox", 512, 1, 1),
    ("streams", None, 4, 1),
    ("streams", 2048, 1, 3),
]


@pytest.mark.parametrize("policy,packet_bytes,buffer_packets,parallel", CONFIGS)
def test_queries_equal_duckdb(tpch, answers, policy, packet_bytes, buffer_packets, parallel):
    with Scheduler(policy=policy, packet_bytes=packet_bytes, buffer_packets=buffer_packets) as s:
        for q in QUERIES:
            got = s.submit(T.plan(q, tpch, parallel)).result(300)
            assert got.column_names == output_columns(q)
            compare_tables(got, answers[q], rel_tol=1e-6)


def test_parallel_8_has_over_100_operators_and_is_correct(tpch, answers):
    big = {q: T.plan(q, tpch, 8) for q in QUERIES}
    assert max(len(p) for p in big.values()) > 100
    with Scheduler(packet_bytes=4096) as s:
        hs = {q: s.submit(p) for q, p in big.items()}
        for q, h in hs.items():
            compare_tables(h.result(300), answers[q])
            assert h.stats["operators"] == len(big[q])


@pytest.mark.parametrize("policy", ["bobox", "simple", "streams"])
def test_concurrent_mix_same_answers_as_alone(tpch, policy):
    plans = {q: T.plan(q, tpch, 2) for q in T.DEFAULT_MIX}
    with Scheduler(policy=policy, packet_bytes=8192) as s:
        alone = {q: s.submit(p).result(300) for q, p in plans.items()}
        handles = [(q, s.submit(p)) for _ in range(4) for q, p in plans.items()]
        for q, h in handles:
            compare_tables(h.result(300), alone[q], rel_tol=1e-12)


@pytest.mark.parametrize("policy,packet_bytes,buffer_packets,parallel", [
    ("bobox", None, 4, 1), ("simple", 2048, 1, 3), ("streams", None, 4, 1)])
def test_queries_equal_duckdb_in_domains(tpch, answers, policy, packet_bytes, buffer_packets, parallel):
    """The same answers with the runtime in two domain processes (bobox_sched/domains),
    every query submitted at once, alternately to each domain."""
    with Scheduler(domains=2, threads_per_node=1, policy=policy, packet_bytes=packet_bytes,
                   buffer_packets=buffer_packets) as s:
        hs = [(q, s.submit_to(i % 2, T.plan(q, tpch, parallel))) for i, q in enumerate(QUERIES)]
        for q, h in hs:
            got = h.result(300)
            assert got.column_names == output_columns(q)
            compare_tables(got, answers[q], rel_tol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("policy,packet_bytes,parallel", [("bobox", None, 3), ("simple", 2048, 4)])
def test_queries_equal_duckdb_spanning_domains(tpch, answers, policy, packet_bytes, parallel):
    """Decomposed wider than one domain's workers, each request spans both domains
    (bobox_sched/domains/span.py): its partitions split over them, the cross-domain
    edges through shared-memory channels; every query at once, the same answers; no
    channel segment left once they ended."""
    from bobox_sched.domains import shm

    with Scheduler(domains=2, threads_per_node=1, policy=policy, packet_bytes=packet_bytes, buffer_packets=1) as s:
        hs = [(q, s.submit(T.plan(q, tpch, parallel))) for q in QUERIES]
        for q, h in hs:
            got = h.result(300)
            assert sorted(c.domain for c in h._children) == [0, 1], q
            assert got.column_names == output_columns(q)
            compare_tables(got, answers[q], rel_tol=1e-6)
        assert not [n for n in shm.ours() if n.endswith("-chan")]
    assert not shm.ours()
