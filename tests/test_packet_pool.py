"""The packet pool and byte accounting: lock-free give-back (safe against the cyclic GC
running inside any locked section, CPython >= 3.12), exact held/peak per request account,
scheduler-wide totals summed from the request accounts, block lifetime."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from bobox_sched.core.packet import ByteAccount, ByteTotals, NodePool, PacketSpec, new_packet


class _GCInsideLock:
    """A lock that runs a full garbage collection right after it is taken: what the
    3.12+ collector may do at any bytecode inside a ``with lock:`` block. If anything on
    the give-back path (a lease's ``__del__``) took this lock, the collection would
    deadlock the thread on its own lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._owner = None
        self.collections = 0
        self.reentered = False  # a real Lock would have deadlocked here

    def __enter__(self):
        if self._owner == threading.get_ident():
            self.reentered = True
            raise AssertionError("lock taken again by its holder: a __del__ path takes a lock")
        self._lock.acquire()
        self._owner = threading.get_ident()
        self.collections += 1
        gc.collect()
        return self

    def __exit__(self, *exc):
        self._owner = None
        self._lock.release()

    def acquire(self, *a, **k):
        return self._lock.acquire(*a, **k)

    def release(self):
        self._lock.release()


@pytest.fixture
def young_heap():
    """Everything alive now moves to the collector's permanent generation (gc.freeze), so
    that each full collection inside a lock scans only what the test made since: the
    same collections, but not of the whole test session's heap (46 s for the account
    test below in a full run, with hundreds of collections of a large heap)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _cyclic_garbage_packets(pool, spec, account, n=20):
    """Packets reachable only through reference cycles: freed by the cyclic collector."""
    for _ in range(n):
        pkt = new_packet(pool, spec, 100, account)
        holder = {"pkt": pkt}
        holder["self"] = holder  # a cycle: refcounting alone never frees it


def test_gc_inside_the_account_lock_frees_leases_of_the_same_account(young_heap):
    pool = NodePool(0, node_local=False)
    totals = ByteTotals()
    acc = totals.new_account()
    acc._lock = _GCInsideLock()
    totals._lock = _GCInsideLock()
    spec = PacketSpec({"x": np.int64, "y": np.float64})
    gc.disable()
    try:
        for _ in range(5):
            _cyclic_garbage_packets(pool, spec, acc)
            # add() takes acc's lock; the collection inside frees 20 leases of acc.
            p = new_packet(pool, spec, 100, acc)
            del p
            # the totals take their lock, with a collection inside it: all 21 of this round freed
            assert totals.held == 0 and acc.held == 0
    finally:
        gc.enable()
    gc.collect()
    assert acc._lock.collections > 0 and totals._lock.collections > 0
    assert not acc._lock.reentered and not totals._lock.reentered
    assert acc.held == 0 and totals.held == 0
    assert acc.peak >= spec.layout(100)[0]
    assert pool.blocks_mapped <= 25  # the collected blocks went back and were reused


def test_gc_inside_the_size_class_lock(young_heap):
    pool = NodePool(0, node_local=False)
    pool._classes_lock = _GCInsideLock()
    acc = ByteAccount()
    gc.disable()
    try:
        for rows in (10, 1000, 100_000):  # three new size classes: the lock is taken each time
            _cyclic_garbage_packets(pool, PacketSpec({"x": np.int64}), acc)
            _cyclic_garbage_packets(pool, PacketSpec({"x": np.int8}), acc)
            new_packet(pool, PacketSpec({"x": np.int64}), rows, acc)
    finally:
        gc.enable()
    gc.collect()
    assert pool._classes_lock.collections >= 2
    assert not pool._classes_lock.reentered
    assert acc.held == 0


def test_one_column_keeps_the_whole_block_out_of_the_pool():
    pool = NodePool(0, node_local=False)
    acc = ByteAccount()
    spec = PacketSpec({"a": np.int64, "b": np.int32})
    one = spec.layout(1000)[0]  # bytes of one such packet
    pkt = new_packet(pool, spec, 1000, acc)
    pkt["a"][:] = np.arange(1000)
    b = pkt["b"]
    view = b[10:20]
    del pkt, b
    gc.collect()
    assert acc.held == one and pool.free_bytes == 0  # a view of one column is still alive
    other = new_packet(pool, spec, 1000, acc)
    assert pool.blocks_mapped == 2  # not the block `view` still sees
    del view
    assert pool.free_bytes > 0 and acc.held == one
    del other
    assert acc.held == 0
    again = new_packet(pool, spec, 1000, acc)
    assert pool.blocks_mapped == 2 and pool.blocks_reused == 1
    del again


def test_columns_are_aligned_and_independent():
    pool = NodePool(0, node_local=False)
    spec = PacketSpec({"a": np.int8, "b": np.int64, "c": np.float32})
    pkt = new_packet(pool, spec, 13, None)
    for name in spec.names:
        assert pkt[name].ctypes.data % 64 == 0
        assert pkt[name].shape == (13,)
    pkt["a"][:] = 1
    pkt["b"][:] = -1
    pkt["c"][:] = 2.5
    assert (pkt["a"] == 1).all() and (pkt["b"] == -1).all() and (pkt["c"] == 2.5).all()
    assert new_packet(pool, spec, 0, None).nrows == 0


@pytest.mark.parametrize("bad", [-5, -1])
def test_negative_row_count_is_refused(bad):
    with pytest.raises(ValueError, match="row count"):
        new_packet(NodePool(0, node_local=False), {"x": np.int64}, bad, None)


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_non_integer_row_count_is_refused(bad):
    with pytest.raises(TypeError, match="row count"):
        new_packet(NodePool(0, node_local=False), {"x": np.int64}, bad, None)


def test_free_blocks_are_capped_per_size_class():
    size = 64 * 1024
    pool = NodePool(0, max_free_bytes=4 * size, node_local=False)
    pkts = [new_packet(pool, {"x": np.uint8}, size, None) for _ in range(10)]
    del pkts
    assert pool.free_bytes == 4 * size


def test_concurrent_allocation_and_give_back_from_other_threads():
    pool = NodePool(0, node_local=False)
    total = ByteTotals()
    accs = [total.new_account() for _ in range(3)]  # one request account per producer
    handoff: list = []
    lock = threading.Lock()

    def producer(acc):
        for i in range(3000):
            p = new_packet(pool, {"x": np.int64}, 1 + i % 700, acc)
            with lock:
                handoff.append(p)

    def consumer(stop):
        while not stop.is_set() or handoff:
            with lock:
                batch = handoff[:]
                handoff.clear()
            del batch  # dropped here: this thread gives the blocks back

    stop = threading.Event()
    cons = [threading.Thread(target=consumer, args=(stop,)) for _ in range(2)]
    prods = [threading.Thread(target=producer, args=(a,)) for a in accs]
    for t in cons + prods:
        t.start()
    for t in prods:
        t.join()
    stop.set()
    for t in cons:
        t.join()
    assert all(a.held == 0 and a.packets == 3000 and 0 < a.peak <= a.allocated for a in accs)
    assert total.held == 0 and total.packets == 9000 and total.allocated == sum(a.allocated for a in accs)
    # the sampled total peak: taken at each account's new peak, so never below any of them
    assert max(a.peak for a in accs) <= total.peak <= sum(a.peak for a in accs)


def test_totals_retire_ended_accounts_and_keep_their_counts():
    pool = NodePool(0, node_local=False)
    total = ByteTotals()
    a, b = total.new_account(), total.new_account()
    pa = new_packet(pool, {"x": np.int64}, 100, a)
    pb = new_packet(pool, {"x": np.int64}, 200, b)
    na, nb = PacketSpec({"x": np.int64}).layout(100)[0], PacketSpec({"x": np.int64}).layout(200)[0]
    held = na + nb
    assert total.held == held and total.packets == 2 and total.peak == held
    a.ended = True
    assert total.held == held and len(total._accounts) == 2  # ended, but its packet lives on
    del pa
    assert total.held == nb and len(total._accounts) == 1  # retired
    assert total.packets == 2 and total.allocated == held  # its counts stay in the totals
    total.reset_peak()
    assert total.peak == nb
    del pb
