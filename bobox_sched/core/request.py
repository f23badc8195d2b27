"""Requests: one execution-plan instance being evaluated, and the handle users hold.

Life of a request: ``Scheduler.submit`` instantiates and validates the plan, the policy
places it on a node, the source operators get deferred tasks; it ends when every
operator finished (DONE), when an operator raised (FAILED) or by ``cancel()``
(CANCELLED). At the end its operators are dropped, so packets and operator state are
released while the handle still answers ``result()`` and ``stats``.

Protocol: ``state`` moves once, from ACTIVE to a final state, under ``_lock``; the thread
that moves it does the clean-up and completes the future, even when a clean-up step
raises (then a request that was completing moves on once more, DONE -> FAILED, under the
lock: ``_end``). Workers read ``state`` without the lock (an attribute read) and drop
tasks of a request that is no longer ACTIVE.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from bobox_sched.control.progress import Passage
from bobox_sched.core.errors import RequestCancelled
from bobox_sched.core.sync import round_robin
from bobox_sched.core.task import Task

STEP_NAMES = {
    1: "own immediate (newest)",
    2: "last request's deferred (oldest)",
    3: "oldest request's deferred (oldest)",
    4: "stolen immediate (oldest)",
    5: "sleep",
}

# The clock latency markers are measured with (their ``t0`` is on it): a name tests can
# replace to feed known times.
_marker_clock = time.perf_counter_ns


class Request:
    ACTIVE = "active"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __init__(self, scheduler, plan, rid: int, ops, edges, buffer_packets: int):
        self.id = rid
        self.name = plan.name
        self.scheduler = scheduler
        self.policy = scheduler.policy
        self.state = self.ACTIVE
        self._lock = threading.Lock()
        # Tasks: deferred list, oldest first. Entries are (task, node) where node is
        # the NodeState responsible for the task (None = the request's first node); the
        # policy owns the meaning of `node` and of `nodes` below.
        self.deferred = deque()
        self.nodes = []  # nodes evaluating this request (first = owner); set by the policy
        self.rr = round_robin()  # cursor over `nodes` for new deferred tasks when shared (core.sync)
        self.results: dict = {}
        self.bytes = scheduler.bytes.new_account()  # the only account per packet (packet.py)
        self.bytes.rid = rid
        self.future: Future = Future()
        self.ops = ops  # name -> the user's operator (this request's instance)
        # name -> the runtime's record of that operator (task.Task): what policies' lists,
        # the context and the edges hold; nothing runtime-owned is set on the operator.
        tasks = self.tasks = {name: Task(op, name, self, buffer_packets) for name, op in ops.items()}
        self.sources = [t for t in tasks.values() if not t.inputs]
        # complete when every operator has passed End (control/progress.py)
        self.progress = Passage(len(ops))
        for s, si, d, di in edges:
            tasks[s].dst[si] = (tasks[d], di)
        deliver = self.policy.deliver
        if deliver is not None:
            for t in tasks.values():
                t.deliver = deliver
        places = plan.placements
        if places:
            node_ids = [n.os_index for n in scheduler.topology.cpu_nodes]
            for name, slot in places.items():
                tasks[name].node = node_ids[slot % len(node_ids)]
        # tasks run per locality step, one row per worker (each worker writes its own)
        self.wsteps = [[0] * 5 for _ in scheduler.workers]
        self.migrations = 0
        self.shares = 0
        self.n_operators = len(ops)
        self.t_submit = time.perf_counter()
        self.t_end = None
        self.failed_operator = None
        # Processing latency of each latency marker that reached a sink (ns); appended by
        # the sink's thread (list.append: one atomic step under the GIL, internally
        # locked in free-threaded builds).
        self.latencies_ns: list = []
        self.final_nodes = None  # node ids evaluating it when it ended
        # traceback and __context__ of the failure, set once before the future completes
        self.exc_tb = None
        self.exc_context = None
        self._final_stats = None

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Give every source operator its first (deferred) task."""
        for t in self.sources:
            t.tok.acquire()  # a fresh task: free; the first run is this one
            self.policy.push_deferred(self, t, None)
        if not self.sources:  # nothing to run: a plan of zero sources completes at once
            self._end(self.DONE)

    def op_finished(self, op) -> None:
        """Operator `op` passed End (it finished): the last one completes the request. One
        that finishes twice is a runtime error, and the request fails with it (counted
        twice, it would have completed the request early)."""
        with self._lock:
            try:
                last = self.progress.pass_(op.name, final=True) and self.state is self.ACTIVE
                twice = None
            except RuntimeError as e:
                last, twice = False, e
        if twice is not None:
            self.fail(twice, op)
        elif last:
            self._end(self.DONE)

    def fail(self, exc: BaseException, op=None) -> None:
        self._end(self.FAILED, exc, getattr(op, "name", None))

    def cancel(self) -> bool:
        return self._end(self.CANCELLED, RequestCancelled(f"request {self.id} ({self.name}) was cancelled"))

    def _end(self, state: str, exc: BaseException | None = None, failed_operator: str | None = None) -> bool:
        with self._lock:
            if self.state is not self.ACTIVE:
                return False
            self.state = state
            self.failed_operator = failed_operator
        # Whatever a step of the clean-up raises (a policy's request_done, the stats), the
        # scheduler forgets the request and its future completes: otherwise result() and
        # shutdown() would wait forever. A request that was completing fails with that
        # error instead (state DONE -> FAILED: the one second move, between two final
        # states, which workers cannot tell apart); one that was failing or cancelled keeps
        # its own error, with a note naming the clean-up's.
        err = None
        try:
            results = self._clean_up(state, exc)
        except BaseException as e:  # noqa: BLE001 - reported through the future, below
            err = e
        try:
            # The scheduler forgets the request before the future completes: a done
            # callback may call shutdown(), which waits for every request to be forgotten.
            self.scheduler._request_ended(self)
        finally:
            if err is None:
                if state == self.DONE:
                    self.future.set_result(next(iter(results.values())) if len(results) == 1 else results)
                else:
                    self.future.set_exception(exc)
            else:
                self._end_after_error(state, exc, err)
        return True

    def _clean_up(self, state: str, exc: BaseException | None) -> dict:
        """Everything between the state's move and the future: drop the operators and
        their buffers, keep the stats and the failure's traceback. Returns the results."""
        self.t_end = time.perf_counter()
        self.final_nodes = [n.os_index for n in self.nodes]
        try:
            self.policy.request_done(self)
            self._final_stats = self.scheduler._collect_request_stats(self)
        finally:  # the operators and their buffers are dropped even if those raised
            tasks = self.tasks
            self.ops = self.tasks = None  # drop operator state (hash tables, stashed packets, ...)
            self.sources = []
            self.deferred.clear()
            if tasks:
                # Input buffers (Ports: deques with atomic steps) are dropped now. Outboxes
                # belong to whichever thread may still be running the operator: that thread
                # drops them (run_task sees the request is over).
                for t in tasks.values():
                    for q in t.inq:
                        q.drop()  # a racing sender's packet dies with op
            results = self.results
            if state != self.DONE:
                self.results = {}
                # Keep the traceback (file, line, function of every frame) but drop the
                # frames' local variables: they hold the packets and operator state that
                # the failed request must release.
                traceback.clear_frames(exc.__traceback__)
                # The traceback as it is now (from the operator's run down to the raise):
                # every result()/exception() shows this one (see RequestHandle.result).
                self.exc_tb = exc.__traceback__
                self.exc_context = exc.__context__
        return results

    def _end_after_error(self, state: str, exc: BaseException | None, err: BaseException) -> None:
        """Complete the future when the clean-up raised `err` (see ``_end``)."""
        req = f"request {self.id} ({self.name})"
        if state == self.DONE or exc is None:
            with self._lock:
                self.state = self.FAILED
            err.add_note(f"bobox: raised while ending {req}, which had completed")
            exc = err
        else:
            exc.add_note(f"bobox: ending {req} after this error also raised {type(err).__name__}: {err}")
        traceback.clear_frames(err.__traceback__)  # as for the failure: the clean-up's locals hold the operators
        if self.exc_tb is None:
            self.exc_tb = exc.__traceback__
            self.exc_context = exc.__context__
        self.results = {}
        self.future.set_exception(exc)

    def record_marker(self, marker) -> None:
        """A latency marker reached a sink: record ingress-to-egress time."""
        self.latencies_ns.append(_marker_clock() - marker.t0)

    @property
    def elapsed(self) -> float:
        end = self.t_end if self.t_end is not None else time.perf_counter()
        return end - self.t_submit

    def stats(self) -> dict:
        if self._final_stats is not None:
            return self._final_stats
        return self.scheduler._collect_request_stats(self)


class RequestHandle:
    """What ``Scheduler.submit`` returns: wait for, inspect or cancel one request."""

    def __init__(self, request: Request):
        self._request = request
        self.id = request.id
        self.name = request.name

    def result(self, timeout: float | None = None):
        """The request's result: the value its sink published (``ctx.set_result``), or a
        dict ``{operator: value}`` when several operators published one.

        Raises the operator's own exception (original traceback) if it failed,
        :class:`RequestCancelled` if cancelled, ``TimeoutError`` after `timeout`.

        Every call raises the same exception object with the same traceback: the frames
        of this call on top of the operator's own (``Future.result`` would re-raise the
        object as it is, and each raise would add its frames to the previous ones).
        Two threads raising it at the same moment still share the one object, whose
        ``__traceback__`` is then the last writer's."""
        exc = self.exception(timeout)
        if exc is None:
            return self._request.future.result()
        raise exc

    def exception(self, timeout: float | None = None):
        """The exception the request failed with (None if it succeeded), its
        ``__traceback__`` and ``__context__`` reset to the operator's (see ``result``)."""
        req = self._request
        try:
            exc = req.future.exception(timeout)
        except FutureTimeout:
            raise TimeoutError(f"request {self.id} ({self.name}) not done after {timeout} s") from None
        if exc is not None:
            # A raise inside a caller's except block also set __context__: undo that too.
            exc.__traceback__ = req.exc_tb
            exc.__context__ = req.exc_context
        return exc

    def done(self) -> bool:
        return self._request.future.done()

    def cancel(self) -> bool:
        """Cancel the request; False if it had already ended."""
        return self._request.cancel()

    def add_done_callback(self, fn) -> None:
        """Call ``fn(handle)`` when the request ends (at once if it has). It runs on the
        worker thread that ended the request: keep it short and never wait in it for
        another request (that worker counts as busy while it waits)."""
        self._request.future.add_done_callback(lambda _f: fn(self))

    @property
    def state(self) -> str:
        return self._request.state

    @property
    def failed_operator(self) -> str | None:
        return self._request.failed_operator

    @property
    def stats(self) -> dict:
        """Per-request metrics: tasks by locality step, packets and bytes, peak bytes
        held, migrations and shares, elapsed seconds."""
        return self._request.stats()

    def __repr__(self) -> str:
        return f"<RequestHandle {self.id} {self.name} {self.state}>"
