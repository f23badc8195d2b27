"""The ``ordered`` policy: ordered stream processing on many workers (Prasaad, Ramalingam
& Rajan, *Scaling Ordered Stream Processing on Shared-Memory Multicores*; spec 000).

    Scheduler(policy="ordered", heuristic="ct")     # or "lp", "et", "qst"

A request is a linear chain source -> o_1 -> ... -> o_n (the last one the egress sink;
spec A8: joins and unions are refused at submit with a clear error). Its egress is
identical to a single-threaded run's (Def 5.1), whatever the workers, heuristic or
timing, while several workers run a stateless operator at once (up to its declared
``max_parallelism``), a partitioned one on up to p buckets at once (``PartitionedOperator``,
hybrid queue), and a stateful one on one worker. The per-operator machinery (worklists,
serials, credits, reorder buffers, hybrid queues) is ``bobox_sched.policies.ordered.stage``;
this module is the *central scheduler* [L323]: every worker asks it for work and gets

* a **drain task** (a reorder buffer whose receiver made room, spec A5), first; else
* the **ingress**: a chain's source, when it asked to run and the first operator's
  worklist has room (the input stream arrives as fast as the pipeline takes it; the
  heuristics schedule o_1..o_n); else
* an **allotment** (operator, quota): among the *schedulable* operators (w_i < M_i, a
  non-empty worklist, and a free credit) the one the heuristic picks
  (``ordered_heuristics``), with quota = max(1, floor(time_slice / c_unit)) units,
  c_unit = c_i x rows per unit (spec A6); the worker returns early, without blocking,
  when the worklist empties or credits run out.

Statistics [L105]: each allotment reports its time, units, input and output rows when
the worker asks again; c_i (seconds per row), s_i (rows out per row in) and rows per
unit are EWMAs with weight ``alpha`` (our choice: the paper states no smoothing).
The time of every decision is measured and reported (``stats()["policy_detail"]``:
``decision_us_mean``/``max``), to be kept far below ``time_slice``.

Protocol (who touches what, when):

* ``_lock`` (one per scheduler) guards ``chains``, ``idle``, every stage's ``w`` and
  statistics, and the CT window. It is taken once per *decision* (one allotment of many
  units; drains and per-unit paths never take it) and never while a reorder buffer's
  exit section is held: a decision only reads worklist sizes and credit counts (one
  atomic read each), so no lock order exists between them.
* w_i: incremented by the decision that allots, decremented by the report of that
  allotment (both under ``_lock``), so w_i <= M_i at every decision and the number of
  workers inside an operator never exceeds its declaration.
* Sleeping: a worker that finds nothing adds itself to ``idle`` under ``_lock``, then
  looks once more without the lock for work (a drain, a schedulable operator); anyone
  who makes work (an enqueue, a credit given back, a drain request, a source asking to
  run) first publishes it, then reads ``idle`` and wakes one worker (``wake_one``: one
  atomic ``list.pop``, then a release of that worker's ``park``). Either the sleeper's
  look sees the work or the maker sees the sleeper, so no wake-up is lost: a
  store-then-load handshake on each side, fenced with ``core.sync.fence()`` between
  the store and the load (a no-op under the GIL, whose one order of bytecodes already
  makes the two steps sequentially consistent; sync's module doc gives the argument for
  a free-threaded build). Every entry of ``idle`` leaves it
  exactly once, by a waker's pop (then ``park`` is released once) or by the worker's
  own ``remove`` under ``_lock`` (then nothing is released); a worker that finds itself
  popped while it meant to leave waits for the release that is on its way. Free-threaded
  builds keep ``list.pop``/``append``/``remove`` atomic (per-object locks).
  A worker whose allotment found nothing (a race with another worker) skips that
  operator in its next decision and then naps at most ``NAP_S`` instead of sleeping.
* ``drains`` is a deque of stages: any thread appends, workers pop.

NUMA (the paper's future work, spec A7): with ``numa_tiebreak=True`` equal priorities
go to the operator whose oldest unit's packet is on the asking worker's node, and a
wake-up for new work prefers an idle worker on the node of the packet. One reorder
buffer per operator, on every node.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from bobox_sched.core.errors import BoboxError
from bobox_sched.core.operator import StreamOperator
from bobox_sched.control import model as _model
from bobox_sched.core.sync import FENCED, fence
from bobox_sched.policies.ordered.hybrid import SCHEMES
from bobox_sched.policies.ordered.stage import SOURCE, OrderedContext, StampedMarker, build_chain
from bobox_sched.policies.ordered.partitioned import PartitionedOperator, ROW_ORDERS
from bobox_sched.policies.ordered.reorder import MODES
from bobox_sched.core.worker import Worker
from bobox_sched.policies.base import Policy
from bobox_sched.policies.ordered.heuristics import HEURISTICS, OpView, choose, qst_thresholds

# Time slice s of one allotment [L327]. 2 ms: a decision costs tens of microseconds in
# Python (measured: ``decision_us_mean`` in the stats, ~15-40 us on the 2-core
# development VM), so a slice of 2 ms keeps the scheduler below ~2% of a worker's time,
# while a worker still comes back often enough to follow the pipeline (the paper's
# trade-off: larger s, less contention, slower reaction).
DEFAULT_TIME_SLICE = 0.002
# CT window w [L361]: 25 time slices (50 ms). Long enough that every operator of a
# short chain is allotted several times per window (the "period" the paper asks for),
# short enough to follow changes within a fraction of a second.
DEFAULT_WINDOW_SLICES = 25
# QST capacity C (Eq 1): in rows. The paper leaves it open; 4 packets of 4096 rows per
# worker is the order of what the worklists hold.
DEFAULT_QST_ROWS_PER_WORKER = 4 * 4096
# EWMA weight of a new allotment's statistics.
DEFAULT_ALPHA = 0.25
# Reorder window (spec A4: capacity >= workers x quota), in units (packets, or bucket
# slices). It is also how far the fastest worker may run ahead of the oldest unit still
# in work: a larger window adds reorder latency (Fig 10) and holds more outputs.
DEFAULT_CAPACITY_PER_WORKER = 16
MIN_CAPACITY = 32
# A source needs no window (one runner, units in order); 4 units ahead is enough to
# keep the ingress fed.
SOURCE_CAPACITY = 4
# Worklist bound in units (packets; slices x p for a partitioned operator).
WORKLIST_PER_WORKER = 4
# Nap of a worker whose last allotment found nothing to take (a race), before it looks
# again; it is also woken by any new work. 1 ms: the scale of one allotment.
NAP_S = 0.001

OPTIONS = {
    "heuristic": "ct",
    "reorder": "nonblocking",
    "scheme": "hybrid",
    "row_order": "exact",
    "capacity": None,
    "worklist": None,
    "time_slice": DEFAULT_TIME_SLICE,
    "window": None,
    "qst_capacity": None,
    "numa_tiebreak": False,
    "ct_cumulative": "literal",
    "window_full": "credits",
    "alpha": DEFAULT_ALPHA,
}


class _NodeRef:
    """What a worker needs of its node (``Worker.node``)."""

    def __init__(self, os_index: int, cpus):
        self.os_index = os_index
        self.cpus = cpus


class Allotment:
    """Task: run up to `quota` units of `stage` (the worker loop reads ``req``)."""

    __slots__ = ("stage", "quota", "req", "name")

    def __init__(self, stage, quota: int):
        self.stage = stage
        self.quota = quota
        self.req = stage.req
        self.name = stage.name


class DrainTask:
    """Task: drain `stage`'s reorder buffer (its receiver made room)."""

    __slots__ = ("stage", "req", "name")

    def __init__(self, stage):
        self.stage = stage
        self.req = stage.req
        self.name = stage.name


class _Chain:
    __slots__ = ("request", "stages", "seq")

    def __init__(self, request, stages, seq):
        self.request = request
        self.stages = stages
        self.seq = seq


def check_options(opts: dict) -> dict:
    """Validated options (BoboxError naming the bad one)."""
    out = dict(OPTIONS)
    unknown = set(opts) - set(OPTIONS)
    if unknown:
        raise BoboxError(f"policy 'ordered' has no option {sorted(unknown)[0]!r} (options: {', '.join(OPTIONS)})")
    out.update({k: v for k, v in opts.items() if v is not None or k in ("capacity", "worklist", "window",
                                                                        "qst_capacity")})
    choices = {"heuristic": HEURISTICS, "reorder": MODES, "scheme": SCHEMES, "row_order": ROW_ORDERS,
               "ct_cumulative": ("literal", "inputs"), "window_full": ("credits", "spin")}
    for k, allowed in choices.items():
        if out[k] not in allowed:
            raise BoboxError(f"{k} must be one of {', '.join(allowed)}, got {out[k]!r}")
    for k in ("capacity", "worklist"):
        v = out[k]
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise BoboxError(f"{k} must be a positive integer, got {v!r}")
    for k in ("time_slice", "window", "qst_capacity"):
        v = out[k]
        if v is not None and not (isinstance(v, (int, float)) and v > 0):
            raise BoboxError(f"{k} must be a positive number, got {v!r}")
    if not (isinstance(out["alpha"], (int, float)) and 0 < out["alpha"] <= 1):
        raise BoboxError(f"alpha must be in (0, 1], got {out['alpha']!r}")
    out["numa_tiebreak"] = bool(out["numa_tiebreak"])
    return out


def chain_order(ops: dict, edges: list) -> list:
    """The operator names of a linear chain, source first; ValueError otherwise (A8)."""
    succ: dict = {}
    indeg = {n: 0 for n in ops}
    for s, _, d, _ in edges:
        succ.setdefault(s, []).append(d)
        indeg[d] += 1
    for name, op in ops.items():
        if len(op.inputs) > 1 or len(op.outputs) > 1:
            raise ValueError(f"ordered policy: operator '{name}' has {len(op.inputs)} inputs and {len(op.outputs)} "
                             "outputs; ordered execution runs linear chains only (no joins, unions or splits)")
    sources = [n for n, k in indeg.items() if k == 0]
    if len(sources) != 1:
        raise ValueError(f"ordered policy: a plan must be one linear chain with one source, got {len(sources)} "
                         f"sources ({', '.join(sorted(sources))})")
    order = [sources[0]]
    while succ.get(order[-1]):
        order.append(succ[order[-1]][0])
    if len(order) != len(ops):
        raise ValueError("ordered policy: the plan is not one linear chain")
    return order


class OrderedPolicy(Policy):
    name = "ordered"
    options = tuple(OPTIONS)
    runtime_tasks = False  # workers run the chain's stages only (base.Policy)

    def __init__(self, scheduler, threads_per_node, balance_interval=None, pin=True, **options):
        super().__init__(scheduler, threads_per_node)
        self.opts = check_options(options)
        o = self.opts
        self.heuristic = o["heuristic"]
        self.time_slice = float(o["time_slice"])
        self.window = float(o["window"]) if o["window"] else DEFAULT_WINDOW_SLICES * self.time_slice
        self.numa = o["numa_tiebreak"]
        self.alpha = float(o["alpha"])
        self.pin = pin
        self.run_task = self._run_task
        self._lock = threading.Lock()
        self._tls = threading.local()
        self.idle: list = []
        self.chains: list = []
        self.drains: deque = deque()
        self.workers: list = []
        self._seq = 0
        # id(source operator) -> its Stage, while its request lives: the policy's record
        # of the operator, kept here rather than on the user's object (under _lock).
        self._source_stages: dict = {}
        self._win_start = time.perf_counter()
        self.decisions = 0
        self.decision_ns = 0
        self.decision_ns_max = 0
        self.allotments_by_heuristic = 0
        self.drain_tasks = 0
        self.finished_chains: deque = deque(maxlen=64)  # (request id, [stage stats]) of ended requests
        self.e2e_ns: dict = {}  # request id -> end-to-end latencies of its markers

    # -- workers ---------------------------------------------------------------------------
    def create_workers(self) -> list:
        workers = []
        for node in self.topology.cpu_nodes:
            k = self.threads_per_node or len(node.cpus)
            ref = _NodeRef(node.os_index, node.cpus)
            for _ in range(k):
                w = Worker(self.scheduler, len(workers), ref, node.cpus if self.pin else None)
                w.ctx = OrderedContext(w, self.scheduler)
                w.ord_report = None
                w.ord_skip = None
                workers.append(w)
        self.workers = workers
        n = len(workers)
        o = self.opts
        self.capacity = o["capacity"] or max(MIN_CAPACITY, DEFAULT_CAPACITY_PER_WORKER * n)
        self.worklist = o["worklist"] or max(self.scheduler.buffer_packets, WORKLIST_PER_WORKER * n)
        self.qst_capacity = float(o["qst_capacity"] or DEFAULT_QST_ROWS_PER_WORKER * n)
        return workers

    # -- requests --------------------------------------------------------------------------
    def bucket_parallelism(self) -> int:
        """Every worker may run a bucket of one partitioned operator (w <= M)."""
        return len(self.workers)

    def validate_plan(self, ops: dict, edges: list) -> None:
        """Refuse (ValueError) what ordered execution cannot run, before the request
        exists: not a linear chain, an operator that is not a StreamOperator, a
        partitioned operator without per-bucket state."""
        order = chain_order(ops, edges)
        for pos, name in enumerate(order):
            op = ops[name]
            if pos == 0:
                continue
            if not isinstance(op, StreamOperator):
                raise ValueError(f"ordered policy: operator '{name}' ({type(op).__name__}) must be a StreamOperator "
                                 "(on_packet per unit)")
            m = _model.model_of(op)
            if m.max_parallelism > 1 and isinstance(m.state, _model.Partitioned):
                if not isinstance(op, PartitionedOperator):
                    raise ValueError(f"ordered policy: operator '{name}' declares Partitioned state with "
                                     "max_parallelism > 1 but is not a PartitionedOperator (state per bucket): "
                                     "subclass bobox_sched.PartitionedOperator or declare max_parallelism=1")
                if m.punct_in[op.inputs[0]] == _model.EXPECTING:
                    raise ValueError(f"ordered policy: partitioned operator '{name}' cannot declare "
                                     "punct_in='expecting' (its buckets run on many workers)")
                # p ("auto" included) and bad partitions/bounds: checked by submit just before

    def place(self, request, node=None) -> None:
        request.nodes = []
        ops = request.ops
        # the operators' tasks in chain order: follow dst from the source
        src = request.sources[0]
        order = [src]
        while order[-1].outputs:
            order.append(order[-1].dst[0][0])
        opts = dict(self.opts)
        opts.update(capacity=self.capacity, worklist=self.worklist, source_capacity=SOURCE_CAPACITY)
        stages = build_chain(self, order, len(self.workers), opts)
        request.e2e_ns = []
        with self._lock:
            if stages[0].kind == SOURCE:
                self._source_stages[id(src)] = stages[0]
            self._seq += 1
            if request.state is request.ACTIVE:
                self.chains.append(_Chain(request, stages, self._seq))
        assert len(ops) == len(stages)

    def request_done(self, request) -> None:
        with self._lock:
            for src in request.sources:
                self._source_stages.pop(id(src), None)
            for ch in self.chains:
                if ch.request is request:
                    self.chains.remove(ch)
                    self.finished_chains.append((request.id, [s.stats() for s in ch.stages]))
                    break
        self._wake_all_idle()

    def chain_stats(self, request_id: int) -> list | None:
        """Per-operator statistics of a request (ended or running)."""
        for rid, st in reversed(self.finished_chains):
            if rid == request_id:
                return st
        with self._lock:
            for ch in self.chains:
                if ch.request.id == request_id:
                    return [s.stats() for s in ch.stages]
        return None

    def record_marker(self, request, marker) -> None:
        """A latency marker reached the egress: processing latency (from the first
        operator's start, ``handle.stats["latency"]``) and end-to-end latency."""
        request.record_marker(marker)
        if isinstance(marker, StampedMarker):
            request.e2e_ns.append(time.perf_counter_ns() - marker.t_in)

    # -- tasks -----------------------------------------------------------------------------
    def push_immediate(self, worker, task) -> None:
        self.push_deferred(task.req, task, worker)

    def push_deferred(self, request, task, worker) -> None:
        st = self._source_stages.get(id(task))
        if st is None:
            return  # not a source, or its request ended
        st.wants = True
        if FENCED:
            fence()  # publish, then look at idle (module doc: sleeping)
        if self.idle:
            self.wake_one(st)

    def push_drain(self, stage) -> None:
        self.drains.append(stage)
        if FENCED:
            fence()
        if self.idle:
            self.wake_one(stage)

    def stage_finished(self, stage) -> None:
        if FENCED:
            fence()
        if self.idle:
            self.wake_one(None)

    def current_ctx(self):
        return self._tls.ctx

    # -- the central decision --------------------------------------------------------------
    def _apply_report(self, w) -> None:
        rep = w.ord_report
        w.ord_report = None
        stage, dt, units, rin, rout, cpu = rep
        stage.w -= 1
        stage.report(dt, units, rin, rout, self.alpha, cpu)

    def decide(self, w):
        """(stage, quota) for worker `w`, or None (under ``_lock``)."""
        now = time.perf_counter()
        if now - self._win_start >= self.window:
            self._win_start = now
            for ch in self.chains:
                for st in ch.stages:
                    st.tw = 0.0
        skip = w.ord_skip
        w.ord_skip = None
        for ch in self.chains:  # the ingress first (module doc)
            src = ch.stages[0]
            if src is not skip and src.schedulable():
                return src, self._source_quota(src)
        views = []
        known = [st.c for ch in self.chains for st in ch.stages[1:] if st.c]
        c_default = (sum(known) / len(known)) if known else 1e-6
        literal = self.opts["ct_cumulative"] == "literal"
        heur = self.heuristic
        node = w.node_id
        for age, ch in enumerate(self.chains):
            ops = ch.stages[1:]
            cs_list = []
            cs = 1.0
            for st in ops:
                s = st.sel if st.sel is not None else 1.0
                cs_list.append(max(cs * s if literal else cs, 1e-12))
                cs *= s
            thresholds = qst_thresholds(cs_list, self.qst_capacity) if heur == "qst" else None
            for k, st in enumerate(ops):
                if st is skip or not st.schedulable():
                    continue
                rpu = st.rpu or 1.0
                v = OpView(pos=st.pos, I=st.size() * rpu, c=st.c or c_default, w=st.w, M=st.M, cs=cs_list[k],
                           Tw=st.tw, age=age, ref=st)
                if thresholds is not None:
                    d = st.down
                    if d is not None and d.down is not None:  # the egress sink's queue is the egress
                        v.out_rows = d.size() * (d.rpu or 1.0)
                        v.T = thresholds[k]
                if self.numa and node is not None:
                    v.local = st.head_node() == node
                views.append(v)
        v = choose(heur, views, self.time_slice, self.numa)
        if v is None:
            return None
        st = v.ref
        unit_s = v.c * (st.rpu or 1.0)
        quota = max(1, int(self.time_slice / unit_s)) if unit_s > 0 else 1
        return st, quota

    def _source_quota(self, src) -> int:
        if src.units:
            unit_s = src.busy_ns / 1e9 / src.units
            if unit_s > 0:
                return max(1, int(self.time_slice / unit_s))
        return 1

    def next_task(self, w):
        clock = time.perf_counter_ns
        while True:
            drains = self.drains
            while drains:
                try:
                    st = drains.popleft()
                except IndexError:
                    break
                if st.req.state is st.req.ACTIVE and not st.finished:
                    if w.ord_report is not None:
                        with self._lock:
                            self._apply_report(w)
                    w.last_step = 2
                    self.drain_tasks += 1
                    return DrainTask(st)
            napping = False
            with self._lock:
                if w.ord_report is not None:
                    napping = w.ord_report[2] == 0
                    self._apply_report(w)
                t0 = clock()
                got = self.decide(w)
                dt = clock() - t0
                self.decisions += 1
                self.decision_ns += dt
                if dt > self.decision_ns_max:
                    self.decision_ns_max = dt
                if got is not None:
                    st, quota = got
                    st.w += 1
                    w.last_step = 1
                    return Allotment(st, quota)
                if self.scheduler._stopping and not self.chains:
                    return None
                self.idle.append(w)
            # Look once more without the lock (protocol in the module doc).
            if FENCED:
                fence()
            if self._work_visible():
                with self._lock:
                    try:
                        self.idle.remove(w)
                        continue
                    except ValueError:
                        pass  # a waker took us out: its release is on its way
            w.steps[5] += 1
            w.sleeps += 1
            if napping:
                if not w.park.acquire(timeout=NAP_S):
                    with self._lock:
                        try:
                            self.idle.remove(w)
                            continue
                        except ValueError:
                            pass
                    w.park.acquire()
            else:
                w.park.acquire()
            w.wakeups += 1

    def _work_visible(self) -> bool:
        if self.drains:
            return True
        for ch in list(self.chains):
            for st in ch.stages:
                if st.schedulable():
                    return True
        return False

    def wake_one(self, stage=None) -> None:
        """Wake one sleeping worker. Called on the per-unit path (an enqueue, a credit
        given back), often by a drainer inside its exit section: the common case takes
        no lock, one atomic ``list.pop`` takes a sleeper out of ``idle`` (each entry is
        removed exactly once: by a waker's pop, which then releases its ``park``, or by the
        worker itself under ``_lock``). The NUMA preference scans the list, so it takes
        ``_lock`` (never held while waiting for anything)."""
        if self.numa and stage is not None:
            node = stage.head_node()
            with self._lock:
                idle = self.idle
                w = None
                for k in range(len(idle) - 1, -1, -1):
                    if idle[k].node_id == node:
                        w = idle.pop(k)
                        break
                if w is None:
                    if not idle:
                        return
                    w = idle.pop()
            w.park.release()
            return
        try:
            w = self.idle.pop()
        except IndexError:
            return
        w.park.release()

    def _wake_all_idle(self) -> None:
        idle = self.idle
        while True:
            try:
                w = idle.pop()
            except IndexError:
                return
            w.park.release()

    def wake_all(self) -> None:
        self._wake_all_idle()

    # -- running a task --------------------------------------------------------------------
    def _run_task(self, worker, task) -> None:
        ctx = worker.ctx
        self._tls.ctx = ctx
        st = task.stage
        req = st.req
        if task.__class__ is DrainTask:
            if req.state is req.ACTIVE:
                try:
                    st.drain()
                except BaseException as e:  # noqa: BLE001 - the request fails, the worker carries on
                    req.fail(e, st.task)
            return
        ctx.rin = 0
        ctx.rout = 0
        c0 = time.thread_time_ns()  # this thread's CPU time: busy minus it is time off a CPU
        t0 = time.perf_counter_ns()
        n = 0
        try:
            if req.state is req.ACTIVE:
                n = st.consume(ctx, task.quota)
        except BaseException as e:  # noqa: BLE001
            req.fail(e, st.task)
        finally:
            ctx.task = None
            ctx._out = None
        worker.ord_report = (st, time.perf_counter_ns() - t0, n, ctx.rin, ctx.rout, time.thread_time_ns() - c0)
        if n == 0:
            worker.ord_skip = st

    # -- metrics ---------------------------------------------------------------------------
    def stats(self) -> dict:
        with self._lock:
            stages = [s.stats() for ch in self.chains for s in ch.stages]
            d = self.decisions
            return {
                "heuristic": self.heuristic, "reorder": self.opts["reorder"], "scheme": self.opts["scheme"],
                "row_order": self.opts["row_order"], "time_slice_s": self.time_slice, "window_s": self.window,
                "capacity": self.capacity, "worklist": self.worklist, "numa_tiebreak": self.numa,
                "decisions": d, "decision_us_mean": (self.decision_ns / d / 1e3) if d else None,
                "decision_us_max": self.decision_ns_max / 1e3, "drain_tasks": self.drain_tasks,
                "stages": stages,
            }


__all__ = ["Allotment", "DrainTask", "OPTIONS", "OrderedPolicy", "chain_order", "check_options"]
