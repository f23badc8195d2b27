"""Dual-mode scheduling (TStream section IV-B, spec section 2) on the bobox runtime.

One :class:`Group` per request and ``TxnConfig.name`` coordinates the T instances
(executors) of a transactional operator. A batch goes through these steps:

1. **Compute mode.** Each instance runs ``pre_process`` and ``state_access`` on its
   packets: the operations are *registered* in the instance's own buffers, the blotters
   are stashed in the instance (``operator.py``).
2. **Barrier 1, without waiting.** An instance that takes a ``Batch`` punctuation (or
   reaches its end of stream) partitions its operations by chain pool (a nogil counting
   sort), hands the batch over (``operator._Arrival``), *arrives* (``arrive``) and
   returns: it never blocks its worker. In the paper's form it computes nothing more
   until its post-processing; with ``TxnConfig.pipeline`` it goes on with the next
   batch's packets in its second buffer, up to that batch's punctuation (``operator.py``;
   the dealer runs one batch further ahead: ``LOOKAHEAD_PIPELINED``). The last instance
   to arrive starts state-access mode (``_start_batch``).
3. **Round 0: append, then sort.** One task per pool (``Policy.push_on``: the pool's
   worker, or node) gathers the pool's operations from every instance and sorts them by
   (record, ts, seq): each record's run is its operation chain (``build_pool``). When
   no operation of the batch reads a record of another pool than its own (its source,
   its transaction's condition records; checked per instance at arrival,
   ``pool_local``: always so with one pool, or with no ``src=`` and no condition) and no
   pool is shared by stealers, no chain waits on a chain of another pool, which may not
   be built yet: the same task walks its chains right away (round 1 *fused* into round
   0), which saves a round trip through the scheduler per batch (GS, TP, OB).
   Where, in addition, no operation has a source (``src=``) and the store has no
   constraints (nothing can abort), a pool needs no chains at all: its task runs the
   pool's operations in ts order straight on the store (``direct``, kernels/direct.py:
   the serial order restricted to the pool's records; conditions then read only their
   own pool, or any pool on the one-task path, which runs every pool in one pass). GS,
   TP and OB take it, and SL on the one-task path; SL's batches that run a task per
   pool keep the chains (its transfers' conditions read across pools).
   A batch of at most ``single_task_ops`` operations runs in *one* task instead, on the
   last arrival's worker: it builds every pool and walks every chain, all its own
   (``process_pool`` with pool -1), so that cross-pool reads cost no rounds either. For
   batches that small, the per-task costs (a hand-off to another worker, each task's
   Python under the GIL) exceeded what running pools side by side saved (measured:
   the constant's comment). Only where every pool's records live on one node: with
   pools on several nodes each keeps its own task, walked on its node.
4. **Rounds.** Tasks walk the chains (``process_pool``) at operation level: an
   operation that reads another record runs once every operation of that record's chain
   below its ts was done, in the snapshot taken when the previous round ended for a chain
   of another pool, live for one of the task's own pool (which it walks first, when it
   needs it). Stealers that share a pool claim its chains (from the pool's cursor, or
   on demand when a chain they walk needs one no stealer has claimed yet) and read the
   chains another stealer claimed live. Chains that others read keep one version per
   operation. Each round runs at least the lowest pending operation (spec 3.2.5).
5. **Aborts** (spec 3.4): when no operation is pending, the smallest-ts transaction that
   violated a constraint is aborted, the chains it touched and their dependents are
   restored to just below it and re-run; repeated until no violation is left.
6. **Barrier 2 and garbage collection.** The last task to finish frees the batch's
   versions (``finish_batch``), publishes the results, and schedules every instance.
7. **Post-processing.** Each instance, on its own thread, runs ``post_process`` on its
   stashed blotters (now holding the results), then resumes taking input. The last
   one to finish opens the dealer's gate for the next batch (``posted``, ``gate``).

Protocol (who touches what, when):

* An instance's buffers and stash: only the thread running the instance. What it hands
  over at arrival (an ``_Arrival``: the batch's buffer, partitioned operations and
  stash) it no longer writes until it has read the batch's results; the batch's tasks
  read it meanwhile. ``_arrived`` (executor -> its _Arrival of the current batch) is
  written under ``_lock`` at arrival and taken by ``_finish``: no instance arrives at
  batch b+1 before it post-processed b, which needs ``done_batch`` = b, stored after.
* ``Group._lock`` guards ``arrivals`` (a Passage), ``_arrived``, ``phase``, ``batch``, ``done_batch``,
  ``open_batch``, ``_posts``, ``gate_waiters``, ``outstanding`` and the round's
  tallies. It is taken twice per instance per batch (arrival, end of its
  post-processing) and once per task per round -- never per packet or per operation.
  ``done_batch`` and ``open_batch`` are also read without it (one attribute read;
  attribute loads and stores are atomic with or without the GIL): a stale value only
  sends the reader to the locked path (``gate``) or to wait for the schedule that
  ``_finish`` does after writing it (an instance at barrier 2). A fresh value is a
  message: an instance that sees ``done_batch`` reach its batch goes on to read its
  ``_Arrival.results``, stored before. So the writer fences between the results and the
  store of ``done_batch``/``open_batch``, and the reader between its load and what it
  reads next (``core.sync.fence``: nothing under the GIL; the argument for a
  free-threaded build is in sync's module doc).
* The batch arrays (``B``) are written in round 0 by the pool tasks in disjoint ranges,
  and in rounds by the task that walks a chain; a round ends only when its last task
  took ``_lock``, and the next round's tasks are pushed after that (lock release, then
  the policy's deque append): everything a round wrote is visible to the next. Inside a
  round, tasks that share a pool (work stealing) take chain indices from an atomic
  cursor and own a chain once their compare-and-swap of its ``ch_own`` stamp (round,
  stealer) succeeds: only the owner writes a chain's operations, record and progress,
  and it publishes the progress with an atomic store after the values, so a stealer
  that reads another's chain (atomic load of the progress, then the versions below it)
  sees finished values only (``core/atomics.py``, ``process_pool``).
* ``_start_batch``, ``_advance`` and ``_finish`` run on the thread of the last arrival /
  last task, alone (no other task of the batch exists at that moment).

GIL: Python work per batch is O(instances + pools x rounds); every per-operation step is
in a kernel. A kernel call releases the GIL only when it has enough work to pay for the
hand-off (``funs.kernel_for``; a batch that one task walks keeps it: ``ONE_TASK_HELD``);
no kernel waits for another thread, so holding it never blocks a peer's progress (a
stealer that finds a chain not far enough returns pending). A free-threaded build needs
nothing more: the shared state is either under ``_lock``, in atomics, or handed over
through the runtime's task push.
"""

from __future__ import annotations

import threading
import time
from itertools import accumulate

import numpy as np

from topology import current_node

from bobox_sched.core.operator import Operator
from bobox_sched.control.progress import Passage
from bobox_sched.core.sync import FENCED, fence
from bobox_sched.core.task import Task, claim, schedule
from bobox_sched.core.worker import current_worker
from bobox_sched.txn.chains import new_batch
from bobox_sched.txn.kernels.fields import NF
from bobox_sched.txn.funs import EntryCache, kernel_for, kernels, shared_entry_cache, value_type_key
from bobox_sched.txn.placement import make_placement, place_store

COMPUTE, BUILD, ROUNDS = "compute", "build", "rounds"
# Batches a dealer may have out beyond the last finished one (post-processed by every
# instance: ``Group.gate_on_posts``): only the batch being computed, in state access or
# post-processed -- no new input enters while a batch is in state access ("e6 and e7
# wait", paper Fig. 3a), nor before its events were post-processed (spec 2, step 8).
# One more batch of slack (2, the setting until 2026-11-26) let the dealer's Python run
# during state access, where it delayed the pool tasks (each waits for the GIL) and made
# every event wait for the batch before its own. Measured on 2 workers, 200k events,
# median of 4, 1 vs 2: throughput GS 596k vs 576k, SL 682k vs 677k, OB 535k vs 526k, TP
# 1618k vs 1522k; p99 latency GS 1.96 vs 4.24 ms, SL 1.63 vs 3.83, OB 2.06 vs 4.56, TP
# 0.75 vs 1.72 (an uncommitted driver over operators.txn.run_once, both settings
# alternating in one process).
LOOKAHEAD = 1
# With ``TxnConfig.pipeline``: the batch in state access (or being post-processed) and
# the next one, which the instances compute meanwhile in their second buffers
# (operator.py). Not more: an instance arrives at batch k+1 only after post-processing
# batch k, so a third batch could only wait in its inbox.
LOOKAHEAD_PIPELINED = 2
# A batch walked by one task keeps the GIL in its kernels up to this many operations:
# nothing runs beside that task, and a release hands the GIL to whichever thread polls
# meanwhile. Measured on 2 workers (TP and SL take the one-task path there: 2000 and
# ~4000 operations a batch), interval 500, 200k events, median of 3, two alternating
# pairs against every kernel releasing it: TP 1808k / 1804k -> 2486k / 2016k events/s
# (p99 0.71 / 0.67 -> 0.53 / 0.64 ms), SL 814k / 802k -> 923k / 976k, GS 616k / 605k ->
# 615k / 612k and OB 587k / 546k -> 583k / 569k (their batches take per-pool tasks,
# whose large calls release it). The cap bounds how long other requests' Python waits
# (50 000 operations: 1-2.5 ms of walking at 20-50 ns each, below the 5 ms switch
# interval at which CPython would preempt a Python thread).
ONE_TASK_HELD = 50_000

_GROUPS_LOCK = threading.Lock()


def group_of(ctx, cfg, executor: int):
    """The group of `cfg` in the running request (created by the first instance)."""
    req = ctx.request
    with _GROUPS_LOCK:
        groups = req.__dict__.setdefault("txn_groups", {})
        g = groups.get(cfg.name)
        if g is None:
            g = Group(cfg, req, ctx.scheduler)
            groups[cfg.name] = g
        elif g.cfg is not cfg:
            raise ValueError(f"two transactional groups named {cfg.name!r} with different settings in one request")
    return g


class _PoolTask(Operator):
    """A state-access task of one pool (a runtime task with no ports)."""

    def __init__(self, group, pool: int, k: int, parity: int):
        self.group, self.pool, self.k, self.parity = group, pool, k, parity
        self.kind = None
        # the chain walk's stack (chains, and the ts each must get past) and a scratch;
        # 4096 levels: dependencies deeper than that wait for the next round
        self.scratch = (np.empty(4096, np.int64), np.empty(4096, np.int64), np.zeros(3, np.int64))

    def process(self, ctx):
        self.group._run_task(self, ctx.worker)


class Group:
    """The coordinator of one transactional operator's instances (module doc)."""

    # fuse round 1 into round 0 where no chain can wait on another (step 3; a class
    # switch, so that a measurement can compare both)
    fuse_rounds = True
    # A batch of at most this many operations runs in one task on the last arrival's
    # worker (step 3; 0: never). Tuned on 2 workers (2026-11-26, 100k events, one
    # task / a task per pool, median of 3): 2000 ops TP 1.29, GS 1.18; 3000 SL 1.22,
    # 3500 OB 1.03; 4000 TP 1.10; 5000 GS 1.02; 5800 OB 0.99, TP 0.89; 6000 SL 1.11
    # (its cross-pool rounds); 10000 GS 0.93. On a lent 16-core machine the one-pool
    # option (shared-everything) beat per-worker pools on TP at 16k operations a batch
    # and lost on GS at 80k (fig. 14): the crossover may lie higher with more workers.
    single_task_ops = 5000
    # Batches whose operations read only their own record and cannot abort skip the
    # chains (step 3; kernels/direct.py). A class switch, so that a measurement and the
    # tests can compare both.
    direct_pools = True
    # The dealer's gate (``gate``, step 7) opens for batch b+1 once every instance has
    # post-processed batch b, not already at barrier 2: dealing and computing b+1 is
    # Python, and so are the posts of b, so under the GIL running them side by side
    # only stretched the posts -- by ~1 ms for the ~1% of batches where the other
    # worker took the GIL first (traced on 2 workers: one instance's post 866 us
    # instead of ~100) -- and that 1% is the p99. Measured on 2 workers (2026-11-26,
    # 200k events, the two settings alternating in one process, median of 8): GS at
    # interval 500 p99 2.52 -> 1.69 ms (p50 1.28 -> 1.26) and 699k -> 718k events/s; at
    # interval 1000 p99 3.15 -> 2.66 ms, 838k -> 847k. Median of 4: OB 1.58 -> 1.58 ms,
    # SL 1.17 -> 1.20, TP 0.72 -> 0.64, throughput within 2.5 %; 1 worker GS 0.89 ->
    # 0.88 ms. (A class switch, so that a measurement can compare both.)
    gate_on_posts = True

    def __init__(self, cfg, request, scheduler):
        if not request.policy.runtime_tasks:
            raise ValueError(f"transactional state needs a policy that runs state-access tasks (bobox or simple); "
                             f"policy {request.policy.name!r} runs only the plan's ports")
        self.cfg = cfg
        self.request = request
        self.scheduler = scheduler
        self.K = kernels() if cfg.kernel_wrap is None else cfg.kernel_wrap(kernels())
        self.store = cfg.store
        self.store.acquire(self)
        request.future.add_done_callback(lambda _f, st=self.store: st.release(self))
        self.T = cfg.executors
        workers = list(scheduler.workers)
        self.nworkers = len(workers)  # the GIL's sharers (funs.kernel_for)
        self.placement = make_placement(cfg.numa_mode, cfg.work_stealing, workers, self.store)
        place_store(self.placement, self.store)
        self.S = self.store.view()
        self.P = self.placement.npools
        self.pool_of_rec = self.placement.pool_of_rec
        G = self.store.nrecords
        self.rec_chain = np.full(G, -1, np.int64)
        self.rec_ver = np.zeros(G, np.int64)
        self.insts = [None] * self.T
        self._lock = threading.Lock()
        # barrier 1: every instance passed this batch's punctuation, one that reached its
        # end of stream passed every later one (control/progress.py)
        self.arrivals = Passage(self.T)
        self.batch = 0
        self.done_batch = -1
        # the last batch the dealer's gate counts as finished: every instance post-processed
        # it (gate_on_posts), or else it passed barrier 2 (then always == done_batch)
        self.open_batch = -1
        self._posts = (-1, 0)  # (batch, instances still to post-process it)
        self.phase = COMPUTE
        self.final = False
        self.punct_ts = None
        self.gate_waiters: list = []
        # executor -> its _Arrival of the current batch (written under _lock at arrival;
        # read by _start_batch and taken by _finish, alone: module doc)
        self._arrived: dict = {}
        self.lookahead = LOOKAHEAD_PIPELINED if cfg.pipeline else LOOKAHEAD
        self._cap = 0
        self.B = None
        self.fused = False
        self.direct = False
        self.single = False
        self.one_task = False
        # every pool's records on one node: a small batch may run in one task (step 3)
        self._one_node = len(set(self.placement.seg_pool_nodes)) <= 1
        self.results = None
        # The kernels that take the batch arrays or the store view (build_pool, process_pool,
        # finish_batch, min_violation, abort_restore; the instances' run_baseline), whose types
        # never change in a group: called past numba's dispatcher (funs.EntryCache). Groups
        # of one kind share the cache (funs.shared_entry_cache: the first call of each kernel
        # cost about 1 ms a request): the same scheme and modes and a store view of the same
        # types give every call site the same argument types (tests/test_txn_unit.py checks
        # it across configurations in one process). A timing wrapper gets its own cache.
        if cfg.kernel_wrap is None:
            key = (cfg.cc, cfg.dual_mode, cfg.numa_mode, cfg.work_stealing, self.store.has_constraints,
                   value_type_key(self.S))
            self.kcall = shared_entry_cache(key).call
        else:
            self.kcall = EntryCache().call
        # state-access tasks: per pool, per stealer, two parities (round r uses r & 1)
        self.tasks = []
        for p, targets in enumerate(self.placement.tasks):
            row = []
            for k in range(len(targets)):
                pair = []
                for parity in range(2):
                    # the runtime's record of the pool task (core/task.py): what is pushed
                    pair.append(Task(_PoolTask(self, p, k, parity), f"{cfg.name}.pool{p}.{k}.{parity}", request, 1))
                row.append(pair)
            self.tasks.append(row)
        self.stats = {"batches": 0, "transactions": 0, "operations": 0, "rounds": 0, "max_rounds": 0,
                      "aborts": 0, "restored_chains": 0, "fused_batches": 0, "direct_batches": 0,
                      "single_task_batches": 0,
                      "versions_peak": 0, "versions_total": 0,
                      "build_s": 0.0, "process_s": 0.0, "coord_s": 0.0, "state_access_s": 0.0, "empty_batches": 0,
                      "local_ops": 0.0, "page_local_ops": 0.0, "placed_ops": 0, "batch_sizes": []}
        self._page_frac = self._segment_page_fractions()
        if cfg.cc != "tstream":
            from bobox_sched.txn.baselines import BaselineState

            self.base = BaselineState(cfg, self.store, self.K)
        else:
            self.base = None

    # -- instances ------------------------------------------------------------------------
    def register(self, executor: int, inst) -> None:
        if not 0 <= executor < self.T:
            raise ValueError(f"executor {executor} out of range: the group has {self.T} executors")
        with self._lock:
            if self.insts[executor] is not None and self.insts[executor] is not inst:
                raise ValueError(f"two instances claim executor {executor} of group {self.cfg.name!r}")
            self.insts[executor] = inst

    def arrive(self, executor: int, final: bool, punct_ts, arrival) -> None:
        """Barrier 1 (step 2 of the module doc): the instance registered everything of
        this batch, handed it over (`arrival`, ``operator._Arrival``) and waits --
        without blocking -- for its results."""
        with self._lock:
            if self.phase != COMPUTE:
                raise RuntimeError(f"instance {executor} arrived while the group is in {self.phase} mode")
            if not final and punct_ts is not None:
                if self.punct_ts is None:
                    self.punct_ts = punct_ts
                elif self.punct_ts != punct_ts:
                    raise ValueError(f"batch {self.batch}: executors got punctuations with different timestamps "
                                     f"({self.punct_ts} and {punct_ts})")
            if arrival.batch != self.batch:
                raise RuntimeError(f"instance {executor} arrived for batch {arrival.batch} while the group is at "
                                   f"batch {self.batch}")
            last = self.arrivals.pass_(executor, final)
            self._arrived[executor] = arrival
            if last:
                self.phase = BUILD
                self.final = self.arrivals.all_ended
        if last:
            self._start_batch()

    def gate(self, batch: int, op) -> bool:
        """May events of `batch` be dealt now? At most ``LOOKAHEAD`` batches are out
        beyond the last finished one (finished: post-processed by every instance, with
        ``gate_on_posts``; else past barrier 2); otherwise `op` (the dealer) is
        scheduled again when that batch finishes."""
        ok = batch <= self.open_batch + self.lookahead
        if FENCED:
            fence()  # the unlocked read before what the dealer does next (module doc)
        if ok:
            return True
        with self._lock:
            if batch <= self.open_batch + self.lookahead:
                return True
            if op not in self.gate_waiters:
                self.gate_waiters.append(op)
            return False

    # -- state-access mode ------------------------------------------------------------------
    def _start_batch(self) -> None:
        t0 = self._t_batch = time.perf_counter()
        K, T, P = self.K, self.T, self.P
        # Only what instances handed over for *this* batch (an instance that ended in an
        # earlier batch passes every later barrier without arriving; with pipelining the
        # others already register the next batch, in their other buffers).
        arrived = self._arrived
        insts = [arrived.get(e) for e in range(T)]
        # Python work here is O(instances) list steps plus a fixed number of numpy calls:
        # it runs once per batch with the GIL held.
        ntx_l, nsl_l, ncs_l, nops_l = [0] * T, [0] * T, [0] * T, [0] * T
        poffs = np.zeros((T, P + 1), np.int64)
        ts_lo = None
        local = True
        any_src = False
        with_ops = []
        for e, i in enumerate(insts):
            if i is None:
                continue
            buf = i.buf
            ntx_l[e], nsl_l[e], ncs_l[e], nops_l[e] = buf.ntx, buf.nslots, buf.nc, buf.n
            if buf.n:
                poffs[e] = i.poff
                with_ops.append((e, i))
            if buf.ntx:
                lo = int(buf.tts[: buf.ntx].min())
                ts_lo = lo if ts_lo is None or lo < ts_lo else ts_lo
            local = local and i.pool_local
            any_src = any_src or buf.has_src
        txn_base = np.array([0, *accumulate(ntx_l[:-1])], np.int64)
        slot_base = np.array([0, *accumulate(nsl_l[:-1])], np.int64)
        NTX, NSL, ncond = sum(ntx_l), sum(nsl_l), sum(ncs_l)
        pool_off = poffs.sum(axis=0)  # each row is cumulative (its pool offsets)
        NOPS = sum(nops_l)
        self.NOPS, self.NTX = NOPS, NTX
        self.stats["transactions"] += NTX
        self.stats["operations"] += NOPS
        self.stats["batch_sizes"].append(NTX)
        res = np.full(NSL, np.nan)
        verdict = np.ones(NTX, np.int8)
        self.results = (res, verdict, slot_base, txn_base)
        if NOPS == 0:
            self.stats["empty_batches"] += 1
            self.stats["coord_s"] += time.perf_counter() - t0
            self._finish()
            return
        conds = np.empty((max(ncond, 1), 3), np.int64)
        c_param = np.empty(max(ncond, 1), np.float64)
        if ncond:
            cond_off = np.empty(NTX + 1, np.int64)
            cinst = np.array([0, *accumulate(ncs_l)], np.int64)
            with_c = [(i, k) for i, k in zip(insts, ncs_l) if k]
            kernel_for(K, "build_conds", ncond)(np.concatenate([i.buf.cb[:k] for i, k in with_c]),
                                                np.concatenate([i.buf.cf[:k] for i, k in with_c]), cinst,
                                                txn_base, NTX, cond_off, conds, c_param)
        else:
            cond_off = np.zeros(NTX + 1, np.int64)
        self.B = new_batch(self, NOPS, NTX, P, pool_off, res, verdict, cond_off, conds, c_param)
        alone = P == 1 and len(self.placement.tasks[0]) == 1  # one task anyway
        self.single = NOPS <= self.single_task_ops and not alone and self._one_node
        # One task walks the batch (the one-task path, or one pool with one task): no pool
        # runs beside it, so its kernels keep the GIL (funs.kernel_for) up to ONE_TASK_HELD
        # operations, whatever the per-call thresholds say -- with other workers only (with
        # one, no thread polls for the GIL and releasing it costs nothing: ratio 0.98-1.02)
        self.one_task = (self.single or alone) and NOPS <= ONE_TASK_HELD and len(self.scheduler.workers) > 1
        self.fused = self.fuse_rounds and (self.single or (local and all(len(t) == 1 for t in self.placement.tasks)))
        # No chains at all where no operation reads another record and nothing aborts:
        # each task runs its pools' operations in ts order on the store (kernels/direct.py)
        self.direct = self.fused and self.direct_pools and not any_src and not self.store.has_constraints
        self.stats["fused_batches"] += self.fused
        self.stats["direct_batches"] += self.direct
        self.stats["single_task_batches"] += self.single
        # every instance's operations, partitioned by pool at its arrival: each pool task
        # gathers its part from every instance (no copy of them all here, on one thread)
        self._build_args = ([(i.pib, i.pfb, i.poff, int(slot_base[e]), int(txn_base[e])) for e, i in with_ops],
                            np.int64(ts_lo if ts_lo is not None else 0))
        self.round = 0
        self.round_done = 0
        self.round_pending = 0
        self.batch_rounds = 0
        self.stats["coord_s"] += time.perf_counter() - t0
        self._submit_round(BUILD)

    def _submit_round(self, kind: str) -> None:
        """Push one round's tasks (round 0 = build: one task per pool)."""
        parity = self.round & 1
        if kind == ROUNDS:
            self.B.pool_cur[:] = 0
        jobs = []
        if self.single:
            jobs.append((self.tasks[0][0][parity], None))
        else:
            for p, targets in enumerate(self.placement.tasks):
                ks = range(1) if kind == BUILD else range(len(targets))
                for k in ks:
                    jobs.append((self.tasks[p][k][parity], targets[k]))
        with self._lock:
            self.phase = kind
            self.outstanding = len(jobs)
            self.round_done = 0
            self.round_pending = 0
        for task, target in jobs:
            task.op.kind = kind  # the _PoolTask: read by its run (_run_task)
            task.op.round = self.round
            self._push(task, target)

    def _push(self, task, target) -> None:
        """Hand a pool task to the policy, to run on its target (None: the calling
        thread's worker, next; tests run it inline)."""
        # task.py's token protocol: take the token and push to the target; a task still in
        # run_task's epilogue of an earlier round holds it, and sees ``again`` there and
        # runs again (as task.schedule does).
        if claim(task):
            policy = self.request.policy
            w = current_worker() if target is None else None
            if w is not None:
                policy.push_on(self.request, task, worker=w)
                return
            if target is None:  # not on a worker thread: the first pool's place
                target = self.placement.tasks[0][0]
            policy.push_on(self.request, task, node=target.node, worker=target.worker)

    def _run_task(self, task, worker) -> None:
        t0 = time.perf_counter()
        B, S, K = self.B, self.S, self.K
        done = pending = 0
        tp = 0.0
        single = self.single  # one task for every pool (step 3): process_pool's pool -1
        if task.kind == BUILD and self.direct:
            done = self._run_direct(task)
            key = "process_s"
        elif task.kind == BUILD:
            ts0 = self._build_args[1]
            for p in range(self.P) if single else (task.pool,):
                tmp_i, tmp_f, n, span = self._gather((p,))
                self.kcall(kernel_for(K, "build_pool", self._work(n)), p, tmp_i, tmp_f, span, ts0, B, S,
                           self.store.has_constraints)
            key = "build_s"
            if self.fused:  # round 1 right away (step 3 of the module doc)
                t1 = time.perf_counter()
                sc, sl, out = task.scratch
                done, pending = self.kcall(kernel_for(K, "process_pool", self._walk_ops(task)),
                                           -1 if single else task.pool, 1, 0, B, S, sc, sl, out)
                tp = time.perf_counter() - t1
                t0 += tp
        else:
            sc, sl, out = task.scratch
            # a stealer's claim stamp (kernels/walk.py, process_pool); 0: the pool's only task
            me = (task.round << K.CLAIM_BITS) | (task.k + 1) if len(self.placement.tasks[task.pool]) > 1 else 0
            done, pending = self.kcall(kernel_for(K, "process_pool", self._walk_ops(task)), -1 if single else task.pool,
                                       task.round & 1, 0 if single else me, B, S, sc, sl, out)
            key = "process_s"
        dt = time.perf_counter() - t0
        if done:  # one task for every pool only where all lie on one node: the same locality
            self._count_locality(task.pool, worker, done)
        with self._lock:
            self.stats[key] += dt
            self.stats["process_s"] += tp
            self.round_done += done
            self.round_pending += pending
            self.outstanding -= 1
            last = self.outstanding == 0
        if last:
            self._advance()

    def _gather(self, pools) -> tuple:
        """Round 0, step 1: the operations of `pools` from every instance (partitioned by
        pool at its arrival), appended pool by pool into fresh arrays: ``(ops, params,
        count, ts span)``."""
        B = self.B
        parts, ts0 = self._build_args
        n = sum(int(B.pool_off[p + 1] - B.pool_off[p]) for p in pools)
        tmp_i = np.empty((max(n, 1), NF), np.int64)
        tmp_f = np.empty(max(n, 1), np.float64)
        k, span = 0, 1
        gather = kernel_for(self.K, "gather_pool", self._work(n), self.nworkers)
        for p in pools:
            for pib, pfb, poff, sb, tb in parts:
                k, span = gather(p, pib, pfb, poff, sb, tb, ts0, tmp_i, tmp_f, k, span)
        return tmp_i, tmp_f, k, span

    def _run_direct(self, task) -> int:
        """Round 0 of a batch without chains (``direct``): the task's operations -- every
        pool's on the one-task path, in one run, so that conditions may read across
        pools -- run in ts order on the store."""
        B = self.B
        tmp_i, tmp_f, n, span = self._gather(range(self.P) if self.single else (task.pool,))
        return int(self.kcall(kernel_for(self.K, "run_direct", self._work(n)), tmp_i, tmp_f, n, span,
                              self._build_args[1], np.zeros(span + 1, np.int64), np.empty(max(n, 1), np.int64),
                              B.cond_off, B.conds, B.c_param, B.verdict, B.res, self.S))

    def _work(self, n: int) -> int:
        """The size a kernel call on `n` operations counts as when it picks whether to
        release the GIL (funs.kernel_for): none where one task walks the batch."""
        return 0 if self.one_task else n

    def _walk_ops(self, task) -> int:
        """``_work`` of the operations a walk of `task` may run: its pool's (every pool's
        on the one-task path)."""
        B = self.B
        return self._work(self.NOPS if self.single else int(B.pool_off[task.pool + 1] - B.pool_off[task.pool]))

    def _advance(self) -> None:
        """The last task of a round decides what comes next (alone: module doc)."""
        t0 = time.perf_counter()
        K = self.K
        if self.phase == BUILD:
            self.round = 1
            self.batch_rounds = 1
            if not self.fused:  # (a direct batch is fused: its run was both rounds)
                self.stats["coord_s"] += time.perf_counter() - t0
                self._submit_round(ROUNDS)
                return
        if self.round_pending > 0:
            if self.round_done == 0:
                raise RuntimeError("a state-access round made no progress (dependency bug)")
            self._next_round(t0)
            return
        if self.store.has_constraints:
            t_ab, x_ab = self.kcall(K.min_violation, self.B, self.NOPS)
            if x_ab >= 0:
                self.stats["aborts"] += 1
                self.stats["restored_chains"] += int(self.kcall(K.abort_restore, t_ab, x_ab, self.B, self.S, self.P,
                                                                  self.NOPS))
                self._next_round(t0)
                return
        self.stats["coord_s"] += time.perf_counter() - t0
        self._finish()

    def _next_round(self, t0) -> None:
        self.round += 1
        self.batch_rounds += 1
        self.stats["coord_s"] += time.perf_counter() - t0
        self._submit_round(ROUNDS)

    def _finish(self) -> None:
        """Barrier 2: free the versions, publish the results, resume the instances."""
        t0 = time.perf_counter()
        st = self.stats
        if self.B is not None and self.NOPS and self.direct:
            st["rounds"] += 1  # no chains: nothing to forget, no versions
            st["max_rounds"] = max(st["max_rounds"], 1)
        elif self.B is not None and self.NOPS:
            versions = int(self.kcall(kernel_for(self.K, "finish_batch", self.NOPS), self.B, self.P, self.NOPS))
            st["versions_peak"] = max(st["versions_peak"], versions)
            st["versions_total"] += versions
            st["rounds"] += self.batch_rounds
            st["max_rounds"] = max(st["max_rounds"], self.batch_rounds)
        # versions held until now: dropped with the batch's arrays (the blotters keep only
        # `res`/`verdict`)
        self.B = None
        self._build_args = None
        st["batches"] += 1
        # Each instance that handed this batch over gets its results.
        b = self.batch
        arrived, self._arrived = self._arrived, {}
        for a in arrived.values():
            a.results = self.results
        posts = len(arrived)
        if FENCED:
            fence()  # the results before done_batch, which instances read unlocked (module doc)
        with self._lock:
            self.done_batch = self.batch
            self.batch += 1
            self.arrivals.next()
            self.punct_ts = None
            self.phase = COMPUTE
            if self.gate_on_posts and posts:
                self._posts = (b, posts)  # the last post opens the gate (``posted``)
                waiters = []
            else:
                self.open_batch = b
                waiters, self.gate_waiters = self.gate_waiters, []
        t1 = time.perf_counter()
        st["coord_s"] += t1 - t0
        # wall time of state-access mode, last arrival to barrier 2: no instance computes
        st["state_access_s"] += t1 - self._t_batch
        for inst in self.insts:
            schedule(inst.task, None, False)
        for op in waiters:
            schedule(op, None, False)

    def posted(self, batch: int) -> None:
        """An instance post-processed `batch` (its thread, after its last output): the
        last of the instances ``_finish`` counted opens the dealer's gate."""
        if not self.gate_on_posts:
            return
        with self._lock:
            b, left = self._posts
            if b != batch:
                return  # not counted: an instance that ended in an earlier batch
            left -= 1
            self._posts = (b, left)
            if left:
                return
            if FENCED:
                fence()  # open_batch is read unlocked (module doc)
            self.open_batch = batch
            waiters, self.gate_waiters = self.gate_waiters, []
        for op in waiters:
            schedule(op, None, False)

    # -- locality -------------------------------------------------------------------------
    def _segment_page_fractions(self):
        """Per store segment: the fraction of its pages on each real node (move_pages)."""
        out = []
        try:
            pn = self.store.page_nodes()
        except OSError:
            pn = [(n, {}) for n in self.store.segment_nodes]
        for placed, hist in pn:
            tot = sum(c for v, c in hist.items() if v >= 0)
            out.append({v: c / tot for v, c in hist.items() if v >= 0} if tot else {})
        return out

    def _count_locality(self, pool: int, worker, done: int) -> None:
        """Operations a task ran, counted as local when the pool's records are on the
        task's worker's node: by placement (the node the segment was placed for) and by
        the pages' real node (the kernel's answer, against the CPU's real node)."""
        seg_nodes = self.store.segment_nodes
        wnode = getattr(worker, "node_id", None)
        pool_node = self.placement.pool_nodes[pool]
        if self.placement.mode == "shared-everything":
            placed = sum(1 for n in seg_nodes if n == wnode) / max(len(seg_nodes), 1)
            fr = [f for f in self._page_frac]
            here = current_node()
            page = sum(f.get(here, 0.0) for f in fr) / max(len(fr), 1)
        else:
            placed = 1.0 if pool_node == wnode else 0.0
            seg = seg_nodes.index(pool_node) if pool_node in seg_nodes else 0
            page = self._page_frac[seg].get(current_node(), 0.0) if self._page_frac else 0.0
        st = self.stats
        with self._lock:
            st["placed_ops"] += done
            st["local_ops"] += placed * done
            st["page_local_ops"] += page * done

    def summary(self) -> dict:
        st = dict(self.stats)
        st.pop("batch_sizes", None)
        n = st["placed_ops"]
        st["placement_locality"] = st["local_ops"] / n if n else None
        st["page_locality"] = st["page_local_ops"] / n if n else None
        st["pools"] = self.P
        st["numa_mode"] = self.placement.mode
        st["work_stealing"] = self.cfg.work_stealing
        if self.base is not None:
            st.update(self.base.summary())
        return st


__all__ = ["Group", "group_of"]
