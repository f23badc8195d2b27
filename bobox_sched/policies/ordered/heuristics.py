"""The four scheduling heuristics of Prasaad et al. section 6 (spec 000 section 4), as
pure functions of a snapshot: which operator a worker that asks for work gets.

Every function takes the *schedulable* operators only (w_i < M_i and a non-empty
worklist; the policy filters, [L325]) as :class:`OpView` records and returns one of
them (None only for an empty list). Units: rows ("tuples" in the paper), seconds.

* **QST** (queue-size throttling, Eq 1 [L331-339]): the *earliest* operator whose output
  queue (the worklist of the next operator) holds fewer rows than
  T_i = C * cs_i / sum_j cs_j. The last operator's output is the egress: never above
  its threshold. If every candidate is throttled (their outputs are full), the *latest*
  candidate (its successor is full, so it is scheduled when that successor is not
  schedulable itself; our fallback, the paper leaves it open).
* **LP** (last in pipeline [L341-343]): the *latest* operator (minimum worklist size 1).
* **ET** (estimated time, Eq 2 [L347-353]): the maximum of p_i = I_i * c_i / (w_i + 1)
  (0 when w_i >= M_i; such an operator is not schedulable anyway).
* **CT** (normalized current throughput, Eq 3 [L355-361]): the minimum of
  n_i = (T_i^w + w_i * s) / (c_i * cs_i), T_i^w the worker time spent on o_i in the
  current window, s the time slice. cs_i = prod_{k<=i} s_k, literally as in Eq 3
  (``OpView.cs``; the policy's ``ct_cumulative="inputs"`` gives prod_{k<i} instead).

Tie-breaks (documented choices; the paper gives none): equal priorities are broken
first by NUMA locality when the policy's ``numa_tiebreak`` is on (an operator whose
oldest unit's packet lives on the asking worker's node wins: ``OpView.local``), then by
position: QST, CT: the earlier operator; LP, ET: the later operator (closer to the
egress, lower latency); then by request age (the older request first, ``OpView.age``
smaller). Priorities are compared exactly (floats computed the same way for every
candidate), so "equal" means equal.

Unknown statistics (an operator that never ran): c_i = the mean of the known c's (1 us
per row if none), s_i = 1, rows per unit = 1; the policy fills these in.
"""

from __future__ import annotations

from dataclasses import dataclass

HEURISTICS = ("ct", "lp", "et", "qst")


@dataclass
class OpView:
    """One schedulable operator as a heuristic sees it."""

    pos: int  # position in its chain, 1..n (the ingress source is 0)
    I: float  # rows in its worklist (estimated: units x rows per unit)
    c: float  # seconds per input row (EWMA of worker statistics)
    w: int  # workers allotted now
    M: int  # maximum degree of parallelism
    cs: float  # cumulative selectivity used by CT and QST
    Tw: float = 0.0  # worker seconds on it in the current CT window
    out_rows: float = 0.0  # rows in the next operator's worklist (QST)
    T: float = float("inf")  # QST threshold of its output queue (inf: the egress)
    local: bool = False  # its oldest unit's packet is on the asking worker's node
    age: int = 0  # rank of its request, 0 = oldest
    ref: object = None  # the policy's stage object


def _tie(v: OpView, later_first: bool, numa: bool) -> tuple:
    """Secondary sort key (smaller wins): locality, position, request age."""
    return ((0 if v.local else 1) if numa else 0, -v.pos if later_first else v.pos, v.age)


def choose_lp(views: list, numa: bool = False) -> OpView | None:
    if not views:
        return None
    return min(views, key=lambda v: (-v.pos,) + _tie(v, True, numa)[:1] + (v.age,))


def et_priority(v: OpView) -> float:
    return v.I * v.c / (v.w + 1) if v.w < v.M else 0.0


def choose_et(views: list, numa: bool = False) -> OpView | None:
    if not views:
        return None
    return min(views, key=lambda v: (-et_priority(v),) + _tie(v, True, numa))


def ct_value(v: OpView, time_slice: float) -> float:
    return (v.Tw + v.w * time_slice) / (v.c * v.cs)


def choose_ct(views: list, time_slice: float, numa: bool = False) -> OpView | None:
    if not views:
        return None
    return min(views, key=lambda v: (ct_value(v, time_slice),) + _tie(v, False, numa))


def qst_thresholds(cs: list, capacity: float) -> list:
    """T_i = C * cs_i / sum_j cs_j for the operators of one chain (Eq 1)."""
    total = sum(cs)
    return [capacity * x / total if total > 0 else capacity for x in cs]


def choose_qst(views: list, numa: bool = False) -> OpView | None:
    if not views:
        return None
    open_ = [v for v in views if v.out_rows < v.T]
    if open_:
        return min(open_, key=lambda v: (v.pos,) + _tie(v, False, numa)[:1] + (v.age,))
    return min(views, key=lambda v: (-v.pos,) + _tie(v, True, numa)[:1] + (v.age,))


def choose(heuristic: str, views: list, time_slice: float, numa: bool = False) -> OpView | None:
    if heuristic == "ct":
        return choose_ct(views, time_slice, numa)
    if heuristic == "lp":
        return choose_lp(views, numa)
    if heuristic == "et":
        return choose_et(views, numa)
    if heuristic == "qst":
        return choose_qst(views, numa)
    raise ValueError(f"heuristic must be one of {', '.join(HEURISTICS)}, got {heuristic!r}")


__all__ = ["HEURISTICS", "OpView", "choose", "choose_ct", "choose_et", "choose_lp", "choose_qst", "ct_value",
           "et_priority", "qst_thresholds"]
