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

from bobox_sched.core import extensions
from bobox_sched.policies.base import Policy
from bobox_sched.policies.bobox.policy import BoboxPolicy
from bobox_sched.policies.ordered.policy import OrderedPolicy
from bobox_sched.policies.simple import SimplePolicy
from bobox_sched.policies.streams.dynamic import StreamsPolicy

POLICY_NAMES = ("bobox", "simple", "ordered", "streams")
for _name, _cls in zip(POLICY_NAMES, (BoboxPolicy, SimplePolicy, OrderedPolicy, StreamsPolicy)):
    extensions.register_policy(_name, _cls)


def get_policy(name: str) -> type[Policy]:
    """The policy class registered as `name` (ValueError naming the known ones)."""
    return extensions.policy_class(name)


__all__ = ["POLICY_NAMES", "Policy", "get_policy"]
