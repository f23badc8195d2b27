"""The two threading models IBM Streams offers beside ``dynamic`` (Schneider & Wu section
2.2), as comparisons for policy ``streams`` (``Scheduler(policy="streams", model=...)``):

``manual``
    No queues and no scheduler threads: a send calls the receiving operator directly, on
    the sending thread, so the thread of a source runs the whole graph below it (with one
    source: one thread for everything; Streams without threaded ports, L43). The lowest
    latency, no pipeline parallelism.
``dedicated``
    One thread and one bounded queue per operator input port (threaded ports everywhere):
    a send puts the tuple in the receiving port's queue, blocking while it is full; the
    port's own thread takes tuples in order and executes them. As many threads as input
    ports.

Both share ``streams_runtime``: port records, ``execute`` and source threads.

Protocol:

* manual: a send takes the receiving port's consumer lock and the operator's state lock
  (blocking ``acquire``), executes, releases. Several sources (several threads) may meet
  in one operator; the locks keep one thread per port and per operator. Locks are taken
  in the order of the graph (a sender holds only locks of operators upstream of the one
  it locks), so a DAG cannot deadlock on them. Sends nest one operator per level on the
  sending thread; a failure at the bottom of the stack unwinds through the senders to the
  thread's source loop, releasing their locks (streams_runtime, "Failures and the stack").
* dedicated: each port's queue (``port.q``, the runtime's ``core.port.Port``) has any
  number of producers (the threads executing its upstream operators, or a source's
  thread) and one consumer, the port's thread. All of them append and pop under the
  port's ``_Blocking`` lock, with ``queue.Queue``'s two conditions (not empty, not full),
  so the capacity check is exact. The port's thread also takes the port's consumer lock
  and the operator's state lock around each execution (two ports of one operator never
  run at once). A producer blocked on a full queue re-checks every ``RECHECK_S`` that the
  receiver still runs and its request is active, then drops the tuple. The port's thread
  ends when its operator finished or at a STOP marker appended when the request ends
  (after retirement emptied the queue; not at the port's final punctuation:
  ``ctx.reschedule()`` may still send it RERUN markers).
"""

from __future__ import annotations

import threading

from bobox_sched.policies.streams.ports import try_lock, unlock
from bobox_sched.policies.streams.runtime import StreamsBase
from bobox_sched.policies.streams.threads import OpThread

# How often a producer blocked on a full dedicated queue checks that its receiver still
# runs (a cancelled request notifies no blocked producer): short enough to notice at once
# for a person, long enough to cost nothing while tuples flow.
RECHECK_S = 0.05

_STOP = object()


class _Blocking:
    """The dedicated model's blocking hand-off around one port's queue (module doc):
    one lock, held by a producer or the port's thread around each append or pop, and
    ``queue.Queue``'s two conditions on it."""

    __slots__ = ("lock", "not_empty", "not_full")

    def __init__(self):
        self.lock = threading.Lock()
        self.not_empty = threading.Condition(self.lock)
        self.not_full = threading.Condition(self.lock)


class ManualPolicy(StreamsBase):
    name = "streams:manual"
    model = "manual"
    flush_idle = False  # no queues: a batch leaves full, at a punctuation or aged (batching.py)

    def create_workers(self) -> list:
        return []

    def push_item(self, worker, port, item) -> None:
        if port.task.finished:
            return
        cons = port.q.cons
        m = port.mutex
        # Each lock's try right after its acquire: at the bottom of a deep stack the
        # second acquire may raise RecursionError (a call), which must not leave the
        # first lock held (streams_runtime, "Failures and the stack").
        cons.acquire()
        try:
            if m is None:
                self.execute(worker, port, item)
            else:
                m.acquire()
                try:
                    self.execute(worker, port, item)
                finally:
                    m.release()
        finally:
            cons.release()


    def push_marker(self, port, marker) -> bool:
        """Execute `marker` (FLUSH) on the timer thread only if the port and its
        operator are free now: never wait there (a timer thread blocked behind a long
        execution would hold back every other timer); a busy operator checks the age of
        its batches itself when its execution ends."""
        if port.task.finished or not try_lock(port):
            return False
        try:
            self.execute(self._timer_worker, port, marker)
        finally:
            unlock(port)
        return True


class DedicatedPolicy(StreamsBase):
    name = "streams:dedicated"
    model = "dedicated"

    def __init__(self, scheduler, threads_per_node, balance_interval=None, pin=True, queue_capacity=None, **batching):
        super().__init__(scheduler, threads_per_node, pin=pin, queue_capacity=queue_capacity, **batching)

    def create_workers(self) -> list:
        return []

    def register(self, request, ports) -> None:
        """One queue and one thread per input port, started before the sources."""
        threads = []
        for port in ports:
            port.dq = _Blocking()
            t = OpThread(self.scheduler, f"bobox-streams-port{request.id}-{port.name}", self._port_main, (port,),
                         deep=False)
            threads.append(t)
        self._add_op_threads(threads)
        for t in threads:
            t.start()

    def port_retired(self, port) -> None:
        b = port.dq
        if b is not None:
            with b.lock:  # retirement emptied the queue: a producer racing it adds at most one tuple
                port.q.append(_STOP)  # wakes the port's thread if it waits for a tuple
                b.not_empty.notify()

    def push_item(self, worker, port, item) -> None:
        task = port.task
        if task.finished:
            return
        q = port.q
        b = port.dq
        with b.lock:
            if len(q) >= q.capacity:
                req = port.req
                while True:
                    b.not_full.wait(RECHECK_S)
                    if len(q) < q.capacity:
                        break
                    if task.finished or req.state is not req.ACTIVE:
                        return  # drop: nobody will take it
            q.append(item)
            b.not_empty.notify()

    def push_marker(self, port, marker) -> bool:
        """Queue `marker` unless the queue is full (never wait on the timer thread)."""
        if port.task.finished:
            return False
        q = port.q
        b = port.dq
        with b.lock:
            if len(q) >= q.capacity:
                return False
            q.append(marker)
            b.not_empty.notify()
        return True

    def _port_main(self, w, port) -> None:
        q = port.q
        b = port.dq
        req = port.req
        task = port.task
        cons = q.cons
        m = port.mutex
        try:
            while True:
                with b.lock:
                    while not q:
                        b.not_empty.wait()
                    item = q.popleft()
                    b.not_full.notify()
                if item is _STOP or req.state is not req.ACTIVE:
                    return
                cons.acquire()
                if m is not None:
                    m.acquire()
                try:
                    self.execute(w, port, item)
                finally:
                    if m is not None:
                        m.release()
                    cons.release()
                item = None  # a batch holds packets: not while this thread waits for the next
                if task.finished:
                    return  # (after its final punctuation a port may still get RERUNs)
        finally:
            self._op_thread_done(w)

    def stats(self) -> dict:
        out = super().stats()
        out["threads"] = len(self.op_threads)
        return out


__all__ = ["DedicatedPolicy", "ManualPolicy", "RECHECK_S"]
