"""Tasks: the operator state machine, packet delivery with back-pressure, and running a task.

A *task* is "run this operator once". Because an operator has at most one pending task
(the token below), a task is represented by one record per operator and request, a
:class:`Task` that ``Request`` makes when it binds the plan: it holds everything the
runtime keeps about the operator (ports, token, outbox, ...), and ``task.op`` is the
user's operator, on which the runtime sets nothing but ``name``. Policies' lists hold
these records (a policy's own per-operator state is a record it keys by the task), and
the context of a run points at it (``ctx.task``). The policy decides which list a task
goes to:

* receiving a packet (or an end of stream) creates an **immediate** task, pushed by the
  sending thread to *its own* immediate list: the packet is hot in that thread's cache;
* ``ctx.reschedule()`` and a blocked sender being woken create a **deferred** task, put
  in the request's deferred list (Bobox paper, section 3.1).

The paper's states (Nothing, Scheduled, Running, Running and scheduled) are kept with
two fields and no lock, so the per-task path takes none:

* ``task.tok``, a ``threading.Lock`` used as a token: held while the operator has a
  task in some list or is running (Scheduled / Running), free when it has nothing to do
  (Nothing). Whoever takes it with ``acquire(blocking=False)`` -- one C call, a real
  test-and-set -- is the one thread that pushes the task; the thread that runs the task
  keeps it, and at the end of the run either pushes the next task itself (keeping the
  token) or releases it. A FINISHED operator keeps it for ever: no task is made again.
* ``task.again``: "run again" (Running and scheduled). Anyone who wants the operator
  to run -- a delivery, a woken waiter, an external ``schedule`` -- first publishes what
  the run must see (appends the packet, ...), then sets ``again``, then tries the
  token. A run clears ``again`` when it starts; at its end, when it would stop, it
  releases the token and *then* reads ``again`` (and its input buffers) again, and
  takes the token back if needed. A trigger either lands before the run starts (the run
  sees its effect), or during the run (the end sees ``again``), or after the token
  was released (its own ``acquire`` succeeds). Exactly one of the racing parties wins
  the token, so there is never more than one task, and never none when one is due.

Protocol (who touches what, when):

* ``task.inq[j]`` is input j's :class:`~bobox_sched.core.port.Port` (``port.py`` states
  its protocol: one producer, one consumer, the capacity check, ``closed``, ``waiters``).
  Its producer is the operator at the far end of the edge (one thread at a time, by the
  same token rule), its consumer the running operator.
* A sender whose packet is rejected by a full buffer is registered in that port's
  ``waiters`` (``Port.offer``, which looks at the buffer again: if room appeared
  meanwhile it goes on). ``take_input`` pops a packet and then drains the port's
  waiters, scheduling each: no sender waits for room that exists (no lost wake-up). A
  sender may be woken twice; a second ``schedule`` of a scheduled operator does nothing.
* ``task.finished`` is set once, by the thread running the operator when it finishes
  (or drops the task of an ended request); senders then drop what they send (a limit
  that finished early). A sender that raced past the flag appends to a buffer nobody
  reads: the packet is released when the request ends.
* ``task.outbox``, ``task.resched``, ``task.finishing``, ``task.outclosed``,
  ``task.openidx`` and ``task.idle`` belong to the thread running the operator; only
  it touches them, and only one thread runs an operator at a time (the token). The
  hand-over from one run's thread to the next is ordered by the token (a lock release
  and acquire).
* No lock is held while calling into the policy, so a policy may take its own.
* An operator with several oblivious inputs that preserves punctuations aligns them
  (``Alignment``): a punctuation stays at the head of its input until every other input
  has it at its head or ended, and only the running thread looks at or pops those heads
  (it is their one consumer), so the alignment needs no lock either. ``unread`` does not
  count an input whose head waits so: an operator is not re-run, nor reported stalled,
  for input it may not take yet.

GIL and free-threaded builds: the argument above needs each deque operation and each
attribute store to be atomic and all of them sequentially consistent. The GIL gives that.
A free-threaded CPython makes deque operations and attribute stores atomic too (per-object
critical sections), and the token's acquire/release are full barriers; the reads of
``again``/buffers after a release need an explicit fence (a release of an
uncontended lock is not one for a *later* read): ``sync.fence()``, called where a run
releases the token and looks again (it does nothing under the GIL: ``sync.FENCED``).

What an operator may send (checked in ``Context.send`` before ``send`` here, so the
runtime never queues garbage): a :class:`~bobox_sched.core.packet.Packet` (an identity test of
its class, ``isinstance`` only for subclasses), on an output it has not closed
(``ctx.close`` removes the port from ``openidx``, the dict ``Context.send`` looks
ports up in, so this check costs nothing per packet). Anything else, and an unknown
port, raises ``OperatorError`` inside the run, which fails the request like any
exception of the operator. Equal column lengths are not checked: that would loop over
the columns of every packet.

No progress. A run ends in one of the branches at the bottom of ``run_task``; only one of
them can repeat without end on its own: *re-queued because the input buffer is not empty*
(not finishing, nothing left in the outbox, no ``reschedule()``, and nothing delivered
during the run, or ``again`` would be set). An operator that stops reading an input
stays there forever: its full buffer stops its senders, so nothing else changes, and the
run is repeated as fast as a core allows (and ``shutdown()`` waits for the request for
ever). Protocol:

* ``task.idle`` (running thread's): ``take_input`` (a packet taken) and ``send`` (a
  packet or end of stream sent) set it to 0; that branch adds 1. It counts the re-queues
  for unread input since the operator last took or sent something. The other branches
  leave it alone: a reschedule, a blocked outbox or a new delivery are not repeats of
  the same stuck state.
* The first such re-queue after progress is an immediate task, as it always was (a
  stream operator that took one of several buffered packets). Later ones are deferred:
  a run that took nothing has no hot packet to run near, and behind the request's other
  tasks whatever it waits for may run first (``bobox`` pops a worker's own immediate
  list newest first: it would run the same operator again at once, starving the rest
  of that list).
* At ``STALL_RUNS`` the operator is made FINISHED and its request fails with
  ``OperatorStalled`` naming the operator and the input ports it left unread. The
  request ends like any failed one (operators dropped, the scheduler forgets it), so
  ``shutdown()`` returns.
* Cost on the per-task path: one attribute store per packet taken or sent and an
  add/compare per re-queue; no lock, no clock read, no allocation.

Operators that follow the rule of ``operator.py`` (keep consuming every input; a hash
join stashes probe packets) never reach a second such re-queue: the unit, stress and
TPC-H tests and ``bobox run`` (both policies, 4 KiB and 512 KiB packets, parallel 1 and
4) counted none.
"""

from __future__ import annotations

import sys

import threading
from collections import deque

from bobox_sched.control import model as _model
from bobox_sched.control.progress import Passage
from bobox_sched.core.errors import OperatorError, OperatorStalled
from bobox_sched.core.port import CountingPort, Port
from bobox_sched.core.sync import FENCED, fence
from bobox_sched.control.punct import END as EOS
from bobox_sched.control.punct import RUNTIME_ONLY, Marker, Punctuation, Watermark

# Re-queues for unread input without a packet taken or sent, after which an operator is
# stalled and its request fails ("No progress" above). Legitimate plans never pass 1
# (see above). A run of an operator that reads nothing cost 1.9 us (bobox) to 3.3 us
# (simple) on the 2-core development VM (``Deaf`` of tests/test_api_errors.py: 100_000
# runs in 0.19-0.34 s and 0.33-0.42 s, machine shared), so this gives up after about
# 0.2-0.4 s of one core: long
# enough for an operator that breaks the rule to be unblocked by work on another thread
# before it is declared stuck, short enough that a stuck request fails before a user
# wonders.
STALL_RUNS = 100_000


class Task:
    """The runtime's record of one operator in one request (the module doc's protocol
    says who touches which field, and when). ``op`` is the user's operator; ``name``,
    ``inputs``, ``outputs`` and ``control_aware`` are copied from it so that the
    per-task path reads one object. Slotted: a field the runtime does not declare
    cannot be set by mistake, and each read is a slot load."""

    __slots__ = ("op", "name", "inputs", "outputs", "control_aware", "req", "tok", "again", "finished",
                 "inidx", "outidx", "openidx", "inq", "dst", "outclosed", "outbox", "resched", "finishing",
                 "idle", "deliver", "node", "model", "pexpect", "ppreserve", "align", "__weakref__")

    def __init__(self, op, name: str, request, buffer_packets: int):
        op.name = name  # the one field set on the user's operator: its name in the plan
        self.op = op
        self.name = name
        self.inputs = tuple(op.inputs)
        self.outputs = tuple(op.outputs)
        self.control_aware = op.control_aware
        self.req = request
        # The token and "run again" flag (module doc): held = the operator has a task in
        # some list or is running; a FINISHED operator keeps it for ever.
        self.tok = threading.Lock()
        self.again = False
        self.finished = False
        self.inidx = {p: i for i, p in enumerate(self.inputs)}
        self.outidx = {p: i for i, p in enumerate(self.outputs)}
        self.openidx = dict(self.outidx)  # outputs not closed yet (ctx.send's lookup)
        # input j's buffer (port.py); a traced run's ports count the rows taken
        traced = getattr(getattr(request, "scheduler", None), "tracer", None) is not None  # (tests pass stand-ins)
        port = CountingPort if traced else Port
        self.inq = [port(buffer_packets) for _ in self.inputs]
        self.dst = [None] * len(self.outputs)  # (receiver's task, its port index) per output
        self.outclosed = [False] * len(self.outputs)
        self.outbox = deque()  # (port index, packet or END); touched by the running thread only
        self.resched = False  # process() asked for a deferred re-run (or its delay in s)
        self.finishing = False  # process() called ctx.finish(); FINISHED once the outbox is empty
        self.idle = 0  # re-queues for unread input since the last packet taken or sent ("No progress")
        # How a packet sent on an output reaches its receiver: _deliver (bounded buffer,
        # outbox and waiters), unless the policy brings its own send path
        # (Policy.deliver; set by Request).
        self.deliver = _deliver
        # NUMA node this operator's tasks run on (None: wherever the policy puts them);
        # set from Plan.place by Request.
        self.node = None
        # Punctuation handling per input (operator.py's module doc), from the operator model.
        model = _model.model_of(op)
        self.model = model
        self.pexpect = [model.punct_in[p] == _model.EXPECTING for p in self.inputs]
        self.ppreserve = tuple(i for i, p in enumerate(self.outputs) if model.punct_out[p] == _model.PRESERVES)
        # Several oblivious inputs: a punctuation leaves once it passed all of them
        # (Alignment). Ports that run concurrently (max_parallelism > 1) cannot be
        # aligned by one thread: there the inputs' punctuations are dropped.
        oblivious = [not e for e in self.pexpect]
        self.align = None
        if sum(oblivious) > 1 and self.ppreserve and not self.control_aware:
            if model.max_parallelism > 1:
                self.ppreserve = ()
            else:
                self.align = Alignment(oblivious)

    def __repr__(self) -> str:
        return f"<task {self.name} of {type(self.op).__name__}>"


def claim(task) -> bool:
    """Trigger `task` (any thread, after publishing what its run must see) and try to take
    its token. True: the caller now holds it and must hand the task to a policy (the
    module doc's protocol). False: a pending or running task will run it again."""
    task.again = True
    if task.tok.acquire(False):
        task.again = False  # the task the caller pushes sees what was published before
        return True
    return False


def release(task) -> bool:
    """The end of a run that found nothing to do: release `task`'s token, then look at
    ``again`` again (a trigger that found the token taken relies on this second
    look). True: a trigger raced in and the caller holds the token again."""
    task.tok.release()
    if FENCED:  # the release above before the loads below (module doc)
        fence()
    if task.again and task.tok.acquire(False):
        task.again = False
        return True
    return False


def schedule(task, worker, immediate: bool) -> None:
    """Ask for `task` to run (any thread). Creates a task only if the operator had none
    and is not running; otherwise the running or pending task runs it again."""
    if claim(task):
        _push(task, worker, immediate)


def _push(task, worker, immediate: bool) -> None:
    """Hand the task of `task` (whose token the caller holds) to the policy."""
    req = task.req
    aff = task.node
    if aff is not None and (worker is None or worker.node_id != aff or not immediate):
        # The operator lives on a node (Plan.place): a task for it from elsewhere, or a
        # deferred one (the request's deferred list is shared with other nodes once the
        # balancer shares the request), goes to that node's pinned list.
        req.policy.push_on(req, task, node=aff)
        return
    if immediate and worker is not None:
        req.policy.push_immediate(worker, task)
    else:
        req.policy.push_deferred(req, task, worker)


def _deliver(worker, src, i: int, item) -> bool:
    """Put `item` (a packet, a punctuation or EOS) into the buffer at the far end of
    output `i` of `src`, and make sure the receiver runs. False if the buffer is full
    (then `src` is registered as a waiter and scheduled when there is room)."""
    dst, j = src.dst[i]
    if dst.finished:
        return True  # the receiver finished early (e.g. a limit): drop
    q = dst.inq[j]
    if item is EOS:
        q.close()
    elif len(q) < q.capacity:
        q.append(item)  # Port.offer's common case, inlined (one call less per packet)
    elif not q.offer(item, src):
        return False  # the receiver's next take schedules us
    dst.again = True
    if dst.tok.acquire(False):
        dst.again = False
        if worker is not None and dst.node is None:  # _push's common case, inlined
            dst.req.policy.push_immediate(worker, dst)
        else:
            _push(dst, worker, True)
    return True


def send(worker, task, i: int, item) -> bool:
    """Send on output `i` of `task`, keeping per-edge order: behind anything already
    waiting in the outbox. True if delivered now."""
    task.idle = 0  # progress: a packet or an end of stream was sent
    ob = task.outbox
    if not ob and task.deliver(worker, task, i, item):
        return True
    ob.append((i, item))
    return False


def flush(worker, task) -> bool:
    """Resend what waits in the outbox, in order. True when it is empty."""
    ob = task.outbox
    while ob:
        i, item = ob[0]
        if not task.deliver(worker, task, i, item):
            return False
        ob.popleft()
    return True


def _wake_waiters(worker, q) -> None:
    """Schedule the senders waiting for room in port `q` (deferred tasks)."""
    for w in q.take_waiters():
        schedule(w, worker, False)


def take_input(worker, task, j: int):
    """Pop the oldest item of input `j` of `task` (the running operator), waking the
    senders that were waiting for room. Punctuations the operator does not handle itself
    are handled here (``_runtime_punct``) and the next item is taken."""
    q = task.inq[j]
    al = task.align
    while q:
        if al is not None and al.oblivious[j] and isinstance(q[0], Punctuation) \
                and not isinstance(q[0], RUNTIME_ONLY):
            if q[0].__class__ is Watermark:
                _watermark(worker, task, al, j, q)
                continue  # taken off; the minimum over the inputs forwarded if it advanced
            if not _align(worker, task, j, q[0]):
                return None  # it waits at the head of this input for the others (Alignment)
            continue  # taken off every input and forwarded once
        pkt = q.popleft()  # the only consumer: cannot fail after the test
        task.idle = 0  # progress
        if q.waiters:
            _wake_waiters(worker, q)
        if isinstance(pkt, Punctuation):
            if _runtime_punct(worker, task, j, pkt):
                continue
            return pkt
        sampler = worker.locality_sampler
        if sampler is not None:
            sampler(worker, pkt)
        return pkt
    if al is not None and q.closed and (al.pending or al.marks):
        _align_ended(worker, task)  # this input ended: what waited for it may go on
    return None


class Alignment:
    """Punctuation alignment of an operator with several oblivious inputs that preserves
    punctuations (``Task.align``; None for every other operator).

    A punctuation P (a window end, a batch barrier) leaves such an operator once, after
    every input has passed it, as Flink aligns barriers: when P reaches the head of input
    j it *stays there*, and input j gives nothing more (``take_input`` returns None)
    until every other oblivious input has P at its head too, or has ended. Then P is taken
    off each of them and sent once, after everything the operator sent for the rows
    before P on any input, and before anything it sends for a row after P. A window
    therefore closes downstream when it closed on every input.

    ``pending`` maps each waiting punctuation (compared by value, not by its region
    seqno: ``Punctuation.__eq__``), in the order they arrived, to its
    :class:`~bobox_sched.control.progress.Passage` over the aligned inputs (the one
    answer to "has every input passed P", which request completion and the txn barrier
    use too): an input passes P when P reaches its head (it stays there until the
    release: ``passed`` minus ``ended`` are the inputs holding it), an input that ended
    passes it as its last (``final``). Only the thread running the operator touches it
    (the token), like the input buffers' heads. Inputs that wait at *different*
    punctuations while every other input has ended or waits too can never go on: the
    operator fails with an ``OperatorError`` naming them (a fan-in must see its
    punctuations in one order).

    A :class:`~bobox_sched.control.punct.Watermark` is not held: it is taken off its input
    at once and recorded in ``marks[j]`` (the input's latest), and a watermark of the
    minimum over the inputs that have not ended is sent when that minimum advances past
    the last one sent (``sent``); an input without a watermark yet holds the minimum
    back, one that ended no longer counts (its event time is infinite), and once every
    input ended the largest watermark seen is sent (if it advanced). Flink's rule: an
    operator's event time is the minimum of its inputs'. Same owner as ``pending``."""

    __slots__ = ("pending", "oblivious", "aligned", "released", "marks", "sent")

    def __init__(self, oblivious):
        self.pending: dict = {}  # punctuation -> its Passage over the aligned inputs
        self.marks: dict = {}  # input -> the time of its latest watermark
        self.sent = None  # the time of the last watermark sent
        self.oblivious = tuple(oblivious)  # per input: aligned here (not expecting)
        self.aligned = tuple(k for k, ob in enumerate(self.oblivious) if ob)  # the Passages' participants
        # A release took punctuations off inputs other than the one being read: the
        # operator may have passed them already in this run, so it runs again (the
        # runtime's "run again", and policy streams' execute loop, read it).
        self.released = False

    def take_released(self) -> bool:
        r = self.released
        self.released = False
        return r

    def waits(self, j: int, head) -> bool:
        """True if input j's head is a punctuation waiting for the other inputs."""
        s = self.pending.get(head) if isinstance(head, Punctuation) else None
        return s is not None and j in s.passed  # passed and holding it (an ended input holds nothing)


def _ended(task, k: int) -> bool:
    """Input k got its end of stream and nothing is left in its buffer (``at_eos``)."""
    return task.inq[k].ended()


def _pass_ended(task, al, passage) -> bool:
    """The aligned inputs that ended since pass `passage` as their last punctuation; True
    if that completed it (every aligned input holds the punctuation or ended)."""
    done = False
    for k in al.aligned:
        if k not in passage.passed and _ended(task, k):
            done = passage.pass_(k, final=True)
    return done


def _release_aligned(worker, task, al, p, passage) -> None:
    del al.pending[p]
    for k in passage.passed - passage.ended:  # the inputs holding p at their head
        q = task.inq[k]
        q.popleft()  # p is at its head: only this thread takes from it
        if q.waiters:
            _wake_waiters(worker, q)
    task.idle = 0  # progress
    for i in task.ppreserve:
        send(worker, task, i, p)
    al.released = True
    task.again = True  # run again: an input it read before this one may have been freed


def _align(worker, task, j: int, p) -> bool:
    """Punctuation `p` is at the head of aligned input `j`: True if it has now passed
    every input (taken off all and sent), False if it waits (Alignment)."""
    al = task.align
    passage = al.pending.get(p)
    if passage is None:
        passage = al.pending[p] = Passage(len(al.aligned))
    # j passes p now (unless it already holds it: a run that reads j again), and any
    # input that ended meanwhile passes it as its last
    if (j not in passage.passed and passage.pass_(j)) or _pass_ended(task, al, passage):
        _release_aligned(worker, task, al, p, passage)
        return True
    _check_misaligned(task, al)
    return False


def _watermark(worker, task, al, j: int, q) -> None:
    """The watermark at the head of aligned input `j` (port `q`): take it off, record it,
    send the minimum over the inputs if it advanced (Alignment)."""
    wm = q.popleft()  # at the head: only this thread takes from it
    if q.waiters:
        _wake_waiters(worker, q)
    task.idle = 0  # progress
    prev = al.marks.get(j)
    if prev is None or wm.t > prev:
        al.marks[j] = wm.t
    _send_min_watermark(worker, task, al)


def _send_min_watermark(worker, task, al) -> None:
    low = high = None
    open_inputs = False
    for k in al.aligned:
        t = al.marks.get(k)
        if t is not None and (high is None or t > high):
            high = t
        if _ended(task, k):
            continue  # an ended input's event time is infinite
        open_inputs = True
        if t is None:
            return  # an input without a watermark yet holds event time back
        if low is None or t < low:
            low = t
    if not open_inputs:
        low = high  # every input ended: event time reached every watermark seen
    if low is not None and (al.sent is None or low > al.sent):
        al.sent = low
        wm = Watermark(low)
        for i in task.ppreserve:
            send(worker, task, i, wm)


def _align_ended(worker, task) -> None:
    """An aligned input ended: release, in arrival order, what no longer waits for it;
    send the watermark minimum over the inputs left if it advanced."""
    al = task.align
    if al.marks:
        _send_min_watermark(worker, task, al)
    for p, passage in list(al.pending.items()):
        if _pass_ended(task, al, passage):
            _release_aligned(worker, task, al, p, passage)
    if al.pending:
        _check_misaligned(task, al)


def _check_misaligned(task, al) -> None:
    held = {k: p for p, passage in al.pending.items() for k in passage.passed - passage.ended}
    for k in al.aligned:
        if k not in held and not _ended(task, k):
            return  # an input can still bring what the others wait for
    what = ", ".join(f"{task.inputs[k]!r} at {p!r}" for k, p in sorted(held.items()))
    raise OperatorError(f"operator {task.name!r}: its inputs wait at different punctuations ({what}); the "
                        "inputs of a fan-in must carry the same punctuations in the same order")


def unread(task) -> bool:
    """Input the operator can take now: a buffer holding something other than a
    punctuation that waits at its head for the other inputs (Alignment)."""
    al = task.align
    if al is None or not al.pending:
        for q in task.inq:
            if q:
                return True
        return False
    for j, q in enumerate(task.inq):
        if q and not al.waits(j, q[0]):
            return True
    return False


def _runtime_punct(worker, task, j: int, p) -> bool:
    """Handle punctuation `p` taken from input `j` of `task` on the operator's behalf; False
    if the operator receives it itself (an expecting input, or a control-aware operator).

    Pulses and latency markers pass through every operator (pulses must cross even an
    operator that drops every row; markers measure the path). Markers reaching an
    operator with no outputs (a sink) are measured there. Other punctuations on an
    oblivious input are forwarded on the outputs that preserve them, else dropped."""
    if task.control_aware:
        return False
    if isinstance(p, RUNTIME_ONLY):
        n = len(task.outputs)
        if n:
            for i in range(n):
                send(worker, task, i, p)
        elif isinstance(p, Marker):
            task.req.record_marker(p)
        return True
    if task.pexpect[j]:
        return False
    for i in task.ppreserve:
        send(worker, task, i, p)
    return True


def _finish(worker, task) -> None:
    """`task` will never run again (finished, or its request ended): drop what waits in
    its buffers, let its blocked senders go on (they drop what they send it). The token
    stays taken for ever."""
    task.finished = True
    for q in task.inq:
        q.clear()
        if q.waiters:
            _wake_waiters(worker, q)


def run_task(worker, task) -> None:
    """Run `task` once on `worker` (the thread calling this; it holds the token)."""
    req = task.req
    if req.state is not req.ACTIVE:
        # The request failed or was cancelled: drop the task, free what it holds.
        task.outbox.clear()
        _finish(worker, task)
        return
    worker.last_req = req
    task.again = False  # triggers from now on are seen at the end of this run
    ctx = worker.ctx
    ctx.task = task
    try:
        if not task.outbox or flush(worker, task):
            if not task.finishing:
                task.op.process(ctx)
            if task.outbox:
                flush(worker, task)
    except BaseException as e:  # noqa: BLE001 - the request fails, the worker carries on
        ctx.task = None
        task.finished = True
        # The traceback starts in the operator's code: this frame (still running, so
        # its locals cannot be cleared) would keep the request's operators alive.
        if e.__traceback__ is not None and e.__traceback__.tb_frame is sys._getframe():
            e.__traceback__ = e.__traceback__.tb_next
        req.fail(e, task)
        # The operator's frames still point back here (f_back): drop our references to
        # the request so that the kept traceback does not pin its memory.
        del task, req, ctx, e
        return
    ctx.task = None

    blocked = bool(task.outbox)
    if task.finishing and not blocked:
        _finish(worker, task)
        req.op_finished(task)
        return

    resched = task.resched
    task.resched = False
    if task.again:
        # Triggered during the run (Running and scheduled): run again, keeping the token.
        task.again = False
        if resched.__class__ is float:
            resched = True  # scheduled anyway: a delay no longer applies
        _push(task, worker, not resched)
        return
    if not blocked:
        if resched:
            if resched.__class__ is float:  # ctx.reschedule(delay): a timer pushes the task
                req.policy.push_later(req, task, resched)
            else:
                _push(task, worker, False)
            return
        if task.align is None:  # unread(task), inlined for the common case (one call less per task)
            left = False
            for q in task.inq:
                if q:
                    left = True
                    break
        else:
            left = unread(task)
        if left:
            # Unread input: run again. No progress detection (module doc): `idle`
            # counts these re-queues since the operator last took or sent a packet.
            idle = task.idle + 1
            task.idle = idle
            if idle < STALL_RUNS:
                _push(task, worker, idle == 1)  # no progress: wait behind others
            else:
                task.finished = True
                req.fail(_stalled(task), task)
            return
    # Nothing to do (or blocked: the receiver's next take schedules us). Release, then
    # look again: a trigger that came after the check above and before the release
    # found the token taken and relies on this second look.
    task.tok.release()
    if FENCED:  # the release above before the loads below (module doc)
        fence()
    if task.again or (not blocked and (any(task.inq) if task.align is None else unread(task))):
        if task.tok.acquire(False):
            task.again = False
            _push(task, worker, True)


def _stalled(task) -> OperatorStalled:
    """The error of an operator that made no progress in STALL_RUNS runs in a row."""
    unread = [(port, len(q)) for port, q in zip(task.inputs, task.inq) if q]
    ports = ", ".join(f"{port!r} ({n} packet{'s' if n != 1 else ''})" for port, n in unread) or "none"
    return OperatorStalled(
        f"operator {task.name!r} ({type(task.op).__name__}) made no progress: run {STALL_RUNS} times in a "
        f"row for its unread input on {ports} without taking or sending a packet; an operator "
        "must keep consuming every input (stash packets it cannot use yet), or call "
        "ctx.reschedule() to be run again without reading"
    )
