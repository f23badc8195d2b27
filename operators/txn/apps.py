"""The TStream benchmark's four applications (spec 5), as transactional operators with
their state and event generators.

* **GS** (Grep and Sum): one table of 10k records of 128 B; a read event READs 10
  records and sums them (the Sum operator, fused into post-processing), a write event
  WRITEs 10 records. 50% reads.
* **SL** (Streaming Ledger): accounts and assets, 10k records of 100 B each. A deposit
  (2 operations) tops up one account and one asset; a transfer (4) moves an amount from
  one (account, asset) pair to another if the source account balance exceeds the minimum
  and the amount, and the source asset exceeds its amount -- else the whole transfer is
  rejected. 50/50. Every transfer operation depends on the source account and asset: the
  workload with dependencies (and cycles).
* **OB** (Online Bidding): 10k items with a price and a quantity (50 B). A bid (1
  operation) buys `bq` of an item if its price is at most the bid and its quantity
  suffices; an alter (20) sets the prices of 20 items; a top (20) adds to the quantities
  of 20 items. 6:1:1.
* **TP** (Toll Processing, fused Road Speed + Vehicle Count + Toll Notification): 100
  road segments; an event updates its segment's average speed (AVG2) and inserts its
  vehicle into the segment's vehicle set (SET_INSERT), one transaction of two
  READ_MODIFYs returning the new values; the toll ``2 (cnt - 50)^2`` if the average is
  below 40 and the count above 50 is computed in post-processing. No Linear Road data:
  segments Zipf(100, 0.2), vehicle ids uniform, speeds U(0, 100) (spec 5, ours).

Each app is an :class:`App`: ``make_store()``, ``events(n, seed)`` (a ``{column: array}``
table in stream order) and the operator class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bobox_sched.txn import (AVG2, DEC, GE, GT, INC, LE, SET_INSERT, StateStore, StateTable,
                             TransactionalOperator)
from bobox_sched.txn.program import Col, Derive, Program, Read, ReadModify, Require, Write

from operators.txn.workload import gen_keys


# -- operators -------------------------------------------------------------------------
# Each operator has two forms of the same transactions: its methods (pre_process /
# state_access / post_process: Python per packet, one kernel call per txn call) and,
# with ``program=True`` (the default), an access program (bobox_sched.txn.program): one
# kernel call per packet for the state access and one per derived column kernel. They
# register the same operations and emit the same columns (tests/test_txn_program.py).


def gs_sum(read, r, out):
    """GS's Sum: the ten reads of a read event added left to right, 0 for a write."""
    for i in range(read.shape[0]):
        if read[i]:
            s = r[i, 0]
            for j in range(1, r.shape[1]):
                s += r[i, j]
            out[i] = s
        else:
            out[i] = 0.0


def tp_toll(avg, cnt, toll):
    """TP's toll: 2 (cnt - 50)^2 where the segment's average speed is below 40 and its
    count above 50, else 0."""
    for i in range(avg.shape[0]):
        d = cnt[i] - 50.0
        toll[i] = 2.0 * (d * d) if avg[i] < 40.0 and cnt[i] > 50.0 else 0.0


class GrepSum(TransactionalOperator):
    LENGTH = 10

    def __init__(self, config, executor=0, with_sum=True, program=True):
        super().__init__(config, executor)
        self.with_sum = with_sum
        self.table = self.store["gs"]
        if program:
            self.program = Program(
                access=(Read("gs", "k", into="r", where="read"), Write("gs", "k", value="v", where=~Col("read"))),
                post=(Derive(gs_sum, ("read", "r"), (("sum", np.float64),)),) if with_sum else (),
                emit=("ts", "t_in", "ok", "sum") if with_sum else ("ts", "t_in", "ok"))

    def state_access(self, txn, eb):
        rd = eb["read"]
        # the ten keys of each event are one (events, 10) column: one call issues the ten
        # reads of every read event, one the ten writes of every write event
        k = eb["k"]
        txn.read(self.table, k, into="r", where=rd)
        txn.write(self.table, k, eb["v"], where=~rd)

    def post_process(self, eb):
        out = {"ts": eb.ts, "t_in": eb["t_in"], "ok": eb.success}
        if self.with_sum:
            # the reads' sum, left to right as gs_sum adds them (write events have no read
            # results: NaN, masked)
            out["sum"] = np.where(eb["read"], eb["r"].cumsum(axis=1)[:, -1], 0.0)
        return out


class Ledger(TransactionalOperator):
    MIN_BALANCE = 0.0

    def __init__(self, config, executor=0, program=True):
        super().__init__(config, executor)
        self.acc = self.store["accounts"]
        self.ast = self.store["assets"]
        if program:
            dep, tr = Col("kind") == 0, ~(Col("kind") == 0)
            self.program = Program(
                access=(ReadModify("accounts", "src", INC, param="a", where=dep),
                        ReadModify("assets", "src", INC, param="s", where=dep),
                        Require(GT("accounts", "src", self.MIN_BALANCE), GT("accounts", "src", Col("a")),
                                GT("assets", "src", Col("s")), where=tr),
                        ReadModify("accounts", "src", DEC, param="a", into="src_balance", where=tr),
                        ReadModify("assets", "src", DEC, param="s", where=tr),
                        ReadModify("accounts", "dst", INC, param="a", into="dst_balance", where=tr),
                        ReadModify("assets", "dst", INC, param="s", where=tr)),
                emit=("ts", "t_in", "ok", "src_balance", "dst_balance"))

    def state_access(self, txn, eb):
        dep = eb["kind"] == 0
        tr = ~dep
        src, dst, a, s = eb["src"], eb["dst"], eb["a"], eb["s"]
        acc, ast = self.acc, self.ast
        txn.read_modify(acc, src, INC, param=a, where=dep)
        txn.read_modify(ast, src, INC, param=s, where=dep)
        txn.require(GT(acc, src, self.MIN_BALANCE), GT(acc, src, a), GT(ast, src, s), where=tr)
        txn.read_modify(acc, src, DEC, param=a, into="src_balance", where=tr)
        txn.read_modify(ast, src, DEC, param=s, where=tr)
        txn.read_modify(acc, dst, INC, param=a, into="dst_balance", where=tr)
        txn.read_modify(ast, dst, INC, param=s, where=tr)

    def post_process(self, eb):
        return {"ts": eb.ts, "t_in": eb["t_in"], "ok": eb.success, "src_balance": eb["src_balance"],
                "dst_balance": eb["dst_balance"]}


class Bidding(TransactionalOperator):
    LENGTH = 20

    def __init__(self, config, executor=0, program=True):
        super().__init__(config, executor)
        self.price = self.store["price"]
        self.qty = self.store["qty"]
        if program:
            k0 = Col("k")[0]
            bid = Col("kind") == 0
            self.program = Program(
                access=(Require(LE("price", k0, Col("bp")), GE("qty", k0, Col("bq")), where=bid),
                        ReadModify("qty", k0, DEC, param="bq", into="left", where=bid),
                        Write("price", "k", value="v", where=Col("kind") == 1),
                        ReadModify("qty", "k", INC, param="v", where=Col("kind") == 2)),
                emit=("ts", "t_in", "ok", "left"))

    def state_access(self, txn, eb):
        kind = eb["kind"]
        bid, alter, top = kind == 0, kind == 1, kind == 2
        # an alter's 20 writes and a top's 20 increments, each one call: keys and values
        # are (events, 20) columns; a bid uses the first key
        k, v = eb["k"], eb["v"]
        k0 = k[:, 0]
        txn.require(LE(self.price, k0, eb["bp"]), GE(self.qty, k0, eb["bq"]), where=bid)
        txn.read_modify(self.qty, k0, DEC, param=eb["bq"], into="left", where=bid)
        txn.write(self.price, k, v, where=alter)
        txn.read_modify(self.qty, k, INC, param=v, where=top)

    def post_process(self, eb):
        return {"ts": eb.ts, "t_in": eb["t_in"], "ok": eb.success, "left": eb["left"]}


class TollProcessing(TransactionalOperator):
    def __init__(self, config, executor=0, program=True):
        super().__init__(config, executor)
        self.speed = self.store["speed"]
        self.count = self.store["count"]
        if program:
            self.program = Program(
                access=(ReadModify("speed", "seg", AVG2, param="speed", into="avg"),
                        ReadModify("count", "seg", SET_INSERT, param="vid", into="cnt")),
                post=(Derive(tp_toll, ("avg", "cnt"), (("toll", np.float64),)),),
                emit=("ts", "t_in", "ok", "toll"))

    def state_access(self, txn, eb):
        txn.read_modify(self.speed, eb["seg"], AVG2, param=eb["speed"], into="avg")
        txn.read_modify(self.count, eb["seg"], SET_INSERT, param=eb["vid"], into="cnt")

    def post_process(self, eb):
        avg, cnt = eb["avg"], eb["cnt"]
        d = cnt - 50.0
        toll = np.where((avg < 40) & (cnt > 50), 2.0 * (d * d), 0.0)
        return {"ts": eb.ts, "t_in": eb["t_in"], "ok": eb.success, "toll": toll}


# -- apps ------------------------------------------------------------------------------


@dataclass
class App:
    """One benchmark application and its workload parameters."""

    name: str
    theta: float = 0.6
    nkeys: int = 10_000
    nparts: int = 1  # partitions of the multi-partition generator (P = executors)
    mp_ratio: float = 0.25
    mp_len: int = 4
    read_ratio: float = 0.5  # GS
    with_sum: bool = True  # GS
    vehicles: int = 10_000  # TP
    program: bool = True  # the operators' access programs (else their methods)
    extra: dict = field(default_factory=dict)

    @property
    def operator(self):
        return {"gs": GrepSum, "sl": Ledger, "ob": Bidding, "tp": TollProcessing}[self.name]

    def operator_kwargs(self) -> dict:
        kw = {"program": self.program}
        if self.name == "gs":
            kw["with_sum"] = self.with_sum
        return kw

    def make_store(self, seed: int = 7) -> StateStore:
        rng = np.random.default_rng(seed)
        n = self.nkeys
        if self.name == "gs":
            return StateStore(StateTable("gs", n, record_bytes=128, init=rng.uniform(0, 100, n).round(2)))
        if self.name == "sl":
            return StateStore(StateTable("accounts", n, record_bytes=100, init=1000.0),
                              StateTable("assets", n, record_bytes=100, init=1000.0))
        if self.name == "ob":
            return StateStore(StateTable("price", n, record_bytes=50, init=rng.uniform(50, 150, n).round(2)),
                              StateTable("qty", n, record_bytes=50, init=1000.0))
        if self.name == "tp":
            return StateStore(StateTable("speed", n, record_bytes=80, init=0.0),
                              StateTable("count", n, set_capacity=self.vehicles, init=0.0))
        raise ValueError(f"unknown app {self.name!r}")

    def events(self, n: int, seed: int = 1) -> dict:
        """The event table, in stream order."""
        rng = np.random.default_rng(seed)
        kw = dict(theta=self.theta, nparts=self.nparts, mp_ratio=self.mp_ratio, mp_len=self.mp_len, seed=seed)
        if self.name == "gs":
            keys, _ = gen_keys(n, GrepSum.LENGTH, self.nkeys, **kw)
            # the ten keys as one (events, 10) column (the parser deals it in one step)
            ev = {"k": np.ascontiguousarray(keys[:, : GrepSum.LENGTH])}
            ev["read"] = rng.random(n) < self.read_ratio
            ev["v"] = rng.uniform(0, 100, n).round(2)
            return ev
        if self.name == "sl":
            keys, _ = gen_keys(n, 2, self.nkeys, distinct=True, **kw)
            return {"kind": (rng.random(n) < 0.5).astype(np.int64), "src": np.ascontiguousarray(keys[:, 0]),
                    "dst": np.ascontiguousarray(keys[:, 1]), "a": rng.integers(1, 100, n).astype(np.float64),
                    "s": rng.integers(1, 100, n).astype(np.float64)}
        if self.name == "ob":
            keys, _ = gen_keys(n, Bidding.LENGTH, self.nkeys, **kw)
            kind = rng.choice(3, size=n, p=[6 / 8, 1 / 8, 1 / 8]).astype(np.int64)
            ev = {"k": np.ascontiguousarray(keys[:, : Bidding.LENGTH])}
            ev["v"] = np.where(kind[:, None] == 1, rng.uniform(50, 150, (n, Bidding.LENGTH)).round(2),
                               rng.integers(1, 50, (n, Bidding.LENGTH)).astype(np.float64))
            ev["kind"] = kind
            ev["bp"] = rng.uniform(50, 150, n).round(2)
            ev["bq"] = rng.integers(1, 20, n).astype(np.float64)
            return ev
        if self.name == "tp":
            keys, _ = gen_keys(n, 1, self.nkeys, **kw)
            return {"seg": np.ascontiguousarray(keys[:, 0]), "vid": rng.integers(0, self.vehicles, n).astype(np.float64),
                    "speed": rng.uniform(0, 100, n).round(1)}
        raise ValueError(f"unknown app {self.name!r}")


def make_app(name: str, **kw) -> App:
    """The app `name` with the paper's defaults (TP: 100 segments, theta 0.2)."""
    if name == "tp":
        kw.setdefault("nkeys", 100)
        kw.setdefault("theta", 0.2)
    if name not in APPS:
        raise ValueError(f"unknown app {name!r} (one of {', '.join(APPS)})")
    return App(name, **kw)


APPS = ("gs", "sl", "ob", "tp")

__all__ = ["APPS", "App", "Bidding", "GrepSum", "Ledger", "TollProcessing", "make_app"]
