"""Tasks: the operator state machine, packet delivery with back-pressure, and running a task.

A *task* is "run this operator once". Because an operator has at most one pending task
(the state machine below), a task is represented by the operator object itself; the
policy decides which list it goes to:

* receiving a packet (or an end of stream) creates an **immediate** task, pushed by the
  sending thread to *its own* immediate list: the packet is hot in that thread's cache;
* ``ctx.reschedule()`` and a blocked sender being woken create a **deferred** task, put
  in the request's deferred list (Bobox paper, section 3.1).

Protocol (who touches what, when):

* ``op._bx_state``, ``op._bx_inq``, ``op._bx_closed``, ``op._bx_waiters`` are guarded by
  ``op._bx_lock``. SCHEDULED -> RUNNING at the start of a run is done by the one thread
  that popped the task, under the lock: a sender then either saw SCHEDULED and put its
  packet or end of stream in before the run started (the run sees it), or saw RUNNING and
  made the state RUNNING_SCHEDULED (the operator runs again). Nothing is missed, not even
  an end of stream, which changes no buffer.
* ``op._bx_outbox``, ``op._bx_resched``, ``op._bx_finishing``, ``op._bx_outclosed``,
  ``op._bx_openidx`` and ``op._bx_idle`` belong to the thread running the operator; only
  it touches them, and only one thread runs an operator at a time (RUNNING /
  RUNNING_SCHEDULED are exclusive; the hand-over from one run's thread to the next is
  ordered by ``_bx_lock`` at SCHEDULED -> RUNNING).
* A sender whose packet is rejected by a full buffer registers in the receiver's
  ``_waiters`` under the receiver's lock; ``take_input`` pops a packet and takes the
  waiter list under the same lock, then schedules the waiters. So a sender is never
  left waiting for room that already exists (no lost wake-up).
* Locks are never nested: a thread holds at most one operator lock, for a few
  deque/attribute operations, and calls into the policy only after releasing it.

What an operator may send (checked in ``Context.send`` before ``send`` here, so the
runtime never queues garbage): a :class:`~bobox_sched.packet.Packet` (an identity test of
its class, ``isinstance`` only for subclasses), on an output it has not closed
(``ctx.close`` removes the port from ``_bx_openidx``, the dict ``Context.send`` looks
ports up in, so this check costs nothing per packet). Anything else, and an unknown
port, raises ``OperatorError`` inside the run, which fails the request like any
exception of the operator. Equal column lengths are not checked: that would loop over
the columns of every packet.

No progress. A run ends in one of the branches at the bottom of ``run_task``; only one of
them can repeat without end on its own: *re-queued because the input buffer is not empty*
(not finishing, nothing left in the outbox, no ``reschedule()``, and nothing delivered
during the run, or the state would be RUNNING_SCHEDULED). An operator that stops reading
an input stays there forever: its full buffer stops its senders, so nothing else changes,
and the run is repeated as fast as a core allows (and ``shutdown()`` waits for the request
for ever). Protocol:

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
* At ``STALL_RUNS`` the operator is made FINISHED under its lock and, after the lock is
  released, its request fails with ``OperatorStalled`` naming the operator and the
  input ports it left unread. The request ends like any failed one (operators dropped,
  the scheduler forgets it), so ``shutdown()`` returns.
* Cost on the per-task path: one attribute store per packet taken or sent and an
  add/compare per re-queue; no lock, no clock read, no allocation.

Operators that follow the rule of ``operator.py`` (keep consuming every input; a hash
join stashes probe packets) never reach a second such re-queue: the unit, stress and
TPC-H tests and ``bobox run`` (both policies, 4 KiB and 512 KiB packets, parallel 1 and
4) counted none.

GIL: the fields added for these checks (``_bx_openidx``, ``_bx_idle``) have one owner,
the running thread, handed over under ``_bx_lock`` like the outbox, so they need neither
the GIL nor a lock, in a free-threaded build too. The stall branch reads the input
buffers under ``_bx_lock`` as before; ``_stalled`` takes that lock again, after it was
released, to list the unread ports, and ``Request.fail`` runs with no lock held.
"""

from __future__ import annotations

import sys

from .errors import OperatorStalled
from .operator import EOS, FINISHED, NOTHING, RUNNING, RUNNING_SCHEDULED, SCHEDULED
from .stream.punct import RUNTIME_ONLY, Marker, Punctuation

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


def schedule(op, worker, immediate: bool) -> None:
    """Ask for `op` to run. Creates a task only if the operator had nothing to do."""
    with op._bx_lock:
        s = op._bx_state
        if s == NOTHING:
            op._bx_state = SCHEDULED
        elif s == RUNNING:
            op._bx_state = RUNNING_SCHEDULED
            return
        else:  # already scheduled, or finished
            return
    _push(op, worker, immediate)


def _push(op, worker, immediate: bool) -> None:
    req = op._bx_req
    aff = op._bx_node
    if aff is not None and (worker is None or worker.node_id != aff):
        req.policy.push_on(req, op, node=aff)  # the operator lives on another node
        return
    if immediate and worker is not None:
        req.policy.push_immediate(worker, op)
    else:
        req.policy.push_deferred(req, op, worker)


def _deliver(worker, src, i: int, item) -> bool:
    """Put `item` (a packet or EOS) into the buffer at the far end of output `i` of
    `src`. False if the buffer is full (then `src` is registered as a waiter)."""
    dst, j = src._bx_dst[i]
    with dst._bx_lock:
        s = dst._bx_state
        if s == FINISHED:
            return True  # the receiver finished early (e.g. a limit): drop
        if item is EOS:
            dst._bx_closed[j] = True
        else:
            q = dst._bx_inq[j]
            if len(q) >= dst._bx_cap:
                if src not in dst._bx_waiters:
                    dst._bx_waiters.append(src)
                return False
            q.append(item)
        if s == NOTHING:
            dst._bx_state = SCHEDULED
        else:
            if s == RUNNING:
                dst._bx_state = RUNNING_SCHEDULED
            return True
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


def take_input(worker, op, j: int):
    """Pop the oldest item of input `j` of `op` (the running operator), waking the
    senders that were waiting for room. Punctuations the operator does not handle itself
    are handled here (``_runtime_punct``) and the next item is taken."""
    while True:
        with op._bx_lock:
            q = op._bx_inq[j]
            if not q:
                return None
            pkt = q.popleft()
            op._bx_idle = 0  # progress (owned by the running thread; the lock is incidental)
            waiters = op._bx_waiters
            if waiters:
                op._bx_waiters = []
        if waiters:
            for w in waiters:
                schedule(w, worker, False)
        if isinstance(pkt, Punctuation):
            if _runtime_punct(worker, op, j, pkt):
                continue
            return pkt
        sampler = worker.locality_sampler
        if sampler is not None:
            sampler(worker, pkt)
        return pkt


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


def run_task(worker, op) -> None:
    """Run `op` once on `worker` (the thread calling this)."""
    req = op._bx_req
    if req.state is not req.ACTIVE:
        # The request failed or was cancelled: drop the task, free what it holds.
        with op._bx_lock:
            op._bx_state = FINISHED
            op._bx_inq = [q.__class__() for q in op._bx_inq]
            op._bx_waiters = []
        op._bx_outbox.clear()
        return
    worker.last_req = req
    with op._bx_lock:
        op._bx_state = RUNNING  # from SCHEDULED: only the thread that popped the task
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
        with op._bx_lock:
            op._bx_state = FINISHED
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
        with op._bx_lock:
            op._bx_state = FINISHED
            op._bx_inq = [q.__class__() for q in op._bx_inq]  # drop what still arrives
            waiters = op._bx_waiters
            op._bx_waiters = []
        for w in waiters:
            schedule(w, worker, False)
        req.op_finished(op)
        return

    resched = op._bx_resched
    op._bx_resched = False
    with op._bx_lock:
        if op._bx_state == RUNNING_SCHEDULED:
            op._bx_state = SCHEDULED
            immediate = not resched
            resched = bool(resched)  # scheduled anyway: a delay no longer applies
        elif blocked:
            # Wait for the receiver to take a packet: it schedules us (no busy retry).
            op._bx_state = NOTHING
            return
        elif resched:
            op._bx_state = SCHEDULED
            immediate = False
        elif any(op._bx_inq):
            # Unread input: run again. No progress detection (module doc): `idle` counts
            # these re-queues since the operator last took or sent a packet.
            idle = op._bx_idle + 1
            op._bx_idle = idle
            if idle < STALL_RUNS:
                op._bx_state = SCHEDULED
                immediate = idle == 1  # a run that made no progress waits behind others
            else:
                op._bx_state = FINISHED
                immediate = None
        else:
            op._bx_state = NOTHING
            return
    if immediate is None:
        req.fail(_stalled(op), op)
        return
    if resched.__class__ is float:  # ctx.reschedule(delay): a timer pushes the task
        req.policy.push_later(req, op, resched)
        return
    _push(op, worker, immediate)


def _stalled(op) -> OperatorStalled:
    """The error of an operator that made no progress in STALL_RUNS runs in a row."""
    with op._bx_lock:
        unread = [(port, len(q)) for port, q in zip(op.inputs, op._bx_inq) if q]
    ports = ", ".join(f"{port!r} ({n} packet{'s' if n != 1 else ''})" for port, n in unread) or "none"
    return OperatorStalled(
        f"operator {op.name!r} ({type(op).__name__}) made no progress: run {STALL_RUNS} times in a "
        f"row for its unread input on {ports} without taking or sending a packet; an operator "
        "must keep consuming every input (stash packets it cannot use yet), or call "
        "ctx.reschedule() to be run again without reading"
    )

