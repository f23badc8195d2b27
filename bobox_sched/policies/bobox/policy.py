"""The Bobox scheduler (Falt & Yaghob, section 5).

Where tasks wait: a new immediate task goes to the list of the thread that created it,
a new deferred task to the list of its request (when the request is shared between
nodes, responsibility for each new deferred task goes round-robin over the sharing
nodes). A worker looks for work in exactly this order:

1. the newest task of its own immediate list (its packet is the hottest in cache);
   then the node's *pinned* tasks: operators placed on this node (``Plan.place``),
   counted as step 3;
2. the oldest deferred task of the request it ran last (that request's data is warm);
3. the oldest task of the oldest request of its node (old requests finish first and
   free their memory);
4. the oldest immediate task of another thread of its node (stealing);
5. sleep, on its own binary semaphore (see ``node.py`` for the sleep/wake protocol).

`find_task` (steps 1-4) and `try_sleep` (the sleeping rule) are plain functions of the
data structures, so tests drive them deterministically without threads.
"""

from __future__ import annotations

import threading

from bobox_sched.policies.bobox.balancer import Balancer
from bobox_sched.policies.bobox.node import NodeState
from bobox_sched.core.worker import Worker
from bobox_sched.core.sync import FENCED, fence
from bobox_sched.policies.base import Policy, steal


class BoboxPolicy(Policy):
    name = "bobox"

    def __init__(self, scheduler, threads_per_node, balance_interval=0.1, pin=True):
        super().__init__(scheduler, threads_per_node)
        topo = self.topology
        self.nodes = [NodeState(n.os_index, n.cpus, n.memory_bytes) for n in topo.cpu_nodes]
        self.by_id = {n.os_index: n for n in self.nodes}
        self.pin = pin
        self.balance_interval = balance_interval
        self.balancer = Balancer(self, balance_interval) if balance_interval else None
        self._stats_lock = threading.Lock()
        self._membership = threading.Lock()
        self.migrations = 0
        self.shares = 0

    # -- workers -------------------------------------------------------------------------
    def create_workers(self) -> list:
        workers = []
        for node in self.nodes:
            k = self.threads_per_node or len(node.cpus)
            for _ in range(k):
                w = Worker(self.scheduler, len(workers), node, node.cpus if self.pin else None)
                node.workers.append(w)
                workers.append(w)
        return workers

    # -- placement -----------------------------------------------------------------------
    def choose_node(self) -> NodeState:
        """The node with the most free resources: idle threads first, then fewer
        requests, then free memory (section 5.1)."""
        return max(self.nodes, key=lambda n: (len(n.idle), -len(n.requests), n.free_memory(), -n.os_index))

    # Which nodes evaluate a request (``request.nodes``, replaced copy-on-write, and each
    # node's ``requests``) changes only under ``_membership``: placement, migration,
    # sharing and the end of a request are serialised, so an ended request can never be
    # put back on a node. Lock order: ``_membership``, then node locks by OS index.

    def place(self, request, node_id: int | None = None) -> None:
        node = self.choose_node() if node_id is None else self.by_id[node_id]
        with self._membership:
            if request.state is not request.ACTIVE:
                return  # cancelled by a concurrent shutdown(cancel=True)
            with node.lock:
                node.add_request(request)
            request.nodes = [node]

    def request_done(self, request) -> None:
        with self._membership:
            nodes = request.nodes
            request.nodes = []
            for node in nodes:
                with node.lock:
                    node.remove_request(request)

    # -- task creation -------------------------------------------------------------------
    def push_immediate(self, worker, op) -> None:
        imm = worker.imm
        imm.append(op)
        if FENCED:  # the append above before the read of idle below (node.py)
            fence()
        # The pusher's only queued task needs nobody: the pusher runs it next (step 1,
        # Tokio's LIFO slot). With more queued, the node has more tasks than this running
        # thread: wake a sleeper, if any (node.py: lock-free wake, no scan). "More"
        # includes a deferred task of the request being run (push_deferred left it to
        # this worker: a run that woke a blocked sender, then sends).
        node = worker.node
        if node.idle and (len(imm) > 1 or (worker.last_req is not None and worker.last_req.deferred)):
            node.wake_one()

    def push_deferred(self, request, op, worker) -> None:
        nodes = request.nodes
        if not nodes:
            return  # the request ended meanwhile: nothing will run it
        if len(nodes) == 1:
            node = nodes[0]
            request.deferred.append((op, None))
        else:
            node = nodes[request.rr() % len(nodes)]
            request.deferred.append((op, node))
        if FENCED:  # the append above before the read of idle below (node.py)
            fence()
        # A worker of this node with nothing else queued takes the task itself (it looks
        # at its request's deferred list right after its own list); anyone else, a busy
        # worker, or a second deferred task (a run that woke two blocked senders) wakes
        # a sleeper.
        if node.idle and (worker is None or worker.node is not node or worker.imm or len(request.deferred) > 1):
            node.wake_one()
        if request.nodes is not nodes:
            # Migrated, shared or ended between our read and our append: the node now
            # responsible may have looked before the task was there. Wake whoever is
            # responsible now (a migration after this point wakes its target itself).
            if request.state is not request.ACTIVE:
                request.deferred.clear()
            for n in request.nodes:
                if n.idle:
                    n.wake_one()

    def push_on(self, request, op, node: int | None = None, worker=None) -> None:
        """A task that must run on `worker` (appended to its immediate list: the deque
        makes a foreign append atomic, the owner runs it as its newest task) or on a
        worker of `node` (the node's ``pinned`` list, looked at right after a worker's
        own list)."""
        if worker is not None:
            worker.imm.append(op)
            nd = worker.node
            if nd.idle:
                with nd.lock:
                    try:
                        nd.idle.remove(worker)
                    except ValueError:
                        return  # awake (or being woken): it will look at its list
                worker.park.release()
            return
        nd = self.by_id.get(node)
        if nd is None:
            self.push_deferred(request, op, None)
            return
        nd.pinned.append(op)
        if FENCED:
            fence()
        if nd.idle:
            nd.wake_one()

    def _wake(self, node: NodeState, always: bool = True) -> bool:
        """Wake one sleeping worker of `node` (a request was added to it)."""
        return node.wake_one()

    # -- task selection ------------------------------------------------------------------
    def find_task(self, w):
        """Steps 1-4 of the locality order; records the step in ``w.last_step``."""
        imm = w.imm
        if imm:
            try:
                op = imm.pop()
                w.last_step = 1
                w.steps[1] += 1
                return op
            except IndexError:  # a thief took it
                pass
        node = w.node
        if node.pinned:
            try:
                op = node.pinned.popleft()
                w.last_req = op.req
                w.last_step = 3
                w.steps[3] += 1
                return op
            except IndexError:
                pass
        r = w.last_req
        if r is not None and r.deferred and node in r.nodes:
            try:
                op = r.deferred.popleft()[0]
                w.last_step = 2
                w.steps[2] += 1
                return op
            except IndexError:
                pass
        for r in node.requests:
            if r.deferred:
                try:
                    op = r.deferred.popleft()[0]
                except IndexError:
                    continue
                w.last_req = r
                w.last_step = 3
                w.steps[3] += 1
                return op
        workers = node.workers
        n = len(workers)
        if n > 1:
            start = workers.index(w) + 1
            return steal(w, (workers[(start + k) % n] for k in range(n - 1)))
        return None

    def try_sleep(self, w) -> bool:
        """Step 5: register `w` as sleeping unless the sleeping rule forbids it. True if
        the caller must now block on ``w.park``."""
        node = w.node
        with node.lock:
            node.idle.append(w)
            if FENCED:  # the append above before the counts below (node.py)
                fence()
            # _stopping is set before wake_all takes this lock: either wake_all finds us
            # in idle, or we see _stopping here and do not sleep (no lost shutdown).
            if self.scheduler._stopping or node.must_not_sleep():
                try:
                    node.idle.remove(w)
                except ValueError:
                    # A lock-free waker popped us meanwhile and released our park (or is
                    # about to): consume that release, we are awake anyway.
                    w.park.acquire()
                return False
        w.steps[5] += 1
        w.sleeps += 1
        return True

    def next_task(self, w):
        # Step 1 inlined (the common case: one frame less per task), then find_task.
        imm = w.imm
        if imm:
            try:
                op = imm.pop()
                w.last_step = 1
                w.steps[1] += 1
                return op
            except IndexError:  # a thief took it
                pass
        find = self.find_task
        sched = self.scheduler
        while True:
            op = find(w)
            if op is not None:
                return op
            if sched._stopping:
                return None
            if self.try_sleep(w):
                w.park.acquire()
                w.wakeups += 1

    def wake_all(self) -> None:
        # Pop each sleeper like wake_one does (never swap the list: a wake_one that read
        # ``node.idle`` before a swap would pop from the old list a sleeper that we
        # release too, a second release of its park). The lock only orders us after a
        # try_sleep (see its _stopping test).
        for node in self.nodes:
            with node.lock:
                while node.wake_one():
                    pass

    # -- balancing -----------------------------------------------------------------------
    def migrate(self, request, src: NodeState, dst: NodeState) -> bool:
        """Move an unshared request to another node (its future deferred tasks and its
        place in the oldest-first order go with it; immediate tasks stay, they are hot
        where they are). False if the request ended or moved meanwhile."""
        first, second = sorted((src, dst), key=lambda n: n.os_index)
        with self._membership:
            if request.state is not request.ACTIVE or request.nodes != [src]:
                return False
            with first.lock, second.lock:
                dst.add_request(request)
                request.nodes = [dst]
                src.remove_request(request)
        request.migrations += 1
        with self._stats_lock:
            self.migrations += 1
        tr = getattr(self.scheduler, "tracer", None)  # (tests drive the policy with stand-ins)
        if tr is not None:
            tr.action("migrate", request.id, src.os_index, dst.os_index)
        self._wake(dst, True)
        return True

    def share(self, request, dst: NodeState) -> bool:
        """Let `dst` evaluate `request` too; new deferred tasks go round-robin. False if
        the request ended or changed meanwhile."""
        with self._membership:
            if request.state is not request.ACTIVE or dst in request.nodes or not request.nodes:
                return False
            with dst.lock:
                dst.add_request(request)
            owner = request.nodes[0].os_index
            request.nodes = request.nodes + [dst]
        request.shares += 1
        with self._stats_lock:
            self.shares += 1
        tr = getattr(self.scheduler, "tracer", None)  # (tests drive the policy with stand-ins)
        if tr is not None:
            tr.action("share", request.id, owner, dst.os_index)
        self._wake(dst, True)
        return True

    def start(self) -> None:
        if self.balancer is not None and len(self.nodes) > 1:
            self.balancer.start()

    def stop(self, wait: bool = True) -> None:
        if self.balancer is not None:
            self.balancer.stop(wait)

    def request_added(self) -> None:
        if self.balancer is not None:
            self.balancer.notify()

    def stats(self) -> dict:
        return {
            "migrations": self.migrations,
            "shares": self.shares,
            "balancer_ticks": self.balancer.ticks if self.balancer else 0,
            "nodes": [
                {
                    "node": n.os_index,
                    "threads": n.nthreads,
                    "idle_threads": len(n.idle),
                    "requests": len(n.requests),
                    "pending_tasks": n.pending_tasks(),
                }
                for n in self.nodes
            ],
        }
