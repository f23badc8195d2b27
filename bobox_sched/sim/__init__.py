"""A deterministic simulator of the scheduling policies (issue 34): the unchanged policy
code on virtual workers and a virtual clock (``engine.py``, its module doc states the
model and the invariants), on the live machine, a captured sysfs tree or a described one
(``machine.py``), running plans of operators that say what their work costs
(``workload.py``: a synthetic mix; ``replay.py``: the requests of a real run's trace),
in one interpreter or in domains, one GIL each (``domains.py``), with the memory
bandwidth of each node shared by its readers when one is given. It writes the trace
format of real runs (``bobox_sched/trace``)."""

from bobox_sched.sim.domains import DomainsSimulation
from bobox_sched.sim.engine import Costs, Simulation, Violation, simulate
from bobox_sched.sim.machine import bandwidth_of, describe, machine
from bobox_sched.sim.replay import ReplayError, replay_plans
from bobox_sched.sim.workload import Cost, chain_mix

__all__ = ["Cost", "Costs", "DomainsSimulation", "ReplayError", "Simulation", "Violation", "bandwidth_of", "chain_mix",
           "describe", "machine", "replay_plans", "simulate"]
