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


class Registry:
    """Names to things, filled once at import time by the layer that provides them."""

    def __init__(self, what: str, hint: str, missing: type[Exception]):
        self.what, self.hint, self.missing = what, hint, missing
        self._items: dict = {}

    def register(self, name: str, item) -> None:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[name] = item

    def get(self, name: str):
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise self.missing(f"unknown {self.what} {name!r} (known: {known}){self.hint}") from None


# Policies: name -> a bobox_sched.policies.base.Policy class; its resolve_options reads
# that policy's own keyword options.
POLICIES = Registry("policy", "", ValueError)
# Plan rewrites from bobox_sched.regions: "analyze_regions" (plan -> RegionPlan) and
# "parallelize" (plan, degree=, ordering= -> Plan).
PLAN_REWRITES = Registry("plan rewrite", ": import bobox_sched.regions", RuntimeError)

# Fronts: "domains" -> make_front(args, kwargs, domains, domain_workers), returning the
# runtime a Scheduler with domains runs on, or None for the in-process one
# (bobox_sched.domains.front).
FRONTS = Registry("front", ": import bobox_sched.domains", RuntimeError)

register_policy = POLICIES.register
policy_class = POLICIES.get
register_plan_rewrite = PLAN_REWRITES.register
plan_rewrite = PLAN_REWRITES.get
register_front = FRONTS.register
front = FRONTS.get
