"""bobox-sched: a NUMA-aware task scheduler for dataflow query execution.

The scheduler of the Bobox system (Falt & Yaghob, "Task Scheduling in Data Stream
Processing"): requests (execution plans) of operators exchanging columnar packets,
immediate and deferred tasks, locality-ordered workers pinned per NUMA node, sleeping
on per-thread semaphores, and a 100 ms balancer that migrates or shares requests.
"""

from .errors import (
    BoboxError,
    OperatorError,
    OperatorStalled,
    RequestCancelled,
    RequestFailed,
    SchedulerShutdown,
    SchedulerWarning,
)
from .operator import Context, Operator, Sink, Source, StreamOperator
from .packet import Packet
from .plan import Plan
from .request import RequestHandle
from .scheduler import Scheduler

__all__ = [
    "BoboxError",
    "Context",
    "Operator",
    "OperatorError",
    "OperatorStalled",
    "Packet",
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
