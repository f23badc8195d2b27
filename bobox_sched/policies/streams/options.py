"""Policy ``streams``: checking its keyword options (``Scheduler(policy="streams", **opts)``).

The threading model (``model=``) picks the class (``dynamic.StreamsPolicy.resolve_options``);
these helpers check one option each and raise a one-line BoboxError naming it.
"""

from __future__ import annotations

from bobox_sched.core.errors import BoboxError

MODELS = ("dynamic", "manual", "dedicated")


def positive_int(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise BoboxError(f"streams option {name} must be a positive integer, got {v!r}")
    return v


def fraction(name, v, lo_open=True, hi_closed=True):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1 if hi_closed else 0 < v < 1):
        rng = "(0, 1]" if hi_closed else "(0, 1)"
        raise BoboxError(f"streams option {name} must be a number in {rng}, got {v!r}")
    return float(v)


def choice(name, v, allowed):
    if v not in allowed:
        raise BoboxError(f"streams option {name} must be one of {', '.join(map(repr, allowed))}, got {v!r}")
    return v
