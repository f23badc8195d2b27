"""A deterministic simulator of the scheduling policies (issue 34): the unchanged policy
code on virtual workers and a virtual clock (``engine.py``, its module doc states the
model and the invariants), on the live machine, a captured sysfs tree or a described one
(``machine.py``), running plans of operators that say what their work costs
(``workload.py``). It writes the trace format of real runs (``bobox_sched/trace``)."""

from bobox_sched.sim.engine import Costs, Simulation, Violation, simulate
from bobox_sched.sim.machine import describe, machine
from bobox_sched.sim.workload import Cost, chain_mix

__all__ = ["Cost", "Costs", "Simulation", "Violation", "chain_mix", "describe", "machine", "simulate"]
