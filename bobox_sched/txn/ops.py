"""Registering operations: the ``txn`` handle a ``state_access`` call gets, the event
blotter, and the per-instance buffers the operations go to.

One ``state_access(txn, eb)`` call covers one packet: every row is an event, and the
operations a row issues form its *state transaction* (Def. 1), with the row's ``ts``.
Each ``txn.read`` / ``txn.write`` / ``txn.read_modify`` call issues **one operation per
row** (per row selected by ``where``), vectorized: keys, values and parameters are
arrays (or scalars); with keys of shape (rows, L) it issues L operations per row, as L
calls with the columns in order would, in one call (GS's ten reads: one call, not
ten -- each call is Python under the GIL). Values, parameters and source keys are then
(rows,) (shared by the row's operations) or (rows, L), and ``into`` names a (rows, L)
column. Within a transaction operations keep their issue order (``seq``: the call's
position in the ``state_access`` call, and the column within a call, spec 1.5).

* ``txn.read(table, keys, into="x")``: the record's value goes to blotter column ``x``.
* ``txn.write(table, keys, values)``: state(d) <- value.
* ``txn.read_modify(table, keys, fun, param=, src=(table2, keys2), into=)``:
  state(d) <- fun(state(d), state(src) as of transaction start, param); the new value
  goes to ``into``.
* ``txn.require(GT(table, keys, rhs), ...)`` (or ``cond=`` on any call): conditions of
  the row's transaction. Its verdict is the AND of all of them on pre-transaction values;
  a false verdict rejects the whole transaction (none of its writes happen,
  ``eb.success`` is False), spec 1.8a.

Buffers (``OpBuffer``) belong to one operator instance and are touched only by the
thread running it, and by the batch's state-access tasks after the instance arrived at
the batch's barrier (then the instance does not touch them until its post-processing).
"""

from __future__ import annotations

import numpy as np

from bobox_sched.txn.funs import Cond, Fun
from bobox_sched.txn.kernels.fields import NF, READ, RMW, WRITE
from bobox_sched.txn.table import StateTable

# Operations one state_access call may issue per row: the baselines take a lock per
# record of a transaction in a fixed-size scratch (64 records), the oracle 256.
MAX_OPS_PER_TXN = 255


class OpBuffer:
    """Growable operation, condition and transaction buffers of one instance."""

    def __init__(self, cap: int = 1024, txns: int = 256, conds: int = 64):
        self.ib = np.empty((cap, NF), np.int64)
        self.fb = np.empty(cap, np.float64)
        self.cb = np.empty((conds, 4), np.int64)
        self.cf = np.empty(conds, np.float64)
        self.tts = np.empty(txns, np.int64)
        self.reset()

    @classmethod
    def for_interval(cls, interval: int) -> "OpBuffer":
        """A buffer sized for a batch of `interval` events (one executor's share): room
        for 16 operations and 2 conditions an event (GS issues 10, OB up to 20, SL 4), at
        most 65 536 operations (4.7 MB) up front; it grows beyond. Growing from the
        default sizes cost the first batch of every request 3-4 copies of its operations
        (GS at interval 500: batch 0's events took 1.6-1.9 ms against 0.9-1.1 ms later)."""
        return cls(min(max(1024, 16 * interval), 1 << 16), max(256, interval), min(max(64, 2 * interval), 1 << 14))

    def reset(self) -> None:
        self.n = 0  # operations
        self.nc = 0  # conditions
        self.ntx = 0  # transactions (rows)
        self.nslots = 0  # result slots
        self.has_src = False  # an operation reads another record (src=)

    def reserve_ops(self, k: int) -> None:
        need = self.n + k
        if need > self.ib.shape[0]:
            cap = max(need, 2 * self.ib.shape[0])
            ib = np.empty((cap, NF), np.int64)
            ib[: self.n] = self.ib[: self.n]
            fb = np.empty(cap, np.float64)
            fb[: self.n] = self.fb[: self.n]
            self.ib, self.fb = ib, fb

    def reserve_conds(self, k: int) -> None:
        need = self.nc + k
        if need > self.cb.shape[0]:
            cap = max(need, 2 * self.cb.shape[0])
            cb = np.empty((cap, 4), np.int64)
            cb[: self.nc] = self.cb[: self.nc]
            cf = np.empty(cap, np.float64)
            cf[: self.nc] = self.cf[: self.nc]
            self.cb, self.cf = cb, cf

    def add_txns(self, ts: np.ndarray) -> int:
        """Register one transaction per row (timestamps `ts`); returns the first's index."""
        k = ts.shape[0]
        need = self.ntx + k
        if need > self.tts.shape[0]:
            t = np.empty(max(need, 2 * self.tts.shape[0]), np.int64)
            t[: self.ntx] = self.tts[: self.ntx]
            self.tts = t
        x0 = self.ntx
        self.tts[x0:need] = ts
        self.ntx = need
        return x0


class EventBlotter:
    """Per-packet access results (TStream's EventBlotter, vectorized): the input
    ``event`` packet, its ``ts``, the result columns named by ``into=`` and ``success``
    (False where the transaction was rejected or aborted). ``eb[name]`` looks up a result
    column, then a column set by ``pre_process`` (``eb[name] = array``), then the event's."""

    __slots__ = ("event", "n", "ts", "columns", "success", "slots", "txn0", "t_in", "data")

    def __init__(self, event, ts=None):
        self.event = event
        cols = getattr(event, "columns", event)
        n = len(next(iter(cols.values()))) if cols else 0
        self.n = n
        self.ts = np.asarray(cols["ts"] if ts is None else ts, np.int64)
        self.columns: dict = {}
        self.success = None
        self.slots: dict = {}  # result column -> first local slot
        self.txn0 = -1
        self.data: dict = {}
        self.t_in = None

    def __getitem__(self, name: str):
        if name in self.columns:
            return self.columns[name]
        if name in self.data:
            return self.data[name]
        cols = getattr(self.event, "columns", self.event)
        return cols[name]

    def __setitem__(self, name: str, value) -> None:
        self.data[name] = value

    def __contains__(self, name: str) -> bool:
        cols = getattr(self.event, "columns", self.event)
        return name in self.columns or name in self.data or name in cols

    def __len__(self) -> int:
        return self.n

    def fill(self, res: np.ndarray, verdict: np.ndarray, slot_base: int, txn_base: int) -> None:
        """Point the result columns at the batch's result slots ((rows, L) for a call
        with 2-D keys)."""
        n = self.n
        for name, (s, L) in self.slots.items():  # L 0: a call with 1-D keys
            a = slot_base + s
            self.columns[name] = res[a:a + n] if L == 0 else res[a:a + n * L].reshape(n, L)
        t = txn_base + self.txn0
        self.success = verdict[t:t + self.n] != 0


def _keys(keys, n: int, what: str, two_d: bool = False) -> np.ndarray:
    """Keys as int64: (n,) one per row; with `two_d` also (n, L), L per row."""
    k = np.asarray(keys)
    if k.ndim == 0:
        return np.full(n, int(k), np.int64)
    if k.shape != (n,) and not (two_d and k.ndim == 2 and k.shape[0] == n and k.shape[1] >= 1):
        raise ValueError(f"{what}: expected {n} keys (one per event{', or (events, L)' if two_d else ''}), got "
                         f"shape {k.shape}")
    if k.dtype.kind not in "iu":
        raise ValueError(f"{what}: keys must be integers, got {k.dtype}")
    return np.ascontiguousarray(k, np.int64)


def _floats(v, n: int, what: str, L: int = 0) -> np.ndarray:
    """Values as float64: (n,) one per row, or (n, L) when `L` (a call with 2-D keys)."""
    a = np.asarray(v, np.float64)
    if a.ndim == 0:
        return np.full(n, float(a), np.float64)
    if a.shape != (n,) and not (L and a.shape == (n, L)):
        raise ValueError(f"{what}: expected {n} values (one per event{f', or ({n}, {L})' if L else ''}), got "
                         f"shape {a.shape}")
    return np.ascontiguousarray(a)


def _cols(a: np.ndarray) -> np.ndarray:
    """(n,) -> (n, 1) (a view): the kernels take one column per operation of a row."""
    return a if a.ndim == 2 else a.reshape(a.shape[0], 1)


def resolve_table(store, table) -> StateTable:
    """`table` (a name, or a StateTable of `store` or of a copy of it -- the oracle runs
    on copies -- with the same id) as a table of `store`."""
    if isinstance(table, str):
        t = store.by_name.get(table)
        if t is None:
            raise ValueError(f"no table {table!r} in the store (its tables: {', '.join(store.by_name)})")
        return t
    if isinstance(table, StateTable) and table.store is not None:
        if table.store is store:
            return table
        if 0 <= table.id < len(store.tables):
            mine = store.tables[table.id]
            if mine.name == table.name and mine.nkeys == table.nkeys:
                return mine
    raise ValueError(f"{table!r} is not a table of this operator's store")


_EMPTY_I = np.zeros(1, np.int64)
_EMPTY_I2 = np.zeros((1, 1), np.int64)
_EMPTY_B = np.zeros(1, np.bool_)


class Txn:
    """The handle ``state_access(txn, eb)`` issues operations through (module doc)."""

    def __init__(self, K, buf: OpBuffer, store, eb: EventBlotter):
        self._K = K
        self._buf = buf
        self._store = store
        self._eb = eb
        self.n = eb.n
        self.ts = eb.ts
        self._seq = 0
        self.txn0 = buf.add_txns(eb.ts)
        eb.txn0 = self.txn0

    def _table(self, table) -> StateTable:
        return resolve_table(self._store, table)

    def _mask(self, where):
        """(mask, use it?, rows to reserve): every row, an upper bound of the selected
        ones -- counting them (``m.sum()``) would be one more GIL-held numpy call per
        operation call, and the buffers grow geometrically anyway."""
        if where is None:
            return _EMPTY_B, False, self.n
        m = np.asarray(where)
        if m.shape != (self.n,) or m.dtype != np.bool_:
            raise ValueError(f"where= must be a boolean array of {self.n} rows")
        return m, True, self.n

    def _slot(self, into, L: int = 0):
        if into is None:
            return -1
        if not isinstance(into, str) or not into:
            raise ValueError(f"into= must be a column name, got {into!r}")
        eb = self._eb
        if into in eb.slots:
            raise ValueError(f"result column {into!r} is written twice in one state_access")
        s = self._buf.nslots
        eb.slots[into] = (s, L)
        self._buf.nslots = s + self.n * max(L, 1)
        return s

    def _issue(self, kind, table, keys, fun, params, src, into, where, cond):
        t = self._table(table)
        if cond is not None:
            self.require(*(cond if isinstance(cond, (list, tuple)) else (cond,)), where=where)
        keys = _keys(keys, self.n, t.name, two_d=True)
        L = keys.shape[1] if keys.ndim == 2 else 0  # 0: 1-D keys, one operation per row
        if self._seq + max(L, 1) > MAX_OPS_PER_TXN:
            raise ValueError(f"more than {MAX_OPS_PER_TXN} operations in one transaction")
        params = _floats(params, self.n, "values" if kind == WRITE else "param", L)
        mask, use_mask, m = self._mask(where)
        if src is not None:
            try:
                st, sk = src
            except (TypeError, ValueError):
                raise ValueError("src= must be a (table, keys) pair") from None
            st = self._table(st)
            skeys = _keys(sk, self.n, st.name, two_d=L > 0)
            if skeys.ndim == 2 and skeys.shape[1] != L:
                raise ValueError(f"src= keys: expected ({self.n},) or ({self.n}, {L}), got shape {skeys.shape}")
            skeys = _cols(skeys)
            sbase, snk = st.base, st.nkeys
            self._buf.has_src = True
        else:
            skeys, sbase, snk = _EMPTY_I2, -1, 0
        out0 = self._slot(into, L)
        buf = self._buf
        buf.reserve_ops(m * max(L, 1))
        r = self._K.append_ops(buf.ib, buf.fb, buf.n, self.ts, self._seq, _cols(keys), t.base, t.nkeys, kind, fun,
                               _cols(params), skeys, sbase, snk, out0, self.txn0, mask, use_mask)
        if r < 0:
            row = -1 - r
            raise IndexError(f"table {t.name!r}: key {keys[row]} (or its source key) of event ts={self.ts[row]} "
                             f"is outside 0..{t.nkeys - 1}")
        buf.n = r
        self._seq += max(L, 1)

    def read(self, table, keys, into: str, where=None) -> None:
        """READ: the value of ``table[keys]`` (per row; keys (rows, L): L reads per row,
        `into` a (rows, L) column) goes to blotter column `into`."""
        self._issue(READ, table, keys, 0, 0.0, None, into, where, None)

    def write(self, table, keys, values, where=None, cond=None) -> None:
        """WRITE: ``table[keys] <- values`` (per row; keys (rows, L): L writes per row,
        values (rows,) or (rows, L))."""
        self._issue(WRITE, table, keys, 0, values, None, None, where, cond)

    def read_modify(self, table, keys, fun: Fun, param=0.0, src=None, into: str | None = None, where=None,
                    cond=None) -> None:
        """READ_MODIFY: ``table[keys] <- fun(table[keys], src value, param)``; the new
        value goes to `into` if given (keys (rows, L): L operations per row, as with
        ``read``)."""
        if not isinstance(fun, Fun):
            raise TypeError(f"fun must be a Fun (e.g. INC, or register_fun(...)), got {fun!r}")
        self._issue(RMW, table, keys, fun.code, param, src, into, where, cond)

    def require(self, *conds: Cond, where=None) -> None:
        """Conditions of the rows' transactions (ANDed into their verdicts)."""
        mask, use_mask, m = self._mask(where)
        buf = self._buf
        for c in conds:
            if not isinstance(c, Cond):
                raise TypeError(f"require() takes conditions like GT(table, keys, rhs), not {c!r}")
            t = self._table(c.table)
            keys = _keys(c.keys, self.n, t.name)
            rhs = c.rhs
            if isinstance(rhs, tuple) and len(rhs) == 2 and isinstance(rhs[0], (StateTable, str)):
                rt = self._table(rhs[0])
                rkeys, rbase, rnk, rv = _keys(rhs[1], self.n, rt.name), rt.base, rt.nkeys, np.zeros(self.n)
            else:
                rkeys, rbase, rnk, rv = _EMPTY_I, -1, 0, _floats(rhs, self.n, "condition operand")
            buf.reserve_conds(m)
            r = self._K.append_conds(buf.cb, buf.cf, buf.nc, self.txn0, keys, t.base, t.nkeys, c.cfun.code, rv,
                                     rkeys, rbase, rnk, mask, use_mask)
            if r < 0:
                raise IndexError(f"condition on table {t.name!r}: key out of range at event ts={self.ts[-1 - r]}")
            buf.nc = r


__all__ = ["EventBlotter", "MAX_OPS_PER_TXN", "OpBuffer", "Txn", "resolve_table"]
