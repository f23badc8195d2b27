"""Operators for the ordered-policy tests: instrumented stateless, partitioned and
stateful operators (they record any moment with more threads inside than declared, or
two threads in one bucket), a feed of prepared packets and punctuations, a recording
sink, and the sequential reference."""

from __future__ import annotations

import threading
import time

import numpy as np

from bobox_sched import Plan, Scheduler, Source, StreamOperator
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.policies.ordered.partitioned import PartitionedOperator
from bobox_sched.control.punct import Punctuation, Window


class Guard:
    """Counts threads inside an operator and inside each bucket; records violations."""

    def __init__(self, limit: int):
        self.limit = limit
        self.lock = threading.Lock()
        self.inside = 0
        self.buckets: dict = {}
        self.violations: list = []
        self.peak = 0

    def enter(self, bucket=None):
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            if self.inside > self.limit:
                self.violations.append(f"{self.inside} threads inside (declared {self.limit})")
            if bucket is not None:
                n = self.buckets.get(bucket, 0) + 1
                self.buckets[bucket] = n
                if n > 1:
                    self.violations.append(f"{n} threads in bucket {bucket}")

    def leave(self, bucket=None):
        with self.lock:
            self.inside -= 1
            if bucket is not None:
                self.buckets[bucket] -= 1


GUARDS: dict = {}  # (run id, operator name) -> Guard; tests read it after a run


def _guard(op, limit):
    key = (op.run_id, op.tag)
    g = GUARDS.get(key)
    if g is None:
        g = GUARDS.setdefault(key, Guard(limit))
    return g


class Feed(Source):
    """Emits prepared items: dicts of columns become packets (copied, so runs share
    nothing), punctuations are sent."""

    def __init__(self, items):
        self.items = items
        self.i = 0

    def process(self, ctx):
        if self.i >= len(self.items):
            ctx.close()
            ctx.finish()
            return
        it = self.items[self.i]
        self.i += 1
        if isinstance(it, Punctuation):
            ctx.punctuate(it)
        else:
            ctx.send("out", Packet({k: np.array(v, copy=True) for k, v in it.items()}))
        ctx.reschedule()


class SL(StreamOperator):
    """Stateless: map (x -> 3x + 1), filter (keep x % mod == rem; may drop a whole packet),
    or flat-map (each row -> `fan` rows x + j)."""

    state = M.STATELESS

    def __init__(self, mode="map", mod=3, rem=0, fan=3, par=64, run_id=0, tag="sl", shake=0):
        self.mode, self.mod, self.rem, self.fan = mode, mod, rem, fan
        self.max_parallelism = par
        self.run_id, self.tag, self.shake = run_id, tag, shake
        self.calls = 0

    def on_packet(self, ctx, port, pkt):
        g = _guard(self, self.max_parallelism)
        g.enter()
        try:
            if self.shake and hash((id(pkt), self.tag)) % self.shake == 0:
                time.sleep(0)
            k, x = pkt["k"], pkt["x"]
            if self.mode == "map":
                out = Packet({"k": k.copy(), "x": x * 3 + 1})
            elif self.mode == "filter":
                keep = (x % self.mod) == self.rem
                out = Packet({"k": k[keep], "x": x[keep]})
            else:
                out = Packet({"k": np.repeat(k, self.fan), "x": (np.repeat(x, self.fan) + np.tile(
                    np.arange(self.fan), len(x)))})
            ctx.send("out", out)
        finally:
            g.leave()


class PS(PartitionedOperator):
    """Partitioned by k: a running sum per key; emits (k, running sum) for every row whose
    running sum is not divisible by `skip` (so 0 or 1 rows per input row), plus, with
    `dup`, a second row for odd x (selectivity up to 2)."""

    state = M.Partitioned("k")

    def __init__(self, partitions=16, partitioner="hash", key_range=None, skip=0, dup=False, par=1 << 20,
                 row_order=None, run_id=0, tag="ps", shake=0):
        self.partitions = partitions
        self.partitioner = partitioner
        self.key_range = key_range
        self.skip, self.dup = skip, dup
        self.max_parallelism = par
        self.row_order = row_order
        self.run_id, self.tag, self.shake = run_id, tag, shake

    def new_state(self):
        return {}

    def on_slice(self, ctx, rows, state, emit):
        b = int(self.bucket_ids(Packet({"k": rows["k"][:1]}))[0]) if rows.nrows else None
        p = self._partitioning()[1]
        g = _guard(self, min(self.max_parallelism, p))
        g.p = p  # the bucket count this run used (partitions="auto": the runtime's)
        g.enter(b)
        try:
            if self.shake and rows.nrows % self.shake == 0:
                time.sleep(0)
            k, x = rows["k"], rows["x"]
            outk, outs, parent = [], [], []
            for i in range(len(k)):
                kk = int(k[i])
                s = state.get(kk, 0) + int(x[i])
                state[kk] = s
                if not self.skip or s % self.skip:
                    outk.append(kk)
                    outs.append(s)
                    parent.append(i)
                if self.dup and x[i] % 2:
                    outk.append(kk)
                    outs.append(-s)
                    parent.append(i)
            emit(Packet({"k": np.array(outk, np.int64), "x": np.array(outs, np.int64)}),
                 np.array(parent, np.int64))
        finally:
            g.leave(b)

    def on_end(self, ctx):
        final = {}
        for _, st in self.bucket_states():
            final.update(st)
        ctx.set_result(dict(sorted(final.items())))


class SF(StreamOperator):
    """Stateful (one thread): a running total over every row, emitted per row."""

    def __init__(self, run_id=0, tag="sf"):
        self.total = 0
        self.run_id, self.tag = run_id, tag

    def on_packet(self, ctx, port, pkt):
        g = _guard(self, 1)
        g.enter()
        try:
            x = pkt["x"]
            tot = self.total + np.cumsum(x)
            if len(x):
                self.total = int(tot[-1])
            ctx.send("out", Packet({"k": pkt["k"].copy(), "x": tot.astype(np.int64)}))
        finally:
            g.leave()

    def on_end(self, ctx):
        ctx.set_result({"total": self.total})


class Record(StreamOperator):
    """The egress: every row's columns, the punctuations it sees in order, end of stream."""

    outputs = ()
    punct_in = M.EXPECTING

    def __init__(self):
        self.events = []
        self.k = []
        self.x = []

    def on_packet(self, ctx, port, pkt):
        self.k.append(np.array(pkt["k"], np.int64))
        self.x.append(np.array(pkt["x"], np.int64))
        self.events.append(("rows", int(sum(len(a) for a in self.k))))

    def on_punct(self, ctx, port, p):
        self.events.append(("punct", repr(p), int(sum(len(a) for a in self.k))))

    def on_end(self, ctx):
        k = np.concatenate(self.k) if self.k else np.zeros(0, np.int64)
        x = np.concatenate(self.x) if self.x else np.zeros(0, np.int64)
        puncts = [(e[1], e[2]) for e in self.events if e[0] == "punct"]  # with the rows before it
        ctx.set_result({"k": k.tobytes(), "x": x.tobytes(), "rows": len(k), "puncts": puncts})


def make_items(n_packets, rows, keys, rng, zipf=1.3, empty_every=0, window_every=0):
    items = []
    for i in range(n_packets):
        r = 0 if empty_every and i % empty_every == empty_every - 1 else int(rng.integers(1, rows + 1))
        k = np.minimum(rng.zipf(zipf, r), keys) - 1 if zipf else rng.integers(0, keys, r)
        items.append({"k": k.astype(np.int64), "x": rng.integers(-50, 100, r).astype(np.int64)})
        if window_every and i % window_every == window_every - 1:
            items.append(Window(i))
    return items


def build(chain, items, run_id=0, row_order=None, ps_partitions=16):
    """A plan: Feed -> the chain's operators -> Record. `chain` is a list of specs:
    ("sl", mode, kwargs) / ("ps", kwargs) / ("sf",)."""
    plan = Plan("ordered-test")
    plan.add("src", Feed, items)
    names = ["src"]
    for j, spec in enumerate(chain):
        name = f"o{j}"
        kind = spec[0]
        if kind == "sl":
            plan.add(name, SL, mode=spec[1], run_id=run_id, tag=name, **(spec[2] if len(spec) > 2 else {}))
        elif kind == "ps":
            kw = dict(spec[1]) if len(spec) > 1 else {}
            kw.setdefault("partitions", ps_partitions)
            plan.add(name, PS, run_id=run_id, tag=name, row_order=row_order, **kw)
        else:
            plan.add(name, SF, run_id=run_id, tag=name)
        names.append(name)
    plan.add("sink", Record)
    names.append("sink")
    plan.chain(*names)
    return plan


def sequential(chain, items, row_order="exact", ps_partitions=16):
    """The sequential reference: one worker of the simple policy, one operator at a time."""
    with Scheduler(policy="simple", threads_per_node=1, pin=False) as s:
        return s.submit(build(chain, items, run_id=-1, row_order=row_order, ps_partitions=ps_partitions)).result(120)
