"""Interleavings of the lock-free task protocol (task.py's module doc), forced one at a
time without threads: a hook inside one party's step runs the other party's whole step
there, as a thread switch at that point would. Each test names the invariant it checks."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np

from bobox_sched import task
from bobox_sched.operator import Context, Operator, StreamOperator
from bobox_sched.packet import Packet


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
    s, r = Sender(), Collect()
    s._bind("s", req, cap)
    r._bind("r", req, cap)
    s._bx_dst[0] = (r, 0)
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
    r._bx_inq[0].append(pkt(0))  # full
    s.todo.append(pkt(1))

    def sender_runs():
        s._bx_tok.acquire()
        task.run_task(ws, s)  # sends pkt(1): rejected (full), waits in the outbox

    r._bx_waiters = HookDeque()
    r._bx_waiters.hook = sender_runs
    r._bx_tok.acquire()
    task.run_task(wr, r)  # takes pkt(0); the sender runs at the switch point
    # Either the packet got in, or the sender has a task (it holds its token and was
    # pushed): a sender with a packet in its outbox, no task, and room at the receiver
    # waits for ever (the receiver's next take needs a packet, only the sender has one).
    assert not s._bx_outbox or s in req.policy.pushed, (
        "sender stranded: its packet waits in the outbox for room that exists "
        f"(receiver buffer {len(r._bx_inq[0])}/1, waiters {list(r._bx_waiters)})"
    )
