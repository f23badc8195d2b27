"""Timers: run a callback at a given time, on one background thread per scheduler.

Used for ``ctx.reschedule(delay)``: a rate-limited or polling source asks to run again in
`delay` seconds; the timer pushes its task when due, so no worker is held (or spins
through the deferred list) while it waits.

Protocol: ``_heap`` and ``_stopped`` are guarded by ``_cond``'s lock. ``add`` may be called
from any thread (never from a ``__del__``): it pushes under the lock and notifies only if
the new deadline is the earliest. The timer thread alone pops; it runs callbacks with
the lock released, so a callback may call ``add``. The thread starts on the first
``add`` and ends at ``stop`` (pending timers are dropped: their requests are over);
``stop(wait=False)`` tells it to end without joining it (any thread, the timer thread
included).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from bobox_sched.core.lifecycle import RuntimeThread


class Timers:
    def __init__(self, name: str = "bobox-timers", group=None):
        self.name = name
        self.group = group  # the scheduler's ThreadGroup (lifecycle.py), or None
        self._cond = threading.Condition(threading.Lock())
        self._heap: list = []  # (deadline, seq, fn, args)
        self._seq = itertools.count()  # ties: first added, first run
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.fired = 0

    def start(self) -> None:
        """Start the timer thread now (idle until a timer is added). A Scheduler does at
        construction: since Python 3.12 no thread may start once the interpreter is
        exiting, and a request still running then (its submitter never waited) may call
        ``ctx.reschedule(delay)`` for the first time."""
        with self._cond:
            if not self._stopped:
                self._start_locked()

    def _start_locked(self) -> None:
        """Start the thread unless it runs (the caller holds ``_cond``)."""
        if self._thread is None:
            self._thread = RuntimeThread(self._main, self.name, group=self.group)
            self._thread.start()

    def add(self, delay: float, fn, *args) -> None:
        """Call ``fn(*args)`` in `delay` seconds (on the timer thread)."""
        deadline = time.monotonic() + max(0.0, delay)
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (deadline, next(self._seq), fn, args))
            if self._thread is None:
                self._start_locked()
            elif self._heap[0][0] == deadline:
                self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._heap)

    def _main(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._stopped:
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        cond.wait(wait)
                    else:
                        cond.wait()
                if self._stopped:
                    self._heap.clear()
                    return
                _, _, fn, args = heapq.heappop(self._heap)
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a failing callback must not stop the timers
                import traceback

                traceback.print_exc()
            self.fired += 1
            fn = args = None

    def stop(self, wait: bool = True) -> None:
        """End the timer thread (pending timers are dropped); with `wait`, join it."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            t = self._thread
        if wait and t is not None and t is not threading.current_thread():
            t.join()


__all__ = ["Timers"]
