"""Ordered execution of a linear chain on many workers (Prasaad et al.; spec 000): the
per-operator runtime that the ``ordered`` policy (``bobox_sched/policies/ordered/policy.py``)
allots workers to.

One :class:`Stage` per operator of the chain source -> o_1 -> ... -> o_n (the last is
the egress sink). A stage owns:

* its **worklist**: a FIFO of units ``(serial, item, ordinals, last)`` for stateless
  (SL), stateful (SF) and sink stages; for a partitioned stateful (PS) stage a
  ``hybrid.HybridQueue`` (or ``PartitionedQueues`` / ``SharedQueue``) of bucket slices;
* its **serial counter** (per operator, from 1), drawn when a unit enters the worklist;
* its **credits** (spec A4): a worker takes one before it dequeues a unit, the drainer
  gives it back once ``next`` moved past the unit, so a dequeued unit's serial is always
  < next + capacity and ``try_add`` never fails;
* its **reorder buffer** (``reorder.py``), whose ``emit`` puts the unit's outputs into
  the next stage's worklist (``accept``) and whose drainer also ends the stage.

Units (spec A1): one input packet of an SL/SF/sink stage, one non-empty bucket slice of
an input packet of a PS stage, or one control item (a punctuation, an empty packet, end
of stream). A PS stage cuts an input packet once into a ``partitioned.SliceGroup`` with
one serial; its slices are units of the worklist that share the group and its serial.
A worker runs the slices it holds at once with one ``on_slices`` call per group
(``hybrid.HybridQueue.consume_batched``); the worker that runs a group's last slice
merges the group's outputs into one packet and sends it to the reorder buffer under
the group's serial: with ``row_order="exact"`` stable-sorted by input-row ordinal, so
egress rows are in the order of a row-at-a-time single-threaded run; with ``"packet"``
in bucket order (order holds across packets and per key). One output packet per input
packet in both: the next operators see the chunking of the sequential run, so even an
operator whose output depends on packet boundaries (a second partitioned one, in
``"packet"`` order) gives the sequential run's egress.

Credits of a PS stage are taken per slice (per master entry) and given back when the
slice ran, except the credit of a group's last slice, which the drainer gives back when
``next`` moved past the group. Why that keeps a sent group's serial t below ``next +
capacity``: when t is sent, every slice of t and so of every earlier group has been
dequeued (master order), and every group between ``next`` and t still holds its last
slice's credit; so there are at most ``capacity`` of them. A group waits for no credit
of its own to finish, so any capacity >= 1 makes progress.

Who touches what, when:

* ``accept(item)`` is called only by the upstream stage's drainer (it holds the
  upstream's exit section, or is the one source runner): one producer per worklist, so
  serial order = worklist order = master-queue order. A full worklist (``cap`` units)
  refuses: the producer registers in ``waiters`` and re-checks (``core.port.Port.no_room``;
  the worklist of a stateless, stateful or sink stage is a ``Port``), and returns False
  (the upstream's drainer then stops without blocking, A5). A consumer that dequeues
  pops ``waiters`` (one ``popleft`` per registration: exactly one consumer gets each)
  and asks the policy for a drain task of the upstream (a registration may be woken
  although room appeared before it was needed: a drain that finds nothing to do).
* Workers allotted to the stage call ``consume`` concurrently; the policy keeps their
  number ``w`` <= ``M`` (1 for SF and sinks and sources; min(max_parallelism, workers)
  for SL; min(max_parallelism, p, workers) for PS). PS bucket state is touched only by
  the bucket's active worker (``hybrid.py``: H1).
* The exit section (``_emit``, ``_end``) runs in one thread at a time (the reorder
  buffer's flag or lock): the exact-order stash, the latency sums and ``finished`` are
  its own. End of stream (spec A9) is a control unit: when the drainer reaches it,
  every earlier unit of the stage has been processed and sent, so ``on_eos``/``on_end``
  run exclusively there, then EOS goes downstream and the operator is finished.
* Statistics of allotments (``c``, ``sel``, ``rpu``, ``tw``, ``w``) are written by the
  policy under its lock.

A source stage runs the source's ``process(ctx)`` once per unit; what it sends is one
unit. ``ctx.reschedule()`` keeps it runnable, ``ctx.reschedule(delay)`` and a channel's
``put`` make it runnable later (through the task state machine's ``schedule``, which the
stage keeps consistent: ``task.py``'s token ``task.tok`` and ``task.again``). The
token is held while the source is runnable (``wants``) or running, released when it has
nothing to do, and kept for ever once it ended; ``schedule`` takes a free token and
pushes, and the policy's ``push_deferred`` then sets ``wants``. Only the token's holder
writes ``wants``.
"""

from __future__ import annotations

import time
from collections import deque

from bobox_sched.core.errors import OperatorError
from bobox_sched.core.operator import EOS, Context, _no_port
from bobox_sched.core.task import release
from bobox_sched.core.packet import Packet
from bobox_sched.core.port import Port, register_waiter, take_waiters
from bobox_sched.control import model as _model
from bobox_sched.core.sync import FENCED, Credits, fence, serials
from bobox_sched.policies.ordered.hybrid import HybridQueue, PartitionedQueues, make_queues
from bobox_sched.policies.ordered.partitioned import PartitionedOperator, SpanCollector, merge_outputs, span_total
from bobox_sched.control.punct import RUNTIME_ONLY, Marker, Punctuation
from bobox_sched.policies.ordered.reorder import make_reorder

SOURCE = "source"
STATELESS = "stateless"
PARTITIONED = "partitioned"
STATEFUL = "stateful"

_EMPTY_PKT = object()  # control unit: an empty input packet of a PS stage
# Most slices a worker runs in one on_slices call (HybridQueue.consume_batched's
# batch_max). A whole packet in one batch keeps the other workers out of its buckets (they
# delegate to the holder and idle: py-spy showed the workers parked 37 % of a Q1 run);
# a few slices pay the Python step per call too often. Q1/Q3/Q4 at 150k rows, 2 workers,
# p = 100, mean of 15 runs on the 2-core machine (2026-12-01): Q1 4: 81 ms, 8: 68, 12: 68,
# 16: 61-64, 24: 62, a whole packet: 70 (PARTITIONED-QUEUE at p = 2: 52); Q3 8: 93, 16: 84,
# whole: 102 (79); Q4 8: 87, 16: 79, whole: 95 (74).
BATCH_SLICES = 16
_clock = time.perf_counter_ns


class StampedMarker(Marker):
    """A latency marker re-stamped when the first operator starts it (processing latency,
    [L99]); ``t_in`` keeps its ingress time (end-to-end latency)."""

    __slots__ = ("t_in",)

    def __init__(self, t_in: int):
        super().__init__()
        self.t_in = t_in


class Out:
    """A unit's outputs in the reorder buffer (never EMPTY, even with no items: R8)."""

    __slots__ = ("items", "pos", "eos", "ended", "t0")

    def __init__(self, items, t0: int):
        self.items = items
        self.pos = 0  # items[:pos] already sent (a drain stopped by a full receiver resumes here)
        self.eos = False
        self.ended = False
        self.t0 = t0


class OrderedContext(Context):
    """The context of a worker of the ``ordered`` policy: what an operator sends while
    running one unit is collected into that unit (``_out``) instead of being delivered,
    so that it can leave through the reorder buffer."""

    __slots__ = ("_out", "_closed", "_resched", "rin", "rout")

    def __init__(self, worker, scheduler):
        super().__init__(worker, scheduler)
        self._out = None
        self._closed = False
        self._resched = False
        self.rin = 0  # rows taken and sent in the current allotment (worker statistics)
        self.rout = 0

    def send(self, port: str, packet) -> bool:
        t = self.task
        if port not in t.outidx:
            raise OperatorError(f"operator {t.name!r} has no output port {port!r}")
        if self._closed:
            raise OperatorError(f"operator {t.name!r} sent a packet on output {port!r} after closing it")
        if packet.__class__ is not Packet and not isinstance(packet, Packet):
            raise OperatorError(f"operator {t.name!r} sent {type(packet).__name__} on output {port!r}: "
                                "send() takes a Packet")
        out = self._out
        if out is None:
            raise OperatorError(f"operator {t.name!r}: a partitioned operator's on_slice outputs with emit(), "
                                "not ctx.send()")
        out.append(packet)
        return True

    def punctuate(self, punct, port: str | None = None) -> None:
        if not isinstance(punct, Punctuation):
            raise TypeError(f"punctuate() takes a Punctuation, not {type(punct).__name__}")
        if self._out is None:
            raise OperatorError(f"operator {self.task.name!r}: no punctuation from on_slice (partitioned operators "
                                "forward punctuations through the runtime)")
        self._out.append(punct)

    def close(self, port: str | None = None) -> None:
        # A chain operator has at most one output (policies/ordered.py refuses more), so
        # closing that port is closing all of them; a name it does not have is a bug.
        if port is not None and port not in self.task.outidx:
            raise _no_port(self.task, "output", port)
        self._closed = True

    def finish(self) -> None:
        self._closed = True

    def reschedule(self, delay: float | None = None) -> None:
        self._resched = True if delay is None or delay <= 0 else float(delay)

    @property
    def blocked(self) -> bool:
        return False  # outputs always join the unit; back-pressure acts on dequeues

    def recv(self, port):
        raise OperatorError(f"operator {self.task.name!r}: the ordered policy runs StreamOperator callbacks "
                            "(on_packet), not recv()")

    def recv_many(self, port, limit=None):
        return self.recv(port)

    def has_input(self, port):
        return self.recv(port)

    def at_eos(self, port):
        return self.recv(port)

    def all_eos(self):
        return self.recv(None)


def stage_kind(task, pos: int) -> str:
    """SOURCE, STATELESS, PARTITIONED or STATEFUL, from the operator model."""
    if pos == 0:
        return SOURCE
    model = task.model
    if model.max_parallelism > 1:
        if model.state == _model.STATELESS:
            return STATELESS
        if isinstance(model.state, _model.Partitioned):
            return PARTITIONED
    return STATEFUL


class Stage:
    """One operator of an ordered chain (module doc)."""

    def __init__(self, policy, task, pos: int, kind: str, M: int, capacity: int, worklist_cap: int,
                 reorder: str = "nonblocking", scheme: str = "hybrid", row_order: str = "exact",
                 window_full: str = "credits"):
        self.policy = policy
        self.task = task  # the runtime's record of the operator (core/task.py)
        self.op = op = task.op
        self.req = task.req
        self.name = task.name
        self.pos = pos
        self.kind = kind
        self.M = M
        self.w = 0  # workers allotted now (policy lock)
        self.up: Stage | None = None
        self.down: Stage | None = None
        self.port = op.inputs[0] if op.inputs else None
        self.serial = serials()
        self.capacity = capacity
        # window_full="spin": no credits; a worker whose unit is beyond the window retries
        # (the paper's loop). Its worklists are unbounded as the paper's are: with bounded
        # ones, workers spinning in one operator while the next one, full, gets no worker
        # would livelock (spec A4).
        self.spin = window_full == "spin"
        if self.spin:
            worklist_cap = 1 << 62
        self.credits = Credits(capacity)
        self.reorder = make_reorder(reorder, capacity, self._emit, self._ready, self._advanced)
        self.queues = None
        self.worklist = None
        self.p = 1
        if kind == PARTITIONED:
            _, self.p, _, _ = op._partitioning()
            self.scheme = scheme
            self.queues = make_queues(scheme, self.p)
            self.cap = worklist_cap * self.p  # in slices: up to p per input packet
            self.exact = op.effective_row_order(row_order) == "exact"
            self.is_partitioned_queues = isinstance(self.queues, PartitionedQueues)
            self.is_hybrid = isinstance(self.queues, HybridQueue)
            # Batches only for an operator with its own on_slices (one kernel call for
            # many slices): the default runs on_slice per slice anyway, and a worker that
            # holds a whole packet's buckets while it does would keep the others out.
            # Not with window_full="spin": a batch's buckets stay held until the whole
            # batch ran, and a spinning send inside it could wait for a group that needs
            # one of them (a livelock; the per-unit path frees each bucket as it goes).
            self.batched = (self.is_hybrid and not self.spin
                            and type(op).on_slices is not PartitionedOperator.on_slices)
            self.waiters: deque = deque()  # the upstream stage, waiting for room (as a Port's)
        else:
            self.scheme = None
            self.worklist = Port(worklist_cap)  # the runtime's one input port (core/port.py)
            self.waiters = self.worklist.waiters
            self.cap = worklist_cap
            self.exact = False
            self.is_partitioned_queues = self.is_hybrid = self.batched = False
        # Whether dequeues take credits (so the drainer gives one back per unit sent): not
        # with window_full="spin", nor under PARTITIONED-QUEUE, whose workers test the
        # window itself (window_ok); a source always does (_consume_source).
        self.uses_credits = kind == SOURCE or not (self.spin or self.is_partitioned_queues)
        preserves = task.ppreserve if task.outputs else ()
        self.preserves = bool(preserves)
        self.expecting = bool(task.inputs) and task.pexpect[0]
        self.wants = False  # source: asked to run (reschedule, first task, channel put)
        self.finished = False
        # statistics written under the policy's lock (allotment reports)
        self.c = None  # seconds per input row (EWMA)
        self.sel = None  # output rows per input row (EWMA)
        self.rpu = None  # rows per unit (EWMA)
        self.tw = 0.0  # worker seconds in the current CT window
        self.units = 0
        self.rows_in = 0
        self.rows_out = 0
        self.busy_ns = 0
        self.cpu_ns = 0  # CPU time of the allotted threads: busy_ns - cpu_ns waited for the GIL or a core
        self.allotments = 0
        self.empty_allotments = 0
        # drainer-owned
        self.lat_ns = 0  # operator latency: processing start -> left the reorder buffer
        self.lat_n = 0

    # -- producer side (the upstream's drainer) ---------------------------------------------
    def size(self) -> int:
        """Units in the worklist (a snapshot)."""
        if self.worklist is not None:
            return len(self.worklist)
        return len(self.queues)

    def full(self) -> bool:
        return self.size() >= self.cap

    def accept(self, item) -> bool:
        """Enqueue `item` (a packet, punctuation or EOS) from the single producer. False
        if the worklist is full: the producer is then registered as our waiter."""
        wl = self.worklist
        if wl is not None:
            if len(wl) >= wl.capacity and wl.no_room(self.up):
                return False
            wl.append((self.serial(), item, None, True))
        else:
            q = self.queues
            if len(q) >= self.cap:
                register_waiter(self.waiters, self.up)  # Port.no_room's protocol, on the stage's queues
                if len(q) >= self.cap:
                    return False
            if item.__class__ is Packet or isinstance(item, Packet):
                g = self.op.slice_group(item) if item.nrows else None
                if g is not None:
                    g.serial = serial = self.serial()
                    last = g.k - 1
                    add = q.add
                    for j, b in enumerate(g.buckets):
                        add(b, (serial, g, j), j == last)
                else:
                    q.add_control((self.serial(), _EMPTY_PKT, None, True))
            else:
                q.add_control((self.serial(), item, None, True))
        pol = self.policy
        if FENCED:
            fence()  # publish the unit, then look at idle (policy.py: sleep/wake)
        if pol.idle:
            pol.wake_one(self)
        return True

    def _ready(self) -> bool:
        """A5's look after the clear: would the receiver take an item now?"""
        d = self.down
        return d is None or d.size() < d.cap

    def _advanced(self) -> None:
        """The drainer moved ``next`` past a unit: its credit is free again."""
        if self.uses_credits:
            self.credits.give()
        pol = self.policy
        if FENCED:
            fence()  # publish the credit, then look at idle (policy.py: sleep/wake)
        if pol.idle:
            pol.wake_one(self)

    def _wake_up(self) -> None:
        """A consumer took a unit: the upstream's drain, stopped by our full worklist, may
        go on."""
        for up in take_waiters(self.waiters):
            self.policy.push_drain(up)

    # -- scheduling view ----------------------------------------------------------------------
    def window_ok(self, t: int) -> bool:
        return t < self.reorder.next + self.capacity

    def schedulable(self) -> bool:
        """w < M, a non-empty worklist, and a unit could be dequeued now (credits)."""
        if self.finished or self.w >= self.M:
            return False
        if self.kind == SOURCE:
            return self.wants and self.credits.available() > 0 and self._ready()
        if self.is_partitioned_queues:
            return self.queues.has_work(self.window_ok)
        if self.spin:
            return self.size() > 0
        return self.size() > 0 and self.credits.available() > 0

    def head_node(self):
        """NUMA node of the oldest unit's packet (None if unknown)."""
        try:
            if self.worklist is not None:
                item = self.worklist[0][1]
            elif self.is_hybrid:
                q = self.queues
                b = q.master[0]
                if b >= q.p:
                    b -= q.p  # a packet's last slice (HybridQueue.add)
                item = q.parts[b][0][1] if b >= 0 else None  # a SliceGroup
            else:
                return None
        except IndexError:
            return None
        return getattr(item, "node", None)

    # -- consumer side: an allotment ---------------------------------------------------------
    def consume(self, ctx, quota: int) -> int:
        """Run up to `quota` units on the calling worker; the number of units taken."""
        ctx.task = self.task
        ctx._closed = False
        if self.kind == SOURCE:
            return self._consume_source(ctx, quota)
        run = self._runner(ctx)
        req = self.req
        active = req.ACTIVE

        def stop():
            return req.state is not active

        if self.is_partitioned_queues:
            return self.queues.consume(self.window_ok, run, quota, stop, ctx.worker.id)
        if self.uses_credits:
            take, give = self.credits.take, self.credits.give
        else:  # window_full="spin"
            take, give = _no_credit_needed, _no_credit
        if self.batched:
            return self.queues.consume_batched(take, give, run, self._batch_runner(ctx), quota, stop,
                                               _serial_and_slice, BATCH_SLICES)
        if self.queues is not None:
            return self.queues.consume(take, give, run, quota, stop, ctx.worker.id)
        wl = self.worklist
        n = 0
        while n < quota:
            if req.state is not active or not take():
                break
            try:
                unit = wl.popleft()
            except IndexError:
                give()
                break
            run(unit, -1)
            n += 1
        return n

    def _runner(self, ctx):
        def run(unit, b, self=self, ctx=ctx):
            self._run(ctx, unit, b)

        return run

    def _batch_runner(self, ctx):
        def run_batch(batch, self=self, ctx=ctx):
            self._run_slices(ctx, batch)

        return run_batch

    def _run_slices(self, ctx, batch: list) -> None:
        """Run bucket slices: `batch` is a list of (bucket, unit) of distinct buckets; the
        slices of one group (consecutive in `batch`) go to one ``on_slices`` call. The
        caller is the active worker of each bucket (H1)."""
        if self.waiters:
            self._wake_up()
        op = self.op
        node = ctx.worker.node_id
        states_of = op._bx_states
        state_node = op._bx_state_node
        give = self.credits.give if self.uses_credits else None
        ctx._out = None
        n = len(batch)
        i = 0
        while i < n:
            g = batch[i][1][1]
            i0 = i
            js = []
            states = []
            while i < n:
                b, unit = batch[i]
                if unit[1] is not g:
                    break
                js.append(unit[2])
                st = states_of[b]  # fast path of state_for: made, and on this node
                if st is None or state_node[b] != node:
                    st = op.state_for(b, node)
                states.append(st)
                i += 1
            m = i - i0
            if g.t0 == 0:
                g.t0 = _clock()  # racy: statistics only (operator latency)
            spans = g.spans if m == g.k else g.spans[js]
            pk: list = []
            keys: list = []
            op.on_slices(ctx, g.rows, spans, states, SpanCollector(g, spans, self.exact, pk, keys))
            r = 0
            for x in pk:
                r += x.nrows
            ctx.rout += r
            ctx.rin += span_total(spans) if m < g.k else g.rows.nrows
            g.outs[js[0]] = (pk, keys)  # before the fetch_sub below publishes it (SliceGroup)
            if give is not None:
                gave = False
                for j in js:
                    if j != g.k - 1:
                        give()  # a slice's credit, once it ran (module doc); the last one's at advance
                        gave = True
                if gave:
                    pol = self.policy
                    if FENCED:
                        fence()  # publish the credits, then look at idle (policy.py: sleep/wake)
                    if pol.idle:
                        pol.wake_one(self)
            if g.left.fetch_sub(m) == m:
                self._group_done(g)

    def _group_done(self, g) -> None:
        """Every slice of `g` ran: its merged output goes to the reorder buffer."""
        pk: list = []
        keys: list = []
        for x in g.outs:
            if x is not None:
                pk.extend(x[0])
                keys.extend(x[1])
        g.outs = None
        merged = merge_outputs(pk, keys)
        o = Out([merged] if merged is not None else [], g.t0)
        self._send(g.serial, o)

    def _send(self, serial: int, o) -> None:
        rb = self.reorder
        if not rb.send(serial, o):
            if not self.spin:
                raise RuntimeError(f"ordered stage {self.name!r}: reorder window full with credits (bug)")
            while not rb.send(serial, o):  # window_full="spin": retry as the paper does [L305]
                if self.req.state is not self.req.ACTIVE:
                    return
                time.sleep(0)

    def _run(self, ctx, unit, b: int) -> None:
        """Process one unit and send its output to the reorder buffer."""
        if b >= 0:
            self._run_slices(ctx, [(b, unit)])
            return
        if self.waiters:
            self._wake_up()
        serial, item, _, _ = unit
        o = Out((), _clock())
        if item.__class__ is Packet or isinstance(item, Packet):
            out = ctx._out = []
            self.op.on_packet(ctx, self.port, item)
            o.items = out
            ctx.rin += item.nrows
            r = 0
            for x in o.items:
                if x.__class__ is Packet:
                    r += x.nrows
            ctx.rout += r
        elif item is EOS:
            o.eos = True
        elif item is _EMPTY_PKT:
            pass
        else:
            o.items = self._punct(ctx, item)
        self._send(serial, o)

    def _punct(self, ctx, p) -> list:
        """Outputs of a punctuation unit (task._runtime_punct's rules)."""
        if isinstance(p, RUNTIME_ONLY):
            if self.down is None:
                if isinstance(p, Marker):
                    self.policy.record_marker(self.req, p)
                return []
            if self.pos == 1 and isinstance(p, Marker):
                return [StampedMarker(p.t0)]
            return [p]
        if self.expecting and self.kind != PARTITIONED:
            out = ctx._out = []
            self.op.on_punct(ctx, self.port, p)
            return out
        return [p] if self.preserves else []

    def _consume_source(self, ctx, quota: int) -> int:
        task = self.task
        n = 0
        while n < quota and self.wants and not self.finished and self._ready():
            if self.req.state is not self.req.ACTIVE or not self.credits.take():
                break
            out = ctx._out = []
            ctx._closed = False
            ctx._resched = False
            task.again = False  # triggers from now on are seen below (task.run_task's rule)
            o = Out(out, _clock())
            self.op.process(ctx)
            r = 0
            for x in out:
                if x.__class__ is Packet:
                    r += x.nrows
            ctx.rout += r
            resched = ctx._resched
            if ctx._closed:
                o.eos = True
                self.wants = False  # the token is kept for ever: no task again
            elif resched is True or task.again:
                self.wants = True  # keep the token: runnable (Running and scheduled)
            elif resched:
                self.wants = False  # keep the token: the timer pushes it (push_later)
            else:
                # Nothing to do: release, then look again (a schedule() that found the
                # token taken relies on this second look).
                self.wants = release(task)
            if resched and resched is not True and not ctx._closed:
                self.req.policy.push_later(self.req, task, resched)
            n += 1
            self.reorder.send(self.serial(), o)
            if o.eos:
                break
        return n

    # -- the exit section ------------------------------------------------------------------
    def _emit(self, o) -> bool:
        """send_downstream(o): its items into the next worklist; False (o keeps its place)
        when that worklist is full. Runs in the exit section only."""
        down = self.down
        while True:
            items = o.items
            if down is not None:
                pos = o.pos
                n = len(items)
                accept = down.accept
                while pos < n:
                    if not accept(items[pos]):
                        o.pos = pos
                        return False
                    pos += 1
                o.pos = pos
            if not o.eos:
                self.lat_ns += _clock() - o.t0
                self.lat_n += 1
                return True
            if o.ended:
                break
            o.ended = True  # end of stream reached the drain: every unit before it was sent
            o.items = self._end_outputs() + ([EOS] if down is not None else [])
            o.pos = 0
        self._finish()
        return True

    def _end_outputs(self) -> list:
        """``on_eos``/``on_end`` of the operator (exclusive: nothing else of it runs)."""
        if self.kind == SOURCE:
            return []
        ctx = self.policy.current_ctx()
        saved = (ctx.task, ctx._out, ctx._closed)
        out = []
        try:
            ctx.task = self.task
            ctx._out = out
            ctx._closed = False
            self.op.on_eos(ctx, self.port)
            self.op.on_end(ctx)
        finally:
            ctx.task, ctx._out, ctx._closed = saved
        return out

    def _finish(self) -> None:
        self.finished = True
        task = self.task
        task.finished = True  # senders drop; the token (held by a source's last run) is never released
        self.policy.stage_finished(self)
        self.req.op_finished(task)

    def drain(self) -> None:
        """A drain-only task: the receiver made room (A5)."""
        self.reorder.send_pending()

    # -- statistics (policy lock) ----------------------------------------------------------------
    def report(self, dt_ns: int, units: int, rin: int, rout: int, alpha: float, cpu_ns: int) -> None:
        self.allotments += 1
        self.busy_ns += dt_ns
        self.cpu_ns += cpu_ns
        self.tw += dt_ns / 1e9
        if units == 0:
            self.empty_allotments += 1
            return
        self.units += units
        self.rows_in += rin
        self.rows_out += rout
        if self.kind == SOURCE:
            return
        if rin > 0:
            c = dt_ns / 1e9 / rin
            s = rout / rin
            self.c = c if self.c is None else alpha * c + (1 - alpha) * self.c
            self.sel = s if self.sel is None else alpha * s + (1 - alpha) * self.sel
        r = rin / units
        self.rpu = r if self.rpu is None else alpha * r + (1 - alpha) * self.rpu

    def stats(self) -> dict:
        return {
            "operator": self.name, "position": self.pos, "kind": self.kind, "M": self.M,
            "partitions": self.p if self.kind == PARTITIONED else None, "scheme": self.scheme,
            "reorder": self.reorder.mode, "capacity": self.capacity,
            "units": self.units, "rows_in": self.rows_in, "rows_out": self.rows_out,
            "cost_us_per_row": None if self.c is None else self.c * 1e6,
            "selectivity": self.sel, "rows_per_unit": self.rpu,
            "busy_s": self.busy_ns / 1e9, "cpu_s": self.cpu_ns / 1e9, "allotments": self.allotments,
            "empty_allotments": self.empty_allotments,
            "latency_ms": (self.lat_ns / self.lat_n / 1e6) if self.lat_n else None,
            "blocked_drains": self.reorder.blocked,
            # sends that found the exit section taken, and LOCK-BASED's wait for it (reorder.py)
            "reorder_contended": self.reorder.contended, "reorder_wait_ms": self.reorder.wait_ns / 1e6,
            "delegated": getattr(self.queues, "delegated", None),
        }


def _serial_and_slice(entry) -> tuple:
    """Sort key of a batch entry (bucket, (serial, group, j)): the packet, then its slice
    (``_run_slices`` takes a group's slices in bucket order)."""
    u = entry[1]
    return u[0], u[2]


def _no_credit_needed() -> bool:
    """A dequeue's credit where dequeues take none (window_full="spin"): always granted."""
    return True


def _no_credit() -> None:
    """The credit given back by a dequeue that took none (window_full="spin")."""


def build_chain(policy, tasks_in_order: list, workers: int, options: dict) -> list:
    """Stages for the operators of a linear chain (their tasks, source first, sink last)."""
    stages = []
    for pos, task in enumerate(tasks_in_order):
        op = task.op
        kind = stage_kind(task, pos)
        declared = task.model.max_parallelism
        if isinstance(op, PartitionedOperator) and op.row_order is None:
            op.row_order = options["row_order"]  # also when it runs on one worker (on_packet)
        if kind == STATELESS:
            M = max(1, min(declared, workers))
        elif kind == PARTITIONED:
            if not isinstance(op, PartitionedOperator):
                raise ValueError(
                    f"operator '{op.name}' declares Partitioned state with max_parallelism > 1 but is not a "
                    "bobox_sched.PartitionedOperator (state per bucket): subclass it, or declare "
                    "max_parallelism = 1")
            if task.pexpect[0]:
                raise ValueError(f"operator '{op.name}': a partitioned operator under the ordered policy cannot "
                                 "declare punct_in='expecting' (its buckets run on many workers)")
            p = op._partitioning()[1]
            M = max(1, min(declared, p, workers))
        else:
            M = 1
        cap = options["capacity"]
        wl = options["worklist"]
        if kind == SOURCE:
            cap = min(cap, options["source_capacity"])
        st = Stage(policy, task, pos, kind, M, cap, wl, reorder=options["reorder"], scheme=options["scheme"],
                   row_order=options["row_order"], window_full=options["window_full"])
        stages.append(st)
    for a, b in zip(stages, stages[1:]):
        a.down = b
        b.up = a
    return stages


__all__ = ["OrderedContext", "Out", "PARTITIONED", "SOURCE", "STATEFUL", "STATELESS", "Stage", "StampedMarker",
           "build_chain", "stage_kind"]
