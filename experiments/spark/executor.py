"""The executor-side Scheduler: one per PySpark Python worker process, shared by every
task that runs there -- the queries of ``run`` and the region channels of ``regions``.

Protocol:

* One Scheduler per PySpark Python worker process, created lazily by the first task
  that needs one (``executor_scheduler``), under ``_SCHED_LOCK``. A Python worker runs
  one task at a time and, with ``spark.python.worker.reuse``, serves many tasks and jobs
  in turn, so the Scheduler (its worker threads pinned per NUMA node, its node-local
  packet pools) and the TableStore caches of the data it read outlive any one task.
  ``spark_session`` sets ``spark.task.cpus`` to the executor's cores, so one task, thus
  one Python worker and one Scheduler, is busy per executor at a time.
* It is never shut down while the process lives: its worker threads are daemon
  threads, idle ones sleep on their own semaphores (no CPU), and PySpark ends a worker
  process with ``os._exit``. One exception: a task asking for other settings (policy,
  threads per node, packet size). Tasks of one process are sequential, so the old
  Scheduler then has no request of ours left; it is shut down (joined) and replaced.
* A task that fails cancels the requests it submitted before raising, so that the
  next attempt (often in the same process) does not compete with orphans.
"""

from __future__ import annotations

import threading

_SCHED = None
_SCHED_KEY = None
_SCHED_LOCK = threading.Lock()


def executor_scheduler(policy: str, threads_per_node: int | None, packet_bytes: int | None, task_cpus: int):
    """This process's Scheduler (see the protocol in the module doc). Without
    `threads_per_node`, the task's CPU share (``spark.task.cpus``) decides: the whole
    machine -> every CPU of every node; less -> that many threads spread over the nodes."""
    global _SCHED, _SCHED_KEY
    import topology

    from bobox_sched import Scheduler

    with _SCHED_LOCK:
        key = (policy, threads_per_node, packet_bytes, task_cpus)
        if _SCHED is not None and _SCHED_KEY == key:
            return _SCHED
        if _SCHED is not None:
            _SCHED.shutdown(wait=True, cancel=True)
            _SCHED = None
        topo = topology.probe()
        tpn = threads_per_node
        usable = sum(len(n.cpus) for n in topo.cpu_nodes)
        if tpn is None and task_cpus < usable:
            tpn = max(1, task_cpus // max(1, len(topo.cpu_nodes)))
        _SCHED = Scheduler(topology=topo, policy=policy, threads_per_node=tpn, packet_bytes=packet_bytes)
        _SCHED_KEY = key
        return _SCHED
