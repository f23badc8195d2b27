"""Transactional operators: ``pre_process`` / ``state_access`` / ``post_process``
(TStream's F1 and Alg. 1), run by the runtime in dual mode (TStream) or coarse-grained
(the baselines).

Write one by subclassing :class:`TransactionalOperator`::

    class Transfer(TransactionalOperator):
        def state_access(self, txn, eb):
            txn.require(GE(accounts, eb["src"], eb["amount"]))
            txn.read_modify(accounts, eb["src"], DEC, param=eb["amount"], into="src_balance")
            txn.read_modify(accounts, eb["dst"], INC, param=eb["amount"])

        def post_process(self, eb):
            return {"ts": eb.ts, "ok": eb.success, "balance": eb["src_balance"]}

or declare the same as an access program (``program.py``: one kernel call per packet for
the state access, one per derived-column kernel, instead of Python per ``txn`` call)::

    class Transfer(TransactionalOperator):
        program = Program(
            access=(Require(GE("accounts", "src", Col("amount"))),
                    ReadModify("accounts", "src", DEC, param="amount", into="src_balance"),
                    ReadModify("accounts", "dst", INC, param="amount")),
            emit=("ts", "ok", "src_balance"))

and run ``config.executors`` instances of it, instance i built with ``executor=i``, each
fed by a progress controller (``progress.py``): events carry a ``ts`` column and every
``interval`` events a ``Batch`` punctuation arrives. ``post_process`` returns a Packet,
a ``{column: array}`` dict or None; it is sent on ``out``.

Dual mode (``cc="tstream"``): packets are pre-processed and their operations registered
at once; the blotters wait in the instance. At a punctuation the instance partitions its
operations, hands the batch over (an :class:`_Arrival`: its operation buffer, the
partitioned operations and the stashed blotters) and arrives at the group's barrier; it
never waits on its worker (``coordinator.py``). When the batch's state access is over the
group schedules the instance, which post-processes that batch's blotters.

With ``TxnConfig.pipeline`` (off by default) the instance goes on computing meanwhile:
registering the next batch's operations reads no state, so compute mode of batch k+1
overlaps state access of batch k, in the instance's second operation buffer (two
alternate). It may not arrive at batch k+1's barrier before it has post-processed batch k
(at most one batch handed over per instance): a punctuation taken before that waits at
the head of the instance's inbox. Without it (the paper's Fig. 3a: "e6 and e7 wait") the
instance computes nothing from its arrival until its post-processing. Either way, what
arrives while it may not go on is taken and kept in its inbox (the runtime runs an
operator again as long as input waits in its buffer).

Protocol (who touches what, when): an instance's ``_State`` -- its compute buffer, stash
and inbox -- is touched only by the thread running the instance. An ``_Arrival`` is
written by that thread before it arrives, then read by the batch's state access (the
last arrival's thread and the pool tasks) and nothing else touches it until the group
stores its ``results`` and publishes ``done_batch`` (fenced: ``coordinator.py``); then the
instance, having read ``done_batch``, reads the results and recycles the buffer.

Baselines (``cc`` = lock | mvlk | pat | nolock): each packet's transactions run at once,
one at a time in ts order, in ``run_baseline`` (``baselines.py``); a wait that lasts too
long returns, and the instance runs again later from where it stopped.

Checks: timestamps must grow across punctuations (an event below the last punctuation's
ts, or at or above the next one's, fails the request), and a punctuation's ts must grow.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from bobox_sched.core.operator import Operator
from bobox_sched.core.packet import Packet
from bobox_sched.core.sync import FENCED, fence
from bobox_sched.control import model as _model
from bobox_sched.control.punct import END, Batch, Punctuation
from bobox_sched.txn.funs import kernel_for
from bobox_sched.txn.ops import EventBlotter, OpBuffer, Txn

# Packets an instance handles per run before it lets other tasks run (a deferred re-run):
# bounds how long one instance holds a worker while its input keeps arriving.
MAX_PACKETS_PER_RUN = 8
_EOS = END  # end of stream, kept in an instance's inbox after the items before it


class TransactionalOperator(Operator):
    """Base class of transactional operators (module doc)."""

    # An access program (program.py) instead of the three methods: set it to run pre-
    # processing, state access and post-processing as kernel calls, one each per packet.
    program = None
    inputs = ("in",)
    outputs = ("out",)
    punct_in = _model.EXPECTING
    punct_out = _model.REMOVES

    def __init__(self, config, executor: int = 0):
        from bobox_sched.txn.config import TxnConfig

        if not isinstance(config, TxnConfig):
            raise TypeError(f"a TransactionalOperator needs a TxnConfig, not {type(config).__name__}")
        if not isinstance(executor, int) or not 0 <= executor < config.executors:
            raise ValueError(f"executor must be in 0..{config.executors - 1}, got {executor!r}")
        self.txn_config = config
        self.executor = executor
        self.store = config.store
        self._tx = None

    # -- user code -------------------------------------------------------------------------
    def pre_process(self, packet) -> EventBlotter:
        """PRE_PROCESS: the blotter of a packet (default: the packet itself; add derived
        columns with ``eb[name] = array``). Every row is an event and gets a transaction,
        possibly with no operation."""
        return EventBlotter(packet)

    def state_access(self, txn: Txn, eb: EventBlotter) -> None:
        """STATE_ACCESS: issue the rows' operations through `txn`."""
        raise NotImplementedError(f"{type(self).__name__}.state_access")

    def post_process(self, eb: EventBlotter):
        """POST_PROCESS: the output for the blotter's rows (Packet, dict or None)."""
        return None

    # -- the driver ------------------------------------------------------------------------
    def process(self, ctx):
        st = self._tx
        if st is None:
            st = self._tx = _State(self, ctx)
        if st.dual:
            self._run_dual(ctx, st)
        else:
            self._run_coarse(ctx, st)

    def _register(self, st, packet, buf) -> EventBlotter:
        """Compute mode for one packet: its blotter, its operations registered in `buf`
        (by the program's kernels, or by ``pre_process`` and ``state_access``)."""
        prog = st.prog
        if prog is not None:
            eb = prog.blotter(packet)
            self._check_ts(st, eb)
            prog.register(eb, buf)
            return eb
        eb = self.pre_process(packet)
        self._check_ts(st, eb)
        self.state_access(Txn(st.K, buf, self.store, eb), eb)
        return eb

    def _emit(self, ctx, eb) -> None:
        prog = self._tx.prog
        out = self.post_process(eb) if prog is None else prog.emit(eb)
        if out is None:
            return
        if isinstance(out, dict):
            out = Packet({k: np.asarray(v) for k, v in out.items()})
        if out.nrows:
            ctx.send("out", out)

    # dual mode ------------------------------------------------------------------------------
    def _run_dual(self, ctx, st) -> None:
        g = st.group
        a = st.arrived
        if a is not None:
            if g.done_batch < a.batch:
                if not st.pipeline:
                    self._drain(ctx, st)  # stash, don't wait: take the input, keep it for later
                    return
            else:
                if FENCED:
                    fence()  # done_batch read unlocked, then a.results (coordinator's protocol)
                self._post_dual(ctx, st, a)
                if a.final:
                    st.done = True
                    ctx.close()
                    ctx.finish()
                    return
        inbox = st.inbox
        for _ in range(MAX_PACKETS_PER_RUN):
            if ctx.blocked:
                return
            item = inbox.popleft() if inbox else ctx.recv("in")
            if item is None:
                if not ctx.at_eos("in"):
                    return
                item = _EOS
            if item is _EOS or isinstance(item, Batch):
                if st.arrived is not None:
                    # pipelined: this barrier waits until the batch handed over before
                    # was post-processed (the group's _finish schedules us)
                    inbox.appendleft(item)
                    self._drain(ctx, st)
                    return
                if item is _EOS:
                    self._arrive(st, True, None)
                    return
                self._check_punct(st, item)
                self._arrive(st, False, item.ts)
                if not st.pipeline:
                    self._drain(ctx, st)
                    return
                # let the batch's state-access task (pushed on this worker) run first
                break
            if isinstance(item, Punctuation):
                continue  # other punctuations mean nothing here
            st.stash.append(self._register(st, item, st.buf))
        ctx.reschedule()

    @staticmethod
    def _drain(ctx, st) -> None:
        """While the instance may not go on: move everything that arrived into the inbox
        (an operator must keep taking its input, or the runtime runs it again at once;
        the progress controller bounds how much comes: ``Group.lookahead``)."""
        inbox = st.inbox
        if inbox and inbox[-1] is _EOS:
            return
        while True:
            item = ctx.recv("in")
            if item is None:
                if ctx.at_eos("in"):
                    inbox.append(_EOS)
                return
            inbox.append(item)

    def _arrive(self, st, final: bool, punct_ts) -> None:
        buf = st.buf
        if punct_ts is not None and buf.ntx and int(buf.tts[: buf.ntx].max()) >= punct_ts:
            raise ValueError(f"executor {self.executor}: an event of ts "
                             f"{int(buf.tts[: buf.ntx].max())} precedes the punctuation of ts {punct_ts}")
        g = st.group
        if buf.nc:
            buf.reserve_ops(buf.nc)
            buf.n = kernel_for(st.K, "cond_only_reads", buf.n)(buf.ib, buf.fb, buf.n, buf.cb, buf.nc, buf.tts,
                                                                 buf.ntx)
        a = _Arrival(st.batch, buf, st.stash, final)
        a.pib = np.empty((max(buf.n, 1), buf.ib.shape[1]), np.int64)
        a.pfb = np.empty(max(buf.n, 1), np.float64)
        a.poff = np.zeros(g.P + 1, np.int64)
        if buf.n:
            part = kernel_for(st.K, "partition_ops", buf.n, g.nworkers)
            part(buf.ib, buf.fb, buf.n, g.pool_of_rec, g.P, a.pib, a.pfb, a.poff)
        # may the batch's chains be walked as soon as they are built (coordinator step 3)?
        a.pool_local = g.P == 1 or not (buf.nc or buf.has_src) or bool(
            kernel_for(st.K, "pool_local", buf.n)(buf.ib, buf.n, buf.cb, buf.nc, buf.ntx, g.pool_of_rec))
        # pipelined, the next batch is registered in the other buffer (module doc); else
        # nothing is registered until the post-processing gives this one back (one
        # buffer: a second one would grow again from its initial size)
        if st.pipeline:
            st.buf = st.spare if st.spare is not None else OpBuffer.for_interval(self.txn_config.interval)
            st.spare = None
        else:
            st.buf = None
        st.stash = []
        st.arrived = a
        st.batch += 1
        g.arrive(self.executor, final, punct_ts, a)

    def _post_dual(self, ctx, st, a) -> None:
        res, verdict, slot_base, txn_base = a.results
        sb, tb = int(slot_base[self.executor]), int(txn_base[self.executor])
        for eb in a.stash:
            eb.fill(res, verdict, sb, tb)
            self._emit(ctx, eb)
        a.buf.reset()
        if st.buf is None:
            st.buf = a.buf
        else:
            st.spare = a.buf
        st.arrived = None
        st.group.posted(a.batch)

    # coarse-grained (the baselines) --------------------------------------------------------
    def _run_coarse(self, ctx, st) -> None:
        if st.pending is not None and not self._resume(ctx, st):
            return
        for _ in range(MAX_PACKETS_PER_RUN):
            if ctx.blocked:
                return
            item = ctx.recv("in")
            if item is None:
                if ctx.at_eos("in"):
                    ctx.close()
                    ctx.finish()
                return
            if isinstance(item, Batch):
                self._check_punct(st, item)
                continue
            if isinstance(item, Punctuation):
                continue
            buf = st.buf
            buf.reset()
            eb = self._register(st, item, buf)
            K = st.K
            ntx = buf.ntx
            ooff = np.empty(ntx + 1, np.int64)
            oo = np.empty(max(buf.n, 1), np.int64)
            kernel_for(K, "by_txn", buf.n)(ntx, buf.ib[:, 7], buf.n, ooff, oo)
            coff = np.empty(ntx + 1, np.int64)
            coo = np.empty(max(buf.nc, 1), np.int64)
            kernel_for(K, "by_txn", buf.nc)(ntx, buf.cb[:, 0], buf.nc, coff, coo)
            res = np.full(max(buf.nslots, 1), np.nan)
            verdict = np.ones(max(ntx, 1), np.int8)
            st.pending = [eb, ooff, oo, coff, coo, res, verdict, 0]
            if not self._resume(ctx, st):
                return
        ctx.reschedule()

    def _resume(self, ctx, st) -> bool:
        """Run the pending packet's transactions on; False if a wait returned (then a
        deferred re-run is requested)."""
        eb, ooff, oo, coff, coo, res, verdict, x = st.pending
        buf = st.buf
        base = st.group.base
        x = st.group.kcall(st.K.run_baseline, base.scheme, self.executor, x, buf.ntx, buf.tts, buf.ib, buf.fb, oo,
                           ooff, buf.cb, buf.cf, coo, coff, st.group.S, base.Y, base.V, base.X[self.executor], res,
                           verdict, st.spin, base.stats[self.executor])
        if x < -1:
            raise ValueError(f"a transaction of ts {int(buf.tts[-2 - x])} touches more than 64 records")
        if x < buf.ntx:
            st.pending[7] = x
            ctx.reschedule()
            return False
        st.pending = None
        eb.fill(res, verdict, 0, 0)
        self._emit(ctx, eb)
        return True

    # checks ------------------------------------------------------------------------------------
    def _check_ts(self, st, eb) -> None:
        if eb.n:
            lo = int(eb.ts.min())
            if lo < st.last_punct:
                raise ValueError(f"executor {self.executor}: event ts {lo} is below the last punctuation's "
                                 f"ts {st.last_punct}")

    def _check_punct(self, st, p) -> None:
        if p.ts <= st.last_punct:
            raise ValueError(f"executor {self.executor}: punctuation ts {p.ts} does not grow "
                             f"(last {st.last_punct})")
        st.last_punct = p.ts


class _Arrival:
    """One instance's batch from its arrival at barrier 1 until it post-processed it
    (module doc: protocol)."""

    __slots__ = ("batch", "buf", "stash", "final", "pib", "pfb", "poff", "pool_local", "results")

    def __init__(self, batch: int, buf, stash: list, final: bool):
        self.batch = batch
        self.buf = buf  # the batch's operation buffer (read by _start_batch)
        self.stash = stash  # its blotters, post-processed once the results are in
        self.final = final  # the instance reached its end of stream with this batch
        self.pib = self.pfb = self.poff = None  # its operations partitioned by pool
        self.pool_local = True  # no operation of it reads a record of another pool
        self.results = None  # (res, verdict, slot_base, txn_base), set by the group


class _State:
    """Per-instance driver state (touched only by the thread running the instance)."""

    def __init__(self, op, ctx):
        from bobox_sched.txn.coordinator import group_of

        cfg = op.txn_config
        self.group = group_of(ctx, cfg, op.executor)
        self.group.register(op.executor, self)
        self.task = ctx.task  # the runtime's record of this instance (the coordinator schedules it)
        self.K = self.group.K
        # the operator's access program (program.py), bound at its first packet
        prog = getattr(op, "program", None)
        self.prog = None if prog is None else prog.bind(op.store, self.K, self.group.nworkers, cfg.kernel_wrap)
        self.dual = cfg.dual_mode
        self.pipeline = cfg.pipeline
        # the baselines' spin budget (dual mode never spins; the first call measures the
        # cycle counter for 20 ms: core.atomics.cycles_per_second)
        self.spin = 0 if self.dual else cfg.spin_ticks(len(ctx.scheduler.workers))
        self.buf = OpBuffer.for_interval(cfg.interval)  # the batch being computed registers here
        self.spare = None  # the other buffer, free once its batch was post-processed
        self.stash: list = []
        self.arrived = None  # the batch handed over at barrier 1, not post-processed yet
        self.batch = 0  # the batch being computed
        self.last_punct = -1
        self.pending = None
        self.inbox = deque()  # input taken while the instance may not go on, in arrival order
        self.done = False  # ended (after its final batch's post-processing)


__all__ = ["TransactionalOperator"]
