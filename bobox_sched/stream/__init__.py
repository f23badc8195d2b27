"""Stream processing on the runtime: the operator model, punctuations, stream sources.

See ``model`` (what operators declare), ``punct`` (in-band control items) and
``sources`` (unbounded sources: fed from a thread, rate-limited generators).
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
    "OBLIVIOUS",
    "OperatorModel",
    "PRESERVES",
    "Partitioned",
    "Pulse",
    "Punctuation",
    "REMOVES",
    "STATELESS",
    "UNKNOWN",
    "Window",
    "model_of",
]
