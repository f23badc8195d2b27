"""Domains: several interpreters, each running the runtime for a part of the machine,
behind one Scheduler (design.md section 4; the domains issue).

* ``front.py``: ``Scheduler(domains=...)``'s runtime in the user's process: the layout
  (which CPUs each domain gets), the domain processes' start, placement of each request
  on the least loaded domain, results, stats, a dead domain's requests failed and the
  domain restarted;
* ``process.py``: one domain process (pinned, its node's memory preferred before numpy
  is imported) running an ordinary Scheduler on its CPUs;
* ``shm.py``: named shared-memory segments in ``/dev/shm``, swept once their creator
  is gone; ``ring.py``: the single-producer single-consumer descriptor ring (LLVM
  atomics in nogil kernels, within a process or across processes).

Not built yet: packet pools in shared memory and requests spanning domains (their
packets would cross through the rings), read-only data shared per node, migration of
waiting requests between domains, results through Arrow IPC (they come back pickled).
"""

from bobox_sched.core.extensions import register_front
from bobox_sched.domains.front import make_front

register_front("domains", make_front)
