"""Scheduling policies behind one interface (``base.Policy``).

``bobox``: the scheduler of the Bobox paper (per-node request lists, per-thread
immediate lists, locality-ordered task search, per-thread sleep semaphores, balancer).
``simple``: the paper's baseline (per-thread FIFO lists, round-robin stealing, one
global semaphore counting tasks, constant packet size).
``ordered``: ordered stream processing of linear chains on many workers (Prasaad et
al.): a central scheduler allotting (operator, quota) by heuristic ``ct|lp|et|qst``.
``streams``: IBM Streams' dynamic threading (Schneider & Wu): per-port SPSC queues, an
LRU free list of ports, reSchedule, static or elastic thread levels; ``model="manual"``
and ``"dedicated"`` are its comparison threading models.
"""

from __future__ import annotations

from .base import Policy


def get_policy(name: str) -> type[Policy]:
    from .bobox import BoboxPolicy
    from .ordered import OrderedPolicy
    from .simple import SimplePolicy
    from .streams import StreamsPolicy

    table = {"bobox": BoboxPolicy, "simple": SimplePolicy, "ordered": OrderedPolicy, "streams": StreamsPolicy}
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(table))})") from None


POLICY_NAMES = ("bobox", "simple", "ordered", "streams")

__all__ = ["POLICY_NAMES", "Policy", "get_policy"]
