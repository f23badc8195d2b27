"""The threads of a scheduler: how they are made and told apart.

Every thread the runtime starts (workers, the timer thread, the balancer, the elastic
controller, ``streams``' source and port threads) is a :class:`RuntimeThread` of its
scheduler's :class:`ThreadGroup`. The group tells the scheduler whether the calling
thread is one of its own: ``shutdown(wait=True)`` on such a thread (a request's done
callback) cannot wait for the requests that thread would run.

Protocol: a RuntimeThread's group is set when it is made and never changes; the group
holds no reference to its threads or its scheduler (a thread may outlive both).
"""

from __future__ import annotations

import threading


class ThreadGroup:
    """The runtime threads of one scheduler (module doc)."""

    def owns_current_thread(self) -> bool:
        """Whether the calling thread is one of this group's."""
        return getattr(threading.current_thread(), "_bx_group", None) is self


class RuntimeThread(threading.Thread):
    """A thread of the runtime, of `group` (None: of no scheduler)."""

    def __init__(self, target, name: str, args=(), group: ThreadGroup | None = None):
        super().__init__(target=target, name=name, args=args, daemon=True)
        self._bx_group = group


__all__ = ["RuntimeThread", "ThreadGroup"]
