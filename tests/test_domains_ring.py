"""The descriptor ring (``bobox_sched/domains/ring.py``) and its shared memory
(``shm.py``): every interleaving of pushes and pops that hypothesis draws against a
deque (full, empty, wrap-around, batches), a producer in another process streaming
descriptors through a segment, bad shapes, and segments that leave nothing behind in
``/dev/shm``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bobox_sched.domains import shm
from bobox_sched.domains.ring import HEAD, TAIL, Ring, check_shape, ring_words


def _ring(capacity, width, start=0):
    r = Ring.create(np.zeros(ring_words(capacity, width), np.int64), capacity, width)
    r.r[HEAD] = r.r[TAIL] = start  # counters far along: slot = counter & (capacity - 1)
    return r


OPS = st.lists(st.tuples(st.sampled_from(["push", "pop", "push_many", "pop_many"]), st.integers(1, 9)),
               max_size=120)


@settings(max_examples=300, deadline=None)
@given(cap_log=st.integers(0, 3), width=st.integers(1, 3), start=st.sampled_from([0, 5, (1 << 40) - 3]), ops=OPS)
def test_ring_against_a_deque(cap_log, width, start, ops):
    """One producer and one consumer, their operations interleaved in every order drawn:
    the ring refuses exactly when the deque model is full, is empty exactly when it is,
    and gives back every descriptor once, in order."""
    cap = 1 << cap_log
    r = _ring(cap, width, start)
    model: deque = deque()
    nxt = 0
    for op, k in ops:
        if op == "push":
            d = np.arange(nxt * width, (nxt + 1) * width, dtype=np.int64)
            ok = r.push(d)
            assert ok == (len(model) < cap)
            if ok:
                model.append(d)
                nxt += 1
        elif op == "push_many":
            ds = np.arange(nxt * width, (nxt + k) * width, dtype=np.int64).reshape(k, width)
            m = r.push_many(ds)
            assert m == min(k, cap - len(model))
            model.extend(ds[:m])
            nxt += m
        elif op == "pop":
            got = r.pop()
            if model:
                assert got is not None and np.array_equal(got, model.popleft())
            else:
                assert got is None
        else:
            out = np.full((k, width), -1, np.int64)
            m = r.pop_many(out)
            assert m == min(k, len(model))
            for i in range(m):
                assert np.array_equal(out[i], model.popleft())
            assert (out[m:] == -1).all()  # nothing written past what was popped
        assert len(r) == len(model)


def test_bad_shapes_are_one_line_errors():
    for cap, width, words in ((3, 1, "power of two"), (0, 1, "power of two"), (1 << 30, 1, "power of two"),
                              (4, 0, "width"), (4, 65, "width"), (4.0, 1, "power of two")):
        with pytest.raises(ValueError, match=words) as e:
            check_shape(cap, width)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="needs a 1-D int64 array"):
        Ring.create(np.zeros(10, np.int64), 4, 2)
    with pytest.raises(ValueError, match="no ring laid out here"):
        Ring(np.zeros(64, np.int64))


PRODUCER = textwrap.dedent("""
    import sys
    import numpy as np
    from bobox_sched.domains.shm import Segment
    from bobox_sched.domains.ring import Ring
    seg = Segment.attach(sys.argv[1])
    r = Ring(seg.array(np.int64))
    n, rng = int(sys.argv[2]), np.random.default_rng(7)
    i = 0
    while i < n:
        k = int(rng.integers(1, 40))
        ds = np.stack([np.arange(i, i + k), -np.arange(i, i + k), np.arange(i, i + k) * 3], axis=1)[: n - i]
        i += r.push_many(np.ascontiguousarray(ds, np.int64))
""")


def test_descriptors_cross_processes_in_order():
    """A producer process and this one popping at the same time, through a 64-slot ring
    in a segment: every descriptor arrives once, whole and in order."""
    n = 200_000
    seg = shm.Segment.create(8 * ring_words(64, 3), "test-ring")
    try:
        r = Ring.create(seg.array(np.int64), 64, 3)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        p = subprocess.Popen([sys.executable, "-c", PRODUCER, seg.name, str(n)], env=env)
        got = np.empty((n, 3), np.int64)
        out = np.empty((17, 3), np.int64)
        i = 0
        while i < n:
            m = r.pop_many(out)
            got[i:i + m] = out[:m]
            i += m
            if not m and p.poll() not in (None, 0):
                break
        assert p.wait(120) == 0
        idx = np.arange(n)
        assert i == n and np.array_equal(got[:, 0], idx) and np.array_equal(got[:, 1], -idx)
        assert np.array_equal(got[:, 2], 3 * idx) and len(r) == 0
        del r
    finally:
        seg.unlink()
        seg.close()
    assert seg.name not in os.listdir(shm.SHM_DIR)


def test_segments_leave_nothing_behind(tmp_path):
    a = shm.Segment.create(4096, "x")
    b = shm.Segment.attach(a.name)
    a.array(np.int64)[3] = 42
    assert b.array(np.int64)[3] == 42 and a.name in shm.ours()
    b.close()
    a.unlink()
    a.unlink()  # idempotent
    assert a.close() and a.name not in shm.ours()
    with pytest.raises(ValueError, match="segment label"):
        shm.Segment.create(10, "a/b")
    with pytest.raises(ValueError, match="positive size"):
        shm.Segment.create(0, "x")


def test_stale_segments_of_dead_processes_are_swept():
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(p.stdout)  # exited: its pid is free (reused only after the pid space wraps)
    stale = os.path.join(shm.SHM_DIR, f"{shm.PREFIX}{dead}-00000000-x")
    mine = shm.Segment.create(64, "live")
    try:
        with open(stale, "wb") as f:
            f.write(b"\0" * 64)
        gone = shm.sweep_stale()
        assert os.path.basename(stale) in gone and not os.path.exists(stale)
        assert os.path.exists(os.path.join(shm.SHM_DIR, mine.name))  # a live process's stays
    finally:
        mine.unlink()
        if os.path.exists(stale):
            os.unlink(stale)


def test_bench_ring_command():
    """``bobox bench ring``: a round trip and a stream through a segment shared with a
    second process (the bench raises if a descriptor came back wrong or out of order),
    the printed line, the JSON, and no segment left behind."""
    import json

    import clirun

    before = set(os.listdir(shm.SHM_DIR))
    r = clirun.bobox("bench", "ring", "--rounds", "2000", "--count", "50000", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["rounds"] == 2000 and out["stream_descriptors"] == 50000 and out["descriptor_words"] == 4
    assert out["hop_p10_us"] <= out["hop_us"] <= out["hop_p90_us"]
    assert "us one way" in r.stdout.splitlines()[0]
    assert {n for n in os.listdir(shm.SHM_DIR) if n.startswith(shm.PREFIX)} <= before


def test_bench_ring_bad_input():
    import clirun

    r = clirun.bobox("bench", "ring", "--rounds", "0", timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1


def test_wrong_shapes_are_refused_before_the_kernels():
    """The nogil kernels trust their arguments; the wrapper checks them (a wrong one once
    read past the descriptor and corrupted the heap)."""
    r = _ring(4, 4)
    for bad in ([1, 2], np.zeros(5, np.int64)):
        with pytest.raises(ValueError, match="4 int64 words"):
            r.push(bad)
    with pytest.raises(ValueError, match="4 columns"):
        r.pop_many(np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError, match="4 columns"):
        r.push_many(np.zeros((3, 4), np.float64))
    for n in (-3, 5):
        with pytest.raises(ValueError, match="n must be 0 to 1"):
            r.push_many(np.zeros((1, 4), np.int64), n)
    raw = np.zeros(ring_words(4, 4) + 1, np.int64).view(np.uint8)[1:1 + 8 * ring_words(4, 4)].view(np.int64)
    with pytest.raises(ValueError, match="8-byte aligned"):
        Ring.create(raw, 4, 4)
    assert len(r) == 0
