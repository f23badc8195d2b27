"""Data between the front and its domains (``bobox_sched/domains/shared_arrays.py``,
``results.py``; ``experiments/memory.py``): the table store loaded straight into shared
memory while a Scheduler with domains runs, results as Arrow IPC mapped from the domain's
segment, and memory counted once across the processes of a run."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from bobox_sched import Plan, Scheduler, Sink
from bobox_sched.domains import results, shm
from bobox_sched.domains import shared_arrays
from ops import Range

pytestmark = pytest.mark.slow


def mapping_of(addr: int) -> str:
    """The path of this process's mapping that holds address `addr` ('' if anonymous)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return parts[5].strip() if len(parts) > 5 else ""
    raise AssertionError(f"address {addr:#x} is not mapped")


# -- results ---------------------------------------------------------------------------------

class TableSink(Sink):
    """Finishes into an Arrow table of every row it got (and its square), or a batch."""

    def __init__(self, batch: bool = False):
        super().__init__()
        self.batch = batch

    def finalize(self, packets):
        x = np.concatenate([p["x"] for p in packets]) if packets else np.empty(0, np.int64)
        t = pa.table({"x": x, "sq": x * x})
        return t.combine_chunks().to_batches()[0] if self.batch else t


def table_plan(n: int, batch: bool = False) -> Plan:
    p = Plan(f"table{n}")
    p.add("src", Range, n, 10_000)
    p.add("sink", TableSink, batch)
    p.chain("src", "sink")
    return p


def test_encode_decode_small_large_and_other_values():
    big = pa.table({"x": np.arange(100_000, dtype=np.int64)})  # 800 KB: through a segment
    small = pa.table({"x": np.arange(10, dtype=np.int64), "s": [str(i) for i in range(10)]})
    p = results.encode(big)
    assert p[0] == "shm" and p[1].endswith("-result") and p[1] in shm.ours()
    got = results.decode(p)
    assert got.equals(big) and p[1] not in shm.ours()  # unlinked once mapped
    assert mapping_of(got.column(0).chunks[0].buffers()[1].address).startswith(f"{shm.SHM_DIR}/{p[1]}")
    q = results.encode(small)
    assert q[0] == "ipc" and results.decode(q).equals(small)
    b = results.encode(big.to_batches()[0])
    rb = results.decode(b)
    assert isinstance(rb, pa.RecordBatch) and rb.equals(big.to_batches()[0])
    assert results.decode(results.encode({"a": [1, 2]})) == {"a": [1, 2]}  # anything else: cloudpickle
    lost = results.encode(big)
    results.discard(lost)
    assert lost[1] not in shm.ours()


def test_a_results_columns_are_the_domains_segment_mapped_here():
    with Scheduler(domains=2, threads_per_node=1) as s:
        pids = [d["pid"] for d in s._core.domains]
        n = 200_000
        t = s.submit(table_plan(n)).result(60)
        assert t.num_rows == n and t.column("sq").to_numpy()[-1] == (n - 1) ** 2
        where = mapping_of(t.column("x").chunks[0].buffers()[1].address)
        assert where.startswith(f"{shm.SHM_DIR}/{shm.PREFIX}") and "-result" in where and where.endswith("(deleted)")
        assert any(where.startswith(f"{shm.SHM_DIR}/{shm.PREFIX}{pid}-") for pid in pids)  # the domain made it
        rb = s.submit(table_plan(100, batch=True)).result(60)  # small: inline
        assert isinstance(rb, pa.RecordBatch) and rb.column(0).to_pylist() == list(range(100))
        assert not [nm for pid in pids for nm in shm.ours(pid) if nm.endswith("-result")]  # nothing left once read
    assert t.column("x").to_numpy()[12345] == 12345  # still readable after the shutdown


def test_what_an_exited_domain_made_is_unlinked():
    seg = shm.Segment.create(4096, "result")  # as a domain leaves them: made, named, never read
    pool = shm.Segment.create_named(f"{shm.PREFIX}{os.getpid()}-0a1b2c3d-pool0", 4096)
    try:
        assert sorted(shm.unlink_of(os.getpid())) == sorted([seg.name, pool.name])
        assert shm.ours() == []
    finally:
        for s in (seg, pool):
            s.close()
            s.unlink()


# -- the table store in shared memory -----------------------------------------------------------

def test_the_table_store_loads_into_shared_memory_once(tpch, monkeypatch):
    from operators import tpch as queries
    from operators.data import TableStore
    from operators.tpch_sql import compare_tables

    monkeypatch.setattr(shared_arrays, "SHARE_BYTES", 64 << 10)  # SF 0.01's lineitem columns are ~0.5 MB
    TableStore.clear_cache()
    try:
        with Scheduler(threads_per_node=1) as s:
            want = s.submit(queries.plan("q6", tpch, 1)).result(60)
            heap = TableStore.open(tpch).table("lineitem").column("l_extendedprice").values
        assert not mapping_of(heap.ctypes.data).startswith(shm.SHM_DIR)  # in-process: on the heap
        TableStore.clear_cache()
        with Scheduler(domains=2, threads_per_node=1) as s:
            front = s._core
            plan = queries.plan("q6", tpch, 1)  # loads lineitem's columns: into the front's segments
            placed = front._share.bytes_shared
            col = TableStore.open(tpch).table("lineitem").column("l_extendedprice").values
            assert placed >= col.nbytes > 64 << 10 and not col.flags.writeable
            assert mapping_of(col.ctypes.data).startswith(f"{shm.SHM_DIR}/{shm.PREFIX}{os.getpid()}-")
            got = [h.result(60) for h in [s.submit(plan) for _ in range(4)]]
            for g in got:
                compare_tables(g, want)
            assert front._share.bytes_shared == placed  # the domains map the loaded columns: no copy at submit
        assert not shm.ours()  # unlinked with the Scheduler ...
        assert float(col.sum()) == float(heap.sum())  # ... and still the columns of this process
        with Scheduler(threads_per_node=1) as s:
            compare_tables(s.submit(queries.plan("q6", tpch, 1)).result(60), want)
    finally:
        TableStore.clear_cache()


# -- memory counted once -------------------------------------------------------------------------

def test_pss_counts_pages_shared_by_processes_once():
    from experiments.memory import PssPeak

    n = 64 << 20
    seg = shm.Segment.create(n, "array")
    try:
        seg.array(np.uint8)[:] = 1  # touched here ...
        child = subprocess.Popen([sys.executable, "-c", f"""
import mmap, os, sys
fd = os.open("{shm.SHM_DIR}/{seg.name}", os.O_RDONLY)
m = mmap.mmap(fd, {n}, access=mmap.ACCESS_READ)
s = sum(m[i] for i in range(0, {n}, 4096))  # ... and mapped and read there
print(s, flush=True)
sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == str(n // 4096)
            import psutil

            pids = [os.getpid(), child.pid]
            rss = sum(psutil.Process(p).memory_info().rss for p in pids)
            with PssPeak(lambda: pids) as m:
                pass
            assert m.samples >= 2
            assert rss - m.peak > n * 3 // 4  # the 64 MiB count once in the PSS sum, twice in the RSS sum
        finally:
            child.stdin.close()
            child.wait()
    finally:
        seg.close()
        seg.unlink()
