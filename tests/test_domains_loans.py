"""Packets lent across domains (``bobox_sched/domains/loans.py``, ``arena.py``): a packet
made in a domain's shared arena crosses a channel without a copy, the consumer's columns
are the producer's pages, and the producer's pool gets the block back only after the
consumer's last view died, or when nobody can give it back any more."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bobox_sched import Scheduler
from bobox_sched.core.atomics import store_word
from bobox_sched.core.packet import NodePool, new_packet
from bobox_sched.core.sources import StreamChannel
from bobox_sched.domains import channel as C
from bobox_sched.domains import loans, shm
from bobox_sched.domains.arena import SharedArena


@pytest.fixture(autouse=True)
def lend_everything(monkeypatch):
    """Small packets here, lent as large ones are (the size threshold has its own test)."""
    monkeypatch.setattr(loans, "LEND_MIN_BYTES", 0)


class Pair:
    """A channel's two ends in this process, the producer's pool in a shared arena."""

    def __init__(self):
        self.seg, self.bell = C.create_channel(), C.create_bell()
        self.arena = SharedArena(None, chunk_bytes=1 << 20)
        self.pool = NodePool(0, node_local=False)
        self.pool.block_source = self.arena.alloc
        self.w = C.ChannelWriter(self.seg.name, self.bell.name)
        self.r = C._Reader(self.seg.name, StreamChannel(capacity=None))

    def packet(self, values):
        p = new_packet(self.pool, {"x": np.int64, "y": np.float32}, len(values), None)
        p["x"][:] = values
        p["y"][:] = np.asarray(values, np.float32) / 2
        return p

    def send(self, pkt):
        self.w.send(pkt.columns, pkt.nrows)

    def receive(self) -> list:
        self.r.drain()
        out = []
        while (it := self.r.chan._take()) is not None:
            out.append(it)
        return out

    def close(self):
        for s in (self.seg, self.bell):
            s.close()
            s.unlink()
        self.arena.close()


@pytest.fixture
def pair():
    p = Pair()
    yield p
    p.close()


def mapping_of(address: int) -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            span, *rest = line.split()
            a, b = (int(x, 16) for x in span.split("-"))
            if a <= address < b:
                return rest[-1] if len(rest) >= 5 else ""
    return ""


def test_a_lent_packet_is_the_producers_memory(pair):
    before = loans.totals()
    pkt = pair.packet(range(1000))
    pair.send(pkt)
    (got,) = pair.receive()
    np.testing.assert_array_equal(got["x"], np.arange(1000))
    np.testing.assert_array_equal(got["y"], np.arange(1000, dtype=np.float32) / 2)
    where = mapping_of(got["x"].ctypes.data)
    assert where == f"{shm.SHM_DIR}/{pair.arena.segments[0].name}"  # the arena's pages, mapped again
    assert got["x"].ctypes.data != pkt["x"].ctypes.data  # ... by the reader, not the writer's view
    pkt["x"][7] = -7  # the same pages: a write (which no operator does) shows through
    assert got["x"][7] == -7
    assert not got["x"].flags.writeable
    after = loans.totals()
    assert after["lent_packets"] - before["lent_packets"] == 1
    assert after["copied_bytes"] == before["copied_bytes"]
    assert after["data_bytes"] - before["data_bytes"] == 1000 * 12


def test_the_block_comes_back_only_after_the_consumers_last_view(pair):
    pkt = pair.packet(range(100))
    address = pkt["x"].ctypes.data
    pair.send(pkt)
    del pkt
    (got,) = pair.receive()
    x = got["x"][10:20]  # a view of a view keeps the loan too
    del got
    assert pair.w.book.reap() == 0 and pair.w.book.n_out == 1
    fresh = pair.packet(range(100))
    assert fresh["x"].ctypes.data != address  # the lent block is not handed out again
    del fresh
    assert list(x) == list(range(10, 20))
    del x
    gc.collect()
    assert pair.w.book.reap() == 1 and pair.w.book.n_out == 0
    again = pair.packet(range(5))
    assert again["x"].ctypes.data == address  # back in its pool, reused (newest first)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3000), st.booleans(), st.integers(0, 5)), min_size=1, max_size=40))
def test_no_block_is_reused_while_a_view_of_it_lives(steps):
    """Send packets, keep some of what arrives and drop others in any order, make new
    packets all along: every kept view still reads what was sent."""
    pair = Pair()
    try:
        _send_keep_drop(pair, steps)
    finally:
        pair.close()


def _send_keep_drop(pair, steps):
    kept = []
    for n, keep, drop in steps:
        values = np.arange(n) * 7 + len(kept)
        pkt = pair.packet(values)
        pair.send(pkt)
        del pkt
        if keep:  # (comprehensions: no loop variable left holding a view)
            kept += [(it, values) for it in pair.receive()]
        else:
            pair.receive()
        for _ in range(min(drop, len(kept))):
            kept.pop(len(kept) // 2)
        pair.w.book.reap()
        scratch = pair.packet(np.full(n, -1))  # a producer's new packet: must not land on a kept one
        del scratch
        assert all(np.array_equal(it["x"], want) for it, want in kept)
    del kept
    gc.collect()
    pair.w.book.reap()
    assert pair.w.book.n_out == 0


def test_loans_of_packets_never_popped_are_freed_when_the_reader_is_gone(pair):
    pair.send(pair.packet(range(10)))
    (first,) = pair.receive()  # popped: borrowed
    for i in range(3):
        pair.send(pair.packet(range(5 + i)))  # never popped
    assert pair.w.book.n_out == 4
    store_word(pair.r.m.ctl, C.GONE, 1)  # the receiver stopped reading (it pops no more)
    pair.w.settle()
    assert pair.w.book.n_out == 1  # the borrowed one stays out while its view lives
    assert list(first["x"]) == list(range(10))
    del first
    gc.collect()
    pair.w.settle()
    assert pair.w.book.n_out == 0


def test_loans_of_a_reader_whose_process_ended_are_freed(pair):
    pair.send(pair.packet(range(10)))
    (got,) = pair.receive()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout
    store_word(pair.r.m.ctl, C.READER, int(dead))
    pair.w.settle()
    assert pair.w.book.n_out == 0
    store_word(pair.r.m.ctl, C.READER, os.getpid())
    pair.send(pair.packet(range(3)))
    pair.w.settle()
    assert pair.w.book.n_out == 1  # a live reader's loan stays out
    del got


def test_a_packet_is_copied_when_every_loan_is_out(pair):
    before = loans.totals()
    kept = []
    for i in range(loans.LOANS + 2):
        pair.send(pair.packet([i]))
        kept += pair.receive()
    after = loans.totals()
    assert after["lent_packets"] - before["lent_packets"] == loans.LOANS
    assert after["copied_packets"] - before["copied_packets"] == 2
    assert [int(k["x"][0]) for k in kept] == list(range(loans.LOANS + 2))
    plain = {"x": np.arange(4)}  # not from a pool: copied too
    pair.w.send(plain, 4)
    assert list(pair.receive()[0]["x"]) == [0, 1, 2, 3]
    assert loans.totals()["copied_packets"] - after["copied_packets"] == 1


def test_a_spanning_request_lends_and_leaves_nothing_behind():
    from experiments.domains_bench import Rows, lanes_plan

    rows = 1 << 16
    with Scheduler(domains=2, threads_per_node=1) as s:
        plan = lanes_plan([(Rows, (0, 1), 0), (Rows, (20, rows), 0)])
        assert s.submit(plan).result(120) == rows * 20 * 19 // 2
        ch = s.stats()["channels"]
        assert ch["lent_packets"] >= 20 and ch["copied_bytes"] == 0 and ch["data_bytes"] == 20 * rows * 8
        doms = [d["pid"] for d in s.stats()["domains"]]
        assert any(n.split("-")[-1].startswith("pool") for pid in doms for n in shm.ours(pid))
    assert not [n for pid in doms for n in shm.ours(pid)]


def test_loans_no_reader_ever_took_are_freed_when_the_request_ended():
    seg, bell = C.create_channel(), C.create_bell()
    arena = SharedArena(None, chunk_bytes=1 << 20)
    pool = NodePool(0, node_local=False)
    pool.block_source = arena.alloc
    try:
        w = C.ChannelWriter(seg.name, bell.name)
        for n in (3, 4):
            p = new_packet(pool, {"x": np.int64}, n, None)
            p["x"][:] = 1
            w.send(p.columns, n)
        w.settle()
        assert w.book.n_out == 2  # no reader yet: it may still come
        C.close_reader(seg.name)  # the front: every part ended, none read this channel
        w.settle()
        assert w.book.n_out == 0
        late = C._Reader(seg.name, StreamChannel(capacity=None))
        assert late.dropped  # a reader that comes after reads nothing
    finally:
        for s in (seg, bell):
            s.close()
            s.unlink()
        arena.close()


def test_a_loan_that_cannot_be_mapped_fails_the_reading_request(pair):
    from bobox_sched.core.sources import _Failed

    pair.send(pair.packet(range(10)))
    pair.arena.close()  # its segments gone before the reader mapped them
    assert C.Receiver._drain(pair.r) == (0, True)
    item = pair.r.chan._take()
    assert isinstance(item, _Failed) and isinstance(item.exc, C.ChannelBroken) and "pool0" in str(item.exc)


def test_a_full_dev_shm_gives_private_blocks(monkeypatch):
    import errno

    arena = SharedArena(None, chunk_bytes=1 << 20)
    try:
        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "posix_fallocate", full)
        pool = NodePool(0, node_local=False)
        pool.block_source = arena.alloc
        p = new_packet(pool, {"x": np.int64}, 10, None)
        p["x"][:] = 5
        assert loans.place_of([p["x"]]) is None and arena.full  # private: it would be copied
        monkeypatch.undo()
        assert arena.alloc(4096) is None and len(arena.segments) == 1  # no more tries once full
        assert loans.place_of([]) is None
    finally:
        arena.close()
    assert not [n for n in shm.ours() if "-pool" in n]


def test_no_new_arena_segment_without_room_to_spare(monkeypatch):
    from bobox_sched.domains import arena as A

    class Small:
        f_bavail, f_frsize = 100, 4096  # 400 KiB free

    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda p: Small() if p == shm.SHM_DIR else real(p))
    a = SharedArena(None, chunk_bytes=1 << 20)
    assert a.alloc(4096) is None and a.full and a.segments == []
    monkeypatch.setattr(A, "MIN_SHM_ROOM", 0)
    monkeypatch.setattr(os, "statvfs", real)
    b = SharedArena(None, chunk_bytes=1 << 20)
    try:
        assert b.alloc(4096) is not None and len(b.segments) == 1
    finally:
        b.close()


def test_a_reader_that_comes_after_its_request_ended_fails_its_source():
    from bobox_sched.core.sources import _Failed

    seg = C.create_channel()
    try:
        C.close_reader(seg.name)
        chan = StreamChannel(capacity=None)
        r = C._Reader(seg.name, chan)
        item = chan._take()
        assert r.dropped and isinstance(item, _Failed) and isinstance(item.exc, C.ChannelGone)
    finally:
        seg.close()
        seg.unlink()


def test_expect_releases_what_it_added_when_a_channel_fails():
    from bobox_sched import Plan

    seg, bell = C.create_channel(), C.create_bell()
    try:
        p = Plan("two-in")
        p.add("a", C.ChannelIn, seg.name, bell.name)
        p.add("b", C.ChannelIn, f"{shm.PREFIX}{os.getpid()}-00000000-chan", bell.name)  # no such segment
        with pytest.raises(FileNotFoundError):
            C.expect(p)
        assert seg.name not in C._expected
        rd = [r for r in C.Receiver.of(bell.name)._readers if r.m.seg.name == seg.name]
        assert rd == [] or rd[0].dropped  # dropped (the receiver removes it on its next pass)
    finally:
        for s in (seg, bell):
            s.close()
            s.unlink()


def test_small_packets_are_copied_and_large_ones_lent(pair, monkeypatch):
    monkeypatch.setattr(loans, "LEND_MIN_BYTES", 32 << 10)
    before = loans.totals()
    small, large = pair.packet(range(100)), pair.packet(range(4096))  # 1200 B; 48 KiB
    pair.send(small)
    pair.send(large)
    got = pair.receive()
    after = loans.totals()
    assert after["copied_packets"] - before["copied_packets"] == 1 and after["lent_packets"] - before["lent_packets"] == 1
    assert after["copied_bytes"] - before["copied_bytes"] == 2 * 1200
    assert [len(g) for g in got] == [100, 4096] and list(got[1]["x"][-2:]) == [4094, 4095]
