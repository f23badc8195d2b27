"""The operator model: what an operator declares about itself, so that the runtime and the
plan analysers (parallel regions, ordered execution, elastic scheduling) know what they
may do with it.

Schneider et al., *Safe Data Parallelism for General Streaming*, section 3.2: every flag
defaults to **Unknown**, the safe default: nothing is parallelised, reordered or
replicated that was not declared safe. An operator class (or an instance, in its
``__init__``) declares:

``state``
    :data:`STATELESS`, :class:`Partitioned` ``(key)`` (state is a map key -> state and
    processing a row touches only its own key's state), or :data:`UNKNOWN`.
``selectivity_bound``
    output rows per input row: :data:`EXACTLY_ONE` (1:1), :data:`AT_MOST_ONE` (1:[0,1]),
    or :data:`UNKNOWN` (1:[0,inf)); sources and timer-driven operators are 0:* and must
    stay Unknown. (``selectivity``, a float, remains the *expected* value used by cost
    models; it is not a bound.)
``forwarding``
    which input columns reach the output unchanged: :data:`ALWAYS` (all, unless the
    operator drops or reassigns them: list those in ``reassigns``),
    :class:`FunctionAny` ``(cols)`` (only those), or :data:`UNKNOWN` (none).
``punct_in``
    per input port: ``"oblivious"`` (works on any stream; the runtime handles the
    punctuations that arrive on it) or ``"expecting"`` (the operator's code receives
    them: ``StreamOperator.on_punct``). One value applies to every port; a dict maps
    port names.
``punct_out``
    per output port: ``"preserves"`` (punctuations arriving on an oblivious input are
    forwarded on this output, in order with the packets), ``"generates"`` (the operator
    makes its own), or ``"removes"`` (its output is punctuation-free). Default:
    ``"preserves"`` for an operator with inputs. With several oblivious inputs a
    punctuation is forwarded once, after it passed every input (aligned, as Flink aligns
    barriers: ``core.task.Alignment``), so a window closes downstream when it closed on
    every input. (Schneider et al. section 5.2 call a fan-in of punctuated streams
    unpunctuated; the region analysis still keeps fan-in out of regions, rule R2.)
``max_parallelism``
    how many threads may run the operator at once (Prasaad et al.): 1 unless declared.
``emit_order``
    ``"ordered"`` (default) or ``"unordered"``: a window operator that emits at a
    punctuation may declare that its output per window is a multiset (rule R8).
``fuse_with``
    names of operators that must be fused with this one (rule R5's pragma).

The legacy ``kind`` attribute maps on: ``"partitioned"`` + ``partition_key`` is
Partitioned(key), ``"stateless"`` is Stateless *only when declared by the class itself*
(``Operator.kind`` no longer defaults to it), ``"stateful"`` is Unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

UNKNOWN = "unknown"
STATELESS = "stateless"
EXACTLY_ONE = "exactly_one"
AT_MOST_ONE = "at_most_one"
ALWAYS = "always"

OBLIVIOUS = "oblivious"
EXPECTING = "expecting"
PRESERVES = "preserves"
GENERATES = "generates"
REMOVES = "removes"

# Selectivity bounds as (low, high) output rows per input row; None = unbounded.
SELECTIVITY_RANGE = {EXACTLY_ONE: (1, 1), AT_MOST_ONE: (0, 1), UNKNOWN: (0, None)}


@dataclass(frozen=True)
class Partitioned:
    """State partitioned by `key` (a tuple of column names)."""

    key: tuple

    def __init__(self, *key):
        if len(key) == 1 and isinstance(key[0], (list, tuple)):
            key = tuple(key[0])
        if not key or not all(isinstance(k, str) and k for k in key):
            raise ValueError(f"Partitioned needs one or more column names, got {key!r}")
        object.__setattr__(self, "key", tuple(key))

    def __str__(self) -> str:
        return f"partitioned({', '.join(self.key)})"


@dataclass(frozen=True)
class FunctionAny:
    """Only the columns `cols` are forwarded unchanged (an aggregate's ``Any(x)``)."""

    cols: tuple

    def __init__(self, *cols):
        if len(cols) == 1 and isinstance(cols[0], (list, tuple, set, frozenset)):
            cols = tuple(cols[0])
        object.__setattr__(self, "cols", tuple(cols))

    def __str__(self) -> str:
        return f"any({', '.join(self.cols)})"


@dataclass(frozen=True)
class OperatorModel:
    """The normalised declarations of one operator instance (see the module doc)."""

    state: object  # STATELESS | Partitioned | UNKNOWN
    selectivity: str  # EXACTLY_ONE | AT_MOST_ONE | UNKNOWN
    forwarding: object  # ALWAYS | FunctionAny | UNKNOWN
    reassigns: frozenset  # columns an ALWAYS-forwarding operator changes or drops
    punct_in: dict  # input port -> OBLIVIOUS | EXPECTING
    punct_out: dict  # output port -> PRESERVES | GENERATES | REMOVES
    max_parallelism: int
    emit_order: str
    fuse_with: tuple = field(default=())

    @property
    def key(self) -> tuple | None:
        return self.state.key if isinstance(self.state, Partitioned) else None

    @property
    def selectivity_range(self) -> tuple:
        return SELECTIVITY_RANGE[self.selectivity]

    def forwards(self, col: str) -> bool:
        """True if column `col` reaches the output unchanged."""
        f = self.forwarding
        if f == ALWAYS:
            return col not in self.reassigns
        if isinstance(f, FunctionAny):
            return col in f.cols
        return False


def _ports(value, ports, allowed, what, default):
    if value is None:
        value = default
    if isinstance(value, str):
        out = {p: value for p in ports}
    elif isinstance(value, dict):
        unknown = set(value) - set(ports)
        if unknown:
            raise ValueError(f"{what} names unknown port(s) {sorted(unknown)} (ports: {', '.join(ports) or 'none'})")
        out = {p: value.get(p, default) for p in ports}
    else:
        raise ValueError(f"{what} must be a string or a dict by port, got {value!r}")
    bad = [v for v in out.values() if v not in allowed]
    if bad:
        raise ValueError(f"{what}: {bad[0]!r} is not one of {', '.join(allowed)}")
    return out


def model_of(op) -> OperatorModel:
    """The declarations of operator `op` (an instance: ports may be set in ``__init__``),
    normalised, with Unknown wherever nothing was declared. Raises ValueError for a
    malformed declaration, naming it."""
    name = getattr(op, "name", None) or type(op).__name__
    try:
        return _model_of(op)
    except ValueError as e:
        raise ValueError(f"operator '{name}': {e}") from None


def _model_of(op) -> OperatorModel:
    state = getattr(op, "state", None)
    if state is None:
        kind = getattr(op, "kind", None)
        if kind == "partitioned" and getattr(op, "partition_key", None):
            # a str is one column name (tuple() would split "user" into 'u', 's', 'e', 'r');
            # any other iterable holds the names
            key = op.partition_key
            state = Partitioned((key,) if isinstance(key, str) else tuple(key))
        elif kind == "stateless":
            state = STATELESS
        else:
            state = UNKNOWN
    elif isinstance(state, str):
        if state not in (STATELESS, UNKNOWN):
            raise ValueError(f"state must be 'stateless', Partitioned(key) or 'unknown', got {state!r}")
    elif not isinstance(state, Partitioned):
        raise ValueError(f"state must be 'stateless', Partitioned(key) or 'unknown', got {state!r}")

    sel = getattr(op, "selectivity_bound", None) or UNKNOWN
    if sel not in SELECTIVITY_RANGE:
        raise ValueError(f"selectivity_bound must be one of {', '.join(SELECTIVITY_RANGE)}, got {sel!r}")
    if not op.inputs and sel != UNKNOWN:
        raise ValueError("a source (no inputs) has selectivity 0:* and cannot declare a bound")

    fwd = getattr(op, "forwarding", None) or UNKNOWN
    if not (fwd in (ALWAYS, UNKNOWN) or isinstance(fwd, FunctionAny)):
        raise ValueError(f"forwarding must be 'always', FunctionAny(cols) or 'unknown', got {fwd!r}")
    reassigns = frozenset(getattr(op, "reassigns", ()) or ())

    pin = _ports(getattr(op, "punct_in", None), op.inputs, (OBLIVIOUS, EXPECTING), "punct_in", OBLIVIOUS)
    # An operator with inputs preserves punctuations unless it says otherwise; one with
    # several passes each once it passed every input (core.task.Alignment).
    pout_default = PRESERVES if op.inputs else REMOVES
    pout = _ports(getattr(op, "punct_out", None), op.outputs, (PRESERVES, GENERATES, REMOVES), "punct_out",
                  pout_default if getattr(op, "punct_out", None) is None else REMOVES)
    if not op.inputs and PRESERVES in pout.values():
        raise ValueError("an operator with no input cannot preserve punctuations")

    mp = getattr(op, "max_parallelism", 1)
    if not isinstance(mp, int) or isinstance(mp, bool) or mp < 1:
        raise ValueError(f"max_parallelism must be a positive integer, got {mp!r}")
    if mp > 1 and state == UNKNOWN:
        raise ValueError("max_parallelism > 1 needs a declared state (stateless or Partitioned)")
    emit = getattr(op, "emit_order", "ordered")
    if emit not in ("ordered", "unordered"):
        raise ValueError(f"emit_order must be 'ordered' or 'unordered', got {emit!r}")
    fuse = getattr(op, "fuse_with", ()) or ()
    if isinstance(fuse, str):
        fuse = (fuse,)
    return OperatorModel(state, sel, fwd, reassigns, pin, pout, mp, emit, tuple(fuse))


__all__ = [
    "ALWAYS",
    "AT_MOST_ONE",
    "EXACTLY_ONE",
    "EXPECTING",
    "FunctionAny",
    "GENERATES",
    "OBLIVIOUS",
    "OperatorModel",
    "PRESERVES",
    "Partitioned",
    "REMOVES",
    "SELECTIVITY_RANGE",
    "STATELESS",
    "UNKNOWN",
    "model_of",
]
