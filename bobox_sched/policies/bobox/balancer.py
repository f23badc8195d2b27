"""The load balancer of the bobox policy (Bobox paper, section 5.2).

Every `interval` (100 ms in the paper) while at least one worker sleeps and a request
is active, the balancer looks at each node's load:

* *overloaded*: no thread sleeps and tasks are waiting (pending tasks > 0);
* *partially idle*: at least one thread sleeps and nothing waits for it.

It pairs overloaded nodes (most pending tasks first) with idle nodes (most sleeping
threads first). For each pair: if the overloaded node evaluates more than one request,
its newest unshared request moves to the idle node (the newest has allocated least, so
moving it is cheapest); otherwise its request becomes shared with the idle node.

``balance_once`` is a pure function of the policy's state, so tests can drive it
deterministically; the thread only calls it on a timer. Protocol: the balancer thread
reads node state without locks (a snapshot that may be stale by the time it acts) and
acts through ``policy.migrate`` / ``policy.share``, which take the node locks and
re-check that the move still makes sense.
"""

from __future__ import annotations

import threading

from bobox_sched.core.lifecycle import RuntimeThread


def node_loads(policy):
    """[(node, pending tasks, sleeping threads)] right now."""
    return [(n, n.pending_tasks(), len(n.idle)) for n in policy.nodes]


def balance_once(policy) -> list[tuple]:
    """One balancing round. Returns the actions taken:
    ``("migrate", request_id, from_node, to_node)`` or ``("share", request_id, from, to)``."""
    loads = node_loads(policy)
    overloaded = sorted(((p, n) for n, p, idle in loads if idle == 0 and p > 0), key=lambda x: -x[0])
    idle_nodes = sorted(((idle, n) for n, p, idle in loads if idle > 0 and p == 0), key=lambda x: -x[0])
    actions = []
    for (_, src), (_, dst) in zip(overloaded, idle_nodes):
        reqs = [r for r in src.requests if r.state == r.ACTIVE]
        if not reqs:
            continue
        unshared = [r for r in reqs if len(r.nodes) == 1]
        if len(reqs) > 1 and unshared:
            r = unshared[-1]  # newest (requests are kept oldest first)
            if policy.migrate(r, src, dst):
                actions.append(("migrate", r.id, src.os_index, dst.os_index))
        else:
            candidates = [r for r in reqs if dst not in r.nodes]
            if not candidates:
                continue
            r = candidates[-1]
            if policy.share(r, dst):
                actions.append(("share", r.id, src.os_index, dst.os_index))
    return actions


class Balancer:
    def __init__(self, policy, interval: float):
        self.policy = policy
        self.interval = interval
        self.ticks = 0
        self.log: list[tuple] = []  # (time since start, action...) for experiments
        self._stop = threading.Event()
        self._work = threading.Event()  # set while requests are active
        self._thread = RuntimeThread(self._main, "bobox-balancer",
                                     group=getattr(policy.scheduler, "_thread_group", None))
        self._t0 = None

    def start(self) -> None:
        import time

        self._t0 = time.perf_counter()
        self._thread.start()

    def notify(self) -> None:
        """A request was submitted: resume periodic checks."""
        self._work.set()

    def stop(self, wait: bool = True) -> None:
        """End the balancer's thread; with `wait`, join it."""
        self._stop.set()
        self._work.set()
        if wait and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _main(self) -> None:
        import time

        sched = self.policy.scheduler
        while not self._stop.is_set():
            # An idle scheduler costs nothing: block until a request arrives.
            self._work.wait()
            if self._stop.wait(self.interval):
                return
            if not sched._active:
                self._work.clear()
                if sched._active:  # submitted between the check and the clear
                    self._work.set()
                continue
            if not any(n.idle for n in self.policy.nodes):
                continue  # every CPU busy: nothing to balance (section 5.2)
            self.ticks += 1
            try:
                for a in balance_once(self.policy):
                    self.log.append((round(time.perf_counter() - self._t0, 4),) + a)
            except Exception as e:  # noqa: BLE001 - balancing is an optimisation: never die
                sched._warn(f"balancer: {type(e).__name__}: {e}")
