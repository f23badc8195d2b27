"""Punctuations: in-band control items that travel in a port's buffer, in order with its
packets, and are never rows.

* :class:`Window` marks a window boundary (Schneider et al. section 5; a keyed aggregate
  over punctuation-delimited windows closes its window when one arrives).
* :class:`Pulse` is a parallel region's progress marker (section 4.3.3): made by a
  splitter, forwarded by every operator of the region whatever its selectivity, consumed
  by the region's merger. Operator code never sees one.
* :class:`Marker` is a latency marker (Prasaad et al. section 5): stamped at ingress,
  forwarded by the runtime through every operator that preserves punctuations, and
  measured at the sink: processing latency.
* :class:`Watermark` is event-time progress ("no row below ``t`` follows"); a fan-in
  forwards the minimum over its inputs.
* :class:`Batch` delimits a transaction batch (TStream's punctuation).
* :class:`End` is the *final* punctuation, end of stream: ``ctx.close(port)`` sends the
  one instance ``END`` (``EOS`` is the same object). It keeps its own fast path (a
  flag per port, not a queue item), and every consumer tests it by identity
  (``item is END``) before it tests for other punctuations.

A punctuation is immutable once sent; the same object may travel on several ports
(broadcast into a region's channels). ``seq`` is its sequence number inside a parallel
region (None outside).
"""

from __future__ import annotations

import time


class Punctuation:
    """Base class of in-band control items (see the module doc)."""

    __slots__ = ("seq",)
    kind = "punctuation"

    def __init__(self, seq: int | None = None):
        self.seq = seq

    def with_seq(self, seq: int) -> "Punctuation":
        """A copy carrying sequence number `seq` (a splitter numbers what enters a region)."""
        p = object.__new__(type(self))
        for cls in type(self).__mro__:
            for s in getattr(cls, "__slots__", ()):
                if hasattr(self, s):
                    object.__setattr__(p, s, getattr(self, s))
        p.seq = seq
        return p

    def _fields(self) -> dict:
        out = {}
        for cls in reversed(type(self).__mro__):
            for s in getattr(cls, "__slots__", ()):
                if s != "seq" and hasattr(self, s):
                    out[s] = getattr(self, s)
        return out

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._fields() == self._fields()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self._fields().items()))))

    def __repr__(self) -> str:
        f = ", ".join(f"{k}={v!r}" for k, v in self._fields().items())
        s = f", seq={self.seq}" if self.seq is not None else ""
        return f"{type(self).__name__}({f}{s})"


class Window(Punctuation):
    """End of a window. `wid` names it (e.g. a counter or the window's end time)."""

    __slots__ = ("wid",)
    kind = "window"

    def __init__(self, wid=None, seq: int | None = None):
        super().__init__(seq)
        self.wid = wid


class Pulse(Punctuation):
    """A parallel region's pulse (never leaves its region)."""

    __slots__ = ()
    kind = "pulse"


class Marker(Punctuation):
    """A latency marker: ``t0`` is ``time.perf_counter_ns()`` at ingress."""

    __slots__ = ("t0",)
    kind = "marker"

    def __init__(self, t0: int | None = None, seq: int | None = None):
        super().__init__(seq)
        self.t0 = time.perf_counter_ns() if t0 is None else t0

    def __eq__(self, other) -> bool:  # markers are compared by identity of their stamp
        return type(other) is Marker and other.t0 == self.t0

    def __hash__(self) -> int:
        return hash(("Marker", self.t0))


class Watermark(Punctuation):
    """Event-time progress: no row with a time below `t` follows on this stream. At an
    operator with several inputs the runtime forwards the *minimum* over its inputs
    (``core.task.Alignment``), each time that minimum advances, instead of aligning
    equal punctuations: a watermark never holds an input back."""

    __slots__ = ("t",)
    kind = "watermark"

    def __init__(self, t, seq: int | None = None):
        super().__init__(seq)
        self.t = t


class Batch(Punctuation):
    """End of a transaction batch; `ts` is the punctuation's timestamp."""

    __slots__ = ("ts",)
    kind = "batch"

    def __init__(self, ts: int, seq: int | None = None):
        super().__init__(seq)
        self.ts = ts


class End(Punctuation):
    """End of stream: nothing follows it on its port. There is one instance, ``END``;
    operators send it with ``ctx.close(port)``, never with ``ctx.punctuate``."""

    __slots__ = ()
    kind = "end"

    def __reduce__(self):  # the singleton survives pickling (Spark, domains)
        return (_end, ())


def _end() -> "End":
    return END


END = End()
EOS = END  # the runtime's older name for it


# Punctuations the runtime handles itself on every port, whatever the operator declared:
# operator code never receives them.
RUNTIME_ONLY = (Pulse, Marker)

__all__ = ["END", "EOS", "Batch", "End", "Marker", "Pulse", "Punctuation", "RUNTIME_ONLY", "Window"]
