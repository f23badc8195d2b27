"""argparse types for the ``bobox`` command: every number bounded, every path non-empty.

Each type refuses bad text with ``argparse.ArgumentTypeError``, so the command ends at
parse time, before any work, with one line (``experiments.cli.main`` prints argparse's errors
as ``error: bobox run: argument --threads-per-node: must be at most 1024 ...``). The
bounds are those of ``bobox_sched.core.limits``.

    p.add_argument("--threads-per-node", type=count(MAX_THREADS_PER_NODE))
"""

from __future__ import annotations

import argparse

from bobox_sched.core import limits


def count(cap: int, minimum: int = 1):
    """An integer in [minimum, cap]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        problem = limits.count_problem(value, cap, minimum)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = "count"
    return parse


def real(cap: float, minimum: float = 0.0, open_min: bool = True):
    """A finite number in (minimum, cap] (``inf`` and ``nan`` are refused)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        problem = limits.real_problem(value, cap, minimum, open_min)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = "number"
    return parse


def byte_size(minimum: int = limits.MIN_PACKET_BYTES, cap: int = limits.MAX_PACKET_BYTES):
    """A byte size such as ``65536``, ``64K`` or ``2MiB`` in [minimum, cap]."""

    def parse(text: str) -> int:
        from topology.cli import bounded_bytes

        return bounded_bytes(text, minimum, cap)

    parse.__name__ = "byte size"
    return parse


def scale_factor(text: str) -> float:
    """A TPC-H scale factor: finite, > 0, at most ``limits.MAX_SF``."""
    return real(limits.MAX_SF)(text)


def path(text: str) -> str:
    """A path that is not empty (``--output ""`` used to be ignored silently)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"not a path: {text!r}")
    return text


# argparse names the type in its fallback message ("invalid path value"); ours give their own.
path.__name__ = "path"

__all__ = ["count", "real", "byte_size", "scale_factor", "path"]
