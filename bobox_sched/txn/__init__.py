"""Transactional shared state for stream operators (TStream, Zhang et al.; spec
``002-tstream.md``): state tables, transactional operators (pre-process / state access /
post-process), dual-mode scheduling between batch punctuations, operation chains
processed by nogil kernels in rounds, NUMA placement of the chain pools, and the LOCK /
MVLK / PAT / No-Lock baselines behind ``TxnConfig(cc=...)``.

Modules: ``table`` (StateTable, StateStore), ``funs`` (Fun, CFun and the generated
kernels), ``ops`` (the txn handle, EventBlotter), ``program`` (access programs: the
three steps declared, run as one kernel call per packet each), ``operator``
(TransactionalOperator), ``progress`` (the progress controller), ``coordinator``
(dual-mode scheduling), ``chains`` (a batch's arrays), ``placement`` (numa_mode),
``baselines``, ``oracle`` (serial timestamp-order execution), ``kernels`` (the nogil kernels' fragments,
joined into one generated module by ``funs.kernels``), ``core.atomics`` (the atomics the kernels emit).
"""

from bobox_sched.txn.config import NUMA_MODES, SCHEMES, TxnConfig
from bobox_sched.txn.funs import (ADD_SRC, AVG2, COPY, DEC, EQ, GE, GT, INC, LE, LT, NE, SET, SET_INSERT, CFun, Cond, Fun,
                   register_cfun, register_fun)
from bobox_sched.txn.operator import TransactionalOperator
from bobox_sched.txn.ops import EventBlotter, Txn
from bobox_sched.txn.program import Col, Derive, Program, Read, ReadModify, Require, Write
from bobox_sched.txn.progress import ProgressController
from bobox_sched.txn.table import StateStore, StateTable

__all__ = ["ADD_SRC", "AVG2", "CFun", "COPY", "Col", "Cond", "DEC", "Derive", "EQ", "EventBlotter", "Fun", "GE", "GT",
           "INC", "LE", "LT", "NE", "NUMA_MODES", "Program", "ProgressController", "Read", "ReadModify", "Require",
           "SCHEMES", "SET", "SET_INSERT", "StateStore", "StateTable", "TransactionalOperator", "Txn", "TxnConfig",
           "Write", "register_cfun", "register_fun"]
