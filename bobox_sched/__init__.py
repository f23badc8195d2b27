"""bobox-sched: a NUMA-aware task scheduler for dataflow query execution.

The scheduler of the Bobox system (Falt & Yaghob, "Task Scheduling in Data Stream
Processing"): requests (execution plans) of operators exchanging columnar packets,
immediate and deferred tasks, locality-ordered workers pinned per NUMA node, sleeping
on per-thread semaphores, and a 100 ms balancer that migrates or shares requests.
"""

from bobox_sched.core.errors import (
    BoboxError,
    OperatorError,
    OperatorStalled,
    RequestCancelled,
    RequestFailed,
    SchedulerShutdown,
    SchedulerWarning,
)
from bobox_sched.core.operator import Context, Operator, Sink, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.core.plan import Plan
from bobox_sched.core.request import RequestHandle
from bobox_sched.core.scheduler import Scheduler
from bobox_sched.policies.ordered.partitioned import PartitionedOperator
from bobox_sched.regions.merger import MisdeclaredOperator  # what a parallel region's debug checks raise (README)

# The layers above the core register what it finds by name (core/extensions.py).
import bobox_sched.policies  # noqa: E402,F401 -- the four policies
import bobox_sched.regions  # noqa: E402,F401 -- parallel regions: analyze_regions, parallelize
import bobox_sched.domains  # noqa: E402,F401 -- Scheduler(domains=...): the front

__all__ = [
    "BoboxError",
    "Context",
    "MisdeclaredOperator",
    "Operator",
    "OperatorError",
    "OperatorStalled",
    "Packet",
    "PartitionedOperator",
    "Plan",
    "RequestCancelled",
    "RequestFailed",
    "RequestHandle",
    "Scheduler",
    "SchedulerShutdown",
    "SchedulerWarning",
    "Sink",
    "Source",
    "StreamOperator",
]
