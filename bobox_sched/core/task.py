"""Tasks: the operator state machine, packet delivery with back-pressure, and running a task.

A *task* is "run this operator once". Because an operator has at most one pending task
(the token below), a task is represented by the operator object itself; the policy
decides which list it goes to:

* receiving a packet (or an end of stream) creates an **immediate** task, pushed by the
  sending thread to *its own* immediate list: the packet is hot in that thread's cache;
* ``ctx.reschedule()`` and a blocked sender being woken create a **deferred** task, put
  in the request's deferred list (Bobox paper, section 3.1).

The paper's states (Nothing, Scheduled, Running, Running and scheduled) are kept with
two fields and no lock, so the per-task path takes none:

* ``op._bx_tok``, a ``threading.Lock`` used as a token: held while the operator has a
  task in some list or is running (Scheduled / Running), free when it has nothing to do
  (Nothing). Whoever takes it with ``acquire(blocking=False)`` -- one C call, a real
  test-and-set -- is the one thread that pushes the task; the thread that runs the task
  keeps it, and at the end of the run either pushes the next task itself (keeping the
  token) or releases it. A FINISHED operator keeps it for ever: no task is made again.
* ``op._bx_again``: "run again" (Running and scheduled). Anyone who wants the operator
  to run -- a delivery, a woken waiter, an external ``schedule`` -- first publishes what
  the run must see (appends the packet, ...), then sets ``_bx_again``, then tries the
  token. A run clears ``_bx_again`` when it starts; at its end, when it would stop, it
  releases the token and *then* reads ``_bx_again`` (and its input buffers) again, and
  takes the token back if needed. A trigger either lands before the run starts (the run
  sees its effect), or during the run (the end sees ``_bx_again``), or after the token
  was released (its own ``acquire`` succeeds). Exactly one of the racing parties wins
  the token, so there is never more than one task, and never none when one is due.

Protocol (who touches what, when):

* ``op._bx_inq[j]`` is input j's :class:`~bobox_sched.core.port.Port` (``port.py`` states
  its protocol: one producer, one consumer, the capacity check, ``closed``, ``waiters``).
  Its producer is the operator at the far end of the edge (one thread at a time, by the
  same token rule), its consumer the running operator.
* A sender whose packet is rejected by a full buffer is registered in that port's
  ``waiters`` (``Port.offer``, which looks at the buffer again: if room appeared
  meanwhile it goes on). ``take_input`` pops a packet and then drains the port's
  waiters, scheduling each: no sender waits for room that exists (no lost wake-up). A
  sender may be woken twice; a second ``schedule`` of a scheduled operator does nothing.
* ``op._bx_finished`` is set once, by the thread running the operator when it finishes
  (or drops the task of an ended request); senders then drop what they send (a limit
  that finished early). A sender that raced past the flag appends to a buffer nobody
  reads: the packet is released when the request ends.
* ``op._bx_outbox``, ``op._bx_resched``, ``op._bx_finishing``, ``op._bx_outclosed``,
  ``op._bx_openidx`` and ``op._bx_idle`` belong to the thread running the operator; only
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
``_bx_again``/buffers after a release need an explicit fence (a release of an
uncontended lock is not one for a *later* read): ``sync.fence()``, called where a run
releases the token and looks again (it does nothing under the GIL: ``sync.FENCED``).

What an operator may send (checked in ``Context.send`` before ``send`` here, so the
runtime never queues garbage): a :class:`~bobox_sched.core.packet.Packet` (an identity test of
its class, ``isinstance`` only for subclasses), on an output it has not closed
(``ctx.close`` removes the port from ``_bx_openidx``, the dict ``Context.send`` looks
ports up in, so this check costs nothing per packet). Anything else, and an unknown
port, raises ``OperatorError`` inside the run, which fails the request like any
exception of the operator. Equal column lengths are not checked: that would loop over
the columns of every packet.

No progress. A run ends in one of the branches at the bottom of ``run_task``; only one of
them can repeat without end on its own: *re-queued because the input buffer is not empty*
(not finishing, nothing left in the outbox, no ``reschedule()``, and nothing delivered
during the run, or ``_bx_again`` would be set). An operator that stops reading an input
stays there forever: its full buffer stops its senders, so nothing else changes, and the
run is repeated as fast as a core allows (and ``shutdown()`` waits for the request for
ever). Protocol:

* ``op._bx_idle`` (running thread's): ``take_input`` (a packet taken) and ``send`` (a
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

from bobox_sched.core.errors import OperatorError, OperatorStalled
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


def claim(op) -> bool:
    """Trigger `op` (any thread, after publishing what its run must see) and try to take
    its token. True: the caller now holds it and must hand the task to a policy (the
    module doc's protocol). False: a pending or running task will run it again."""
    op._bx_again = True
    if op._bx_tok.acquire(False):
        op._bx_again = False  # the task the caller pushes sees what was published before
        return True
    return False


def release(op) -> bool:
    """The end of a run that found nothing to do: release `op`'s token, then look at
    ``_bx_again`` again (a trigger that found the token taken relies on this second
    look). True: a trigger raced in and the caller holds the token again."""
    op._bx_tok.release()
    if FENCED:  # the release above before the loads below (module doc)
        fence()
    if op._bx_again and op._bx_tok.acquire(False):
        op._bx_again = False
        return True
    return False


def schedule(op, worker, immediate: bool) -> None:
    """Ask for `op` to run (any thread). Creates a task only if the operator had none
    and is not running; otherwise the running or pending task runs it again."""
    if claim(op):
        _push(op, worker, immediate)


def _push(op, worker, immediate: bool) -> None:
    """Hand the task of `op` (whose token the caller holds) to the policy."""
    req = op._bx_req
    aff = op._bx_node
    if aff is not None and (worker is None or worker.node_id != aff or not immediate):
        # The operator lives on a node (Plan.place): a task for it from elsewhere, or a
        # deferred one (the request's deferred list is shared with other nodes once the
        # balancer shares the request), goes to that node's pinned list.
        req.policy.push_on(req, op, node=aff)
        return
    if immediate and worker is not None:
        req.policy.push_immediate(worker, op)
    else:
        req.policy.push_deferred(req, op, worker)


def _deliver(worker, src, i: int, item) -> bool:
    """Put `item` (a packet, a punctuation or EOS) into the buffer at the far end of
    output `i` of `src`, and make sure the receiver runs. False if the buffer is full
    (then `src` is registered as a waiter and scheduled when there is room)."""
    dst, j = src._bx_dst[i]
    if dst._bx_finished:
        return True  # the receiver finished early (e.g. a limit): drop
    q = dst._bx_inq[j]
    if item is EOS:
        q.close()
    elif len(q) < q.capacity:
        q.append(item)  # Port.offer's common case, inlined (one call less per packet)
    elif not q.offer(item, src):
        return False  # the receiver's next take schedules us
    dst._bx_again = True
    if dst._bx_tok.acquire(False):
        dst._bx_again = False
        if worker is not None and dst._bx_node is None:  # _push's common case, inlined
            dst._bx_req.policy.push_immediate(worker, dst)
        else:
            _push(dst, worker, True)
    return True


def send(worker, op, i: int, item) -> bool:
    """Send on output `i` of `op`, keeping per-edge order: behind anything already
    waiting in the outbox. True if delivered now."""
    op._bx_idle = 0  # progress: a packet or an end of stream was sent
    ob = op._bx_outbox
    if not ob and op._bx_deliver(worker, op, i, item):
        return True
    ob.append((i, item))
    return False


def flush(worker, op) -> bool:
    """Resend what waits in the outbox, in order. True when it is empty."""
    ob = op._bx_outbox
    while ob:
        i, item = ob[0]
        if not op._bx_deliver(worker, op, i, item):
            return False
        ob.popleft()
    return True


def _wake_waiters(worker, q) -> None:
    """Schedule the senders waiting for room in port `q` (deferred tasks)."""
    for w in q.take_waiters():
        schedule(w, worker, False)


def take_input(worker, op, j: int):
    """Pop the oldest item of input `j` of `op` (the running operator), waking the
    senders that were waiting for room. Punctuations the operator does not handle itself
    are handled here (``_runtime_punct``) and the next item is taken."""
    q = op._bx_inq[j]
    al = op._bx_align
    while q:
        if al is not None and al.oblivious[j] and isinstance(q[0], Punctuation) \
                and not isinstance(q[0], RUNTIME_ONLY):
            if q[0].__class__ is Watermark:
                _watermark(worker, op, al, j, q)
                continue  # taken off; the minimum over the inputs forwarded if it advanced
            if not _align(worker, op, j, q[0]):
                return None  # it waits at the head of this input for the others (Alignment)
            continue  # taken off every input and forwarded once
        pkt = q.popleft()  # the only consumer: cannot fail after the test
        op._bx_idle = 0  # progress
        if q.waiters:
            _wake_waiters(worker, q)
        if isinstance(pkt, Punctuation):
            if _runtime_punct(worker, op, j, pkt):
                continue
            return pkt
        sampler = worker.locality_sampler
        if sampler is not None:
            sampler(worker, pkt)
        return pkt
    if al is not None and q.closed and (al.pending or al.marks):
        _align_ended(worker, op)  # this input ended: what waited for it may go on
    return None


class Alignment:
    """Punctuation alignment of an operator with several oblivious inputs that preserves
    punctuations (``Operator._bx_align``; None for every other operator).

    A punctuation P (a window end, a batch barrier) leaves such an operator once, after
    every input has passed it, as Flink aligns barriers: when P reaches the head of input
    j it *stays there*, and input j gives nothing more (``take_input`` returns None)
    until every other oblivious input has P at its head too, or has ended. Then P is taken
    off each of them and sent once, after everything the operator sent for the rows
    before P on any input, and before anything it sends for a row after P. A window
    therefore closes downstream when it closed on every input.

    ``pending`` maps each waiting punctuation (compared by value, not by its region
    seqno: ``Punctuation.__eq__``) to the inputs holding it at their head, in the order
    they arrived. Only the thread running the operator touches it (the token), like the
    input buffers' heads. Inputs that wait at *different* punctuations while every other
    input has ended or waits too can never go on: the operator fails with an
    ``OperatorError`` naming them (a fan-in must see its punctuations in one order).

    A :class:`~bobox_sched.control.punct.Watermark` is not held: it is taken off its input
    at once and recorded in ``marks[j]`` (the input's latest), and a watermark of the
    minimum over the inputs that have not ended is sent when that minimum advances past
    the last one sent (``sent``); an input without a watermark yet holds the minimum
    back, one that ended no longer counts (its event time is infinite), and once every
    input ended the largest watermark seen is sent (if it advanced). Flink's rule: an
    operator's event time is the minimum of its inputs'. Same owner as ``pending``."""

    __slots__ = ("pending", "oblivious", "released", "marks", "sent")

    def __init__(self, oblivious):
        self.pending: dict = {}
        self.marks: dict = {}  # input -> the time of its latest watermark
        self.sent = None  # the time of the last watermark sent
        self.oblivious = tuple(oblivious)  # per input: aligned here (not expecting)
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
        return s is not None and j in s


def _ended(op, k: int) -> bool:
    """Input k got its end of stream and nothing is left in its buffer (``at_eos``)."""
    return op._bx_inq[k].ended()


def _passed_or_ended(op, al, waiting) -> bool:
    """Every aligned input holds the punctuation (`waiting`: those that do) or ended."""
    for k, ob in enumerate(al.oblivious):
        if ob and k not in waiting and not _ended(op, k):
            return False
    return True


def _release_aligned(worker, op, al, p, waiting) -> None:
    del al.pending[p]
    for k in waiting:
        q = op._bx_inq[k]
        q.popleft()  # p is at its head: only this thread takes from it
        if q.waiters:
            _wake_waiters(worker, q)
    op._bx_idle = 0  # progress
    for i in op._bx_ppreserve:
        send(worker, op, i, p)
    al.released = True
    op._bx_again = True  # run again: an input it read before this one may have been freed


def _align(worker, op, j: int, p) -> bool:
    """Punctuation `p` is at the head of aligned input `j`: True if it has now passed
    every input (taken off all and sent), False if it waits (Alignment)."""
    al = op._bx_align
    waiting = al.pending.get(p)
    if waiting is None:
        waiting = al.pending[p] = {}
    waiting[j] = True
    if _passed_or_ended(op, al, waiting):
        _release_aligned(worker, op, al, p, waiting)
        return True
    _check_misaligned(op, al)
    return False


def _watermark(worker, op, al, j: int, q) -> None:
    """The watermark at the head of aligned input `j` (port `q`): take it off, record it,
    send the minimum over the inputs if it advanced (Alignment)."""
    wm = q.popleft()  # at the head: only this thread takes from it
    if q.waiters:
        _wake_waiters(worker, q)
    op._bx_idle = 0  # progress
    prev = al.marks.get(j)
    if prev is None or wm.t > prev:
        al.marks[j] = wm.t
    _send_min_watermark(worker, op, al)


def _send_min_watermark(worker, op, al) -> None:
    low = high = None
    open_inputs = False
    for k, ob in enumerate(al.oblivious):
        if not ob:
            continue
        t = al.marks.get(k)
        if t is not None and (high is None or t > high):
            high = t
        if _ended(op, k):
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
        for i in op._bx_ppreserve:
            send(worker, op, i, wm)


def _align_ended(worker, op) -> None:
    """An aligned input ended: release, in arrival order, what no longer waits for it;
    send the watermark minimum over the inputs left if it advanced."""
    al = op._bx_align
    if al.marks:
        _send_min_watermark(worker, op, al)
    for p, waiting in list(al.pending.items()):
        if _passed_or_ended(op, al, waiting):
            _release_aligned(worker, op, al, p, waiting)
    if al.pending:
        _check_misaligned(op, al)


def _check_misaligned(op, al) -> None:
    held = {k: p for p, waiting in al.pending.items() for k in waiting}
    for k, ob in enumerate(al.oblivious):
        if ob and k not in held and not _ended(op, k):
            return  # an input can still bring what the others wait for
    what = ", ".join(f"{op.inputs[k]!r} at {p!r}" for k, p in sorted(held.items()))
    raise OperatorError(f"operator {op.name!r}: its inputs wait at different punctuations ({what}); the "
                        "inputs of a fan-in must carry the same punctuations in the same order")


def unread(op) -> bool:
    """Input the operator can take now: a buffer holding something other than a
    punctuation that waits at its head for the other inputs (Alignment)."""
    al = op._bx_align
    if al is None or not al.pending:
        for q in op._bx_inq:
            if q:
                return True
        return False
    for j, q in enumerate(op._bx_inq):
        if q and not al.waits(j, q[0]):
            return True
    return False


def _runtime_punct(worker, op, j: int, p) -> bool:
    """Handle punctuation `p` taken from input `j` of `op` on the operator's behalf; False
    if the operator receives it itself (an expecting input, or a control-aware operator).

    Pulses and latency markers pass through every operator (pulses must cross even an
    operator that drops every row; markers measure the path). Markers reaching an
    operator with no outputs (a sink) are measured there. Other punctuations on an
    oblivious input are forwarded on the outputs that preserve them, else dropped."""
    if op.control_aware:
        return False
    if isinstance(p, RUNTIME_ONLY):
        n = len(op.outputs)
        if n:
            for i in range(n):
                send(worker, op, i, p)
        elif isinstance(p, Marker):
            op._bx_req.record_marker(p)
        return True
    if op._bx_pexpect[j]:
        return False
    for i in op._bx_ppreserve:
        send(worker, op, i, p)
    return True


def _finish(worker, op) -> None:
    """`op` will never run again (finished, or its request ended): drop what waits in
    its buffers, let its blocked senders go on (they drop what they send it). The token
    stays taken for ever."""
    op._bx_finished = True
    for q in op._bx_inq:
        q.clear()
        if q.waiters:
            _wake_waiters(worker, q)


def run_task(worker, op) -> None:
    """Run `op` once on `worker` (the thread calling this; it holds the token)."""
    req = op._bx_req
    if req.state is not req.ACTIVE:
        # The request failed or was cancelled: drop the task, free what it holds.
        op._bx_outbox.clear()
        _finish(worker, op)
        return
    worker.last_req = req
    op._bx_again = False  # triggers from now on are seen at the end of this run
    ctx = worker.ctx
    ctx.op = op
    try:
        if not op._bx_outbox or flush(worker, op):
            if not op._bx_finishing:
                op.process(ctx)
            if op._bx_outbox:
                flush(worker, op)
    except BaseException as e:  # noqa: BLE001 - the request fails, the worker carries on
        ctx.op = None
        op._bx_finished = True
        # The traceback starts in the operator's code: this frame (still running, so
        # its locals cannot be cleared) would keep the request's operators alive.
        if e.__traceback__ is not None and e.__traceback__.tb_frame is sys._getframe():
            e.__traceback__ = e.__traceback__.tb_next
        req.fail(e, op)
        # The operator's frames still point back here (f_back): drop our references to
        # the request so that the kept traceback does not pin its memory.
        del op, req, ctx, e
        return
    ctx.op = None

    blocked = bool(op._bx_outbox)
    if op._bx_finishing and not blocked:
        _finish(worker, op)
        req.op_finished(op)
        return

    resched = op._bx_resched
    op._bx_resched = False
    if op._bx_again:
        # Triggered during the run (Running and scheduled): run again, keeping the token.
        op._bx_again = False
        if resched.__class__ is float:
            resched = True  # scheduled anyway: a delay no longer applies
        _push(op, worker, not resched)
        return
    if not blocked:
        if resched:
            if resched.__class__ is float:  # ctx.reschedule(delay): a timer pushes the task
                req.policy.push_later(req, op, resched)
            else:
                _push(op, worker, False)
            return
        if op._bx_align is None:  # unread(op), inlined for the common case (one call less per task)
            left = False
            for q in op._bx_inq:
                if q:
                    left = True
                    break
        else:
            left = unread(op)
        if left:
            # Unread input: run again. No progress detection (module doc): `idle`
            # counts these re-queues since the operator last took or sent a packet.
            idle = op._bx_idle + 1
            op._bx_idle = idle
            if idle < STALL_RUNS:
                _push(op, worker, idle == 1)  # no progress: wait behind others
            else:
                op._bx_finished = True
                req.fail(_stalled(op), op)
            return
    # Nothing to do (or blocked: the receiver's next take schedules us). Release, then
    # look again: a trigger that came after the check above and before the release
    # found the token taken and relies on this second look.
    op._bx_tok.release()
    if FENCED:  # the release above before the loads below (module doc)
        fence()
    if op._bx_again or (not blocked and (any(op._bx_inq) if op._bx_align is None else unread(op))):
        if op._bx_tok.acquire(False):
            op._bx_again = False
            _push(op, worker, True)


def _stalled(op) -> OperatorStalled:
    """The error of an operator that made no progress in STALL_RUNS runs in a row."""
    unread = [(port, len(q)) for port, q in zip(op.inputs, op._bx_inq) if q]
    ports = ", ".join(f"{port!r} ({n} packet{'s' if n != 1 else ''})" for port, n in unread) or "none"
    return OperatorStalled(
        f"operator {op.name!r} ({type(op).__name__}) made no progress: run {STALL_RUNS} times in a "
        f"row for its unread input on {ports} without taking or sending a packet; an operator "
        "must keep consuming every input (stash packets it cannot use yet), or call "
        "ctx.reschedule() to be run again without reading"
    )
