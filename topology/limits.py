"""Caps on what ``python -m topology`` and the ``bobox`` command accept, each with its source.

The rest of the caps live in ``bobox_sched/core/limits.py``, which re-exports these: the
topology package is the lowest layer and imports nothing of the runtime.
"""

from __future__ import annotations

import numbers

# Packet size. 64 bytes: one cache line, below which a packet holds no useful row.
# 256 MiB: 256x the default (half of a 2 MiB L2); the packet-size experiment sweeps up to
# 4x the L2. Every edge buffers up to 4 packets, so larger packets only exhaust memory.
MIN_PACKET_BYTES = 64
MAX_PACKET_BYTES = 256 * 2**20

# Timed repetitions of a measurement (--repeat of every benchmark and experiment):
# medians stop moving long before 1000.
MAX_REPEAT = 1000


def count_problem(value, cap: int, minimum: int = 1) -> str | None:
    """Why `value` is not an integer in [minimum, cap] ("must be at most 1024 ..., got
    40000"), or None where it is one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return f"must be an integer, got {value!r}"
    if value < minimum:
        return f"must be positive, got {value}" if minimum == 1 else f"must be at least {minimum}, got {value}"
    if value > cap:
        return f"must be at most {cap} (a cap of bobox_sched/core/limits.py or topology/limits.py), got {value}"
    return None
