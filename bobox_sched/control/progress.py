"""Progress: has every participant passed punctuation P?

The runtime asks this one question at several scales, and answers it here:

* a **request** is complete when every one of its operators has passed ``End`` (an
  operator passes it once, when it finished: ``Request.op_finished``);
* a **transaction batch** reaches barrier 1 when every executor instance of the group has
  passed ``Batch(k)`` (``txn.coordinator.Group.arrive``), and an instance that reached
  its own end of stream counts as having passed every later batch;
* a **fan-in operator** sends a punctuation on when every aligned input has passed it
  (``core/task.py``, ``Alignment``: one Passage per waiting punctuation; an input passes
  it when it reaches its head, an input that ended passes it as its last).

A :class:`Passage` counts one punctuation's passage over a fixed set of participants:
``pass_(i)`` returns True exactly once, on the call that completes the set; ``next()``
starts the count of the next punctuation, in which participants that ended
(``pass_(i, final=True)``) have passed already. Passing twice before ``next()`` is a
runtime error (a participant counted twice would end the wait early).

One place answers the same question with its own data, because it answers it per row
inside a nogil kernel: a region's ordered merger (``regions/merger.py``: ``seenTop``,
the minimum over channels of the last seqno each passed, a pulse included, is how far
every channel has passed; a Passage per seqno would put a Python call on every row).

Threads: a Passage is not synchronised. Each owner serialises its calls: the request
under ``Request._lock``, the group under ``Group._lock``, an alignment by being touched
only by the thread running its operator (the task token).
"""

from __future__ import annotations


class Passage:
    """How many of `participants` have passed the current punctuation (module doc)."""

    __slots__ = ("participants", "passed", "ended")

    def __init__(self, participants: int):
        if participants < 0:
            raise ValueError(f"participants must be at least 0, got {participants}")
        self.participants = participants
        self.ended: set = set()  # participants that passed their last punctuation
        self.passed: set = set()  # participants that passed the current one (ended included)

    def pass_(self, who, final: bool = False) -> bool:
        """Participant `who` passed the current punctuation (`final`: and it was its
        last, so it counts as having passed every later one). True on the call that
        completes the set, and only then."""
        if who in self.passed:
            raise RuntimeError(f"participant {who!r} passed the same punctuation twice")
        self.passed.add(who)
        if final:
            self.ended.add(who)
        return len(self.passed) == self.participants

    @property
    def complete(self) -> bool:
        """Every participant passed the current punctuation."""
        return len(self.passed) == self.participants

    @property
    def all_ended(self) -> bool:
        """Every participant passed its last punctuation."""
        return len(self.ended) == self.participants

    @property
    def waiting_for(self) -> int:
        """Participants that have not passed the current punctuation yet."""
        return self.participants - len(self.passed)

    def next(self) -> None:
        """Count the next punctuation: only the participants that ended have passed it."""
        self.passed = set(self.ended)
