"""Interleavings of the lock-free task protocol (task.py's module doc), forced one at a
time without threads: a hook inside one party's step runs the other party's whole step
there, as a thread switch at that point would. Each test names the invariant it checks."""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from types import SimpleNamespace

import numpy as np

import bobox_sched
from bobox_sched.core import task
from bobox_sched.core.operator import Context, Operator, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control.punct import Window
from bobox_sched.core.sources import QueueSource, StreamChannel


class RecordingPolicy:
    """Records pushed tasks; runs nothing."""

    deliver = None

    def __init__(self):
        self.pushed = []

    def push_immediate(self, worker, op):
        self.pushed.append(op)

    def push_deferred(self, request, op, worker):
        self.pushed.append(op)

    def push_on(self, request, op, node=None, worker=None):
        self.pushed.append(op)


class FakeRequest:
    ACTIVE = "active"

    def __init__(self):
        self.state = self.ACTIVE
        self.policy = RecordingPolicy()
        self.failed = []
        self.finished = []

    def fail(self, exc, op=None):
        self.failed.append((exc, op))

    def op_finished(self, op):
        self.finished.append(op)


def fake_worker():
    w = SimpleNamespace(locality_sampler=None, node_id=None, last_req=None, node=None, imm=deque())
    w.ctx = Context(w, None)
    return w


def pkt(v):
    return Packet({"x": np.array([v], dtype=np.int64)})


class Sender(Operator):
    """Sends the packets it is given, one run each."""

    outputs = ("out",)

    def __init__(self):
        self.todo = deque()

    def process(self, ctx):
        if self.todo:
            ctx.send("out", self.todo.popleft())


class Collect(StreamOperator):
    outputs = ()

    def __init__(self):
        self.got = []

    def on_packet(self, ctx, port, packet):
        self.got.append(int(packet["x"][0]))


def bind(cap=1):
    req = FakeRequest()
    s = task.Task(Sender(), "s", req, cap)  # the runtime's records of the two operators
    r = task.Task(Collect(), "r", req, cap)
    s.dst[0] = (r, 0)
    return req, s, r


class HookDeque(deque):
    """A deque whose truth test runs `hook` once, right after the test was answered (a
    thread switch between the test and the caller's next step)."""

    hook = None

    def __bool__(self):
        answer = len(self) > 0
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return answer


def test_recv_fast_path_never_strands_a_sender_that_registered_during_the_take():
    """Invariant: no sender waits for room that exists. The receiver takes the head of a
    full buffer; the sender, rejected by the full buffer, registers as a waiter at the
    moment between the receiver's look at its waiters and its pop. Either the receiver
    must wake it, or the sender's second look must see the room."""
    req, s, r = bind(cap=1)
    wr, ws = fake_worker(), fake_worker()
    r.inq[0].append(pkt(0))  # full
    s.op.todo.append(pkt(1))

    def sender_runs():
        s.tok.acquire()
        task.run_task(ws, s)  # sends pkt(1): rejected (full), waits in the outbox

    r.inq[0].waiters = HookDeque()
    r.inq[0].waiters.hook = sender_runs
    r.tok.acquire()
    task.run_task(wr, r)  # takes pkt(0); the sender runs at the switch point
    # Either the packet got in, or the sender has a task (it holds its token and was
    # pushed): a sender with a packet in its outbox, no task, and room at the receiver
    # waits for ever (the receiver's next take needs a packet, only the sender has one).
    assert not s.outbox or s in req.policy.pushed, (
        "sender stranded: its packet waits in the outbox for room that exists "
        f"(receiver buffer {len(r.inq[0])}/1, waiters {list(r.inq[0].waiters)})"
    )


class TwoInputs(Operator):
    inputs = ("l", "r")
    outputs = ()


def test_a_sender_waits_on_the_port_it_sent_to():
    """Invariant: a blocked sender is registered on the receiver's port that refused it
    (core/port.py): a take from the receiver's other input leaves it waiting, a take
    from its port wakes it."""
    req = FakeRequest()
    a, b, j = (task.Task(op, name, req, 1) for name, op in (("a", Sender()), ("b", Sender()), ("j", TwoInputs())))
    a.dst[0], b.dst[0] = (j, 0), (j, 1)
    w = fake_worker()
    assert task._deliver(w, a, 0, pkt(0)) and task._deliver(w, b, 0, pkt(1))
    assert not task._deliver(w, a, 0, pkt(2))  # 'l' is full: a waits on it
    assert list(j.inq[0].waiters) == [a] and not j.inq[1].waiters
    req.policy.pushed.clear()
    w.ctx.task = j
    assert int(w.ctx.recv("r")["x"][0]) == 1  # a take from the other input
    assert a not in req.policy.pushed and list(j.inq[0].waiters) == [a]
    assert int(w.ctx.recv("l")["x"][0]) == 0  # a take from a's port
    assert a in req.policy.pushed and not j.inq[0].waiters


# -- every single preemption ------------------------------------------------------------
#
# A model of two threads: one task runs ("main"), and at its n-th bytecode inside the
# runtime (bobox_sched/) a second task runs to completion ("other") -- a thread switch at
# that point. For each n, from a fresh state, until main completes without reaching n;
# then every remaining task runs, one at a time, and the end state is checked. Bytecode
# boundaries the GIL would never switch at are included: a free-threaded build can
# interleave anywhere.

RUNTIME_DIR = os.path.dirname(bobox_sched.__file__)


def preempt_at(n: int, main, other) -> bool:
    """Run main(); before its n-th bytecode in the runtime, run other() (or at the first
    bytecode after that where other does not return False: it would block). True if it
    did; False if main had fewer bytecodes (other then runs after it)."""
    state = {"count": 0, "fired": False, "error": None}

    def local(frame, event, arg):
        if event == "opcode" and not state["fired"]:
            if state["count"] >= n:
                try:
                    # Trace functions are off inside a trace function. False: other
                    # would block here (a lock main holds): try at the next bytecode.
                    state["fired"] = other() is not False
                except BaseException as e:  # noqa: BLE001 - reported below
                    state["fired"] = True
                    state["error"] = e
            state["count"] += 1
        return local

    def call(frame, event, arg):
        if frame.f_code.co_filename.startswith(RUNTIME_DIR):
            # f_trace first: since 3.12 f_trace_opcodes takes effect only on a frame
            # that already has its trace function.
            frame.f_trace = local
            frame.f_trace_lines = False
            frame.f_trace_opcodes = True
            return local
        return None

    old = sys.gettrace()
    sys.settrace(call)
    try:
        main()
    finally:
        sys.settrace(old)
    if state["error"] is not None:
        raise state["error"]
    if not state["fired"]:
        other()
    preempt_at.traced = state["count"]
    return state["fired"]


def every_point(case) -> int:
    """Call ``case(n)`` (one preempt_at) for n = 0, 1, ... until main ran out of
    bytecodes before n; returns how many points there were. Python 3.12.1 sends no
    opcode event the first time a code object is traced: a run that traced nothing is
    repeated once (its code objects are instrumented by then)."""
    n = 0
    retried = False
    while True:
        if case(n):
            n += 1
        elif preempt_at.traced == 0 and not retried:
            retried = True
        else:
            return n


class SimPolicy(RecordingPolicy):
    """Tasks in one FIFO list; flags two tasks of one operator: a push of an operator
    that has a pending task, or that another worker is running (the running worker
    itself may push its next task: it keeps the token). A run ends, for this purpose,
    when it releases the token (what it does after that touches no operator state)."""

    def __init__(self):
        super().__init__()
        self.pending = deque()
        self.running = {}  # op -> the worker running it
        self.errors = []

    def _add(self, op, worker):
        if op in self.pending:
            self.errors.append(f"second task of {op.name} (one pending)")
        elif op in self.running and self.running[op] is not worker:
            self.errors.append(f"second task of {op.name} (pushed while another worker runs it)")
        self.pushed.append(op)
        self.pending.append(op)

    def push_immediate(self, worker, op):
        self._add(op, worker)

    def push_deferred(self, request, op, worker):
        self._add(op, worker)

    def push_on(self, request, op, node=None, worker=None):
        self._add(op, worker)

    def push_later(self, request, op, delay):
        self._add(op, None)

    def run(self, worker, op):
        if op in self.running:
            self.errors.append(f"two workers run {op.name}")
        if not op.tok.locked():
            self.errors.append(f"a task of {op.name} without its token")
        self.running[op] = worker
        try:
            task.run_task(worker, op)
        finally:
            if self.running.get(op) is worker:
                del self.running[op]

    def released(self, op):
        self.running.pop(op, None)

    def pop(self, skip=None):
        for op in self.pending:
            if op is not skip:
                self.pending.remove(op)
                return op
        return None


class Token:
    """The task token, telling the policy when a run gives it back."""

    def __init__(self, op, policy):
        self._lock = threading.Lock()
        self._op = op
        self._policy = policy
        self.acquire = self._lock.acquire
        self.locked = self._lock.locked

    def release(self):
        self._policy.released(self._op)
        self._lock.release()


class Emit(Operator):
    """A source of one-row packets 0..n-1, one per run."""

    outputs = ("out",)

    def __init__(self, n):
        self.n = n
        self.i = 0

    def process(self, ctx):
        if ctx.blocked:
            return
        if self.i == self.n:
            ctx.finish()
            return
        ctx.send("out", pkt(self.i))
        self.i += 1
        ctx.reschedule()


class Forward(StreamOperator):
    def on_packet(self, ctx, port, packet):
        ctx.send("out", packet)


class Limit(StreamOperator):
    """Takes `k` packets, then finishes (a LIMIT): its senders then drop what they send."""

    outputs = ()

    def __init__(self, k):
        self.k = k
        self.got = []

    def on_packet(self, ctx, port, packet):
        self.got.append(int(packet["x"][0]))
        if len(self.got) == self.k:
            ctx.finish()


class World:
    """Operators `ops` with `edges` ((sender, output index, receiver, input index)),
    buffers of `cap`; every source has its first task."""

    def __init__(self, ops, edges, cap=1):
        self.req = FakeRequest()
        self.req.policy = self.policy = SimPolicy()
        self.ops = ops  # the operators (what they collected); their tasks below
        self.tasks = [task.Task(op, f"op{i}", self.req, cap) for i, op in enumerate(ops)]
        for t in self.tasks:
            t.tok = Token(t, self.policy)
        for a, i, b, j in edges:
            self.tasks[a].dst[i] = (self.tasks[b], j)
        self.w1, self.w2 = fake_worker(), fake_worker()
        for t in self.tasks:
            if not t.inputs:
                t.tok.acquire()
                self.policy.pending.append(t)

    @classmethod
    def chain(cls, ops, cap=1):
        return cls(ops, [(k, 0, k + 1, 0) for k in range(len(ops) - 1)], cap)

    def step(self, worker):
        op = self.policy.pop()
        if op is not None:
            self.policy.run(worker, op)
        return op

    def two_tasks(self):
        """Two parties: the tasks of two different operators (None if fewer pending)."""
        a = self.policy.pop()
        b = self.policy.pop(skip=a)
        if a is None or b is None:
            for op in (b, a):
                if op is not None:
                    self.policy.pending.appendleft(op)
            return None
        return (a.name, lambda: self.policy.run(self.w1, a)), (b.name, lambda: self.policy.run(self.w2, b))

    def drain(self, limit=10_000):
        for _ in range(limit):
            if self.step(self.w1) is None:
                return
        raise AssertionError("tasks never run out (livelock)")


def explore(make_world, check, parties=World.two_tasks, max_prefix=40):
    """For each prefix length k (tasks run one at a time first) after which `parties`
    gives two, every preemption point n of one by the other, both ways round; then
    every task left runs and `check` judges the end state."""
    cases = 0
    for k in range(max_prefix):
        probe = make_world()
        if any(probe.step(probe.w1) is None for _ in range(k)):
            break
        if parties(probe) is None:
            continue
        for order in (0, 1):

            def case(n):
                world = make_world()
                for _ in range(k):
                    world.step(world.w1)
                (na, a), (nb, b) = parties(world)[:: -1 if order else 1]
                fired = preempt_at(n, a, b)
                world.drain()
                where = f"prefix {k}, {na} preempted by {nb} at bytecode {n}"
                assert not world.policy.errors, f"{where}: {world.policy.errors}"
                check(world, where)
                return fired

            cases += every_point(case) + 1
    return cases


def quiescent(world, where):
    """Nothing waits: no outbox holds a packet, no task is pending, every operator is
    finished (the run completed)."""
    for op in world.tasks:
        assert not op.outbox, f"{where}: {op.name} stranded with {len(op.outbox)} item(s) in its outbox"
        assert op.finished, f"{where}: {op.name} never finished (inputs {[len(q) for q in op.inq]})"
    assert not world.policy.pending
    assert not world.req.failed, f"{where}: {world.req.failed}"


def test_chain_every_preemption_delivers_everything_in_order():
    """Source -> forward -> sink with one-packet buffers: whichever bytecode of one
    task another task runs at, every packet arrives once and in order, nothing is left
    waiting, and no operator ever has two tasks."""
    n = 4

    def check(world, where):
        quiescent(world, where)
        assert world.ops[-1].got == list(range(n)), f"{where}: got {world.ops[-1].got}"

    assert explore(lambda: World.chain([Emit(n), Forward(), Collect()]), check) > 100


def test_finishing_receiver_every_preemption_releases_its_senders():
    """A receiver that finishes early (a LIMIT) while its senders are blocked on it or
    sending: at every preemption point they are let go (they drop what they send) and
    finish; none waits for ever on a buffer nobody reads."""

    def check(world, where):
        quiescent(world, where)
        assert world.ops[-1].got == [0, 1], f"{where}: got {world.ops[-1].got}"

    assert explore(lambda: World.chain([Emit(6), Forward(), Limit(2)]), check) > 100


class EmitPunct(Emit):
    """Emit, with a window punctuation after every odd packet."""

    def process(self, ctx):
        i = self.i
        super().process(ctx)
        if self.i != i and i % 2:
            ctx.punctuate(Window(i))


class Record(StreamOperator):
    """A sink that receives punctuations too (expecting): records packets and windows."""

    outputs = ()
    punct_in = "expecting"

    def __init__(self):
        self.got = []

    def on_packet(self, ctx, port, packet):
        self.got.append(int(packet["x"][0]))

    def on_punct(self, ctx, port, punct):
        self.got.append(f"W{punct.wid}")


def test_punctuations_every_preemption_keep_their_place():
    """Punctuations forwarded by the runtime through an oblivious operator (take_input's
    slow path, sends behind a blocked outbox) arrive in order with the packets."""
    n = 4
    want = [0, 1, "W1", 2, 3, "W3"]

    def check(world, where):
        quiescent(world, where)
        assert world.ops[-1].got == want, f"{where}: got {world.ops[-1].got}"

    assert explore(lambda: World.chain([EmitPunct(n), Forward(), Record()]), check) > 100


class Union(StreamOperator):
    inputs = ("a", "b")

    def on_packet(self, ctx, port, packet):
        ctx.send("out", packet)


class Tee(StreamOperator):
    outputs = ("a", "b")

    def on_packet(self, ctx, port, packet):
        ctx.send("a", packet)
        ctx.send("b", packet)


class Shifted(Emit):
    def process(self, ctx):
        if not ctx.blocked and self.i < self.n:
            ctx.send("out", pkt(100 + self.i))
            self.i += 1
            ctx.reschedule()
            return
        super().process(ctx)


def test_fan_in_every_preemption_keeps_each_edge_in_order():
    """Two sources into one operator: per-edge order and exactly-once delivery."""
    n = 3

    def make():
        return World([Emit(n), Shifted(n), Union(), Collect()], [(0, 0, 2, 0), (1, 0, 2, 1), (2, 0, 3, 0)])

    def check(world, where):
        quiescent(world, where)
        got = world.ops[-1].got
        assert [v for v in got if v < 100] == list(range(n)), f"{where}: got {got}"
        assert [v - 100 for v in got if v >= 100] == list(range(n)), f"{where}: got {got}"

    assert explore(make, check) > 100


def test_fan_out_every_preemption_blocks_and_resumes_on_either_receiver():
    """One operator sending to two receivers, either of which may be full."""
    n = 4

    def make():
        return World([Emit(n), Tee(), Collect(), Collect()], [(0, 0, 1, 0), (1, 0, 2, 0), (1, 1, 3, 0)])

    def check(world, where):
        quiescent(world, where)
        for sink in world.ops[2:]:
            assert sink.got == list(range(n)), f"{where}: {sink.name} got {sink.got}"

    assert explore(make, check) > 100


class ChannelWorld(World):
    """A QueueSource fed by a StreamChannel from outside the workers: a step is either a
    put (the feeding thread) or a task; puts and tasks alternate while both remain."""

    def __init__(self, n, batch):
        self.channel = StreamChannel(capacity=None)
        super().__init__([QueueSource(self.channel, batch=batch), Forward(), Collect()],
                         [(0, 0, 1, 0), (1, 0, 2, 0)])
        self.feed = deque([pkt(i) for i in range(n)] + [None])  # None: close()
        self.turn = 0

    def put(self):
        if self.channel._cond._lock.locked():
            return False  # the consumer holds the channel's lock: a put would wait
        item = self.feed.popleft()
        if item is None:
            self.channel.close()
        else:
            self.channel.put(item)

    def step(self, worker):
        self.turn += 1
        if self.feed and (self.turn % 2 or not self.policy.pending):
            self.put()
            return True
        return super().step(worker)

    def task_and_put(self):
        """Two parties: the next task, and the next put."""
        if not self.feed:
            return None
        op = self.policy.pop()
        if op is None:
            return None
        def run():
            if self.channel._cond._lock.locked():
                return False  # the put holds the channel's lock: the source would wait
            self.policy.run(self.w1, op)

        return (op.name, run), ("put", self.put)


def test_channel_every_preemption_wakes_its_source():
    """A put at any bytecode of the source's (or its receiver's) run: the source runs
    again for every item (the run's end sees the put, or the put gets the token), nothing
    stays in the channel, and the stream ends once closed."""
    n = 5

    def check(world, where):
        quiescent(world, where)
        assert not len(world.channel), f"{where}: {len(world.channel)} item(s) left in the channel"
        assert world.ops[-1].got == list(range(n)), f"{where}: got {world.ops[-1].got}"

    assert explore(lambda: ChannelWorld(n, batch=2), check, parties=ChannelWorld.task_and_put) > 100


class CancelWorld(World):
    """A chain whose request is cancelled from outside: Request._end's part that touches
    operators (buffers and waiter lists cleared; outboxes are left to the thread that runs
    the operator next), then every task left runs and is dropped."""

    def cancel(self):
        req = self.req
        req.state = "cancelled"
        for op in self.tasks:
            for q in op.inq:
                q.clear()
                q.waiters.clear()

    def task_and_cancel(self):
        op = self.policy.pop()
        if op is None:
            return None
        return (op.name, lambda: self.policy.run(self.w1, op)), ("cancel", self.cancel)


def test_cancel_every_preemption_drops_every_task():
    """A cancel at any bytecode of a run: no exception leaves run_task (the worker would
    report it), every task left is dropped, and the operators that still had a task keep
    nothing queued (the thread that drops a task clears its outbox and buffers)."""

    def check(world, where):
        assert not world.policy.pending, where
        for op in world.tasks:
            if op.finished:
                assert not op.outbox and not any(op.inq), f"{where}: {op.name} dropped but holds packets"
        # an operator that ran into the cleared buffer may fail the (already ended)
        # request: Request.fail is then a no-op; nothing else may fail it
        for exc, op in world.req.failed:
            assert isinstance(exc, IndexError), f"{where}: {op.name} failed with {exc!r}"

    assert explore(lambda: CancelWorld.chain([Emit(4), Forward(), Collect()]), check,
                   parties=CancelWorld.task_and_cancel) > 100


def test_a_warning_given_by_two_threads_at_once_is_given_once():
    """SchedulerCore._warn is a check-then-append on the scheduler's list of warnings: a
    second thread's call with the same message, stepped in before every bytecode of the
    first's, must neither warn twice nor list the message twice."""
    import warnings

    from bobox_sched.core.scheduler import SchedulerCore

    n = 0
    while True:
        me = SimpleNamespace(_warnings=[], _warnings_lock=threading.Lock())

        def other():
            if me._warnings_lock.locked():
                return False  # the first call holds it: a real thread would wait here
            SchedulerCore._warn(me, "twice?")

        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            fired = preempt_at(n, lambda: SchedulerCore._warn(me, "twice?"), other)
        assert (len(got), me._warnings) == (1, ["twice?"]), f"second call before bytecode {n}"
        if not fired:
            break
        n += 1
    assert n > 5  # every bytecode of the first call was tried
