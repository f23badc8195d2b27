"""The control floor, below the core: what an operator declares and what travels in band.

``model`` (the operator model: state, selectivity, forwarding, punctuation modes) and
``punct`` (punctuations: window ends, region pulses, latency markers, batch barriers).
Nothing here imports the core: the core, the policies and the plan rewrites all read
these declarations, and none of them owns them.
"""

from bobox_sched.control.model import (
    ALWAYS,
    AT_MOST_ONE,
    EXACTLY_ONE,
    EXPECTING,
    GENERATES,
    OBLIVIOUS,
    PRESERVES,
    REMOVES,
    STATELESS,
    UNKNOWN,
    FunctionAny,
    OperatorModel,
    Partitioned,
    model_of,
)
from bobox_sched.control.punct import Batch, Marker, Pulse, Punctuation, Watermark, Window

__all__ = [
    "ALWAYS",
    "AT_MOST_ONE",
    "Batch",
    "EXACTLY_ONE",
    "EXPECTING",
    "FunctionAny",
    "GENERATES",
    "Marker",
    "OBLIVIOUS",
    "OperatorModel",
    "PRESERVES",
    "Partitioned",
    "Pulse",
    "Punctuation",
    "REMOVES",
    "STATELESS",
    "UNKNOWN",
    "Watermark",
    "Window",
    "model_of",
]
