"""The interface every scheduling policy implements.

The runtime (operators, packets, requests, the task state machine) is shared; a policy
owns where tasks wait, which task a worker runs next, how idle workers sleep and wake,
where requests are placed, and any background balancing. A new policy is a new module
in this package registered in ``policies/__init__.py``.

Contract:

* ``push_immediate(worker, op)`` is called by `worker`'s own thread;
  ``push_deferred(request, op, worker)`` by any thread (worker None = not a worker,
  e.g. ``submit``). Both may be called concurrently with ``next_task`` of any worker.
* ``next_task(worker)`` is called only by `worker`'s thread; it returns an operator to
  run, blocking (sleeping) while there is none, and returns None once the scheduler is
  stopping and no work is left, which ends the worker.
* ``place(request)`` runs before the request's first task is pushed;
  ``request_done(request)`` once, when it ended.
* ``run_task`` (attribute) is what a worker calls with the task ``next_task`` returned;
  ``deliver`` (attribute, None by default) replaces how a sent item reaches its receiver;
* ``push_on(request, op, node=None, worker=None)`` places a task on a node or a worker
  (default: a plain deferred task);
* ``push_later(request, op, delay)`` (default: the scheduler's timer thread calls
  ``push_deferred`` when due) serves ``ctx.reschedule(delay)``;
* ``validate_plan(ops, edges)`` (default: accept) runs in ``submit`` before the request
  exists: a policy that cannot run some plans (``ordered``: linear chains only) raises
  ValueError there;
* ``options`` (class attribute): the keyword options ``Scheduler(...)`` passes on to the
  policy's constructor (``Scheduler(policy="ordered", heuristic="lp")``); a policy with
  none refuses any;
* ``resolve_options(options)`` (classmethod) checks them before anything starts and
  returns the class to instantiate and the keyword arguments to pass it (default: names
  outside ``options`` refused; ``streams`` picks its threading model's class there).
"""

from __future__ import annotations

from bobox_sched.core import task as _task
from bobox_sched.core.errors import BoboxError


class Policy:
    name = "?"
    options: tuple = ()  # keyword options of the constructor that Scheduler(...) passes on
    # A policy with its own send path (e.g. running the receiver on the sender's thread
    # when its queue is full) sets this to ``deliver(worker, src, out_index, item) ->
    # bool`` with ``task._deliver``'s contract: put `item` (a packet, punctuation or EOS)
    # at the far end of output `out_index` of `src`; False leaves it in `src`'s outbox
    # and `src` must then be scheduled again when there is room. None: ``task._deliver``.
    deliver = None
    # Whether push_on/push_deferred run tasks of operators that are not the plan's (with
    # no ports: TStream's state-access rounds). A policy that runs only its plan's ports
    # (streams) sets False, and such users refuse it up front instead of hanging.
    runtime_tasks = True

    def __init__(self, scheduler, threads_per_node: int | None):
        self.scheduler = scheduler
        self.topology = scheduler.topology
        self.threads_per_node = threads_per_node
        # What a worker calls to run the task ``next_task`` gave it: ``run_task(worker,
        # task)``. A policy whose tasks are not plain operator runs (several workers in
        # one operator, a port of an operator) replaces it. An attribute, not a method,
        # so the default costs no extra frame per task.
        self.run_task = _task.run_task

    @classmethod
    def resolve_options(cls, options: dict):
        """Check ``Scheduler(policy=..., **options)``'s policy options; return ``(class,
        kwargs)`` for the constructor. Raises BoboxError naming a bad option."""
        unknown = sorted(set(options) - set(cls.options))
        if unknown:
            have = f" (options: {', '.join(cls.options)})" if cls.options else ""
            raise BoboxError(f"policy {cls.name!r} has no option {unknown[0]!r}{have}")
        return cls, dict(options)

    @classmethod
    def default_packet_bytes(cls, topology) -> int:
        return topology.packet_bytes

    def create_workers(self) -> list:
        raise NotImplementedError

    def place(self, request, node: int | None = None) -> None:
        raise NotImplementedError

    def push_immediate(self, worker, op) -> None:
        raise NotImplementedError

    def push_deferred(self, request, op, worker) -> None:
        raise NotImplementedError

    def next_task(self, worker):
        raise NotImplementedError

    def request_done(self, request) -> None:
        pass

    def validate_plan(self, ops: dict, edges: list) -> None:
        """Refuse (ValueError, naming the operator) a plan this policy cannot run; called
        by ``submit`` before the request exists. Default: every valid plan."""

    def bucket_parallelism(self) -> int:
        """How many buckets of one partitioned operator this policy may run at once;
        ``partitions="auto"`` is resolved from it at submit (``stream/partitioned.py``).
        Default 1: one packet of an operator at a time."""
        return 1

    def push_on(self, request, op, node: int | None = None, worker=None) -> None:
        """Push a task for `op` that should run on `worker` (one of this scheduler's
        workers) or on a worker of NUMA node `node` (an OS index); any thread. Used for
        operators with a node affinity (``Plan.place``: a parallel region's channels
        spread over nodes) and tasks that must run where some state lives. A policy
        without placement (the default) treats it as a deferred task."""
        self.push_deferred(request, op, None)

    def push_later(self, request, op, delay: float) -> None:
        """Push `op`'s deferred task in `delay` seconds (``ctx.reschedule(delay)``); any
        thread. The scheduler's timer thread calls ``push_deferred`` when due."""
        self.scheduler.timers.add(delay, self._timer_fired, request, op)

    def _timer_fired(self, request, op) -> None:
        if request.state is request.ACTIVE:
            self.push_deferred(request, op, None)

    def wake_all(self) -> None:
        """Wake every sleeping worker (shutdown)."""
        raise NotImplementedError

    def start(self) -> None:
        """Start background threads (after the workers started)."""

    def stop(self, wait: bool = True) -> None:
        """Tell background threads to end (the scheduler calls it once every request
        ended, from any thread, possibly more than once); with `wait`, also join them
        (never the calling thread)."""

    def stats(self) -> dict:
        return {}


def steal(w, victims):
    """Take the oldest task of the first worker in `victims` (in order) that has one;
    records it as a steal (locality step 4) of `w`. None if all were empty."""
    for other in victims:
        if other.imm:
            try:
                op = other.imm.popleft()
            except IndexError:  # emptied by its owner or another thief meanwhile
                continue
            w.last_step = 4
            w.steps[4] += 1
            w.steals += 1
            w.stolen_from = other.id  # a trace's steal arrow (bobox_sched/trace)
            return op
    return None
