"""A parallel region's channels as Spark partitions (spec 001 section 5, "Spark").

``spark_region_run(plan, degree=N)`` runs one parallel region of `plan` (its first, or
the one whose head is named) with its N channels on Spark, everything else on the
driver:

1. the plan's part *upstream* of the region runs on the driver's bobox Scheduler, into a
   sink that captures the region's input stream (packets and punctuations, in order);
2. the first splitter runs on the driver (the region's own ``splitter.Router``: seqnos
   ``base + row``, round-robin or the hash of the region key, punctuations broadcast
   with fresh seqnos, pulses every ``epoch * N`` packets) and cuts the stream into N
   channel streams, which become the N partitions of an RDD (Arrow IPC for packets,
   pickled punctuations);
3. each Spark task runs one channel -- fresh instances of the region's operators,
   wrapped as in ``fission`` (seqnos by position or ``send_derived``) -- on its
   executor's long-lived bobox Scheduler (``executor.executor_scheduler``), and
   returns the channel's output stream;
4. the driver merges the channel streams with the same ``OrderedMerger`` the runtime
   uses (the end of a partition is the end of that channel: ``back = +inf``), in
   whatever order Spark delivers the partitions, and feeds the ordered stream to the
   plan's part *downstream* of the region on its Scheduler, whose result is returned.

Bookkeeping travels in band only (seqnos in ``__seq``, control items in the streams), so
a channel may run on any executor; a failed task is simply re-run by Spark (its output
replaces nothing: the driver takes each partition's result once). Bounded streams only:
partitioned state across micro-batches would need sticky placement.

Requirements: the region is the only path between the upstream and downstream parts,
and its operators are importable on the executors (same checkout and environment).

It lives with the Spark pipeline for what it shares with it, the session (``session``)
and each executor's long-lived Scheduler (``executor``); it uses nothing of the TPC-H
stages.
"""

from __future__ import annotations

import pickle
import time
from collections import deque

import numpy as np

from bobox_sched import Plan, Source, StreamOperator
from bobox_sched.core.errors import BoboxError
from bobox_sched.core.packet import Packet
from bobox_sched.control import model as M
from bobox_sched.regions.channel import RR, SEQ_MODE
from bobox_sched.regions.fission import DEFAULT_EPOCH
from bobox_sched.regions.merger import LATTICE, ROUND_ROBIN, STRICT, UNORDERED, OrderedMerger
from bobox_sched.control.punct import Punctuation
from bobox_sched.regions.analysis import analyze
from bobox_sched.regions.splitter import Router

# ---------------------------------------------------------------------------------------
# items on the wire


def _encode(items) -> list:
    """Packets as Arrow IPC (columns, __seq included), punctuations pickled."""
    import pyarrow as pa

    out = []
    for it in items:
        if isinstance(it, Punctuation):
            out.append(("c", pickle.dumps(it)))
        else:
            batch = pa.RecordBatch.from_arrays([pa.array(np.asarray(v)) for v in it.columns.values()],
                                               names=list(it.columns))
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as w:
                w.write_batch(batch)
            out.append(("p", sink.getvalue().to_pybytes()))
    return out


def _decode(items) -> list:
    import pyarrow as pa

    out = []
    for kind, data in items:
        if kind == "c":
            out.append(pickle.loads(data))
        else:
            batch = pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()
            cols = {name: batch.column(i).to_numpy(zero_copy_only=False) for i, name in enumerate(batch.schema.names)}
            out.append(Packet(cols, batch.num_rows))
    return out


# ---------------------------------------------------------------------------------------
# operators at the cut points


class Capture(StreamOperator):
    """Sink of the upstream part: every packet and punctuation, in order."""

    outputs = ()
    punct_in = M.EXPECTING

    def __init__(self):
        self.items = []

    def on_packet(self, ctx, port, pkt):
        if pkt.nrows:
            self.items.append(Packet({k: np.array(v) for k, v in pkt.columns.items()}, pkt.nrows))

    def on_punct(self, ctx, port, p):
        self.items.append(p)

    def on_end(self, ctx):
        ctx.set_result(self.items)


class Replay(Source):
    """Source of a stream of packets and punctuations (a channel's input on an executor,
    or the merged region output on the driver)."""

    def __init__(self, items):
        self.items = deque(items)

    def process(self, ctx):
        while self.items and not ctx.blocked:
            it = self.items.popleft()
            if isinstance(it, Punctuation):
                ctx.punctuate(it)
            else:
                ctx.send("out", it)
        if self.items:
            ctx.reschedule()
            return
        ctx.close()
        ctx.finish()


# ---------------------------------------------------------------------------------------
# cutting the plan


class _Cut:
    """The plan around one region: upstream and downstream sub-plans, the region's ops."""

    def __init__(self, plan: Plan, region=None):
        rp = analyze(plan)
        if not rp.regions:
            raise BoboxError(f"plan '{plan.name}' has no parallel region")
        if region is None:
            r = rp.regions[0]
        else:
            match = [r for r in rp.regions if region in (r.index, r.head)]
            if not match:
                raise BoboxError(f"plan '{plan.name}' has no region {region!r}")
            r = match[0]
        if r.first_joint != "split" or r.last_joint not in ("merge",):
            # a shuffle chain, a parallel source or sink: runs whole on the driver's bobox
            raise BoboxError(f"region {r.index} ({r.head}) is joined by a {r.first_joint}/{r.last_joint}: Spark "
                             "channels need a region entered by a split and left by a merge")
        self.region = r
        self.ordering = r.ordering if r.ordering in LATTICE else UNORDERED
        members = set(r.ops)
        edges = plan._edges
        succ = {}
        for s, _, d, _ in edges:
            succ.setdefault(s, []).append(d)
        down = set()
        todo = [d for s, _, d, _ in edges if s == r.tail]
        while todo:
            n = todo.pop()
            if n in down:
                continue
            down.add(n)
            todo += succ.get(n, [])
        up = set(plan._specs) - members - down
        for s, _, d, _ in edges:
            if s in down and d in up:
                raise BoboxError(f"edge {s} -> {d} goes back from the region's downstream part to its upstream part")
            if s in up and d in down:
                raise BoboxError(f"edge {s} -> {d} bypasses region {r.index}: the region must be the only path")
        self.up, self.down = up, down
        self.specs = [plan._specs[o] for o in r.ops]
        self.plan = plan

    def upstream(self) -> Plan:
        p = Plan(f"{self.plan.name}-upstream")
        for name, (f, a, k) in self.plan._specs.items():
            if name in self.up:
                p.add(name, f, *a, **k)
        p.add("__capture", Capture)
        for s, sp, d, dp in self.plan._edges:
            if s in self.up and d in self.up:
                p.connect(_ref(s, sp), _ref(d, dp))
            elif s in self.up and d == self.region.head:
                p.connect(_ref(s, sp), "__capture")
        return p

    def downstream(self, items) -> Plan:
        p = Plan(f"{self.plan.name}-downstream")
        for name, (f, a, k) in self.plan._specs.items():
            if name in self.down:
                p.add(name, f, *a, **k)
        p.add("__replay", Replay, items)
        for s, sp, d, dp in self.plan._edges:
            if s in self.down and d in self.down:
                p.connect(_ref(s, sp), _ref(d, dp))
            elif s == self.region.tail and d in self.down:
                p.connect("__replay", _ref(d, dp))
        return p


def _ref(op, port):
    return op if port is None else f"{op}.{port}"


# ---------------------------------------------------------------------------------------
# the channel task (executor side)


class _Collect(StreamOperator):
    outputs = ()
    punct_in = M.EXPECTING
    control_aware = True  # pulses too: the driver's merger wants them

    def __init__(self):
        self.items = []

    def on_packet(self, ctx, port, pkt):
        if pkt.nrows:
            self.items.append(pkt)

    def on_punct(self, ctx, port, p):
        self.items.append(p)

    def on_end(self, ctx):
        ctx.set_result(_encode(self.items))


def _make_member(spec, mode, channel, degree, check):
    from bobox_sched.regions.fission import make_channel

    return make_channel(spec, mode, channel, degree, check)


def channel_plan(specs, mode: str, channel: int, degree: int, items, check: bool = True) -> Plan:
    """One channel as a bobox plan: its input stream -> fresh member instances -> a
    collector of its output stream (packets with __seq, control items)."""
    p = Plan(f"channel-{channel}")
    p.add("in", Replay, items)
    names = []
    for i, spec in enumerate(specs):
        names.append(f"m{i}")
        p.add(f"m{i}", _make_member, spec, mode, channel, degree, check)
    p.add("out", _Collect)
    p.chain("in", *names, "out")
    return p


def _channel_task(cfg: dict, parts):
    """Spark task: run every channel of this partition on the executor's Scheduler."""
    import os
    import socket

    from pyspark import TaskContext

    from experiments.spark.executor import executor_scheduler

    ctx = TaskContext.get()
    sched = executor_scheduler(cfg["policy"], cfg["threads_per_node"], None, ctx.cpus())
    specs = pickle.loads(cfg["specs"])
    host = f"{socket.gethostname()}:{os.getpid()}"
    for channel, encoded in parts:
        plan = channel_plan(specs, cfg["mode"], channel, cfg["degree"], _decode(encoded), cfg["check"])
        out = sched.submit(plan).result()
        yield channel, ctx.attemptNumber(), host, out


# ---------------------------------------------------------------------------------------
# the driver


def split_stream(items, degree: int, key, numbered: bool, pulses: bool, epoch: int = DEFAULT_EPOCH,
                 windows: bool = False) -> list:
    """The first splitter on the driver: the region's input stream cut into `degree`
    channel streams (lists of packets and control items)."""
    router = Router(degree, key, numbered, windows=windows)
    chans = [[] for _ in range(degree)]
    units = 0
    for it in items:
        if isinstance(it, Punctuation):
            p = router.control(it)
            for c in range(degree):
                chans[c].append(p)
            continue
        if not it.nrows:
            continue
        for c, part in router.route(it):
            chans[c].append(part)
        units += 1
        if pulses and units >= epoch * degree:
            units = 0
            pl = router.pulse()
            for c in range(degree):
                chans[c].append(pl)
    return chans


def spark_region_run(plan: Plan, degree: int = 2, *, region=None, ordering: str | None = None, spark=None,
                     master: str = "local[*]", scheduler=None, epoch: int = DEFAULT_EPOCH, policy: str = "bobox",
                     threads_per_node: int | None = None, check: bool = True, shuffle_arrivals=None) -> dict:
    """Run `plan` with one region's channels as Spark partitions (module doc). Returns
    ``{"result": the plan's result, "wall_s", "hosts": {channel: "host:pid"},
    "attempts": {channel: attempt}, "ordering", "region"}``. `shuffle_arrivals` (a
    ``random.Random``) feeds the channels' outputs to the merger in a random interleaving
    (per-channel order kept), as partitions arriving from executors would."""
    from bobox_sched import Scheduler

    from experiments.spark.session import spark_session

    if not isinstance(degree, int) or degree < 1:
        raise BoboxError(f"degree must be a positive integer, got {degree!r}")
    cut = _Cut(plan, region)
    r = cut.region
    strat = cut.ordering
    if ordering is not None:
        if ordering not in LATTICE or LATTICE.index(ordering) < LATTICE.index(strat):
            raise BoboxError(f"ordering {ordering!r}: region {r.index} needs at least {strat} (only up the lattice)")
        strat = ordering
    numbered = strat != ROUND_ROBIN
    pulses = strat in (STRICT, "relaxed")
    mode = SEQ_MODE if numbered else RR
    own = scheduler is None
    sched = scheduler or Scheduler(threads_per_node=threads_per_node)
    try:
        t0 = time.perf_counter()
        items = sched.submit(cut.upstream()).result()
        if isinstance(items, dict):  # other sinks upstream: take ours
            items = items["__capture"]
        chans = split_stream(items, degree, r.key, numbered, pulses, epoch, r.window_groups)
        spark = spark or spark_session(master)
        sc = spark.sparkContext
        cfg = {"specs": pickle.dumps(cut.specs), "mode": mode, "degree": degree, "check": check, "policy": policy,
               "threads_per_node": threads_per_node}
        rdd = sc.parallelize([(c, _encode(chans[c])) for c in range(degree)], degree)
        outs = rdd.mapPartitions(lambda part: _channel_task(cfg, part)).collect()
        got = {}
        hosts, attempts = {}, {}
        for c, attempt, host, enc in outs:
            if c in got:
                raise BoboxError(f"channel {c} returned twice")
            got[c] = _decode(enc)
            hosts[c], attempts[c] = host, attempt
        merger = OrderedMerger(degree, strat, check=check, name=f"spark merger of region {r.index}",
                               windows=r.window_groups)
        merged = []
        queues = {c: deque(got[c]) for c in range(degree)}
        order = list(range(degree))
        while queues:
            c = shuffle_arrivals.choice(order) if shuffle_arrivals else order[0]
            q = queues[c]
            if q:
                merger.push(c, q.popleft())
            else:
                merger.close(c)
                del queues[c]
                order.remove(c)
            merged += merger.drain()
        merged += merger.drain()
        if not merger.done:
            raise BoboxError(f"region {r.index}: the merger did not finish ({merger.queued} items left)")
        result = sched.submit(cut.downstream(merged)).result()
        return {"result": result, "wall_s": time.perf_counter() - t0, "hosts": hosts, "attempts": attempts,
                "ordering": strat, "region": list(r.ops)}
    finally:
        if own:
            sched.shutdown()


__all__ = ["Capture", "Replay", "channel_plan", "spark_region_run", "split_stream"]

