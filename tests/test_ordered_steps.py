"""The reorder buffer and the hybrid queue as step machines, every interleaving (spec
000 T1, T2, T4), and the paper's Figure 3 scenario on the real buffers, driven by events
(T3). The machines are in ``ordered_machines.py``; ``explore`` visits every reachable
state, so every interleaving of the steps is checked."""

from __future__ import annotations

import threading

import pytest
from ordered_machines import Q_BLK, HybridMachine, ReorderMachine, SharedQueueMachine, Violation, explore

from bobox_sched.policies.ordered.reorder import LockReorderBuffer, ReorderBuffer, make_reorder

# ---------------------------------------------------------------------------------------
# T1: every interleaving of F4 for <= 3 workers, capacity 2, <= 5 serials


@pytest.mark.parametrize("workers,serials,gated", [
    (1, 5, True), (2, 3, True), (2, 5, True), (2, 5, False), (3, 3, False), (3, 4, False), (3, 5, True),
])
def test_reorder_every_interleaving(workers, serials, gated):
    # serial 2 is a filter's empty unit: it must still go through (R8)
    r = explore(ReorderMachine(workers, 2, serials, empty=(2,), gated=gated))
    assert r["finals"] == 1 and r["states"] > serials  # one outcome: 1..n sent, buffer empty, next = n + 1


def test_reorder_every_interleaving_capacity_3():
    explore(ReorderMachine(3, 3, 3, empty=(1,), gated=False))


# ---------------------------------------------------------------------------------------
# T2: the mutations T1 must catch (the paper's F4 as written: a full window is retried)

MUTATIONS = {
    "no_recheck": "R2/R4",  # F4:L40-42 dropped: an output stranded in the buffer
    "swap_33_34": "R3",  # next moved before the slot is cleared: a unit overwritten
    "window_le": "R3",  # entry condition t <= n + s: a unit overwrites the one of next
    "skip_empty": "no progress",  # a filter's empty unit not sent: next stalls (R8)
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_reorder_mutations_are_caught(mutation):
    with pytest.raises(Violation, match=MUTATIONS[mutation]):
        explore(ReorderMachine(3, 2, 5, empty=(2,), gated=False, mutation=mutation))


def test_mutations_caught_with_two_workers_too():
    for mutation in ("no_recheck", "swap_33_34", "window_le"):
        with pytest.raises(Violation):
            explore(ReorderMachine(2, 2, 5, empty=(2,), gated=False, mutation=mutation))


def test_credit_gating_stalls_on_a_skipped_empty_unit():
    # with the credit-gated dequeue (A4) a skipped unit shows as workers that can no
    # longer dequeue anything: stuck
    with pytest.raises(Violation, match="stuck"):
        explore(ReorderMachine(2, 2, 4, empty=(2,), gated=True, mutation="skip_empty"))


# ---------------------------------------------------------------------------------------
# T4: the hybrid queue (F7), H1 and H2, counts back to 0, F7:L12 never fails

@pytest.mark.parametrize("workers,inputs", [
    (2, (0, 0, 0, 0)),  # one hot bucket: delegation all the way
    (2, (0, 1, 0, 1, 1)),
    (3, (0, 1, 0, 0, 1)),
    (3, (1, 0, 2, 1, 1)),
])
def test_hybrid_every_interleaving(workers, inputs):
    r = explore(HybridMachine(workers, inputs))
    assert r["finals"] >= 1


@pytest.mark.parametrize("mutation,match", [
    ("master_first", "F7:L12"),  # master before the partition queue: a worker finds nothing
    ("sub_gt0", "F7:L12|H1"),  # fetch_sub > 0: a worker keeps going without a delegated tuple
])
def test_hybrid_mutations_are_caught(mutation, match):
    with pytest.raises(Violation, match=match):
        explore(HybridMachine(3, (0, 1, 0, 0, 1), mutation=mutation))


def test_hybrid_sub_gt0_breaks_h1_when_the_queue_is_not_empty():
    """With ``fetch_sub > 0`` the active worker re-enters L12 after its count reached 0;
    when the producer has already put the next tuple of the bucket, another worker may
    have become active for it meanwhile: two workers operate on one bucket (H1)."""
    with pytest.raises(Violation, match="H1|F7:L12"):
        explore(HybridMachine(2, (0, 0, 0), mutation="sub_gt0"))


# ---------------------------------------------------------------------------------------
# SHARED-QUEUE inside a stage: every interleaving of its lock steps with the credits, the
# receiver's back-pressure and the wake-ups (issue 33: the shared scheme hung once in CI,
# capacity 1, one-packet buffers). H2 per bucket, every output sent, credits back; no
# deadlock ("stuck") and no livelock ("no progress") in any interleaving.

@pytest.mark.parametrize("workers,inputs,capacity,qcap,dcap", [
    (2, (0, 0, 1, 0), 1, 1, 1),  # T8's shape: capacity 1, one-unit worklists
    (3, (0, 0, 1), 1, 1, 1),
    (4, (0, 0), 1, 1, 1),
    (2, (0, 1, 0, 1), 2, 2, 1),  # two units in flight: a worker waits for the other's bucket
    (3, (0, 0, 0, 1), 2, 1, 1),
    (3, (0, 1, 0, 1), 2, 2, 2),
    (2, (0, -1, 0, -1), 1, 1, 1),  # control units (a punctuation, the end of stream): no bucket lock
    (3, (0, -1, 0, 1, -1), 2, 2, 1),
])
def test_shared_queue_every_interleaving(workers, inputs, capacity, qcap, dcap):
    r = explore(SharedQueueMachine(workers, inputs, capacity, qcap, dcap))
    assert r["finals"] == 1 and r["states"] > 100


def test_shared_queue_waits_for_a_bucket_while_holding_the_dequeue_lock():
    """The blocking the scheme is built on is reachable in the machine (so the checks above
    cover it): a worker blocked on a bucket lock while it holds the dequeue lock."""
    m = SharedQueueMachine(2, (0, 0), 2, 2, 1)
    seen = []

    class Watch(SharedQueueMachine):
        def check_state(self, state):
            sh, ws = state
            for k, (pc, u) in enumerate(ws):
                if pc == Q_BLK and sh.dq == k and sh.locks[self.inputs[u]] not in (-1, k):
                    seen.append(state)

    explore(Watch(m.W, m.inputs, m.capacity, m.qcap, m.dcap))
    assert seen


@pytest.mark.parametrize("mutation,args,match", [
    ("lock_after_dq", (2, (0, 0), 2, 2, 1), "bucket 0 ran \\(1, 0\\)"),  # Figure 5's race
    ("keep_credit", (2, (0, 1), 2, 1, 1), "credits 1 at the end|stuck"),
])
def test_shared_queue_mutations_are_caught(mutation, args, match):
    with pytest.raises(Violation, match=match):
        explore(SharedQueueMachine(*args, mutation=mutation))


# ---------------------------------------------------------------------------------------
# the real buffers: simple sequences

def _collect(mode, capacity=4):
    sent = []
    rb = make_reorder(mode, capacity, lambda o: sent.append(o) or True)
    return rb, sent


@pytest.mark.parametrize("mode", ["nonblocking", "lock"])
def test_real_buffer_orders_any_permutation(mode):
    import itertools

    for perm in itertools.permutations(range(1, 5)):
        rb, sent = _collect(mode)
        for t in perm:
            assert rb.send(t, f"o{t}")
        assert sent == ["o1", "o2", "o3", "o4"] and rb.next == 5 and rb.pending() == 0


def test_nonblocking_window_full_then_retry():
    rb, sent = _collect("nonblocking", capacity=2)
    assert rb.send(2, "o2")
    assert not rb.send(3, "o3")  # 3 >= next + 2: the caller retries
    assert rb.send(1, "o1") and sent == ["o1", "o2"]
    assert rb.send(3, "o3") and sent == ["o1", "o2", "o3"]
    with pytest.raises(RuntimeError, match="sent twice"):
        rb.send(2, "again")


@pytest.mark.parametrize("mode", ["nonblocking", "lock"])
def test_back_pressure_keeps_the_unit_and_resumes(mode):
    """A5: a full receiver stops the drain without blocking; o_next stays, next does not
    move; a drain after room appeared sends it, in order."""
    room = {"free": 0}
    sent = []

    def emit(o):
        if room["free"] == 0:
            return False
        room["free"] -= 1
        sent.append(o)
        return True

    rb = make_reorder(mode, 4, emit, ready=lambda: room["free"] > 0)
    rb.send(2, "o2")
    rb.send(1, "o1")
    assert sent == [] and rb.next == 1 and rb.blocked >= 1
    room["free"] = 1
    rb.send_pending()
    assert sent == ["o1"] and rb.next == 2
    room["free"] = 5
    rb.send(3, "o3")
    assert sent == ["o1", "o2", "o3"] and rb.next == 4


# ---------------------------------------------------------------------------------------
# T3: Figure 3, driven by events

class RecordingLock:
    """A lock that records who had to wait for it (instead of guessing from timings)."""

    def __init__(self):
        self._l = threading.Lock()
        self.waited = []
        self.cond = threading.Condition()

    def acquire(self, blocking=True, timeout=-1):
        if self._l.acquire(False):
            return True
        if not blocking:
            return False
        with self.cond:
            self.waited.append(threading.current_thread().name)
            self.cond.notify_all()
        return self._l.acquire()

    def release(self):
        self._l.release()

    def locked(self):
        return self._l.locked()

    __enter__ = acquire

    def __exit__(self, *a):
        self.release()


def _figure3(mode):
    """T4 sends O1 and, while it is inside send_downstream(O1), T1-T3 send O4, O6, O8
    (O2 and O3 were already buffered). Returns (returned-before-release, waited)."""
    inside = threading.Event()
    release = threading.Event()
    sent = []

    def emit(o):
        if o == "O1":
            inside.set()
            assert release.wait(30), "test harness: T4 never released"
        sent.append(o)
        return True

    rb = make_reorder(mode, 16, emit)
    lock = None
    if mode == "lock":
        lock = rb.lock = RecordingLock()
    rb.send(2, "O2")
    rb.send(3, "O3")
    t4 = threading.Thread(target=rb.send, args=(1, "O1"), name="T4")
    t4.start()
    assert inside.wait(30)
    returned = {}
    threads = []
    for name, t in (("T1", 4), ("T2", 6), ("T3", 8)):
        done = threading.Event()
        returned[name] = done

        def run(t=t, done=done):
            rb.send(t, f"O{t}")
            done.set()

        th = threading.Thread(target=run, name=name)
        th.start()
        threads.append(th)
    if mode == "nonblocking":
        # they return while T4 is still sending O1 (not a timing: T4 waits for `release`)
        ok = all(ev.wait(30) for ev in returned.values())
        early = ok and not release.is_set()
        waited = []
    else:
        with lock.cond:  # wait until all three are recorded waiting for the lock
            assert lock.cond.wait_for(lambda: len(lock.waited) == 3, 30)
        early = any(ev.is_set() for ev in returned.values())
        waited = sorted(lock.waited)
    release.set()
    t4.join(30)
    for th in threads:
        th.join(30)
    rb.send(5, "O5")
    rb.send(7, "O7")
    assert sent == [f"O{i}" for i in range(1, 9)], sent
    return early, waited, rb


def test_figure3_nonblocking_senders_return_while_t4_sends():
    early, waited, rb = _figure3("nonblocking")
    assert early and waited == []
    # the experiment's contention counters: T1-T3 found the flag held, nobody waited
    assert rb.contended == 3 and rb.wait_ns == 0


def test_figure3_lock_based_senders_wait_for_t4():
    early, waited, rb = _figure3("lock")
    assert not early and waited == ["T1", "T2", "T3"]
    assert rb.contended == 3 and rb.wait_ns > 0


def test_buffer_classes():
    assert isinstance(make_reorder("nonblocking", 2, None), ReorderBuffer)
    assert isinstance(make_reorder("lock", 2, None), LockReorderBuffer)
    with pytest.raises(ValueError, match="reorder must be one of"):
        make_reorder("spin", 2, None)
    with pytest.raises(ValueError, match="capacity"):
        ReorderBuffer(0, None)
