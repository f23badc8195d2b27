"""Per-NUMA-node state of the bobox policy.

What a node holds (Bobox paper, section 5.1): the requests it evaluates, oldest first;
its worker threads, pinned to its CPUs; the workers that sleep. The number of tasks the
node is responsible for is *derived* (``pending_tasks``): the immediate lists of its
workers plus the deferred tasks of its requests that it is responsible for. Deriving it
instead of keeping a counter keeps the hot path free of any shared counter update: a
task push is a deque append and one read of ``idle``.

Protocol (who may touch what, when):

* ``requests`` is a tuple replaced (copy-on-write) under ``lock`` by placement, the
  balancer and request completion; workers iterate whatever tuple they read, lock-free.
* ``idle`` (the sleeping workers): a worker going to sleep appends itself to ``idle``
  *then* counts the pending tasks (the sleeping rule: not while the node has more tasks
  than running threads), under ``lock`` (sleepers and ``wake_all`` only). A task pusher
  appends its task *then* reads ``idle``, and if a sleeper is there and the task needs
  another thread, pops one sleeper and releases it (``wake_one``: no lock, no count). One
  of the two always sees the other (the GIL makes these steps sequentially consistent;
  without it, ``sync.fence()`` sits between each side's two steps), so a task is never
  stranded while every thread of its node sleeps, and a push never takes a lock or
  scans the node: the count runs only on the way to sleep, over queue lengths that only
  their owners grow.
* "Needs another thread": the pusher's own next task does not (it runs it itself, step
  1); a second queued task (in its immediate list or the deferred list of the request
  it runs), or a task pushed by a non-worker or another node's worker, does.
* A sleeper is woken by the one thread that popped it from ``idle``: it released the
  sleeper's binary semaphore exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from topology import node_free_bytes

# How old the cached free-memory figure of a node may get before placement re-reads it
# from sysfs: the balancer's period, so placement sees what the balancer sees.
FREE_MEMORY_TTL_S = 0.1


class NodeState:
    def __init__(self, os_index: int, cpus: tuple, memory_bytes: int | None):
        self.os_index = os_index
        self.cpus = tuple(cpus)
        self.memory_bytes = memory_bytes
        self.workers: list = []
        self.requests: tuple = ()
        self.lock = threading.Lock()
        self.idle: list = []  # sleeping workers; the last to sleep is woken first
        # Tasks that must run on this node (operators placed here: Plan.place), oldest
        # first; appended by any thread, popped by this node's workers (deque: atomic).
        self.pinned: deque = deque()
        self._free = None
        self._free_t = 0.0

    def __repr__(self) -> str:
        return f"<Node {self.os_index}: {len(self.workers)} threads, {len(self.idle)} idle, {len(self.requests)} requests>"

    @property
    def nthreads(self) -> int:
        return len(self.workers)

    def running(self) -> int:
        """Threads not sleeping (running a task or looking for one)."""
        return len(self.workers) - len(self.idle)

    def pending_tasks(self, limit: int | None = None) -> int:
        """Tasks this node is responsible for; counting stops once above `limit`."""
        n = len(self.pinned)
        for w in self.workers:
            n += len(w.imm)
        if limit is not None and n > limit:
            return n
        for r in self.requests:
            nodes = r.nodes
            if not nodes:
                continue
            if len(nodes) == 1:
                if nodes[0] is self:
                    n += len(r.deferred)
            else:
                owner = nodes[0]
                for _op, nd in list(r.deferred):  # list(): a snapshot, deques mutate
                    if (nd if nd is not None else owner) is self:
                        n += 1
            if limit is not None and n > limit:
                return n
        return n

    def wake_one(self) -> bool:
        """Wake one sleeping worker, lock-free: ``list.pop`` is one atomic step, so each
        sleeper is popped by exactly one waker, who releases its park exactly once. A
        sleeper that changes its mind (``try_sleep``) and finds itself already popped
        consumes that release instead of sleeping. False if nobody sleeps."""
        try:
            w = self.idle.pop()
        except IndexError:
            return False
        w.park.release()
        return True

    def must_not_sleep(self) -> bool:
        """The sleeping rule: no thread may sleep while the node has more tasks than
        running threads. Call with ``lock`` held."""
        running = self.running()
        return self.pending_tasks(limit=running) > running

    def free_memory(self) -> int:
        now = time.monotonic()
        if self._free is None or now - self._free_t > FREE_MEMORY_TTL_S:
            self._free = node_free_bytes(self.os_index) or 0
            self._free_t = now
        return self._free

    def add_request(self, request) -> None:
        """Insert keeping age order (request ids grow with submission). Lock held."""
        reqs = [r for r in self.requests if r is not request]
        reqs.append(request)
        reqs.sort(key=lambda r: r.id)
        self.requests = tuple(reqs)

    def remove_request(self, request) -> None:
        """Lock held."""
        self.requests = tuple(r for r in self.requests if r is not request)
