"""The correctness oracle (spec 1.5): the same operator's transactions run serially in
timestamp order, one at a time, on a copy of the state.

:func:`record` runs ``pre_process`` and ``state_access`` of an operator (or its access
program, ``program.py``) over packets, without a scheduler, registering the operations;
:func:`serial_oracle` executes them in ts order (the nogil kernel ``serial_run``: pre-transaction values for sources and
conditions, the AND of the conditions, operations in issue order, a constraint violation
undoes the whole transaction) and returns the final records and every post-processed
output. :func:`reference_run` is the same semantics in plain Python (small inputs:
tests use it to check the kernel itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bobox_sched.txn.funs import _cfuns, _funs, kernels
from bobox_sched.txn.ops import EventBlotter, OpBuffer, Txn


@dataclass
class Recording:
    buf: OpBuffer
    blotters: list
    program: object = None  # the operator's bound access program (program.py), if it has one


def record(op, packets) -> Recording:
    """Pre-process and register the state access of every packet (any order): by the
    operator's access program if it has one, else by its methods."""
    K = kernels()
    buf = OpBuffer()
    ebs = []
    prog = getattr(op, "program", None)
    bound = None if prog is None else prog.bind(op.store, K, 0)
    for pkt in packets:
        if bound is not None:
            eb = bound.blotter(pkt)
            bound.register(eb, buf)
            ebs.append(eb)
            continue
        eb = op.pre_process(pkt)
        if not isinstance(eb, EventBlotter):
            raise TypeError(f"pre_process must return an EventBlotter, got {type(eb).__name__}")
        txn = Txn(K, buf, op.store, eb)
        op.state_access(txn, eb)
        ebs.append(eb)
    return Recording(buf, ebs, bound)


def serial_run(store, rec: Recording):
    """Execute `rec` serially in ts order on `store` (modified). Returns (res, verdict,
    aborted transactions)."""
    K = kernels()
    b = rec.buf
    res = np.full(max(b.nslots, 1), np.nan)
    verdict = np.ones(max(b.ntx, 1), np.int8)
    ab = K.serial_run(b.ntx, b.tts, b.ib, b.fb, b.n, b.cb, b.cf, b.nc, store.view(), res, verdict, store.width)
    if ab < 0:
        raise ValueError("a transaction touches more than 256 records")
    return res, verdict, int(ab)


def serial_oracle(op, store, packets):
    """(final records ``[g, field]``, post-processed outputs in packet order, blotters)
    of running `op`'s transactions serially in ts order on a copy of `store`."""
    work = store.copy()
    op_store = op.store
    op.store = work  # register against the copy's tables (same ids and bases)
    try:
        rec = record(op, packets)
        res, verdict, _ = serial_run(work, rec)
        outs = []
        for eb in rec.blotters:
            eb.fill(res, verdict, 0, 0)
            if rec.program is None:
                outs.append(op.post_process(eb))
            else:
                out = rec.program.emit(eb)
                outs.append(None if out is None else out.columns)
    finally:
        op.store = op_store
    return work.dense(), outs, rec.blotters


def _py(source: str):
    ns = {"np": np}
    exec(source, ns)  # noqa: S102 - the registered functions' own source
    return next(v for k, v in ns.items() if callable(v) and k != "np")


def reference_run(store, rec: Recording):
    """The oracle in plain Python, for small inputs (tests cross-check ``serial_run``
    with it). Works on ``store.dense()``; returns (rows, res, verdict)."""
    funs = {f.code: _py(f.source) for f in _funs}
    cfuns = {c.code: _py(c.source) for c in _cfuns}
    rows = store.dense()
    rows_i = rows.view(np.int64)
    b = rec.buf
    res = np.full(max(b.nslots, 1), np.nan)
    verdict = np.ones(max(b.ntx, 1), np.int8)
    ops_of: dict = {x: [] for x in range(b.ntx)}
    for i in range(b.n):
        ops_of[int(b.ib[i, 7])].append(i)
    conds_of: dict = {x: [] for x in range(b.ntx)}
    for c in range(b.nc):
        conds_of[int(b.cb[c, 0])].append(c)
    for x in sorted(range(b.ntx), key=lambda x: b.tts[x]):
        before = {}
        for i in ops_of[x]:
            for g in (int(b.ib[i, 2]), int(b.ib[i, 5])):
                if g >= 0:
                    before[g] = rows[g].copy()
        for c in conds_of[x]:
            for g in (int(b.cb[c, 1]), int(b.cb[c, 3])):
                if g >= 0:
                    before[g] = rows[g].copy()
        ok = all(cfuns[int(b.cb[c, 2])](before[int(b.cb[c, 1])][0],
                                        b.cf[c] if b.cb[c, 3] < 0 else before[int(b.cb[c, 3])][0])
                 for c in conds_of[x])
        verdict[x] = ok
        aborted = False
        for i in ops_of[x]:
            g, kind, src = int(b.ib[i, 2]), int(b.ib[i, 3]), int(b.ib[i, 5])
            cur = rows[g, 0]
            if kind != 0 and ok:
                srcv = 0.0 if src < 0 else (cur if src == g else before[src][0])
                nv = b.fb[i] if kind == 1 else funs[int(b.ib[i, 4])](cur, srcv, b.fb[i], rows_i[g, 1:])
                t = store.tables[int(store.rec_table[g])]
                if not (t.lo <= nv <= t.hi):
                    aborted = True
                    break
                rows[g, 0] = cur = nv
            if b.ib[i, 6] >= 0:
                res[b.ib[i, 6]] = cur
        if aborted:
            for g, r in before.items():
                rows[g] = r
            for i in ops_of[x]:
                if b.ib[i, 6] >= 0:
                    res[b.ib[i, 6]] = np.nan
            verdict[x] = 0
    return rows, res, verdict


__all__ = ["Recording", "record", "reference_run", "serial_oracle", "serial_run"]
