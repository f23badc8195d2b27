"""How a scheduler's threads end, as those of ``concurrent.futures`` executors do: at
``shutdown()``, when the Scheduler is dropped without it, and at interpreter exit.

* :class:`~bobox_sched.core.scheduler.Scheduler`, what users hold, is a handle on the runtime,
  :class:`~bobox_sched.core.scheduler.SchedulerCore`. The runtime's threads, its policy, its
  requests and the operators' ``ctx.scheduler`` hold the core, never the handle, so a
  handle nobody references is collected even while the threads run. Its
  ``weakref.finalize`` callback (``_abandoned``) then has the core shut down
  (``shutdown(wait=False)``): new requests are refused, running ones finish (a
  ``RequestHandle`` the user kept still gets its result), then every thread ends, and
  the core is freed with the last of them.
* At interpreter exit, ``_at_exit`` (registered with ``threading._register_atexit``, as
  ``concurrent.futures.thread`` does: it runs before the interpreter joins non-daemon
  threads, where an ``atexit`` hook would run after) shuts down every core not yet
  collected, without waiting. Runtime threads are not daemons, so the interpreter then
  joins them: the requests that were running finish first and no operator is killed in
  the middle of a call (a daemon thread is frozen wherever it is, its output half
  written). A request that never ends (an unbounded source) therefore keeps the
  interpreter from exiting, as an endless task does in a ThreadPoolExecutor: cancel it,
  or use ``with Scheduler() as s`` (an exception in the block cancels). No scheduler can
  be created after the hook ran.
* Every thread the runtime starts (workers, the timer thread, the balancer, the elastic
  controller, ``streams``' source and port threads) is a :class:`RuntimeThread` of its
  scheduler's :class:`ThreadGroup`, which tells the scheduler whether the calling thread
  is one of its own (``shutdown(wait=True)`` on such a thread cannot wait for the
  requests that thread would run) and counts the threads that run, so that what a
  scheduler changed for the whole process (``streams``' recursion limit) is given back
  when its last thread ended, whichever way it was shut down (``when_quiet``).

Protocol (who touches what, when):

* The finalizer callback runs on whichever thread drops the handle or runs the garbage
  collector, at any bytecode boundary: since 3.12 that may be inside someone's ``with
  lock:``, one of the runtime's locks included. So it takes no lock and waits for
  nothing: it puts the core in ``_reap_q``, a ``queue.SimpleQueue`` (its ``put`` is
  reentrant: made for finalizers) and returns. The shutdown itself, which takes the
  runtime's locks, runs on the *reaper*, one thread per process (``bobox-reaper``, not a
  daemon), started with the first scheduler and ended by ``_at_exit`` (a None in the
  queue).
* ``_live`` (a WeakSet of the cores not yet collected), ``_reaper`` and ``_exiting`` are
  guarded by ``_lock``, taken by ``adopt`` (a scheduler being created) and ``_at_exit``
  only. In a child process made by ``fork`` they start afresh (the parent's schedulers'
  threads do not exist there), as ``concurrent.futures`` does.
* ``SchedulerCore.shutdown(wait=False)`` may run on the reaper, the exit hook and the
  user's thread at once: each of its steps is idempotent.
* A :class:`RuntimeThread`'s group is set when it is made and never changes; a group
  holds no reference to its threads or its scheduler (a thread may outlive both).
* ``ThreadGroup._running``, ``_stopping``, ``_quiet`` and ``_callbacks`` are guarded by the
  group's ``_lock``. A thread is counted by whoever starts it, before ``Thread.start``
  (and uncounted if the start fails), and uncounted by itself as the last step of its
  ``run``, so the count never reads 0 while a thread of the group runs its target.
  ``stopping()`` is called once the scheduler starts no more threads (every request
  ended, none can start: ``SchedulerCore._stop_threads``). The ``when_quiet`` callbacks
  run once, with no lock held, when the group is stopping and none of its threads runs:
  on the last thread to end (inside its ``run``: before a join of it returns) or on the
  thread that calls ``stopping()`` when none runs; one added once the group is quiet
  runs at once. Never taken from a finalizer.
"""

from __future__ import annotations

import os
import queue
import threading
import traceback
import weakref

from bobox_sched.core.errors import SchedulerShutdown

REAPER_NAME = "bobox-reaper"

_lock = threading.Lock()
_live: weakref.WeakSet = weakref.WeakSet()
_exiting = False
_reaper: threading.Thread | None = None
_reap_q: queue.SimpleQueue = queue.SimpleQueue()


class ThreadGroup:
    """The runtime threads of one scheduler (module doc)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._stopping = False
        self._quiet = False
        self._callbacks: list = []

    def owns_current_thread(self) -> bool:
        """Whether the calling thread is one of this group's."""
        return getattr(threading.current_thread(), "_bx_group", None) is self

    def stopping(self) -> None:
        """No thread of the group will be started any more. Idempotent."""
        with self._lock:
            self._stopping = True
            callbacks = self._take_callbacks()
        for fn in callbacks:
            fn()

    def when_quiet(self, fn) -> None:
        """Call ``fn()`` once the group is stopping and none of its threads runs."""
        with self._lock:
            if not self._quiet:
                self._callbacks.append(fn)
                return
        fn()

    def _started(self) -> None:
        with self._lock:
            self._running += 1

    def _ended(self) -> None:
        with self._lock:
            self._running -= 1
            callbacks = self._take_callbacks()
        for fn in callbacks:
            fn()

    def _take_callbacks(self) -> list:
        """Lock held: the callbacks to run now, if the group just became quiet."""
        if self._stopping and self._running == 0 and not self._quiet:
            self._quiet = True
            callbacks, self._callbacks = self._callbacks, []
            return callbacks
        return []


class RuntimeThread(threading.Thread):
    """A thread of the runtime, counted by `group` while it runs (None: of no
    scheduler). Not a daemon: the exit hook stops it, and the interpreter joins it
    (module doc)."""

    def __init__(self, target, name: str, args=(), group: ThreadGroup | None = None):
        super().__init__(target=target, name=name, args=args, daemon=False)
        self._bx_group = group

    def start(self) -> None:
        group = self._bx_group
        if group is None:
            super().start()
            return
        group._started()
        try:
            super().start()
        except BaseException:
            group._ended()
            raise

    def run(self) -> None:
        try:
            super().run()
        finally:
            if self._bx_group is not None:
                self._bx_group._ended()


def adopt(core) -> None:
    """`core` is about to start its threads: shut it down at interpreter exit. Raises
    SchedulerShutdown once the interpreter is exiting."""
    global _reaper
    with _lock:
        if _exiting:
            raise SchedulerShutdown("cannot start a scheduler: the interpreter is exiting")
        _live.add(core)
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name=REAPER_NAME, daemon=False)
            _reaper.start()


def shut_down_when_collected(handle, core) -> weakref.finalize:
    """Shut `core` down (without waiting) once `handle`, which holds it, is collected."""
    fin = weakref.finalize(handle, _abandoned, core)
    fin.atexit = False  # at exit, _at_exit has shut every core down already
    return fin


def _abandoned(core) -> None:
    """The finalizer of a collected Scheduler: no lock, no wait (module doc)."""
    _reap_q.put(core)


def _reap() -> None:
    while True:
        core = _reap_q.get()
        if core is None:
            return
        try:
            core.shutdown(wait=False)
        except BaseException:  # noqa: BLE001 - the reaper serves every scheduler: never die
            traceback.print_exc()
        core = None  # do not hold it while waiting for the next one


def _at_exit() -> None:
    global _exiting
    with _lock:
        _exiting = True
        cores = list(_live)
    for core in cores:
        try:
            core.shutdown(wait=False)
        except BaseException:  # noqa: BLE001 - stop the others anyway
            traceback.print_exc()
    del cores
    _reap_q.put(None)


def _after_fork_in_child() -> None:
    global _lock, _live, _exiting, _reaper, _reap_q
    _lock = threading.Lock()
    _live = weakref.WeakSet()
    _exiting = False
    _reaper = None
    _reap_q = queue.SimpleQueue()


try:
    threading._register_atexit(_at_exit)
except RuntimeError:  # first imported while the interpreter exits: no scheduler may start
    _exiting = True
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["REAPER_NAME", "RuntimeThread", "ThreadGroup", "adopt", "shut_down_when_collected"]
