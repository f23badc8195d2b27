"""The bobox policy's logic, driven deterministically without threads: the locality
order of task selection, the sleeping rule, waking, placement and the balancer
(migrate, share, round-robin responsibility for a shared request's deferred tasks)."""

from collections import deque
from types import SimpleNamespace

import pytest

from bobox_sched.core.sync import round_robin
from bobox_sched.policies.bobox.balancer import balance_once
from bobox_sched.policies.bobox.policy import BoboxPolicy
from topology.probe import CPU, Node, Topology


def make_topology(nodes=2, cpus_per_node=2):
    ns, cs = [], []
    for n in range(nodes):
        cpus = tuple(range(n * cpus_per_node, (n + 1) * cpus_per_node))
        dist = tuple(10 if m == n else 20 for m in range(nodes))
        ns.append(Node(n, cpus, 1 << 30, 1 << 29, dist))
        cs += [CPU(c, c, n, n, (c,)) for c in cpus]
    return Topology("synthetic", False, tuple(ns), tuple(cs), (), "test")


class CountingPark:
    """Stands in for a worker's binary semaphore: counts releases."""

    def __init__(self):
        self.releases = 0

    def release(self):
        self.releases += 1


def make_policy(nodes=2, threads=2):
    sched = SimpleNamespace(topology=make_topology(nodes, threads), _locality_sampler=None, _stopping=False)
    p = BoboxPolicy(sched, threads, balance_interval=None, pin=False)
    sched.policy = p
    p.create_workers()
    for w in p.nodes[0].workers + [w for n in p.nodes[1:] for w in n.workers]:
        w.park = CountingPark()
    return p


_ids = iter(range(10**6))


class Req:
    ACTIVE = "active"

    def __init__(self, policy, node=None):
        self.id = next(_ids)
        self.state = self.ACTIVE
        self.deferred = deque()
        self.nodes = []
        self.rr = round_robin()
        self.migrations = 0
        self.shares = 0
        policy.place(self, node)


class Op:
    def __init__(self, req, label):
        self.req = req
        self.label = label

    def __repr__(self):
        return self.label


def drain(policy, w):
    out = []
    while True:
        op = policy.find_task(w)
        if op is None:
            return out
        out.append((op.label, w.last_step))


def two_workers(nodes: int = 1):
    """A policy with 2 workers per node; node 0, its two workers and a request placed there."""
    p = make_policy(nodes=nodes, threads=2)
    node = p.nodes[0]
    w0, w1 = node.workers
    return p, node, w0, w1, Req(p, 0)


def test_locality_order_steps_1_to_4():
    p = make_policy(nodes=1, threads=2)
    w0, w1 = p.nodes[0].workers
    old = Req(p, 0)
    last = Req(p, 0)
    w0.last_req = last
    for i in range(2):
        p.push_deferred(old, Op(old, f"old-d{i}"), None)
        p.push_deferred(last, Op(last, f"last-d{i}"), None)
    p.push_immediate(w0, Op(last, "own-1"))
    p.push_immediate(w0, Op(last, "own-2"))
    p.push_immediate(w1, Op(old, "other-1"))
    p.push_immediate(w1, Op(old, "other-2"))
    assert drain(p, w0) == [
        ("own-2", 1), ("own-1", 1),  # 1: own immediate list, newest first
        ("last-d0", 2), ("last-d1", 2),  # 2: the request it ran last, oldest first
        ("old-d0", 3),  # 3: oldest request of the node, oldest task first ...
        ("old-d1", 2),  # ... which is now the request it ran last
        ("other-1", 4), ("other-2", 4),  # 4: steal the oldest immediate task of another thread
    ]
    assert w0.steps[1:5] == [2, 3, 1, 2] and w0.steals == 2


def test_step3_takes_oldest_request_with_tasks_and_remembers_it():
    p = make_policy(nodes=1, threads=1)
    (w,) = p.nodes[0].workers
    r_empty, r_old, r_new = Req(p, 0), Req(p, 0), Req(p, 0)
    p.push_deferred(r_new, Op(r_new, "new"), None)
    p.push_deferred(r_old, Op(r_old, "old-a"), None)
    p.push_deferred(r_old, Op(r_old, "old-b"), None)
    assert p.find_task(w).label == "old-a" and w.last_step == 3 and w.last_req is r_old
    # now step 2 applies to r_old even though... it is also the oldest; add to r_new:
    assert p.find_task(w).label == "old-b" and w.last_step == 2
    assert p.find_task(w).label == "new" and w.last_step == 3
    assert r_empty.deferred == deque()


def test_step2_prefers_last_request_over_older_ones():
    p = make_policy(nodes=1, threads=1)
    (w,) = p.nodes[0].workers
    r_old, r_new = Req(p, 0), Req(p, 0)
    p.push_deferred(r_old, Op(r_old, "old"), None)
    p.push_deferred(r_new, Op(r_new, "new"), None)
    w.last_req = r_new
    assert p.find_task(w).label == "new" and w.last_step == 2


def test_no_stealing_across_nodes_and_no_foreign_requests():
    p = make_policy(nodes=2, threads=1)
    (a,), (b,) = p.nodes[0].workers, p.nodes[1].workers
    r1 = Req(p, 1)
    p.push_immediate(b, Op(r1, "b-imm"))
    p.push_deferred(r1, Op(r1, "r1-def"), None)
    assert p.find_task(a) is None  # node 0 sees neither node 1's threads nor its requests
    assert drain(p, b) == [("b-imm", 1), ("r1-def", 3)]


def test_sleeping_rule():
    p, node, w0, w1, r = two_workers(nodes=1)
    # no task: a thread may sleep
    assert p.try_sleep(w0) is True and node.idle == [w0]
    # one task, one running thread (w1): w1 must not sleep (1 task > 0 running)
    r.deferred.append((Op(r, "t"), None))
    assert p.try_sleep(w1) is False and node.idle == [w0]
    # w0 woken by hand; now 1 task and 2 running: 1 > 1 is false, w1 may sleep
    node.idle.clear()
    assert p.try_sleep(w1) is True
    # 2 tasks, w0 running alone: w0 must not sleep
    r.deferred.append((Op(r, "u"), None))
    assert p.try_sleep(w0) is False
    assert w0.steps[5] == 1 and w1.steps[5] == 1


def test_fully_busy_node_touches_no_semaphore():
    p = make_policy(nodes=1, threads=2)
    w0, w1 = p.nodes[0].workers
    r = Req(p, 0)
    for i in range(50):
        p.push_immediate(w0, Op(r, f"i{i}"))
        p.push_deferred(r, Op(r, f"d{i}"), w1)
    assert w0.park.releases == 0 and w1.park.releases == 0


def test_new_task_wakes_an_idle_thread_of_its_node_only_when_needed():
    p, node, w0, w1, r = two_workers(nodes=1)
    assert p.try_sleep(w1)
    # one task created by the running w0: 1 task, 1 running -> w0 will do it, no wake
    p.push_immediate(w0, Op(r, "a"))
    assert w1.park.releases == 0
    # a second task: 2 tasks > 1 running -> wake w1 (and only once)
    p.push_immediate(w0, Op(r, "b"))
    assert w1.park.releases == 1 and node.idle == []
    assert p.find_task(w1).label == "a" and w1.last_step == 4  # w1 steals the oldest


def test_new_request_goes_to_node_with_most_free_resources():
    p = make_policy(nodes=2, threads=2)
    n0, n1 = p.nodes
    # node 1 has two idle threads, node 0 none
    for w in n1.workers:
        assert p.try_sleep(w)
    r = Req(p)
    assert r.nodes == [n1] and r in n1.requests
    # tie on idle threads -> fewer requests wins
    for w in n0.workers:
        assert p.try_sleep(w)
    r2 = Req(p)
    assert r2.nodes == [n0]


def test_balancer_migrates_newest_request_of_overloaded_node():
    p = make_policy(nodes=2, threads=1)
    n0, n1 = p.nodes
    (b,) = n1.workers
    assert p.try_sleep(b)  # node 1 idle
    r_old, r_new = Req(p, 0), Req(p, 0)
    for r in (r_old, r_new):
        p.push_deferred(r, Op(r, "x"), None)
    actions = balance_once(p)
    assert actions == [("migrate", r_new.id, 0, 1)]
    assert r_new.nodes == [n1] and n1.requests == (r_new,) and n0.requests == (r_old,)
    assert r_new.migrations == 1 and p.migrations == 1
    assert b.park.releases == 1  # the idle node was woken
    assert p.find_task(b).label == "x" and b.last_step == 3


def test_balancer_shares_single_request_and_round_robins_deferred_tasks():
    p = make_policy(nodes=2, threads=1)
    n0, n1 = p.nodes
    (a,), (b,) = n0.workers, n1.workers
    assert p.try_sleep(b)
    r = Req(p, 0)
    p.push_deferred(r, Op(r, "before"), None)
    assert balance_once(p) == [("share", r.id, 0, 1)]
    assert r.nodes == [n0, n1] and r in n1.requests and r.shares == 1
    assert b.park.releases == 1
    # responsibility for new deferred tasks alternates between the sharing nodes
    for i in range(4):
        p.push_deferred(r, Op(r, f"d{i}"), None)
    assert [nd.os_index if nd else None for _, nd in r.deferred] == [None, 0, 1, 0, 1]
    assert n0.pending_tasks() == 3 and n1.pending_tasks() == 2  # "before" is the owner's
    # both nodes' threads take the shared request's tasks (step 3 / step 2)
    assert p.find_task(b).label == "before"
    assert p.find_task(a).label == "d0"


def test_balancer_does_nothing_when_balanced_or_fully_busy():
    p = make_policy(nodes=2, threads=1)
    r0, r1 = Req(p, 0), Req(p, 1)
    for r in (r0, r1):
        p.push_deferred(r, Op(r, "x"), None)
    assert balance_once(p) == []  # both busy, nobody idle
    p2 = make_policy(nodes=2, threads=1)
    for n in p2.nodes:
        assert p2.try_sleep(n.workers[0])
    assert balance_once(p2) == []  # nobody overloaded


def test_shared_request_not_migrated_but_shared_further():
    p = make_policy(nodes=3, threads=1)
    n0, n1, n2 = p.nodes
    r = Req(p, 0)
    p.push_deferred(r, Op(r, "x"), None)
    assert p.try_sleep(n1.workers[0])
    assert balance_once(p) == [("share", r.id, 0, 1)]
    n1.idle.clear()
    p.push_deferred(r, Op(r, "y"), None)
    p.push_deferred(r, Op(r, "z"), None)
    assert p.try_sleep(n2.workers[0])
    acts = balance_once(p)
    assert acts and acts[0][0] == "share" and acts[0][3] == 2
    assert r.nodes == [n0, n1, n2]


@pytest.mark.parametrize("threads", [1, 3])
def test_request_done_removes_it_everywhere(threads):
    p = make_policy(nodes=2, threads=threads)
    r = Req(p, 0)
    p.share(r, p.nodes[1])
    p.request_done(r)
    assert r.nodes == [] and all(r not in n.requests for n in p.nodes)
    p.push_deferred(r, Op(r, "late"), None)  # dropped: nothing evaluates it any more
    assert not r.deferred


class _AppendHook(deque):
    """A deferred list that runs `before` (once) just before its first append: forces
    an interleaving between reading ``request.nodes`` and appending the task."""

    def __init__(self, before):
        super().__init__()
        self.before = before

    def append(self, x):
        if self.before is not None:
            fn, self.before = self.before, None
            fn()
        super().append(x)


def test_migration_between_reading_nodes_and_appending_still_wakes_the_new_node():
    p = make_policy(nodes=2, threads=1)
    src, dst = p.nodes
    (ws,), (wd,) = src.workers, dst.workers
    assert p.try_sleep(ws) and p.try_sleep(wd)
    r = Req(p, 0)

    def balancer_moves_it():
        assert p.migrate(r, src, dst)  # wakes wd, which finds nothing yet and sleeps again
        assert p.find_task(wd) is None and p.try_sleep(wd)

    r.deferred = _AppendHook(balancer_moves_it)
    woken = wd.park.releases
    p.push_deferred(r, Op(r, "source"), None)
    assert wd.park.releases == woken + 2  # the migration woke dst, then the pusher did again
    assert p.find_task(wd).label == "source"


def test_request_ending_during_share_is_not_put_back():
    import threading

    p = make_policy(nodes=2, threads=1)
    src, dst = p.nodes
    r = Req(p, 0)
    ender = threading.Thread(target=lambda: (setattr(r, "state", "cancelled"), p.request_done(r)))
    orig = dst.add_request

    def add_then_end(req):
        orig(req)
        ender.start()  # the request ends on another thread right now
        ender.join(0.2)  # it must wait for the membership lock the share holds

    dst.add_request = add_then_end
    p.share(r, dst)
    ender.join(5)
    assert r.nodes == [] and r not in dst.requests and r not in src.requests


def test_sleep_refused_once_stopping():
    p = make_policy(nodes=1, threads=1)
    (w,) = p.nodes[0].workers
    p.scheduler._stopping = True
    assert p.try_sleep(w) is False and p.nodes[0].idle == []


class AcquirablePark(CountingPark):
    """A park whose release may be consumed (acquire) once it happened."""

    def __init__(self):
        super().__init__()
        self.acquires = 0

    def acquire(self, blocking=True):
        assert self.releases > self.acquires, "would block: nobody released this park"
        self.acquires += 1
        return True


def test_deferred_push_wakes_only_when_the_pusher_cannot_take_it():
    p, node, w0, w1, r = two_workers(nodes=2)
    assert p.try_sleep(w1)
    # w0 of the same node with nothing else queued takes the task itself (step 2/3)
    p.push_deferred(r, Op(r, "d0"), w0)
    assert w1.park.releases == 0 and node.idle == [w1]
    # w0 with an immediate task queued: the deferred one needs another thread
    p.push_immediate(w0, Op(r, "i0"))
    p.push_deferred(r, Op(r, "d1"), w0)
    assert w1.park.releases == 1 and node.idle == []
    # a push from outside the workers (submit, a timer, a channel) always wakes
    assert p.try_sleep(w1) is False  # 2 deferred + 1 immediate > 1 running: w1 must not sleep
    r2 = Req(p, 0)
    node.idle.append(w1)
    p.push_deferred(r2, Op(r2, "x"), None)
    assert w1.park.releases == 2
    # ... and so does a worker of another node
    node.idle.append(w1)
    other = p.nodes[1].workers[0]
    p.push_deferred(r2, Op(r2, "y"), other)
    assert w1.park.releases == 3


def test_a_sleeper_popped_by_a_lock_free_waker_consumes_the_release():
    """try_sleep registers, then the sleeping rule says no; a waker popped it from idle in
    between (wake_one takes no lock): the sleeper must consume that release, not leave it
    pending (its next real sleep would return at once) and not block."""
    p = make_policy(nodes=1, threads=2)
    node = p.nodes[0]
    w0, w1 = node.workers
    w1.park = AcquirablePark()
    r = Req(p, 0)
    for label in "abc":
        r.deferred.append((Op(r, label), None))
    real = node.must_not_sleep

    def count_with_a_racing_waker():
        assert node.wake_one()  # the waker pops w1 (just appended) and releases it
        return real()

    node.must_not_sleep = count_with_a_racing_waker
    assert p.try_sleep(w1) is False  # 3 tasks > 2 running: w1 stays awake
    assert w1.park.releases == 1 and w1.park.acquires == 1 and node.idle == []
