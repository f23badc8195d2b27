"""Safe data parallelism (Schneider et al., seed 001) as a plan rewrite applied before submit.

``analysis`` finds a plan's parallel regions (rules R1-R9), ``fission`` rewrites a plan so
that each region runs as N channels between a ``splitter`` and an ordered ``merger``;
``channel`` wraps a member operator per channel, ``kernels`` holds their nogil loops. The
core never imports this package: it finds ``parallelize`` and ``analyze_regions``
through ``bobox_sched.core.extensions``, where this module registers them.
"""

from bobox_sched.core import extensions
from bobox_sched.regions.analysis import analyze
from bobox_sched.regions.fission import parallelize
from bobox_sched.regions.merger import MisdeclaredOperator

extensions.register_plan_rewrite("analyze_regions", analyze)
extensions.register_plan_rewrite("parallelize", parallelize)

__all__ = ["MisdeclaredOperator", "analyze", "parallelize"]
