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
* ``op._bx_outbox``, ``op._bx_resched``, ``op._bx_finishing``, ``op._bx_outclosed`` belong to the
  thread running the operator; only it touches them, and only one thread runs an
  operator at a time (RUNNING / RUNNING_SCHEDULED are exclusive).
* A sender whose packet is rejected by a full buffer registers in the receiver's
  ``_waiters`` under the receiver's lock; ``take_input`` pops a packet and takes the
  waiter list under the same lock, then schedules the waiters. So a sender is never
  left waiting for room that already exists (no lost wake-up).
* Locks are never nested: a thread holds at most one operator lock, for a few
  deque/attribute operations, and calls into the policy only after releasing it.
"""

from __future__ import annotations

import sys

from .operator import EOS, FINISHED, NOTHING, RUNNING, RUNNING_SCHEDULED, SCHEDULED
from .stream.punct import RUNTIME_ONLY, Marker, Punctuation


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
    ob = op._bx_outbox
    if not ob and _deliver(worker, op, i, item):
        return True
    ob.append((i, item))
    return False


def flush(worker, op) -> bool:
    """Resend what waits in the outbox, in order. True when it is empty."""
    ob = op._bx_outbox
    while ob:
        i, item = ob[0]
        if not _deliver(worker, op, i, item):
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
            op._bx_state = SCHEDULED
            immediate = True
        else:
            op._bx_state = NOTHING
            return
    if resched.__class__ is float:  # ctx.reschedule(delay): a timer pushes the task
        req.policy.push_later(req, op, resched)
        return
    _push(op, worker, immediate)

