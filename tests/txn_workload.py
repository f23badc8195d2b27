"""Random transactional workloads for the tests: a generic operator whose events carry up
to ``SLOTS`` operations each (read / write / read_modify with any built-in Fun, with or
without a source record in another table) and up to two conditions, over two tables --
one of them optionally constrained (writes below 0 abort) -- plus helpers that run a
workload under a scheduler and under the serial oracle."""

from __future__ import annotations

import functools

import numpy as np

from bobox_sched import Plan, Scheduler
from bobox_sched.core.packet import Packet
from bobox_sched.txn import (ADD_SRC, AVG2, COPY, DEC, GE, GT, INC, LE, LT, NE, SET, ProgressController,
                             StateStore, StateTable, TransactionalOperator, TxnConfig)
from bobox_sched.txn.oracle import serial_oracle
from bobox_sched.txn.progress import ArrayParser
from operators.txn.plan import TxnSink

SLOTS = 4
FUNS = (INC, DEC, SET, AVG2, ADD_SRC, COPY)
CFUNS = (GE, GT, LE, LT, NE)
NONE, READ, WRITE, RMW = 0, 1, 2, 3


def make_store(nkeys: int, constrained: bool = False, seed: int = 0) -> StateStore:
    rng = np.random.default_rng(seed)
    a = StateTable("a", nkeys, record_bytes=24, init=rng.integers(0, 50, nkeys).astype(float))
    b = StateTable("b", nkeys, init=rng.integers(0, 50, nkeys).astype(float),
                   constraint=(0.0, None) if constrained else None)
    return StateStore(a, b)


def make_events(n: int, nkeys: int, theta: float, seed: int, deps: bool = True, conds: bool = True,
                kinds=(READ, WRITE, RMW), cycles: bool = False) -> dict:
    """`n` events of random operations; keys Zipf(theta). With `cycles`, every event
    is an SL-style pair: READ_MODIFY of a[k1] and b[k1], each conditioned on both (a
    cycle a[k1] <-> b[k1] in every batch), plus a transfer to a[k2]."""
    from operators.txn.workload import zipf_cdf

    rng = np.random.default_rng(seed)
    cdf = zipf_cdf(nkeys, theta)

    def keys(m):
        return np.minimum(np.searchsorted(cdf, rng.random(m)), nkeys - 1).astype(np.int64)

    ev = {}
    for j in range(SLOTS):
        ev[f"kind{j}"] = rng.choice(np.array(kinds + (NONE,)), size=n, p=None).astype(np.int64)
        ev[f"tab{j}"] = rng.integers(0, 2, n).astype(np.int64)
        ev[f"key{j}"] = keys(n)
        ev[f"val{j}"] = rng.integers(-5, 30, n).astype(float)
        ev[f"fun{j}"] = rng.integers(0, len(FUNS) if deps else 4, n).astype(np.int64)
        ev[f"stab{j}"] = rng.integers(0, 2, n).astype(np.int64)
        ev[f"skey{j}"] = keys(n)
    for c in range(2):
        ev[f"ckind{c}"] = (rng.integers(0, 3, n) if conds else np.zeros(n)).astype(np.int64)  # 0 none 1 const 2 rec
        ev[f"ctab{c}"] = rng.integers(0, 2, n).astype(np.int64)
        ev[f"ckey{c}"] = keys(n)
        ev[f"ccode{c}"] = rng.integers(0, len(CFUNS), n).astype(np.int64)
        ev[f"crhs{c}"] = rng.integers(0, 60, n).astype(float)
        ev[f"ctab2{c}"] = rng.integers(0, 2, n).astype(np.int64)
        ev[f"ckey2{c}"] = keys(n)
    if cycles:
        k1, k2 = keys(n), keys(n)
        ev["cyc"] = np.ones(n, np.bool_)
        ev["ck1"], ev["ck2"] = k1, k2
    else:
        ev["cyc"] = np.zeros(n, np.bool_)
        ev["ck1"] = ev["ck2"] = np.zeros(n, np.int64)
    return ev


class RandomOp(TransactionalOperator):
    """Issues each event's operations slot by slot (vectorized: one masked call per
    (slot, kind, table, fun, source table))."""

    def state_access(self, txn, eb):
        st = self.store
        tabs = (st["a"], st["b"])
        cyc = eb["cyc"]
        if cyc.any():
            a, b = tabs
            k1, k2 = eb["ck1"], eb["ck2"]
            txn.require(GT(a, k1, (b, k1)), GE(b, k1, 0.0), where=cyc)
            txn.read_modify(a, k1, DEC, param=1.0, src=(b, k1), into="cy0", where=cyc)
            txn.read_modify(b, k1, ADD_SRC, src=(a, k1), into="cy1", where=cyc)
            txn.read_modify(a, k2, INC, param=1.0, into="cy2", where=cyc)
        for c in range(2):
            ck = eb[f"ckind{c}"]
            for t in range(2):
                for code, cf in enumerate(CFUNS):
                    base = (eb[f"ctab{c}"] == t) & (eb[f"ccode{c}"] == code)
                    m1 = base & (ck == 1)
                    if m1.any():
                        txn.require(cf(tabs[t], eb[f"ckey{c}"], eb[f"crhs{c}"]), where=m1)
                    for t2 in range(2):
                        m2 = base & (ck == 2) & (eb[f"ctab2{c}"] == t2)
                        if m2.any():
                            txn.require(cf(tabs[t], eb[f"ckey{c}"], (tabs[t2], eb[f"ckey2{c}"])), where=m2)
        for j in range(SLOTS):
            kind, tab, key = eb[f"kind{j}"], eb[f"tab{j}"], eb[f"key{j}"]
            for t in range(2):
                on = tab == t
                txn.read(tabs[t], key, into=f"r{j}_{t}", where=on & (kind == READ))
                txn.write(tabs[t], key, eb[f"val{j}"], where=on & (kind == WRITE))
                for f, fun in enumerate(FUNS):
                    m = on & (kind == RMW) & (eb[f"fun{j}"] == f)
                    if not m.any():
                        continue
                    if fun in (ADD_SRC, COPY):
                        for t2 in range(2):
                            m2 = m & (eb[f"stab{j}"] == t2)
                            if m2.any():
                                txn.read_modify(tabs[t], key, fun, src=(tabs[t2], eb[f"skey{j}"]),
                                                into=f"m{j}_{t}_{f}_{t2}", where=m2)
                    else:
                        txn.read_modify(tabs[t], key, fun, param=eb[f"val{j}"], into=f"m{j}_{t}_{f}", where=m)

    def post_process(self, eb):
        out = {"ts": eb.ts, "ok": eb.success}
        for name, col in eb.columns.items():
            out[name] = col
        return out


def random_selectors(kind0, kind1, kind2, kind3, tab0, tab1, tab2, tab3, fun0, fun1, fun2, fun3, stab0, stab1,
                     stab2, stab3, ckind0, ckind1, ctab0, ctab1, ccode0, ccode1, ctab20, ctab21, kt, ktfs, cs):
    """RandomProgramOp's pre kernel: per slot j ``kt[:, j]`` = kind * 10 + table and
    ``ktfs[:, j]`` = kind * 1000 + table * 100 + fun * 10 + source table (0 for the funs
    without a source); per condition c
    ``cs[:, c]`` = ckind * 1000 + ctab * 100 + ccode * 10 + (ctab2 if ckind == 2 else 0)."""
    for r in range(kind0.shape[0]):
        for j in range(4):
            if j == 0:
                k, t, f, s2 = kind0[r], tab0[r], fun0[r], stab0[r]
            elif j == 1:
                k, t, f, s2 = kind1[r], tab1[r], fun1[r], stab1[r]
            elif j == 2:
                k, t, f, s2 = kind2[r], tab2[r], fun2[r], stab2[r]
            else:
                k, t, f, s2 = kind3[r], tab3[r], fun3[r], stab3[r]
            kt[r, j] = k * 10 + t
            ktfs[r, j] = k * 1000 + t * 100 + f * 10 + (s2 if f >= 4 else 0)  # FUNS[4:]: with a source
        for c in range(2):
            if c == 0:
                ck, ct, cc, ct2 = ckind0[r], ctab0[r], ccode0[r], ctab20[r]
            else:
                ck, ct, cc, ct2 = ckind1[r], ctab1[r], ccode1[r], ctab21[r]
            cs[r, c] = ck * 1000 + ct * 100 + cc * 10 + (ct2 if ck == 2 else 0)


def random_program():
    """RandomOp's transactions as an access program: the same steps in the same order,
    each step's compound mask a comparison with one of the pre kernel's selectors. Every
    step is issued (RandomOp skips the calls no row selects), so it has more, all-NaN,
    result columns; ``_merge_outputs`` makes the missing ones NaN, which compares equal."""
    from bobox_sched.txn.program import Col, Derive, Program, Read, ReadModify, Require, Write

    ins = tuple(f"{c}{j}" for c in ("kind", "tab", "fun", "stab") for j in range(SLOTS))
    ins += ("ckind0", "ckind1", "ctab0", "ctab1", "ccode0", "ccode1", "ctab20", "ctab21")
    pre = Derive(random_selectors, ins, (("kt", np.int64, SLOTS), ("ktfs", np.int64, SLOTS), ("cs", np.int64, 2)))
    cyc = Col("cyc")
    steps = [Require(GT("a", "ck1", ("b", "ck1")), GE("b", "ck1", 0.0), where=cyc),
             ReadModify("a", "ck1", DEC, param=1.0, src=("b", "ck1"), into="cy0", where=cyc),
             ReadModify("b", "ck1", ADD_SRC, src=("a", "ck1"), into="cy1", where=cyc),
             ReadModify("a", "ck2", INC, param=1.0, into="cy2", where=cyc)]
    tabs = ("a", "b")
    for c in range(2):
        for t in range(2):
            for code, cf in enumerate(CFUNS):
                steps.append(Require(cf(tabs[t], f"ckey{c}", Col(f"crhs{c}")),
                                     where=Col("cs")[c] == 1000 + t * 100 + code * 10))
                for t2 in range(2):
                    steps.append(Require(cf(tabs[t], f"ckey{c}", (tabs[t2], f"ckey2{c}")),
                                         where=Col("cs")[c] == 2000 + t * 100 + code * 10 + t2))
    for j in range(SLOTS):
        for t in range(2):
            steps.append(Read(tabs[t], f"key{j}", into=f"r{j}_{t}", where=Col("kt")[j] == READ * 10 + t))
            steps.append(Write(tabs[t], f"key{j}", f"val{j}", where=Col("kt")[j] == WRITE * 10 + t))
            for f, fun in enumerate(FUNS):
                if fun in (ADD_SRC, COPY):
                    for t2 in range(2):
                        steps.append(ReadModify(tabs[t], f"key{j}", fun, src=(tabs[t2], f"skey{j}"),
                                                into=f"m{j}_{t}_{f}_{t2}",
                                                where=Col("ktfs")[j] == RMW * 1000 + t * 100 + f * 10 + t2))
                else:
                    steps.append(ReadModify(tabs[t], f"key{j}", fun, param=f"val{j}", into=f"m{j}_{t}_{f}",
                                            where=Col("ktfs")[j] == RMW * 1000 + t * 100 + f * 10))
    intos = [x.into for x in steps if getattr(x, "into", None)]
    return Program(access=steps, pre=(pre,), emit=("ts", "ok", *intos))


class RandomProgramOp(TransactionalOperator):
    """RandomOp as an access program (``random_program``); its output: ts, ok and every
    result column, as RandomOp's."""

    def __init__(self, config, executor=0):
        super().__init__(config, executor)
        self.program = _random_program()

    def state_access(self, txn, eb):  # never called: the program registers the operations
        raise AssertionError("an operator with a program does not run state_access")

    def post_process(self, eb):  # never called: the program emits
        raise AssertionError("an operator with a program does not run post_process")


@functools.lru_cache(maxsize=1)
def _random_program():
    return random_program()


def _merge_outputs(packets) -> dict:
    """Rows by ts; result columns may differ between packets (only the calls a packet
    made exist): missing ones are NaN."""
    names = set()
    for p in packets:
        names.update(p.names)
    n = sum(p.nrows for p in packets)
    ts = np.concatenate([p["ts"] for p in packets]) if packets else np.zeros(0, np.int64)
    order = np.argsort(ts, kind="stable")
    out = {"ts": ts[order], "ok": np.concatenate([p["ok"] for p in packets])[order] if packets else ts}
    for name in sorted(names - {"ts", "ok", "t_in"}):
        col = np.full(n, np.nan)
        k = 0
        for p in packets:
            if name in p:
                col[k:k + p.nrows] = p[name]
            k += p.nrows
        out[name] = col[order]
    return out


def run_scheduled(store, events: dict, cfg: TxnConfig, policy: str = "bobox", threads: int = 2, topology=None,
                  controller: bool = False, packet_rows: int = 64, op=RandomOp, timeout: float = 120):
    """Run `op` over `events` with cfg.executors instances: (final records, outputs by ts,
    group summary, request)."""
    T = cfg.executors
    plan = Plan("txn-test")
    if controller:
        n = len(next(iter(events.values())))
        cols = dict(events)

        from bobox_sched.core.sources import GeneratorSource

        def make(ctx, i, cols=cols, n=n):
            lo = i * packet_rows
            if lo >= n:
                return None
            return Packet({k: v[lo:lo + packet_rows] for k, v in cols.items()})

        plan.add("src", GeneratorSource, make)
        plan.add("parser", ProgressController, T, cfg.interval, cfg)
        plan.connect("src", "parser")
    else:
        plan.add("parser", ArrayParser, events, T, cfg.interval, cfg, packet_rows)
    plan.add("sink", _KeepAll, T)
    for t in range(T):
        plan.add(f"op{t}", op, cfg, t)
        plan.connect(f"parser.out{t}", f"op{t}")
        plan.connect(f"op{t}", f"sink.in{t}")
    with Scheduler(policy=policy, threads_per_node=threads, pin=False, topology=topology) as s:
        h = s.submit(plan)
        packets = h.result(timeout=timeout)
        req = h._request
    grp = req.__dict__["txn_groups"][cfg.name]
    return store.dense(), _merge_outputs(packets), grp.summary(), grp


class _KeepAll(TxnSink):
    def __init__(self, inputs):
        super().__init__(inputs, keep=True)

    def on_end(self, ctx):
        ctx.set_result(self.kept)


def pat_seq(store, events: dict, parts: int, op=RandomOp) -> np.ndarray:
    """PAT's per-partition sequence numbers of `events` (S-Store's bid array)."""
    from bobox_sched.txn.baselines import pat_sequence
    from bobox_sched.txn.oracle import record

    n = len(next(iter(events.values())))
    cols = dict(events)
    cols["ts"] = np.arange(n, dtype=np.int64)
    return pat_sequence(record(op(TxnConfig(store, 1), 0), [Packet(cols)]), store, parts)


def run_oracle(store, events: dict, op=RandomOp):
    n = len(next(iter(events.values())))
    cols = dict(events)
    cols["ts"] = np.arange(n, dtype=np.int64)
    inst = op(TxnConfig(store, 1), 0)
    dense, outs, _ = serial_oracle(inst, store, [Packet(cols)])
    o = outs[0]
    pk = Packet({k: np.asarray(v) for k, v in o.items()})
    return dense, _merge_outputs([pk])


def same(out_a: dict, out_b: dict) -> str | None:
    """None if equal (success flags everywhere, values where the transaction succeeded),
    else what differs."""
    if not np.array_equal(out_a["ts"], out_b["ts"]):
        return "ts differ"
    if not np.array_equal(out_a["ok"], out_b["ok"]):
        bad = np.flatnonzero(out_a["ok"] != out_b["ok"])
        return f"success flags differ at ts {out_a['ts'][bad[:5]]}"
    ok = out_b["ok"].astype(bool)
    for k in set(out_a) | set(out_b):
        if k in ("ts", "ok"):
            continue
        a = out_a.get(k, np.full(ok.size, np.nan))[ok]
        b = out_b.get(k, np.full(ok.size, np.nan))[ok]
        if not np.array_equal(a, b, equal_nan=True):
            bad = np.flatnonzero(~((a == b) | (np.isnan(a) & np.isnan(b))))
            return f"column {k} differs at {bad[:5]}: {a[bad[:3]]} vs {b[bad[:3]]}"
    return None
