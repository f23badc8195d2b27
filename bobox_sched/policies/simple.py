"""The paper's baseline scheduler (Falt & Yaghob, section 6).

"Each thread keeps its own list of tasks and processes this list in the FIFO order. If
there is no task in its own list, it tries to steal a task from other threads in
round-robin order. For threads suspending, one global semaphore is used. The value of
the semaphore is kept the same as the number of tasks. The size of packets is constant
without respecting the cache size."

No distinction between immediate and deferred tasks (both go to the creating thread's
list; tasks created outside the workers go round-robin), no NUMA nodes (threads are not
pinned; packets come from the pool of the node the thread happens to run on).

Protocol: every push appends to a list *then* releases the global semaphore once, so
the semaphore never counts a task that is not in some list yet; a worker takes one
permit per task it runs. Holding a permit guarantees some list holds a task nobody has
claimed, though not which list: a worker that misses it scans again.
"""

from __future__ import annotations

import itertools
import threading

from bobox_sched.core.worker import Worker
from bobox_sched.policies.base import Policy, steal

# "Constant without respecting the cache size": 64 KiB, a common fixed batch size of
# stream engines of the paper's time, and a quarter of the paper machine's L2 -- so on
# that machine the two schedulers differ in packet size as they did in the paper.
SIMPLE_PACKET_BYTES = 64 * 1024


class SimplePolicy(Policy):
    name = "simple"

    def __init__(self, scheduler, threads_per_node, balance_interval=None, pin=True):
        super().__init__(scheduler, threads_per_node)
        self.sem = threading.Semaphore(0)  # value == number of tasks in all lists
        self._rr = itertools.count()
        self.workers: list = []

    @classmethod
    def default_packet_bytes(cls, topology) -> int:
        return SIMPLE_PACKET_BYTES

    def create_workers(self) -> list:
        total = 0
        for node in self.topology.cpu_nodes:
            total += self.threads_per_node or len(node.cpus)
        self.workers = [Worker(self.scheduler, i, None, None) for i in range(total)]
        return self.workers

    def place(self, request, node=None) -> None:
        request.nodes = []

    def push_immediate(self, worker, op) -> None:
        worker.imm.append(op)
        self.sem.release()

    def push_deferred(self, request, op, worker) -> None:
        if worker is None:
            worker = self.workers[next(self._rr) % len(self.workers)]
        worker.imm.append(op)
        self.sem.release()

    def find_task(self, w):
        """Own list (FIFO), then the others round-robin (FIFO)."""
        try:
            op = w.imm.popleft()
            w.last_step = 1
            w.steps[1] += 1
            return op
        except IndexError:
            pass
        workers = self.workers
        n = len(workers)
        return steal(w, (workers[(w.id + k) % n] for k in range(1, n)))

    def next_task(self, w):
        sem = self.sem
        sched = self.scheduler
        while True:
            if not sem.acquire(blocking=False):
                w.steps[5] += 1
                w.sleeps += 1
                sem.acquire()
                w.wakeups += 1
            while True:
                op = self.find_task(w)
                if op is not None:
                    return op
                if sched._stopping:
                    return None
                # A permit without a task in view: it was pushed to a list we already
                # scanned. Look again (it exists, see the protocol).

    def wake_all(self) -> None:
        for _ in self.workers:
            self.sem.release()
