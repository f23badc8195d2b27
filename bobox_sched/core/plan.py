"""Execution plans: a DAG of operators connected port to port.

A :class:`Plan` is a reusable description; every ``Scheduler.submit(plan)`` instantiates
fresh operators from it (operators hold per-request state), so one plan can be
submitted many times concurrently.

    plan = Plan("example")
    plan.add("src", RangeSource, n=1000)       # a class (or factory) and its arguments
    plan.add("double", MapOp, fn=lambda p: ...)
    plan.add("sink", Sink)
    plan.connect("src", "double")              # "op" = its only port, or "op.port"
    plan.connect("double.out", "sink.in")

Validation (at submit, or ``plan.validate()``): every port connected exactly once, edges
naming existing operators and ports, no cycles, unique names. Failures raise
``ValueError`` naming the operator.
"""

from __future__ import annotations

import copy

from bobox_sched.core import extensions
from bobox_sched.core.operator import Operator


class Plan:
    def __init__(self, name: str = "plan"):
        self.name = name
        self._specs: dict[str, tuple] = {}
        self._places: dict[str, int] = {}  # operator -> node slot (Plan.place)
        self._lanes: dict[str, int] = {}  # operator -> partition of a decomposed plan (Plan.lane)
        self._edges: list[tuple[str, str | None, str, str | None]] = []

    # -- building -------------------------------------------------------------------------
    def add(self, name: str, factory, *args, **kwargs) -> str:
        """Add operator `name`, made by ``factory(*args, **kwargs)`` for each request.

        `factory` may also be an Operator instance: it is then deep-copied per request."""
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"operator name must be a non-empty string without '.': {name!r}")
        if name in self._specs:
            raise ValueError(f"duplicate operator name '{name}'")
        if not (callable(factory) or isinstance(factory, Operator)):
            raise ValueError(f"operator '{name}': {factory!r} is neither an Operator nor a factory")
        self._specs[name] = (factory, args, kwargs)
        return name

    def connect(self, src: str, dst: str) -> None:
        """Connect output ``src`` ("op" or "op.port") to input ``dst``."""
        s_op, s_port = _split(src)
        d_op, d_port = _split(dst)
        self._edges.append((s_op, s_port, d_op, d_port))

    def chain(self, *names: str) -> None:
        """Connect single-port operators in a row: ``chain("a", "b", "c")``."""
        for a, b in zip(names, names[1:]):
            self.connect(a, b)

    def place(self, name: str, slot: int) -> None:
        """Run operator `name` on a NUMA node: the `slot`-th CPU node of the scheduler's
        topology, modulo their number (so a plan spread over k slots runs on any
        machine). Its tasks then go to that node's workers (policies with placement:
        ``bobox``; others ignore it)."""
        if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
            raise ValueError(f"operator '{name}': node slot must be an integer >= 0, got {slot!r}")
        self._places[name] = slot

    @property
    def placements(self) -> dict[str, int]:
        return dict(self._places)

    def lane(self, name: str, index: int) -> None:
        """Say that operator `name` belongs to partition `index` of a plan decomposed k
        ways (``Query(parallel=k)`` says it of every per-partition operator). The
        in-process runtime ignores it; a Scheduler with domains may run different
        partitions in different domains (a request spanning domains), the operators
        without a lane in the request's home domain."""
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"operator '{name}': lane must be an integer >= 0, got {index!r}")
        self._lanes[name] = index

    @property
    def lanes(self) -> dict[str, int]:
        return dict(self._lanes)

    @property
    def operator_names(self) -> list[str]:
        return list(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    # -- instantiation and validation -------------------------------------------------------
    def instantiate(self) -> tuple[dict[str, Operator], list[tuple[str, int, str, int]]]:
        """Fresh operators and resolved edges ``(src, out_index, dst, in_index)``.
        Raises ValueError (naming the operator) for an invalid plan."""
        if not self._specs:
            raise ValueError(f"plan '{self.name}' has no operators")
        ops: dict[str, Operator] = {}
        for name, (factory, args, kwargs) in self._specs.items():
            if isinstance(factory, Operator):
                op = copy.deepcopy(factory)
            else:
                op = factory(*args, **kwargs)
            if not isinstance(op, Operator):
                raise ValueError(f"operator '{name}': factory returned {type(op).__name__}, not an Operator")
            ops[name] = op
        edges = []
        in_used: dict[tuple[str, int], str] = {}
        out_used: dict[tuple[str, int], str] = {}
        for s_op, s_port, d_op, d_port in self._edges:
            for n in (s_op, d_op):
                if n not in ops:
                    raise ValueError(f"edge {s_op} -> {d_op}: no operator named '{n}'")
            si = _port_index(ops[s_op], s_op, s_port, "output")
            di = _port_index(ops[d_op], d_op, d_port, "input")
            if (s_op, si) in out_used:
                raise ValueError(
                    f"operator '{s_op}': output port '{ops[s_op].outputs[si]}' is connected twice "
                    "(use a broadcast operator to fan out)"
                )
            if (d_op, di) in in_used:
                raise ValueError(f"operator '{d_op}': input port '{ops[d_op].inputs[di]}' is connected twice")
            out_used[(s_op, si)] = d_op
            in_used[(d_op, di)] = s_op
            edges.append((s_op, si, d_op, di))
        for name, op in ops.items():
            for i, p in enumerate(op.inputs):
                if (name, i) not in in_used:
                    raise ValueError(f"operator '{name}': input port '{p}' is not connected")
            for i, p in enumerate(op.outputs):
                if (name, i) not in out_used:
                    raise ValueError(f"operator '{name}': output port '{p}' is not connected")
        _check_acyclic(ops, edges)
        for name in self._places:
            if name not in ops:
                raise ValueError(f"Plan.place names no operator '{name}'")
        return ops, edges

    def validate(self) -> None:
        self.instantiate()

    # -- parallel regions (bobox_sched.regions.analysis) ------------------------------------
    def regions(self):
        """Where this plan may run data-parallel: its parallel regions, each with key,
        selectivity, ordering strategy and the rule that ended it, and why every other
        operator is excluded (``bobox_sched.regions.analysis.RegionPlan``)."""
        return extensions.plan_rewrite("analyze_regions")(self)

    def explain_regions(self) -> str:
        """The parallel regions as text (see ``regions()``)."""
        return self.regions().explain()


def _split(ref: str) -> tuple[str, str | None]:
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"bad port reference {ref!r}")
    if "." in ref:
        op, port = ref.split(".", 1)
        return op, port
    return ref, None


def _port_index(op: Operator, name: str, port: str | None, kind: str) -> int:
    ports = list(op.outputs if kind == "output" else op.inputs)
    if port is None:
        if len(ports) != 1:
            have = ", ".join(ports) or "none"
            raise ValueError(f"operator '{name}': say which {kind} port (it has: {have})")
        return 0
    if port not in ports:
        have = ", ".join(ports) or "none"
        raise ValueError(f"operator '{name}' has no {kind} port '{port}' (it has: {have})")
    return ports.index(port)


def _check_acyclic(ops, edges) -> None:
    succ: dict[str, list[str]] = {n: [] for n in ops}
    indeg = {n: 0 for n in ops}
    for s, _, d, _ in edges:
        succ[s].append(d)
        indeg[d] += 1
    ready = [n for n, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    if seen != len(ops):
        # Every operator left has a predecessor that is left too: walking predecessors
        # must revisit one, and that one lies on a cycle.
        left = {n for n, k in indeg.items() if k > 0}
        pred = {d: s for s, _, d, _ in edges if s in left and d in left}
        n = min(left)
        visited = []
        while n not in visited:
            visited.append(n)
            n = pred[n]
        cycle = visited[visited.index(n):][::-1]
        raise ValueError(f"plan has a cycle through operator '{n}': {' -> '.join(cycle + [cycle[0]])}")
