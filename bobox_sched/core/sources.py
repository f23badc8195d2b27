"""Unbounded sources: fed by another thread (:class:`QueueSource` over a
:class:`StreamChannel`) or generated at a rate (:class:`GeneratorSource`).

A request on an unbounded source ends when the source closes its outputs (the *final*
punctuation: the channel was closed, the generator returned None) or by
``handle.cancel()``.

StreamChannel protocol (who touches what, when): the producer is any non-worker thread
(a socket reader, an application thread); the consumer is the one QueueSource operator
bound to the channel, run by whichever worker runs it (one at a time). ``_items`` and
``_closed`` are guarded by ``_cond``. ``put`` appends, then -- with the lock released --
schedules the consumer through the task state machine: if the consumer is running it
becomes RUNNING_SCHEDULED and runs again, if it is idle it gets a deferred task. The
consumer takes items under the lock and, when it finds none, returns without asking to
be rescheduled, so it costs nothing while the channel is empty, and no item is ever left
behind: a ``put`` after the consumer's last look always schedules it again. A bounded
channel blocks ``put`` (on the producer's thread, never a worker's) until the consumer
took items.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque

import numpy as np

from bobox_sched.core.operator import Source
from bobox_sched.core.packet import Packet
from bobox_sched.control.punct import Marker, Punctuation

_CLOSE = object()
# How often a producer blocked on a full channel re-checks that its consumer's request is
# still running (a cancelled request notifies nobody). Short enough that a producer
# notices within a blink, long enough to cost nothing.
_RECHECK_S = 0.05


class _Failed:
    """The end of a channel's stream by an error (``StreamChannel.fail``)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class StreamChannel:
    """A thread-safe feed of packets (or ``{column: array}`` dicts, or punctuations) into
    one :class:`QueueSource`. `capacity` (items) bounds it: ``put`` then blocks."""

    def __init__(self, capacity: int | None = 64):
        if capacity is not None and (not isinstance(capacity, int) or capacity < 1):
            raise ValueError(f"channel capacity must be a positive integer or None, got {capacity!r}")
        self.capacity = capacity
        self._items: deque = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        # The bound QueueSource operator (runtime instance), held weakly: the producer
        # and the plan keep the channel alive, and a strong reference would keep the
        # source, and through its edges every operator downstream, alive after the
        # request ended. A dead reference means the reading request has ended.
        self._consumer = None  # weakref.ref to the operator, or None while unbound
        self._worker_wake = None  # task.schedule, bound lazily (avoids an import cycle)

    def put(self, item, timeout: float | None = None) -> None:
        """Add one item (from any thread but a worker's). Blocks while the channel is full;
        TimeoutError after `timeout` seconds. Raises after ``close()``."""
        if isinstance(item, dict):
            item = Packet({k: np.asarray(v) for k, v in item.items()})
        elif not isinstance(item, (Packet, Punctuation)):
            raise TypeError(f"a channel carries Packets, column dicts or Punctuations, not {type(item).__name__}")
        with self._cond:
            self._check_open()
            if self.capacity is not None:
                deadline = None if timeout is None else time.monotonic() + timeout
                while len(self._items) >= self.capacity:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"channel full for {timeout} s")
                    # Re-check now and then: the consumer's request may end (cancel)
                    # without anyone notifying this condition.
                    self._cond.wait(_RECHECK_S if left is None else min(left, _RECHECK_S))
                    self._check_open()
            self._items.append(item)
            consumer = self._consumer
        self._wake(consumer() if consumer is not None else None)

    def close(self) -> None:
        """End of stream: the source closes its outputs once every item before was sent."""
        self._end(_CLOSE)

    def fail(self, exc: BaseException) -> None:
        """End of stream by an error: the source raises `exc` where the stream would have
        ended, failing its request (a cross-domain channel that cannot be read)."""
        self._end(_Failed(exc))

    def _end(self, last) -> None:
        """Close with `last` as the final item (the first close or fail wins)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._items.append(last)
            consumer = self._consumer
            self._cond.notify_all()
        self._wake(consumer() if consumer is not None else None)

    def _check_open(self) -> None:
        """Raise if nothing will ever read what is put (lock held)."""
        if self._closed:
            raise RuntimeError("put() on a closed channel")
        ref = self._consumer
        if ref is None:
            return
        task = ref()
        if task is None:
            raise RuntimeError("the request reading this channel has ended")
        if task.req.state is not task.req.ACTIVE:
            raise RuntimeError(f"the request reading this channel has ended ({task.req.state})")

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def _wake(self, task) -> None:
        if task is None:
            return  # not bound yet: the source's first (deferred) run finds the items
        from bobox_sched.core.task import schedule

        schedule(task, None, False)

    # -- consumer side (the QueueSource, on a worker) ------------------------------------
    def _bind(self, task) -> None:
        with self._cond:
            bound = self._consumer() if self._consumer is not None else None
            if bound is not None and bound is not task:
                raise RuntimeError("this channel already feeds another request's source")
            if self._consumer is not None and bound is None:
                raise RuntimeError("this channel fed a request that has ended")
            self._consumer = weakref.ref(task)

    def _unbind(self, task) -> None:
        with self._cond:
            if self._consumer is not None and self._consumer() is task:
                self._consumer = None
                self._cond.notify_all()

    def _take(self):
        """The oldest item, or None if there is none."""
        with self._cond:
            if not self._items:
                return None
            item = self._items.popleft()
            if self.capacity is not None:
                self._cond.notify_all()
            return item


class QueueSource(Source):
    """A source fed by a :class:`StreamChannel` from another thread (a socket reader, an
    application). Emits the channel's items in order; closes its outputs when the
    channel is closed. Sends at most `batch` items per run so that one busy feed does not
    hold a worker. With `marker_every` = k > 0 a latency marker follows every k-th packet."""

    state = "unknown"

    def __init__(self, channel: StreamChannel, batch: int = 16, marker_every: int = 0):
        if not isinstance(channel, StreamChannel):
            raise TypeError(f"QueueSource needs a StreamChannel, not {type(channel).__name__}")
        self.channel = channel
        self.batch = batch
        self.marker_every = marker_every
        self._sent = 0
        self._bound = False

    def process(self, ctx):
        ch = self.channel
        if not self._bound:
            ch._bind(ctx.task)
            self._bound = True
        for _ in range(self.batch):
            if ctx.blocked:
                break  # the receiver is full: it reschedules us when it takes a packet
            item = ch._take()
            if item is None:
                return  # empty: the next put() schedules us
            if item is _CLOSE:
                ch._unbind(ctx.task)
                ctx.close()
                ctx.finish()
                return
            if item.__class__ is _Failed:
                ch._unbind(ctx.task)
                raise item.exc
            if isinstance(item, Punctuation):
                ctx.punctuate(item)
                continue
            for port in self.outputs:
                ctx.send(port, item)
            self._sent += 1
            if self.marker_every and self._sent % self.marker_every == 0:
                ctx.punctuate(Marker())
        if len(ch) and not ctx.blocked:
            ctx.reschedule()  # more waiting: run again (deferred), let others run first


class GeneratorSource(Source):
    """A source that calls ``make(ctx, i)`` for packet i = 0, 1, ... until it returns None
    (end of stream; an unbounded source never does). With `rate` (rows per second) it
    paces itself: after each packet it asks to run again when the rows sent so far are
    due, through a timer (``ctx.reschedule(delay)``), holding no worker while it waits.
    With `marker_every` = k > 0 a latency marker follows every k-th packet."""

    state = "unknown"

    def __init__(self, make, rate: float | None = None, marker_every: int = 0):
        if rate is not None and not (rate > 0 and np.isfinite(rate)):
            raise ValueError(f"rate must be a positive number of rows per second, got {rate!r}")
        self.make = make
        self.rate = rate
        self.marker_every = marker_every
        self._i = 0
        self._rows = 0
        self._t0 = None

    def process(self, ctx):
        if self._t0 is None:
            self._t0 = time.monotonic()
        pkt = self.make(ctx, self._i)
        if pkt is None:
            ctx.close()
            ctx.finish()
            return
        self._i += 1
        self._rows += pkt.nrows
        for port in self.outputs:
            ctx.send(port, pkt)
        if self.marker_every and self._i % self.marker_every == 0:
            ctx.punctuate(Marker())
        if self.rate is None:
            ctx.reschedule()
            return
        due = self._t0 + self._rows / self.rate
        ctx.reschedule(max(0.0, due - time.monotonic()))


__all__ = ["GeneratorSource", "QueueSource", "StreamChannel"]
