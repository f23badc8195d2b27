"""Stream processing on the runtime: the operator model, punctuations, stream sources.

See ``model`` (what operators declare), ``punct`` (in-band control items),
``sources`` (unbounded sources: fed from a thread, rate-limited generators) and, for
ordered execution on many workers (policy ``ordered``), ``partitioned`` (operators with
state per key bucket), ``reorder``, ``hybrid``, ``atomics`` and ``ordered``.
"""

from .model import (
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
from .merger import MisdeclaredOperator
from .partitioned import PartitionedOperator
from .punct import Batch, Marker, Pulse, Punctuation, Window

__all__ = [
    "ALWAYS",
    "AT_MOST_ONE",
    "Batch",
    "EXACTLY_ONE",
    "EXPECTING",
    "FunctionAny",
    "GENERATES",
    "Marker",
    "MisdeclaredOperator",
    "OBLIVIOUS",
    "OperatorModel",
    "PRESERVES",
    "Partitioned",
    "PartitionedOperator",
    "Pulse",
    "Punctuation",
    "REMOVES",
    "STATELESS",
    "UNKNOWN",
    "Window",
    "model_of",
]
