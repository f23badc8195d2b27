"""What the core finds by name and the layers above it provide: policies and plan rewrites.

The core never imports a policy, the regions rewrite or the transactional layer (the
import-linter contract in ``.importlinter`` checks it). Where the core needs one of them
-- ``Scheduler(policy="bobox")``, ``submit(plan, parallelism=4)``, ``plan.regions()`` --
it looks it up here, and the layer above registers itself when it is imported:
``bobox_sched.policies`` registers the four policies, ``bobox_sched.regions`` the region
analysis and the fission rewrite. ``import bobox_sched`` (which any ``bobox_sched.*``
import runs first) imports both, so every lookup finds them.

Protocol: registration happens at import time, under the interpreter's import lock, and
never again; lookups only read. A name registered twice is a programming error
(ValueError) rather than a silent override.
"""

from __future__ import annotations

from collections.abc import Callable

_policies: dict[str, type] = {}
_plan_rewrites: dict[str, Callable] = {}


def register_policy(name: str, cls: type) -> None:
    """`cls` (a ``bobox_sched.policies.base.Policy``) runs ``Scheduler(policy=name)``; its
    ``resolve_options`` reads that policy's own keyword options."""
    if name in _policies:
        raise ValueError(f"policy {name!r} is registered twice")
    _policies[name] = cls


def policy_class(name: str) -> type:
    try:
        return _policies[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(_policies))})") from None


def policy_names() -> tuple[str, ...]:
    return tuple(_policies)


# Plan rewrites: "analyze_regions" (plan -> RegionPlan) and "parallelize"
# (plan, degree=, ordering= -> Plan), both from bobox_sched.regions.
def register_plan_rewrite(name: str, fn: Callable) -> None:
    if name in _plan_rewrites:
        raise ValueError(f"plan rewrite {name!r} is registered twice")
    _plan_rewrites[name] = fn


def plan_rewrite(name: str) -> Callable:
    try:
        return _plan_rewrites[name]
    except KeyError:
        raise RuntimeError(f"no plan rewrite {name!r} is registered: import bobox_sched.regions") from None
