"""What the three threading models of IBM Streams share (Schneider & Wu section 2.2):
the port records of a request, ``execute`` (run an operator for one tuple of one input
port), source operators on their own threads, and the options.

The models differ only in how a submitted tuple reaches its port and which threads
execute ports: ``dynamic`` (``streams.py``: any scheduler thread executes any port;
push / reSchedule), ``manual`` and ``dedicated`` (``models.py``).

Mapping onto the runtime (spec section 5.2). A Streams tuple is one item of an output:
a packet, a punctuation, or the final punctuation (``EOS``), all in band, in order.
``execute(port, tuple)`` puts the tuple where the operator's ``ctx.recv`` finds it (its
input port ``inq[j]``, a ``core.port.Port`` empty between executions, or its
``closed`` flag for EOS) and
calls ``process(ctx)`` once (a batch, ``batching.py``: all its tuples, then its end of
stream in an execution of its own): the operator API is unchanged (R4), and scheduling happens
only when the operator sends (``Policy.deliver``: the operator's ``ctx.send``, ``close``
and ``punctuate`` end there), so the scheduler is non-preemptive (L162). A send never
leaves an item in the sender's outbox: it returns once the tuple is queued, executed,
or dropped because its receiver finished or its request ended; ``ctx.blocked`` is
therefore always false.

Protocol (who may touch what, when):

* An operator's input buffers, closed flags and run-time fields are touched only by the
  thread executing one of its ports, and that thread holds the port's consumer lock and,
  for an operator with several inputs, the operator's state lock (``streams_ports``):
  one thread at a time per operator. An operator that declared ``max_parallelism > 1``
  has no state lock: its ports run concurrently, each thread sees only the port it
  executes (``PortContext``), and the operator synchronises its own state (an SPL
  operator without the automatic state lock, e.g. a Gate).
* Executions nest: a thread in ``execute`` may send, and the send may execute another
  port on the same thread (reSchedule, or manual's direct call). The thread's context
  object is shared by the nested executions, so ``execute`` saves and restores the
  context's operator (and port) around ``process``.
* ``finished`` of an operator is set once, by the thread whose execution made it
  finish (``OpRecord.once``, a try-lock, makes ``op_finished`` run once even for an
  operator whose ports run concurrently); senders drop what they send to a finished
  operator.
* A source operator runs on its own thread (``OpThread``, L168). It owns the operator's
  task token while it runs (``Request.start`` took it): when it has nothing to do it
  releases the token and waits; whoever takes the token to schedule it
  (``task.schedule``: a ``StreamChannel.put``; a timer for ``ctx.reschedule(delay)``)
  hands it back through ``push_deferred``, which sets the source's wake event.
* ``ctx.reschedule()`` of a non-source operator puts a RERUN marker in its first input
  port's queue, from the timer thread (never from the executing thread, which holds the
  port and could wait on itself).
* Failures and the stack: a nested execution may be at the bottom of the thread's stack
  (manual's direct calls and reSchedule nest one operator per level). Failing the request
  there (``Request.fail``) could itself overflow, after the request's state was set and
  before its future completed: the request would never end. So an execution that is
  nested (the thread's context, or its port context, is inside another operator) and
  caught a ``RecursionError``, or has fewer than ``FAIL_RESERVE`` frames left, does not
  fail the request: it raises ``_Unwind`` (a BaseException, which ``except Exception``
  in operator code does not stop) carrying the error and the operator; every enclosing
  execution re-raises it (their ``finally`` blocks release the ports they hold), and the
  thread's outermost execution, or its source loop, fails the request with the error.
* Port records are registered in ``place`` (before the request's sources start) and
  retired in ``request_done``.
* ``stop`` runs once every request ended (the scheduler's ``_stop_threads``, any thread):
  it sets ``g_shutdown``; with ``wait`` (``shutdown(wait=True)``'s thread) it also joins
  each operator thread, for at most ``OP_THREAD_JOIN_S``, and names one still running
  in a SchedulerWarning: nothing is given up on silently. ``op_threads`` (the live
  threads' records, for the stats) and ``_op_thread_objs`` (a WeakSet of their threads,
  which a thread leaves only once collected, after its ``run`` returned: what ``stop``
  joins) are guarded by ``_threads_lock``.
"""

from __future__ import annotations

import operator
import sys
import threading
import time
import weakref

from bobox_sched.core.errors import OperatorStalled
from bobox_sched.core.operator import EOS
from bobox_sched.core.packet import Packet
from bobox_sched.core.task import release, unread
from bobox_sched.policies.base import Policy
from bobox_sched.policies.streams.batching import DEFAULT_BATCH, DEFAULT_LATENCY_S, FLUSH, aged, new_stage
from bobox_sched.policies.streams.options import MODELS  # noqa: F401 -- re-exported: the models
from bobox_sched.policies.streams.ports import RERUN, PortRecord, PortTable
from bobox_sched.policies.streams.threads import OpThread, ensure_recursion, release_recursion



# Frames a nested execution must have left below the recursion limit to fail its request
# in place (module doc, "Failures and the stack"): Request.fail went 8-9 frames deep
# (measured with sys.setprofile, 3.11, all three models), plus the request's done
# callbacks, which run inside it.
FAIL_RESERVE = 100

# The batching timer's walk over a request's operators (``_flush_tick``) waits at least
# this many times its own duration before the next one: at most 1/20 = 5 % of the GIL.
# A walk costs about 0.35 us per operator (0.33-0.38 ms for 1,000 in a loop of the tick
# over fake records), so up to ~150 operators the tick keeps the 1 ms default bound (the
# quick experiments' 100-operator graphs: 3-4 % of the GIL); at 1,000 it runs every ~7 ms,
# and the bound for idle operators stretches in proportion (busy ones check their own).
TICK_SHARE_INV = 20

# How long shutdown(wait=True) waits for each operator thread (a source's, a dedicated
# port's) once every request ended. Such a thread ends at once then (its wake event is
# set, a STOP marker is queued) unless it is stuck in operator code (a process() that does
# not return), which the scheduler cannot interrupt: it is left running and named in a
# SchedulerWarning. 5 s: far above the milliseconds an ending thread takes, short enough
# for someone waiting on shutdown.
OP_THREAD_JOIN_S = 5.0


class _Unwind(BaseException):
    """An operator's failure on its way up to the thread's outermost execution (module
    doc): ``args`` is ``(error, operator)``; ``levels`` counts the executions it left."""

    levels = 1


class OpRecord:
    """What policy ``streams`` keeps per operator of a request: the operator's input
    ports, the ports its outputs feed (``out[i]``: the receiver of output i), the try-lock
    that makes ``op_finished`` run once, the "a rerun is queued" flag, and for a source
    its thread and wake-up event. The policy owns it (``StreamsBase.records``, keyed by
    ``id(task)`` while the request lives; every ``PortRecord`` points to its operator's),
    so nothing of the policy is stored on the user's operator object.

    Who touches what: ``ports``, ``out`` and ``once`` are written at ``place`` (before
    the request's sources start) and only read afterwards; ``rerun`` by the thread
    executing the operator and the timer thread, ordered by the operator's task token;
    ``thread`` and ``wake`` by whoever holds the source's token (``push_deferred``);
    ``stage``, ``born`` and ``flush_queued`` as ``batching.py`` says."""

    __slots__ = ("ports", "out", "once", "rerun", "thread", "wake", "stage", "born", "rows", "flush_queued")

    def __init__(self):
        self.ports: list = []
        self.out: list = []
        self.once = threading.Lock()
        self.rerun = False
        self.thread = None
        self.wake = None
        # Batched ports (batching.py): the staged batch per output and when its oldest
        # tuple was staged; None when the policy hands off one tuple at a time, or the
        # operator's ports run concurrently. Touched by the thread executing the operator.
        self.stage = None
        self.born = None
        self.rows = None  # rows staged per output (valid while its batch is not empty)
        self.flush_queued = False  # a FLUSH marker of this operator is queued (the timer's)


class StreamsBase(Policy):
    """Ports, execute and source threads: the part of policy ``streams`` every threading
    model uses. Subclasses set ``model``, ``deliver``, ``create_workers`` and
    ``push_item`` (deliver one item to one port: the RERUN path)."""

    name = "streams"
    model = "?"
    runtime_tasks = False  # every thread executes the plan's ports or a source (base.Policy)

    # Rule 3 of batching.py (flush when the executed port has nothing more queued): the
    # models with queues. Manual has none (a send executes the receiver at once), so its
    # batches leave when full, at a punctuation or when aged.
    flush_idle = True

    def __init__(self, scheduler, threads_per_node, balance_interval=None, pin=True, queue_capacity=None,
                 batch=DEFAULT_BATCH, batch_latency_s=DEFAULT_LATENCY_S):
        super().__init__(scheduler, threads_per_node)
        self.pin = pin
        # Rows per hand-off (batching.py; a one-row tuple counts one; 1: the paper's one
        # tuple per queue operation) and how long a staged tuple may wait for its batch.
        self.batch = batch
        self.batch_latency_s = batch_latency_s
        # Queue capacity in tuples (packets). Streams uses 1000 one-tuple slots per port
        # ([OSS] ScheduledQueue::queueSize); a bobox packet holds up to half an L2 cache
        # of rows, so the default is the scheduler's buffer size in packets, as for the
        # other policies, and the experiments (one-row packets) ask for 1000.
        self.capacity = queue_capacity or scheduler.buffer_packets
        self.table = PortTable()
        self.workers: list = []
        # Global copies of shutdown / portsClosed, for threads without a record (L422).
        self.g_shutdown = False
        self.g_ports_closed = False
        self._threads_lock = threading.Lock()
        self.op_threads: set = set()  # live source / port threads (OpThread records)
        # Their threads, until collected: a thread leaves op_threads before its run ends,
        # stop(wait=True) joins it until it has (every thread of the scheduler ended).
        self._op_thread_objs = weakref.WeakSet()
        self.records: dict[int, OpRecord] = {}  # id(task) -> its record, while its request lives (OpRecord)
        self.retired_executed = 0  # tuples executed by operator threads that have ended
        self.max_in_ports = 1  # largest number of input ports of a registered operator
        self.max_conc_ports = 0  # ... of one that runs its ports concurrently
        self.depth = 1  # longest pipeline registered (operators)
        # This policy's hold on the process-wide recursion limit (streams_threads): taken by
        # the first request that needs a raise, given back once every thread of the
        # scheduler ended.
        self._recursion_hold = object()
        # The timer thread's stand-in worker (it executes RERUN markers it pushes).
        self._timer_worker = OpThread(scheduler, "bobox-streams-timer", None)

    # -- requests ------------------------------------------------------------------------
    def place(self, request, node=None) -> None:
        """Register the request's ports, before its sources start."""
        request.nodes = []
        tasks = request.tasks
        ports = []
        records = self.records
        for task in tasks.values():
            n = len(task.inputs)
            conc = task.model.max_parallelism > 1
            mutex = threading.Lock() if n > 1 and not conc else None
            rec = records[id(task)] = OpRecord()
            rec.ports = [PortRecord(task, rec, j, self.capacity, mutex, conc) for j in range(n)]
            if self.batch > 1 and task.outputs and not conc:
                rec.stage, rec.born, rec.rows = new_stage(len(task.outputs))
            if not n:
                rec.wake = threading.Event()
            ports.extend(rec.ports)
            if n > self.max_in_ports:
                self.max_in_ports = n
            if conc and n > self.max_conc_ports:
                self.max_conc_ports = n
        for task in tasks.values():
            records[id(task)].out = [records[id(dst)].ports[j] for dst, j in task.dst]
        request.streams_ports = ports
        depth = _longest_path(tasks)
        if depth > self.depth:
            self.depth = depth
        if ensure_recursion(depth, self._recursion_hold):
            group = getattr(self.scheduler, "_thread_group", None)
            if group is not None:
                hold = self._recursion_hold
                group.when_quiet(lambda: release_recursion(hold))
        self.register(request, ports)
        if self.batch > 1 and ports:
            self.push_later_fn(self.batch_latency_s, self._flush_tick, request)

    def push_later_fn(self, delay: float, fn, *args) -> None:
        """Call ``fn(*args)`` on the scheduler's timer thread in `delay` seconds."""
        self.scheduler.timers.add(delay, fn, *args)

    def register(self, request, ports) -> None:
        """The model's part of registration (dynamic: the free list)."""

    def request_done(self, request) -> None:
        ports = getattr(request, "streams_ports", None)
        if ports is None:
            return
        tasks = {p.task for p in ports} | set(request.sources)
        dropped = self.table.retire(ports)
        for port in ports:
            self.port_retired(port)
        for task in tasks:
            rec = self.records.pop(id(task), None)
            if rec is None:
                continue
            if rec.stage is not None:
                # Staged tuples never handed off (read without the operator's locks: the
                # request ended, so at most a sender racing this adds one uncounted).
                dropped += sum(len(b) for b in list(rec.stage))
            if rec.wake is not None:
                rec.wake.set()  # a waiting source sees its request ended
        request.streams_dropped = dropped

    def port_retired(self, port) -> None:
        """The model's part of retirement."""

    # -- tasks: sources and reruns ---------------------------------------------------------
    def push_deferred(self, request, task, worker) -> None:
        if request.state is not request.ACTIVE:
            return
        rec = self.records.get(id(task))
        if rec is None:
            return  # the request ended meanwhile (request_done dropped the record)
        if not task.inputs:
            if rec.thread is None:
                t = OpThread(self.scheduler, f"bobox-streams-src{request.id}-{task.name}", self._source_main,
                             (task, rec))
                rec.thread = t
                self._add_op_threads([t])
                t.start()
            else:
                rec.wake.set()
            return
        # ctx.reschedule() of an operator with inputs (we are on the timer thread).
        rec.rerun = False
        if not task.finished:
            self.push_item(self._timer_worker, rec.ports[0], RERUN)

    def push_immediate(self, worker, task) -> None:
        self.push_deferred(task.req, task, worker)

    def push_item(self, worker, port, item) -> None:
        raise NotImplementedError

    def deliver(self, worker, src, i, item) -> bool:
        """`item` sent on output `i` of `src` goes to the receiving port: staged in the
        output's batch (batching.py), or handed off at once with ``push_item`` (each
        model's: dynamic pushes and reSchedules, manual executes the receiver, dedicated
        queues). True: delivered, staged or dropped."""
        rec = self.records.get(id(src))
        if rec is None:
            return True  # the request ended (request_done dropped the records): drop
        st = rec.stage
        if st is not None:
            b = st[i]
            if item.__class__ is Packet or (item is not EOS and isinstance(item, Packet)):
                if b:
                    n = rec.rows[i] + item.nrows
                    young = _now() - rec.born[i] < self.batch_latency_s  # rule 4 at a send
                else:
                    rec.born[i] = _now()
                    n = item.nrows
                    young = True
                b.append(item)
                if n < self.batch and young:
                    rec.rows[i] = n
                    return True  # rule 1: not full yet
            else:
                b.append(item)  # rule 2: a punctuation or the end leaves at once
            st[i] = []
            item = b
        self.push_item(worker, rec.out[i], item)
        return True

    def deliver_many(self, worker, src, i, items: list) -> None:
        """``ctx.send_many``: the packets `items` (checked by the context) sent on output
        `i` of `src`, in order: added to the output's batch (which leaves if full), or
        handed off one by one when the operator does not batch."""
        rec = self.records.get(id(src))
        if rec is None:
            return
        st = rec.stage
        if st is None:
            port = rec.out[i]
            push = self.push_item
            for item in items:
                push(worker, port, item)
            return
        b = st[i]
        n = sum(map(_nrows, items))
        if b:
            n += rec.rows[i]
        else:
            rec.born[i] = _now()
        b.extend(items)
        if n >= self.batch or _now() - rec.born[i] >= self.batch_latency_s:  # rules 1 and 4
            st[i] = []
            self.push_item(worker, rec.out[i], b)
        else:
            rec.rows[i] = n

    def flush_stage(self, w, rec, everything: bool) -> None:
        """Hand off the batches of `rec`'s operator that may leave: all of them
        (`everything`: rule 3, or the operator finished), else the aged ones (rule 4).
        Called by the thread executing the operator."""
        st = rec.stage
        born = rec.born
        now = 0.0 if everything else _now()
        bound = self.batch_latency_s
        out = rec.out
        for i in range(len(st)):
            b = st[i]
            if b and (everything or now - born[i] >= bound):
                st[i] = []
                self.push_item(w, out[i], b)

    def push_marker(self, port, marker) -> bool:
        """Queue `marker` (FLUSH) on `port` from the timer thread without waiting. False:
        no room, the marker is dropped (the operator is busy with a full queue, and each
        of its executions checks the age itself). Manual executes it at once."""
        self.push_item(self._timer_worker, port, marker)
        return True

    def _flush_tick(self, request) -> None:
        """The timer's look at the request's staged batches (batching.py, rule 4): a FLUSH
        marker for every operator with inputs holding a batch older than the bound; then
        the next tick, while the request lives: after the bound, or after
        ``TICK_SHARE_INV`` times what this tick took if that is longer, so that the walk
        takes at most 1/TICK_SHARE_INV of the GIL on a graph of thousands of operators
        (a busy operator checks its own batches' age at each send and execution end;
        the timer is for idle ones)."""
        if request.state is not request.ACTIVE:
            return
        bound = self.batch_latency_s
        now = t0 = _now()
        records = self.records
        for task in request.tasks.values():
            rec = records.get(id(task))
            if rec is None or rec.stage is None or not rec.ports or rec.flush_queued or task.finished:
                continue
            if aged(rec.stage, rec.born, now, bound):
                rec.flush_queued = True
                if not self.push_marker(rec.ports[0], FLUSH):
                    rec.flush_queued = False
        self.push_later_fn(max(bound, TICK_SHARE_INV * (_now() - t0)), self._flush_tick, request)

    def next_task(self, worker):
        return None  # only the dynamic model has scheduler threads

    def wake_all(self) -> None:
        self.g_ports_closed = True

    def stop(self, wait: bool = True) -> None:
        self.g_shutdown = True
        if not wait:
            return  # their requests ended: they end by themselves
        with self._threads_lock:
            threads = list(self._op_thread_objs)
        me = threading.current_thread()
        for th in threads:
            if th is me or th.ident is None:
                continue
            th.join(OP_THREAD_JOIN_S)  # their requests ended: they exit at once, unless stuck
            if th.is_alive():
                self.scheduler._warn(
                    f"shutdown: thread {th.name!r} did not end within {OP_THREAD_JOIN_S:g} s of its request's end; "
                    "it is stuck in an operator's code (a process() that does not return) and is left running")

    def _add_op_threads(self, threads) -> None:
        with self._threads_lock:
            for t in threads:
                self.op_threads.add(t)
                self._op_thread_objs.add(t.thread)

    def _op_thread_done(self, w) -> None:
        with self._threads_lock:
            self.op_threads.discard(w)
            self.retired_executed += w.executed

    def _source_main(self, w, task, rec) -> None:
        """A source operator's own thread: run ``process`` until the source finishes or
        its request ends (module doc: the task token)."""
        req = task.req
        ctx = w.ctx
        wake = rec.wake
        try:
            while True:
                if req.state is not req.ACTIVE:
                    task.finished = True
                    return
                task.again = False
                ctx.task = task
                try:
                    task.op.process(ctx)
                    if rec.stage is not None:
                        # Batched outputs (batching.py): everything unless the source runs
                        # again at once (rule 3), else the aged (rule 4). ctx.task stays the
                        # source's: what the flush executes on this thread is nested in it.
                        self.flush_stage(w, rec, task.finishing or not (task.again or task.resched is True))
                except BaseException as e:  # noqa: BLE001 - the request fails, nothing else
                    ctx.task = None
                    task.finished = True
                    if e.__class__ is _Unwind:  # failed downstream, executed on this thread
                        self._fail_unwound(req, e)
                    else:
                        if e.__traceback__ is not None and e.__traceback__.tb_frame is sys._getframe():
                            e.__traceback__ = e.__traceback__.tb_next
                        req.fail(e, task)
                    del e
                    return
                ctx.task = None
                if task.finishing:
                    if rec.once.acquire(False):
                        task.finished = True
                        req.op_finished(task)
                    return
                resched = task.resched
                task.resched = False
                if task.again or resched is True:
                    continue
                wake.clear()
                if resched:  # reschedule(delay): the timer hands the token back
                    self.push_later(req, task, resched)
                elif release(task):
                    continue  # a trigger raced in: run again, holding the token
                wake.wait()
        finally:
            ctx.task = None
            w.last_req = None
            self._op_thread_done(w)

    # -- executing one tuple -----------------------------------------------------------
    def execute(self, w, port, item) -> None:
        """Run the operator of `port` for one tuple, on the calling thread `w`, which
        holds the port (and the operator's state lock). Exceptions of the operator fail
        its request; the caller's locks are the caller's to release."""
        task = port.task
        req = port.req
        if task.finished or req.state is not req.ACTIVE:
            return  # finished early (a limit) or the request ended: drop
        j = port.index
        conc = port.concurrent
        if item.__class__ is list:  # a batch (batching.py)
            if item[-1] is EOS:
                # Its tuples, then the end of stream in an execution of its own, as when
                # they come one by one: an operator that takes one packet per run and
                # looks for the end only when its input is empty is run once more.
                if len(item) > 1:
                    self.execute(w, port, item[:-1])
                self.execute(w, port, EOS)
                return
            task.inq[j].extend(item)
            w.executed += len(item)
        elif item is EOS:
            task.inq[j].close()
            w.executed += 1
        elif item is RERUN:
            j = -1
            w.executed += 1
        elif item is FLUSH:  # the timer's: hand off the aged batches, nothing else
            rec = port.rec
            rec.flush_queued = False
            if rec.stage is not None:
                self.flush_stage(w, rec, self.flush_idle and not port.q)
            return
        else:
            task.inq[j].append(item)
            w.executed += 1
        ctx = w.cctx if conc else w.ctx
        prev_task = ctx.task
        prev_port = ctx.port_index
        ctx.task = task
        ctx.port_index = j
        try:
            task.idle = 1
            task.op.process(ctx)
            # An operator may read one packet per run (a hash join's probe side): run it
            # again while it takes something and input is left.
            if conc:
                # Ports that run concurrently share ``task.idle`` (another port's thread
                # resets it): progress here is this port's buffer shrinking.
                q = task.inq[j] if j >= 0 else None
                while q and not task.finishing:
                    n = len(q)
                    task.op.process(ctx)
                    if len(q) >= n:
                        break
            else:
                al = task.align
                while not task.finishing and task.idle == 0 and (unread(task) or
                                                                     (al is not None and al.take_released())):
                    task.idle = 1
                    task.op.process(ctx)
            if port.rec.stage is not None:
                # Batched outputs (batching.py): everything when the operator finished or
                # the port it executed has nothing more queued (rule 3), else the aged.
                self.flush_stage(w, port.rec, task.finishing or (self.flush_idle and not port.q))
        except BaseException as e:  # noqa: BLE001 - the request fails, the thread carries on
            # Up to the RecursionError test, attribute reads and stores only (module doc,
            # "Failures and the stack"): at the bottom of the stack a call may raise a
            # second RecursionError, which the enclosing execution would then handle.
            ctx.task = prev_task
            ctx.port_index = prev_port
            task.finished = True
            nested = w.ctx.task is not None or w.cctx.task is not None
            if e.__class__ is _Unwind:
                if nested:
                    e.levels += 1
                    raise
                self._fail_unwound(req, e)
                del e
                return
            if nested and e.__class__ is RecursionError:
                raise _Unwind(e, task) from None
            if e.__traceback__ is not None and e.__traceback__.tb_frame is sys._getframe():
                e.__traceback__ = e.__traceback__.tb_next
            if nested and _near_limit():
                raise _Unwind(e, task) from None
            req.fail(e, task)
            del e
            return
        ctx.task = prev_task
        ctx.port_index = prev_port
        if task.finishing:
            if port.rec.once.acquire(False):
                task.finished = True
                for q in task.inq:
                    q.clear()
                req.op_finished(task)
            return
        resched = task.resched
        if resched:
            task.resched = False
            rec = port.rec
            if not rec.rerun:
                rec.rerun = True
                self.push_later(req, task, resched if resched.__class__ is float else 0.0)
            return
        if task.idle and all(q.closed for q in task.inq) and _unread(task, j, conc):
            # Every input ended and the operator left input unread without taking
            # anything: nothing will run it again.
            task.finished = True
            req.fail(_stalled(task), task)

    def _fail_unwound(self, req, u) -> None:
        """Fail `req` with the error `u` carried up from a nested execution (module doc),
        on the thread's outermost execution or source loop, where the stack has room."""
        exc, task = u.args
        tb = exc.__traceback__
        if tb is not None and tb.tb_frame.f_code is _EXECUTE_CODE:
            exc.__traceback__ = tb.tb_next  # as execute does: the trace starts in the operator
        if exc.__class__ is RecursionError:
            exc.add_note(
                f"policy streams (model {self.model!r}): operator {task.name!r} ran nested {u.levels} executions "
                f"deep on one thread (a send executes its receiver on the sending thread: in manual always, in "
                f"dynamic by reSchedule when the receiver's queue is full) and reached the recursion limit "
                f"({sys.getrecursionlimit()}); raise it (sys.setrecursionlimit) or use model='dedicated'")
        req.fail(exc, task)

    # -- metrics ---------------------------------------------------------------------------
    def total_executed(self) -> int:
        n = self.retired_executed + self._timer_worker.executed
        for w in self.workers:
            n += w.executed
        with self._threads_lock:
            threads = list(self.op_threads)
        for t in threads:
            n += t.executed
        return n

    def stats(self) -> dict:
        with self._threads_lock:
            n_op = len(self.op_threads)
        return {
            "model": self.model,
            "queue_capacity": self.capacity,
            "registered_ports": len(self.table),
            "free_ports": len(self.table.free),
            "operator_threads": n_op,
            "executed": self.total_executed(),
            "max_input_ports": self.max_in_ports,
            "deadlock_min_threads": 1 + self.max_in_ports,
            "depth": self.depth,
        }


_EXECUTE_CODE = StreamsBase.execute.__code__
_now = time.perf_counter
_nrows = operator.attrgetter("nrows")


def _unread(task, j: int, conc: bool) -> bool:
    """Input left in the operator's buffers (for one whose ports run concurrently: in the
    buffer of the port this thread executes)."""
    if conc:
        return j >= 0 and bool(task.inq[j])
    return unread(task)  # a punctuation waiting at an input's head for the others is not unread


def _near_limit() -> bool:
    """Fewer than FAIL_RESERVE frames left on this thread below the recursion limit (a
    walk of the stack: on the failure path of nested executions only)."""
    left = sys.getrecursionlimit() - FAIL_RESERVE
    f = sys._getframe(1)
    while f is not None:
        left -= 1
        if left <= 0:
            return True
        f = f.f_back
    return False


def _stalled(task) -> OperatorStalled:
    unread = [(p, len(q)) for p, q in zip(task.inputs, task.inq) if q]
    ports = ", ".join(f"{p!r} ({n} packet{'s' if n != 1 else ''})" for p, n in unread) or "none"
    return OperatorStalled(
        f"operator {task.name!r} ({type(task.op).__name__}) made no progress: every input ended and it left "
        f"{ports} unread without taking a packet; an operator must keep consuming every input")


def _longest_path(tasks) -> int:
    """Operators on the longest path of the plan (how deep reSchedule can nest)."""
    memo: dict = {}
    order = list(tasks.values())
    # iterative DFS post-order: depth(task) = 1 + max depth of its receivers
    for root in order:
        if id(root) in memo:
            continue
        stack = [(root, False)]
        while stack:
            task, done = stack.pop()
            if done:
                memo[id(task)] = 1 + max((memo[id(d)] for d, _ in task.dst), default=0)
                continue
            if id(task) in memo:
                continue
            stack.append((task, True))
            for d, _ in task.dst:
                if id(d) not in memo:
                    stack.append((d, False))
    return max(memo.values(), default=1)


__all__ = ["FAIL_RESERVE", "MODELS", "OP_THREAD_JOIN_S", "RERUN", "StreamsBase"]
