"""What a simulation runs: real plans of operators that do almost nothing but say what
their work would cost.

Each operator carries a :class:`Cost`: nanoseconds with the GIL held per task and per
row (the Python around a kernel: scheduling, dispatch, bookkeeping), nanoseconds per
row with it released (the nogil kernel's work, paid at the local rate; a remote packet
costs ``numa`` times more, ``engine.py``) and the bytes per row that released part reads
(from the packet's home node: with a bandwidth per node, ``Costs.node_bandwidth_gbs``,
the tasks reading from one node at once share it). The operators themselves run for
real on the simulator's virtual workers (the runtime's ``run_task``: recv, send,
delivery, back-pressure, end of stream), moving one-column packets of the real row counts through
the real ports and packet pools, so the policies see the same tasks, lists and wake-ups
as with real work; only the time is virtual.

:func:`chain_mix` makes the synthetic mix (``bobox simulate``'s default work): chains of
a source and ``length`` operators, the per-row costs drawn per request from a seeded
generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bobox_sched.core.operator import Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.core.plan import Plan


@dataclass(frozen=True)
class Cost:
    """What one task of an operator costs (module doc), in nanoseconds, and the bytes
    per row its released part reads (``bytes_row``; 0: it reads none, its time is all
    compute)."""

    held_task_ns: float = 2_000.0
    held_row_ns: float = 0.0
    released_row_ns: float = 50.0
    bytes_row: float = 0.0

    def of(self, rows: int) -> tuple[float, float]:
        """(GIL-held ns, GIL-released ns at the local rate) of a task over `rows` rows."""
        return self.held_task_ns + self.held_row_ns * rows, self.released_row_ns * rows


class SimSource(Source):
    """`packets` packets of `rows` rows each."""

    def __init__(self, packets: int, rows: int, cost: Cost):
        self.packets, self.rows, self.cost, self.sent = packets, rows, cost, 0

    def sim_rows(self, task) -> int:
        return 0 if self.sent >= self.packets else self.rows

    def next_packet(self, ctx):
        if self.sent >= self.packets:
            return None
        self.sent += 1
        p = ctx.new_packet({"x": np.int64}, self.rows)
        p["x"][:1] = self.sent  # one store: the rows are there, their values do not matter
        return p


class SimOp(StreamOperator):
    """Passes each packet on (a new packet of the same rows, from the worker's pool)."""

    def __init__(self, cost: Cost):
        self.cost = cost

    def sim_rows(self, task) -> int:
        return queued_rows(task)

    def on_packet(self, ctx, port, pkt):
        out = ctx.new_packet({"x": np.int64}, pkt.nrows)
        out["x"][:1] = pkt["x"][:1]
        ctx.send("out", out)


class SimSink(StreamOperator):
    """Counts rows and packets (keeps none: memory returns to zero as it goes)."""

    outputs = ()

    def __init__(self, cost: Cost):
        self.cost, self.rows, self.packets = cost, 0, 0

    def sim_rows(self, task) -> int:
        return queued_rows(task)

    def on_packet(self, ctx, port, pkt):
        self.rows += pkt.nrows
        self.packets += 1

    def on_end(self, ctx):
        ctx.set_result({"rows": self.rows, "packets": self.packets})


def queued_rows(task) -> int:
    """Rows of the packets waiting in `task`'s input ports now."""
    n = 0
    for q in task.inq:
        for item in q:
            if item.__class__ is Packet:
                n += item.nrows
    return n


def home_node(task):
    """The node whose pool holds the oldest packet waiting for `task` (None: none waits)."""
    for q in task.inq:
        for item in q:
            if item.__class__ is Packet:
                return item.node
    return None


def chain_mix(requests: int, length: int = 4, packets: int = 64, rows: int = 4096, seed: int = 0,
              gil_share: float = 0.1, row_ns: float = 50.0, bytes_row: float = 8.0) -> list[Plan]:
    """`requests` chain plans (source, `length` operators, sink). Each operator's
    released per-row cost is `row_ns` times a factor drawn from [0.5, 2) per request and
    operator; its GIL-held time per task makes `gil_share` of a task of `rows` rows at
    the mean rate. Every operator but the source reads `bytes_row` bytes per row
    (default 8: the one int64 column the packets carry); the source reads no packet
    (a real trace counts it 0 bytes too)."""
    rng = np.random.default_rng(seed)
    plans = []
    for r in range(requests):
        p = Plan(f"chain{r}")
        names = ["src"]

        def cost(reads=bytes_row):
            rel = row_ns * float(rng.uniform(0.5, 2.0))
            held = gil_share / max(1e-9, 1 - gil_share) * rel * rows
            return Cost(held_task_ns=held, released_row_ns=rel, bytes_row=reads)

        p.add("src", SimSource, packets, rows, cost(0.0))
        for k in range(length):
            p.add(f"op{k}", SimOp, cost())
            names.append(f"op{k}")
        p.add("sink", SimSink, cost())
        names.append("sink")
        p.chain(*names)
        plans.append(p)
    return plans


__all__ = ["Cost", "SimOp", "SimSink", "SimSource", "chain_mix", "home_node", "queued_rows"]
