"""Operators, ports and the per-task context.

An operator runs on at most one thread at a time (the state machine in ``task.py``
guarantees it) and talks to other operators only through packets on its ports:

* every input port has a bounded buffer (``Scheduler(buffer_packets=...)`` packets); a
  full buffer rejects a packet, which waits in the sender's outbox, and the sender is
  scheduled again (a deferred task) as soon as the receiver takes a packet out;
* end of stream is the *final* punctuation: ``ctx.close(port)`` delivers it after the
  packets already sent on that port (``ctx.finish()`` closes every output still open);
  ``ctx.at_eos(port)`` is true once it arrived and the buffer is drained. Sources may be
  unbounded (a request on one ends by ``cancel()``, or when its sources close their
  outputs);
* other punctuations (``bobox_sched.control.punct``: window ends, region pulses, latency
  markers, batch ends) travel in the buffers in order with the packets. On an input an
  operator declares *oblivious* (the default) the runtime handles them inside
  ``ctx.recv``: forwarded on every output declared ``"preserves"`` (the default of a
  one-input operator), dropped otherwise; pulses and latency markers always pass
  through. On an *expecting* input ``ctx.recv`` returns them to the operator. An operator
  whose outputs preserve punctuations must send a packet's outputs before it takes the
  next item of that input (packet-at-a-time, as ``StreamOperator`` does), so that a
  forwarded punctuation follows them;
* an operator must keep consuming every input while it waits for another one (a hash
  join stashes probe packets until its build side ended). With that rule and bounded
  buffers, a DAG of operators cannot deadlock: the sinks always drain. An operator that
  breaks it, run again and again for unread input while taking and sending nothing,
  fails its request with ``OperatorStalled`` (``task.STALL_RUNS`` runs in a row);
* ``ctx.send`` takes a :class:`Packet` on an output the operator has not closed; anything
  else (``None`` included) raises ``OperatorError``, which fails the request.

Write an operator by subclassing :class:`Operator` (full control: ``process(ctx)`` is
called each time it is scheduled), :class:`Source` (``next_packet``) or
:class:`StreamOperator` (``on_packet`` / ``on_eos`` / ``on_end``).
"""

from __future__ import annotations

from bobox_sched.control import punct as _punct
from bobox_sched.core import packet as _packet
from bobox_sched.core import seq as _seq
from bobox_sched.core import task as _task
from bobox_sched.core.errors import OperatorError
from bobox_sched.core.packet import Packet

# The operator states of the Bobox paper (section 3.1: Nothing, Scheduled, Running,
# Running and scheduled) plus Finished are kept by a task token and a "run again" flag:
# see task.py's module doc.

EOS = _punct.END  # the final punctuation (control/punct.py), travels in outboxes like a packet


class Operator:
    """Base class of all operators.

    Class attributes (or instance attributes set in ``__init__``) declare the shape:

    ``inputs`` / ``outputs``
        port names; every port must be connected exactly once in a plan.
    ``state``, ``selectivity_bound``, ``forwarding``, ``punct_in``, ``punct_out``,
    ``max_parallelism``, ``emit_order``, ``fuse_with``
        the operator model (``bobox_sched.control.model``): what the plan analysers and
        policies may do with the operator. Undeclared means *unknown*: nothing is
        parallelised that was not declared safe.
    ``kind`` / ``partition_key``
        the older form of ``state``: ``"stateless"``, ``"partitioned"`` (with
        ``partition_key``) or ``"stateful"``; None (the default) is unknown.
    ``selectivity``
        expected output rows per input row, when known (None otherwise): a cost-model
        hint, not a bound.
    """

    inputs: tuple = ()
    outputs: tuple = ()
    kind: str | None = None
    partition_key = None
    selectivity: float | None = None
    # Runtime-internal operators (splitters, mergers) that must see pulses and latency
    # markers themselves instead of having the runtime forward them.
    control_aware: bool = False
    # True on operators whose bucket count is fixed at submit
    # (``PartitionedOperator.resolve_partitions``): the scheduler asks the policy how many
    # buckets may run at once and passes it on, without importing the ordered policy.
    resolves_partitions: bool = False

    def process(self, ctx: "Context") -> None:
        raise NotImplementedError(f"{type(self).__name__}.process")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {getattr(self, 'name', '?')}>"


class Context:
    """What ``process(ctx)`` sees. One per worker thread, re-pointed at each task:
    ``ctx.task`` is the runtime's record of the running operator (``task.Task``; its
    ``op`` is the operator itself)."""

    __slots__ = ("worker", "task", "scheduler")

    def __init__(self, worker, scheduler):
        self.worker = worker
        self.scheduler = scheduler
        self.task = None

    # -- inputs -------------------------------------------------------------------------
    def recv(self, port: str):
        """Take the oldest packet of input `port`, or None if its buffer is empty. On an
        input declared ``punct_in="expecting"`` this may be a punctuation (a
        ``bobox_sched.control.punct.Punctuation``); on an oblivious one the runtime
        handles punctuations here (module doc)."""
        t = self.task
        try:
            j = t.inidx[port]
        except KeyError:
            raise _no_port(t, "input", port) from None
        # task.take_input's fast path, inlined (one frame less per packet): a packet at
        # the head, no locality sampling. Pop first, then look at the waiters (task.py's
        # protocol): a sender that registers after the look sees the room on its second
        # look; looking before the pop would miss one that registers in between.
        q = t.inq[j]
        if q:
            pkt = q[0]
            if pkt.__class__ is Packet and self.worker.locality_sampler is None:
                q.popleft()  # the only consumer: it is still the head
                t.idle = 0
                if q.waiters:
                    _task._wake_waiters(self.worker, q)
                return pkt
        return _task.take_input(self.worker, t, j)

    def recv_many(self, port: str, limit: int | None = None) -> list:
        """Take what ``recv`` would return, repeatedly, in one call: the items of input
        `port` up to `limit` (None: every item queued now), oldest first, stopping when
        the input has nothing more to give. A list, empty when there is nothing: packets,
        the last of which may be a punctuation on an input declared
        ``punct_in="expecting"``. A punctuation behind the packets taken stays queued:
        on an oblivious input the next call forwards it, after what the operator sent
        for those packets (packet-at-a-time order, module doc). For an operator that
        handles a batch at once (one kernel call for many packets, ``ctx.send_many``)."""
        t = self.task
        j = _input_index(t, port)
        q = t.inq[j]
        worker = self.worker
        n = len(q) if limit is None else min(limit, len(q))
        out: list = []
        if n <= 0:
            return out
        fast = worker.locality_sampler is None
        append = out.append
        popleft = q.popleft
        take = _task.take_input
        while len(out) < n and q:
            head = q[0]
            if head.__class__ is Packet or isinstance(head, Packet):
                if fast:
                    append(popleft())  # recv's fast path: the only consumer pops its head
                    continue
            elif out:
                break  # a punctuation: the operator first sends what the packets before it give
            item = take(worker, t, j)  # punctuations, locality sampling (wakes waiters itself)
            if item is None:
                break
            append(item)
            if item.__class__ is not Packet and not isinstance(item, Packet):
                break  # an expecting input's punctuation ends the list
        if out:
            t.idle = 0
            if q.waiters:
                _task._wake_waiters(worker, q)
        return out

    def has_input(self, port: str) -> bool:
        t = self.task
        return bool(t.inq[_input_index(t, port)])

    def at_eos(self, port: str) -> bool:
        """True when `port` got its end-of-stream and every packet before it was taken."""
        t = self.task
        return t.inq[_input_index(t, port)].ended()

    def all_eos(self) -> bool:
        for q in self.task.inq:
            if not q.ended():
                return False
        return True

    # -- outputs ------------------------------------------------------------------------
    def send(self, port: str, packet) -> bool:
        """Send `packet` on output `port`. True if the receiver took it now; False if it
        waits in this operator's outbox (receiver full): stop producing and return, the
        runtime resends it and runs this operator again when there is room.

        Raises :class:`OperatorError` (failing the request) for an unknown port, a port
        this operator already closed, or anything that is not a :class:`Packet` (None
        included). Columns of unequal length are not checked here (per-packet cost)."""
        t = self.task
        try:
            i = t.openidx[port]  # close() removes the port: no per-packet test for it
        except KeyError:
            if port in t.outidx:
                raise OperatorError(f"operator {t.name!r} sent a packet on output {port!r} after closing it") from None
            raise _no_port(t, "output", port) from None
        # One cheap check per packet: an identity test of the class (subclasses take the
        # isinstance path).
        if packet.__class__ is not Packet and not isinstance(packet, Packet):
            raise OperatorError(
                f"operator {t.name!r} sent {type(packet).__name__} on output {port!r}: "
                "send() takes a Packet (return without sending to emit nothing)"
            )
        # task.send, inlined (one frame less per packet)
        t.idle = 0
        ob = t.outbox
        if not ob and t.deliver(self.worker, t, i, packet):
            return True
        ob.append((i, packet))
        return False

    def send_many(self, port: str, packets) -> bool:
        """``send`` each packet of the sequence `packets` on output `port`, in order.
        True if the receiver took all of them now; False if some wait in this operator's
        outbox (as ``send``'s False: stop producing and return). A policy whose ports
        carry batches (``streams`` with ``batch``) hands the list on in one step."""
        ok = True
        for p in packets:
            ok = self.send(port, p)
        return ok

    def send_derived(self, port: str, packet, parent_pkt, parent) -> bool:
        """Send `packet`, whose i-th row was derived from row ``parent[i]`` of the input
        packet `parent_pkt` (a selection vector, a flat-map's parent index). Inside a
        parallel region this gives the rows their causes' seqnos
        (``bobox_sched.core.seq``); elsewhere it is ``send``."""
        # Through self.send, never the task's send: a policy's context that collects or
        # routes what an operator sends (the ordered policy's units) must see these
        # packets too, and the port and packet checks are send's.
        return self.send(port, _seq.derive(self, packet, parent_pkt, parent))

    def close(self, port: str | None = None) -> None:
        """End of stream on `port` (all outputs if None). Closing a port twice is
        harmless; sending on it afterwards raises :class:`OperatorError`."""
        t = self.task
        if port is None:
            ports = range(len(t.outputs))
        else:
            try:
                ports = [t.outidx[port]]
            except KeyError:
                raise _no_port(t, "output", port) from None
        for i in ports:
            if not t.outclosed[i]:
                t.outclosed[i] = True
                t.openidx.pop(t.outputs[i], None)
                _task.send(self.worker, t, i, EOS)

    @property
    def blocked(self) -> bool:
        """True while packets wait in the outbox: a producer should return now."""
        return bool(self.task.outbox)

    @property
    def port(self) -> str | None:
        """The name of the input port this run executes a tuple of, under a policy that
        runs an operator per input port (``streams``: its ``StreamsContext``); None here,
        where a run serves every input (read them with ``recv``), and wherever the
        operator runs without a tuple. A name, like ``on_packet``'s `port`."""
        return None

    # -- control ------------------------------------------------------------------------
    def reschedule(self, delay: float | None = None) -> None:
        """Run this operator again later (a deferred task): a source emitting one packet
        per run calls it after each packet. With `delay` (seconds), not before that much
        time has passed: a rate-limited source waits without holding a worker."""
        if delay is None or delay <= 0:
            self.task.resched = True
        else:
            self.task.resched = float(delay)

    def punctuate(self, punct, port: str | None = None) -> None:
        """Send punctuation `punct` on output `port` (every output if None), in order
        after what was sent there before."""
        if not isinstance(punct, _punct.Punctuation):
            raise TypeError(f"punctuate() takes a Punctuation, not {type(punct).__name__}")
        if punct is _punct.END:
            raise ValueError("end of stream is sent with close(port), not punctuate()")
        t = self.task
        ports = range(len(t.outputs)) if port is None else [t.outidx[port]]
        for i in ports:
            if t.outclosed[i]:
                raise RuntimeError(f"operator '{t.name}': punctuation on output '{t.outputs[i]}' after close()")
            _task.send(self.worker, t, i, punct)

    def finish(self) -> None:
        """This operator is done: end of stream on every output it has not closed yet
        (without it the receivers would wait for ever), and no more runs. Inputs still
        arriving are dropped; sending afterwards raises :class:`OperatorError`."""
        self.close()
        self.task.finishing = True

    def set_result(self, value) -> None:
        """Publish the request's result (sinks)."""
        self.task.req.results[self.task.name] = value

    # -- memory -------------------------------------------------------------------------
    def new_packet(self, schema, nrows: int):
        """An uninitialised packet of `nrows` rows with the columns of `schema` (a
        ``{name: dtype}`` dict, or a ``PacketSpec`` made once for speed), whose memory is
        on this worker's NUMA node (recycled when the packet dies)."""
        sched = self.scheduler
        return _packet.new_packet(sched._pool_for(self.worker), schema, nrows, self.task.req.bytes)

    @property
    def packet_bytes(self) -> int:
        """Target packet size of this scheduler (half the L2 by default)."""
        return self.scheduler.packet_bytes

    def rows_for(self, schema) -> int:
        """Rows of `schema` (dict or PacketSpec) that make one packet of the target size."""
        return _packet.rows_per_packet(schema, self.scheduler.packet_bytes)

    @property
    def node(self) -> int | None:
        """NUMA node of the worker running this task (None if not pinned to a node)."""
        return self.worker.node_id

    @property
    def request(self):
        return self.task.req


def _input_index(task, port: str) -> int:
    """The index of input `port` of `task`; OperatorError for a port it does not have
    (``recv`` inlines this: one frame less per packet)."""
    try:
        return task.inidx[port]
    except KeyError:
        raise _no_port(task, "input", port) from None


def _no_port(task, kind: str, port) -> OperatorError:
    names = task.inputs if kind == "input" else task.outputs
    have = ", ".join(repr(n) for n in names) or "none"
    return OperatorError(f"operator {task.name!r} has no {kind} port {port!r} ({kind}s: {have})")


class Source(Operator):
    """An operator with no inputs that emits one packet per run.

    Implement ``next_packet(ctx)`` returning a Packet, or None when exhausted (end of
    stream on every output, then finish). Unbounded sources simply never return None."""

    outputs = ("out",)

    def next_packet(self, ctx):
        raise NotImplementedError

    def process(self, ctx):
        pkt = self.next_packet(ctx)
        if pkt is None:
            ctx.close()
            ctx.finish()
            return
        for port in self.outputs:
            ctx.send(port, pkt)
        ctx.reschedule()


class StreamOperator(Operator):
    """Packet-at-a-time operator with callbacks per event. Each run drains what waits on
    each input (up to two buffers' worth, so that a producer refilling it cannot hold the
    worker for ever): a packet left in a buffer would otherwise cost a whole task.

    ``on_packet(ctx, port, packet)`` for each packet, ``on_punct(ctx, port, punct)`` for
    each punctuation on an input declared ``punct_in="expecting"``, ``on_eos(ctx, port)``
    once per input when its stream ends, ``on_end(ctx)`` once when all inputs ended (then
    the runtime closes every output and finishes). A callback that calls ``ctx.finish()``
    is the last one: what is still buffered is dropped."""

    inputs = ("in",)
    outputs = ("out",)

    def on_packet(self, ctx, port, packet):
        raise NotImplementedError

    def on_punct(self, ctx, port, punct):
        raise NotImplementedError(f"{type(self).__name__} declares punct_in='expecting' but has no on_punct")

    def on_eos(self, ctx, port):
        pass

    def on_end(self, ctx):
        pass

    def process(self, ctx):
        op_eos = getattr(self, "_eos_done", None)
        if op_eos is None:
            op_eos = self._eos_done = [False] * len(self.inputs)
        # The runtime's record of the run (ctx.task): this operator's, or that of the
        # wrapper that runs it (a parallel region's channel operator).
        rt = ctx.task
        inq = rt.inq
        budget = 2 * inq[0].capacity if inq else 2  # an operator's ports share one capacity (task.Task)
        for i, port in enumerate(self.inputs):
            for _ in range(budget):
                if ctx.blocked:
                    return
                pkt = ctx.recv(port)
                if pkt is None:
                    break
                if pkt.__class__ is Packet or not isinstance(pkt, _punct.Punctuation):
                    self.on_packet(ctx, port, pkt)
                else:
                    self.on_punct(ctx, port, pkt)
                if rt.finishing:
                    return  # the callback called ctx.finish(): no callback after that
            if ctx.blocked:
                return
            if not op_eos[i] and ctx.at_eos(port):
                op_eos[i] = True
                self.on_eos(ctx, port)
        if all(op_eos) and not ctx.blocked:
            self.on_end(ctx)
            ctx.close()
            ctx.finish()


class Sink(StreamOperator):
    """Collects every packet; the result is ``finalize(packets)`` (default: the list)."""

    outputs = ()

    def __init__(self):
        self.packets = []

    def on_packet(self, ctx, port, packet):
        self.packets.append(packet)

    def finalize(self, packets):
        return packets

    def on_end(self, ctx):
        ctx.set_result(self.finalize(self.packets))
        self.packets = []

