"""Worklists of a partitioned stateful operator run by several workers (Prasaad et al.
section 4; spec 000 section 3): ``HybridQueue`` (HYBRID-QUEUE, Figure 7, the default),
``PartitionedQueues`` (PARTITIONED-QUEUE, the Volcano exchange baseline) and
``SharedQueue`` (SHARED-QUEUE, made safe with a dequeue lock; a blocking baseline).

Entries are the operator's *units* (``(serial, ...)`` tuples made by the caller): a
bucket slice of an input packet goes to its bucket ``b`` (0..p-1); a unit that needs no
bucket (a punctuation, an empty packet, end of stream) is a *control* unit and may be
run by any worker (its output goes through the reorder buffer like any other).

Who touches what:

* ``add(b, unit)`` / ``add_control(unit)`` are called by the single producer: the
  upstream operator's drainer (it holds its reorder buffer's exit section) or the
  source. So master order = serial order [L291].
* ``consume(...)`` is called by every worker allotted to the operator; it never blocks
  (except in ``SharedQueue``, on purpose) and runs ``run(unit, b)`` for each unit it
  takes. ``run`` processes the unit and sends its output to the reorder buffer.

HybridQueue protocol (F7, line by line; the step machine of
``tests/test_ordered_steps.py`` checks H1, H2 and the mutations):

* ``add``: the unit goes to ``parts[b]`` *before* ``b`` goes to ``master`` (F7:L4 then
  L5): a worker that dequeued ``b`` from master always finds a unit in ``parts[b]``
  (F7:L12 never fails).
* ``consume``: take a credit (spec A4: fewer than ``capacity`` units in flight), pop an
  entry ``b`` from master (F7:L9); ``count[b].fetch_add(1) == 0`` makes this worker
  ``b``'s *active worker* (F7:L10), otherwise the unit is *delegated* to the active
  worker and this one moves on without blocking. The active worker pops ``parts[b]``'s
  oldest unit (F7:L12), runs it (F7:L13) and repeats while ``count[b].fetch_sub(1) >
  1`` (F7:L14): delegated units remain. Only the active worker lowers the count to 0,
  so at most one worker runs bucket b (H1); ``parts[b]`` is FIFO, so b's units run in
  arrival order (H2). The quota is checked only between master entries: delegated
  units must be run by the active worker whatever its quota.
* ``count[b]`` is an ``core.sync.AtomicCounter`` (Python has no fetch-and-add).
* ``consume_batched`` (what the ordered stage runs) is the same protocol with the
  running deferred: the active worker of b pops ``parts[b]``'s oldest unit as above but
  keeps it in a *batch* (at most one unit per bucket: it holds b's activity until it
  ran that unit), goes on popping master entries until it popped the last slice of an
  input packet (``add(..., last=True)``: its master entry is ``b + p``), ``batch_max``
  units, the quota, an empty master queue or no credit, then runs the whole batch with one ``run_batch``
  call (one kernel call for a packet's slices), and only then does F7:L14 for each
  bucket of the batch: a bucket with delegated units gives its next unit to the next
  batch, which it runs the same way until no bucket has any left. A first batch is in
  master order; a batch of delegated units is sorted by the caller's key (the stage's:
  a packet's slices together, in bucket order). Per bucket a unit
  still runs only after the one before it returned (H1, H2 as above); the units of
  one batch are of distinct buckets, so their order inside ``run_batch`` is free.

PartitionedQueues: one FIFO per bucket and an ownership flag per bucket (try-lock). A
worker scans the buckets from its own (``start``), takes a free one and runs its units
in order while the head's serial is inside the reorder window (``window_ok``: serial <
next + capacity; the bucket's owner is its only consumer, so peek-then-pop is safe),
then releases it. Units of unserved buckets hold back the reorder merge [L243-245].

SharedQueue: one FIFO; a worker dequeues and takes the unit's bucket lock in one step
under a dequeue lock (Figure 5: otherwise two units of one key could be taken in order
and locked out of order). A worker whose bucket is busy *waits* holding the dequeue
lock, so every other worker waits too: the costly, blocking scheme the paper rejects,
here for comparison. It cannot deadlock: the holder of a bucket lock needs neither
lock to finish its unit.
"""

from __future__ import annotations

import threading
from collections import deque

from bobox_sched.core.sync import AtomicCounter, AtomicFlag

SCHEMES = ("hybrid", "partitioned", "shared")


class HybridQueue:
    """HYBRID-QUEUE (Figure 7): master queue, partition queues, per-bucket counts."""

    scheme = "hybrid"
    __slots__ = ("p", "parts", "master", "count", "control", "delegated")

    def __init__(self, p: int):
        self.p = p
        self.parts = [deque() for _ in range(p)]  # partitionQueues
        self.master = deque()  # masterQueue: a bucket id per unit (-1: control unit)
        self.count = [AtomicCounter() for _ in range(p)]
        self.control = deque()  # control units, in master order
        self.delegated = 0  # statistics: entries handed to another bucket's active worker

    def add(self, b: int, unit, last: bool = False) -> None:
        """`unit` of bucket `b`; `last`: the last slice of its input packet (a batch
        boundary for ``consume_batched``)."""
        self.parts[b].append(unit)  # F7:L4
        self.master.append(b + self.p if last else b)  # F7:L5

    def add_control(self, unit) -> None:
        self.control.append(unit)
        self.master.append(-1)

    def __len__(self) -> int:
        return len(self.master)

    def has_work(self) -> bool:
        return bool(self.master)

    def consume(self, take_credit, give_credit, run, quota: int, stop=None, start: int = 0) -> int:
        """F7:L8-15, each unit run on its own as it is taken (``consume_batched`` with
        batches of one: the same steps); returns the number of master entries taken."""

        def run_one(batch):
            b, unit = batch[0]
            run(unit, b)  # F7:L13

        return self.consume_batched(take_credit, give_credit, run, run_one, quota, stop, None, 1)

    def consume_batched(self, take_credit, give_credit, run, run_batch, quota: int, stop=None, order=None,
                        batch_max: int = 1 << 30) -> int:
        """F7:L8-15 with the units run in batches (module doc): ``run_batch(batch)`` runs
        a list of (bucket, unit) of distinct buckets; ``run(unit, -1)`` a control unit;
        `order`: the sort key of a batch of delegated units (None: bucket order of the
        batch before). Returns the number of master entries taken."""
        master = self.master
        parts = self.parts
        count = self.count
        p = self.p
        taken = 0
        batch = []
        while taken < quota:
            if stop is not None and stop():
                break
            if not take_credit():
                break
            try:
                b = master.popleft()  # F7:L9
            except IndexError:
                give_credit()
                break
            taken += 1
            if b < 0:
                if batch:  # the batch first: it holds its buckets
                    self._run_batches(batch, run_batch, order)
                    batch = []
                run(self.control.popleft(), -1)  # any worker runs a control unit
                continue
            last = b >= p
            if last:
                b -= p
            if count[b].fetch_add(1) == 0:  # F7:L10: we are b's active worker
                batch.append((b, parts[b].popleft()))  # F7:L12; run below (F7:L13)
            else:
                self.delegated += 1  # racy counter, statistics only
            if batch and (last or len(batch) >= batch_max):
                self._run_batches(batch, run_batch, order)
                batch = []
        if batch:
            self._run_batches(batch, run_batch, order)
        return taken

    def _run_batches(self, batch: list, run_batch, order) -> None:
        """Run `batch` (F7:L13), then F7:L14 per bucket: its delegated units, one per
        bucket and batch, until none is left."""
        count = self.count
        parts = self.parts
        while batch:
            run_batch(batch)
            nxt = []
            for b, _ in batch:
                if count[b].fetch_sub(1) > 1:  # F7:L14: a delegated unit of b is left
                    nxt.append((b, parts[b].popleft()))
            if order is not None and len(nxt) > 1:
                nxt.sort(key=order)
            batch = nxt


class PartitionedQueues:
    """PARTITIONED-QUEUE: one queue and one owner flag per bucket (module doc)."""

    scheme = "partitioned"
    __slots__ = ("p", "parts", "owner", "control", "control_owner")

    def __init__(self, p: int):
        self.p = p
        self.parts = [deque() for _ in range(p)]
        self.owner = [AtomicFlag() for _ in range(p)]
        self.control = deque()
        self.control_owner = AtomicFlag()

    def add(self, b: int, unit, last: bool = False) -> None:
        self.parts[b].append(unit)

    def add_control(self, unit) -> None:
        self.control.append(unit)

    def __len__(self) -> int:
        return sum(map(len, self.parts)) + len(self.control)

    def has_work(self, window_ok=None) -> bool:
        """Some free queue whose head is runnable now."""
        for q, f in zip(self.parts, self.owner):
            if q and not f.is_set():
                if window_ok is None:
                    return True
                try:
                    if window_ok(q[0][0]):
                        return True
                except IndexError:
                    pass
        q = self.control
        if q and not self.control_owner.is_set():
            try:
                return window_ok is None or window_ok(q[0][0])
            except IndexError:
                return False
        return False

    def consume(self, window_ok, run, quota: int, stop=None, start: int = 0) -> int:
        taken = 0
        p = self.p
        for k in range(p + 1):
            if taken >= quota or (stop is not None and stop()):
                break
            if k == p:
                q, flag, b = self.control, self.control_owner, -1
            else:
                b = (start + k) % p
                q, flag = self.parts[b], self.owner[b]
            if not q or not flag.try_set():
                continue
            try:
                while taken < quota and q and window_ok(q[0][0]):
                    run(q.popleft(), b)
                    taken += 1
            finally:
                flag.clear()
        return taken


class SharedQueue:
    """SHARED-QUEUE made safe: dequeue and bucket lock atomic under one lock (module doc)."""

    scheme = "shared"
    __slots__ = ("p", "queue", "dq_lock", "bucket_lock")

    def __init__(self, p: int):
        self.p = p
        self.queue = deque()  # (bucket or -1, unit)
        self.dq_lock = threading.Lock()
        self.bucket_lock = [threading.Lock() for _ in range(p)]

    def add(self, b: int, unit, last: bool = False) -> None:
        self.queue.append((b, unit))

    def add_control(self, unit) -> None:
        self.queue.append((-1, unit))

    def __len__(self) -> int:
        return len(self.queue)

    def has_work(self) -> bool:
        return bool(self.queue)

    def consume(self, take_credit, give_credit, run, quota: int, stop=None, start: int = 0) -> int:
        taken = 0
        while taken < quota:
            if stop is not None and stop():
                break
            if not take_credit():
                break
            with self.dq_lock:
                try:
                    b, unit = self.queue.popleft()
                except IndexError:
                    give_credit()
                    break
                if b >= 0:
                    self.bucket_lock[b].acquire()  # may wait for the bucket's current holder
            taken += 1
            try:
                run(unit, b)
            finally:
                if b >= 0:
                    self.bucket_lock[b].release()
        return taken


def make_queues(scheme: str, p: int):
    if scheme == "hybrid":
        return HybridQueue(p)
    if scheme == "partitioned":
        return PartitionedQueues(p)
    if scheme == "shared":
        return SharedQueue(p)
    raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")


__all__ = ["HybridQueue", "PartitionedQueues", "SCHEMES", "SharedQueue", "make_queues"]
