"""Access programs: a transactional operator's pre-processing, state access and
post-processing declared once, then run per packet as nogil kernel calls -- one for the
whole state access, one per derived-column kernel -- instead of a Python method each
whose every ``txn`` call and numpy step holds the GIL (TStream's compute and post
modes; issue 33: at 1 thread the GIL-held share of TStream was 0.5-0.8).

Declare it as the operator's ``program`` (a class attribute, or set in ``__init__``)::

    def gs_sum(read, r, out):             # a plain def: compiled with nogil=True
        for i in range(read.shape[0]):
            out[i] = r[i].sum() if read[i] else 0.0

    class GrepSum(TransactionalOperator):
        program = Program(
            access=(Read("gs", "k", into="r", where=Col("read")),
                    Write("gs", "k", value="v", where=~Col("read"))),
            post=(Derive(gs_sum, inputs=("read", "r"), outputs=(("sum", np.float64),)),),
            emit=("ts", "t_in", "ok", "sum"))

* ``access``: steps that mean what the ``txn`` calls of the same names mean (ops.py),
  issued in their order: ``Read(table, key, into, where=)``, ``Write(table, key, value,
  where=)``, ``ReadModify(table, key, fun, param=, src=(table, key), into=, where=)`` and
  ``Require(cond, ..., where=)`` with conditions built by the CFuns (``GT(table, key,
  rhs)``). A key, value or parameter names a column of the event (or one made by a
  ``pre`` kernel): ``"k"`` or ``Col("k")``, one column of a 2-D one ``Col("k")[0]``; a
  value, parameter or right-hand side may also be a number, and a right-hand side a
  ``(table, key)`` record. A 2-D key column issues one operation per column, as 2-D
  keys do in ``txn`` calls. ``where`` filters rows: ``Col("read")`` (not zero),
  ``Col("kind") == 0`` (also ``!= < <= > >=``), negated with ``~``.
* ``pre`` / ``post``: :class:`Derive` kernels, each called once per packet with its
  input columns then freshly allocated output columns, ``fn(*inputs, *outputs)``;
  their outputs become columns of the blotter (``pre``: before state access, which may
  read them; ``post``: after the results are in, which they may read). ``"ts"`` is the
  event's timestamp and ``"ok"`` its transaction's verdict (``EventBlotter.success``).
* ``emit``: the names of the output packet's columns (none: no output).

The program is bound to the store and to the first packet's columns (their element
types and widths) when an instance takes its first packet; later packets must have the
same widths (the types are converted if they differ). Both forms register the same
operations in the same order (kernels/program.py), so an operator gives the same output
with a program as with the equivalent ``state_access`` / ``post_process`` methods (tests
compare them); with a program the methods are not called.

Protocol: a :class:`Program` is immutable and may be shared by instances and requests.
Each instance binds its own :class:`BoundProgram`, touched only by the thread running
that instance (its ``out`` scratch array is why).
"""

from __future__ import annotations

import numbers
import types

import numpy as np

from bobox_sched.core.packet import Packet
from bobox_sched.txn.funs import Cond, Fun, kernel_for
from bobox_sched.txn.kernels import program as _k
from bobox_sched.txn.kernels.fields import READ, RMW, WRITE
from bobox_sched.txn.ops import MAX_OPS_PER_TXN, EventBlotter, resolve_table

# plain functions given to Derive -> their nogil dispatcher (any thread; a dict read and
# setdefault are atomic under the GIL, internally locked in a free-threaded build: two
# threads that race compile twice and keep the first)
_JITTED: dict = {}

_OPS = {"==": _k.W_EQ, "!=": _k.W_NE, "<": _k.W_LT, "<=": _k.W_LE, ">": _k.W_GT, ">=": _k.W_GE}


class Col:
    """A column of the event (or of a ``pre`` kernel) by name; ``Col(name)[j]`` is
    column `j` of a 2-D one. Comparing it with a number makes a row filter."""

    __slots__ = ("name", "j")

    def __init__(self, name: str, j: int | None = None):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a column name is a non-empty string, not {name!r}")
        if j is not None and (not isinstance(j, int) or j < 0):
            raise ValueError(f"Col({name!r})[j]: j must be an int >= 0, not {j!r}")
        self.name, self.j = name, j

    def __getitem__(self, j: int) -> "Col":
        if self.j is not None:
            raise ValueError(f"Col({self.name!r})[{self.j}] is one column already")
        return Col(self.name, j)

    def _cmp(self, op: str, x) -> "Where":
        if not isinstance(x, numbers.Real) or isinstance(x, bool):
            raise TypeError(f"a row filter compares {self!r} with a number, not {x!r}")
        return Where(self, _OPS[op], float(x), False)

    def __eq__(self, x):  # noqa: D105 -- a row filter, not equality of columns
        return self._cmp("==", x)

    def __ne__(self, x):
        return self._cmp("!=", x)

    def __lt__(self, x):
        return self._cmp("<", x)

    def __le__(self, x):
        return self._cmp("<=", x)

    def __gt__(self, x):
        return self._cmp(">", x)

    def __ge__(self, x):
        return self._cmp(">=", x)

    def __invert__(self) -> "Where":
        return Where(self, _k.W_TRUE, 0.0, True)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Col({self.name!r})" + ("" if self.j is None else f"[{self.j}]")


class Where:
    """A row filter: ``col op value`` (``op`` a ``kernels.program.W_*`` code; ``W_TRUE``:
    the value is not zero), negated with ``~``."""

    __slots__ = ("col", "op", "value", "neg")

    def __init__(self, col: Col, op: int, value: float, neg: bool):
        self.col, self.op, self.value, self.neg = col, op, value, neg

    def __invert__(self) -> "Where":
        return Where(self.col, self.op, self.value, not self.neg)

    def __bool__(self):
        raise TypeError(f"{self!r} is a row filter for a program step (where=...), not a truth value")

    def __repr__(self) -> str:
        ops = {v: k for k, v in _OPS.items()}
        s = repr(self.col) if self.op == _k.W_TRUE else f"{self.col!r} {ops[self.op]} {self.value:g}"
        return f"~({s})" if self.neg else s


def _col(x, what: str) -> Col:
    if isinstance(x, str):
        return Col(x)
    if isinstance(x, Col):
        return x
    raise TypeError(f"{what} names a column (a str or Col), not {x!r}")


def _val(x, what: str):
    """A column or a number."""
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return float(x)
    return _col(x, what + " (a column or a number)")


def _where(w, what: str):
    if w is None or isinstance(w, Where):
        return w
    if isinstance(w, (str, Col)):
        return Where(_col(w, what), _k.W_TRUE, 0.0, False)
    raise TypeError(f"{what}: where= takes a column or a comparison like Col('kind') == 0, not {w!r}")


class Read:
    """READ ``table[key]`` into result column `into` (``txn.read``)."""

    kind = READ

    def __init__(self, table, key, into: str, where=None):
        self.table, self.key, self.where = table, _col(key, "Read key"), _where(where, "Read")
        if not isinstance(into, str) or not into:
            raise ValueError(f"Read: into= must be a column name, got {into!r}")
        self.into, self.value, self.src, self.fun = into, 0.0, None, 0


class Write:
    """WRITE ``table[key] <- value`` (``txn.write``)."""

    kind = WRITE

    def __init__(self, table, key, value, where=None):
        self.table, self.key, self.where = table, _col(key, "Write key"), _where(where, "Write")
        self.value, self.into, self.src, self.fun = _val(value, "Write value"), None, None, 0


class ReadModify:
    """READ_MODIFY ``table[key] <- fun(table[key], src value, param)`` (``txn.read_modify``)."""

    kind = RMW

    def __init__(self, table, key, fun: Fun, param=0.0, src=None, into: str | None = None, where=None):
        if not isinstance(fun, Fun):
            raise TypeError(f"fun must be a Fun (e.g. INC, or register_fun(...)), got {fun!r}")
        if into is not None and (not isinstance(into, str) or not into):
            raise ValueError(f"ReadModify: into= must be a column name, got {into!r}")
        if src is not None:
            try:
                st, sk = src
            except (TypeError, ValueError):
                raise ValueError("src= must be a (table, key column) pair") from None
            src = (st, _col(sk, "src= key"))
        self.table, self.key, self.where = table, _col(key, "ReadModify key"), _where(where, "ReadModify")
        self.fun, self.value, self.src, self.into = fun.code, _val(param, "ReadModify param"), src, into


class Require:
    """Conditions of the selected rows' transactions (``txn.require``): ``Require(GT(table,
    key, rhs), ..., where=)``; `rhs` a number, a column, or a ``(table, key)`` record."""

    def __init__(self, *conds: Cond, where=None):
        if not conds:
            raise ValueError("Require needs at least one condition")
        for c in conds:
            if not isinstance(c, Cond):
                raise TypeError(f"Require takes conditions like GT(table, key, rhs), not {c!r}")
        self.conds, self.where = conds, _where(where, "Require")


class Derive:
    """A kernel that makes columns: ``fn(*inputs, *outputs)`` once per packet, `outputs`
    freshly allocated from ``(name, dtype)`` ((rows,)) or ``(name, dtype, width)``
    ((rows, width)) pairs. `fn` is a plain ``def`` (compiled here with ``nogil=True``) or
    a numba function compiled with ``nogil=True``."""

    def __init__(self, fn, inputs, outputs):
        from numba.core.registry import CPUDispatcher
        from numba import njit

        if isinstance(fn, CPUDispatcher):
            if not fn.targetoptions.get("nogil", False):
                raise ValueError(f"Derive: {fn.py_func.__name__} keeps the GIL: compile it with @njit(nogil=True)")
        elif isinstance(fn, types.FunctionType):
            jit = _JITTED.get(fn)  # one dispatcher per function: its machine code is compiled once
            if jit is None:
                jit = _JITTED.setdefault(fn, njit(nogil=True, cache=True)(fn))
            fn = jit
        else:
            raise TypeError(f"Derive takes a function, not {fn!r}")
        self.fn = fn
        self.inputs = tuple(inputs)
        for name in self.inputs:
            if not isinstance(name, str) or not name:
                raise ValueError(f"Derive inputs are column names, not {name!r}")
        outs = []
        for o in outputs:
            if not isinstance(o, tuple) or len(o) not in (2, 3) or not isinstance(o[0], str):
                raise ValueError(f"Derive outputs are (name, dtype) or (name, dtype, width), not {o!r}")
            width = o[2] if len(o) == 3 else 0  # 0: a (rows,) column
            if len(o) == 3 and (not isinstance(width, int) or isinstance(width, bool) or width < 1):
                raise ValueError(f"Derive output {o[0]!r}: width must be an int >= 1, not {width!r}")
            outs.append((o[0], np.dtype(o[1]), width))
        if not outs:
            raise ValueError("Derive needs at least one output column")
        self.outputs = tuple(outs)

    def run(self, eb: EventBlotter, fn) -> None:
        n = eb.n
        ins = [_blotter_col(eb, name) for name in self.inputs]
        outs = [np.empty(n if w == 0 else (n, w), dt) for _, dt, w in self.outputs]
        fn(*ins, *outs)
        data = eb.data
        for (name, _, _), a in zip(self.outputs, outs):
            data[name] = a


def _blotter_col(eb: EventBlotter, name: str):
    if name == "ts":
        return eb.ts
    if name == "ok":
        return eb.success
    return eb[name]


class Program:
    """An operator's declared pre-processing, state access and post-processing (module
    doc)."""

    def __init__(self, access=(), pre=(), post=(), emit=None):
        self.access = tuple(access)
        for s in self.access:
            if not isinstance(s, (Read, Write, ReadModify, Require)):
                raise TypeError(f"access steps are Read, Write, ReadModify or Require, not {s!r}")
        self.pre, self.post = tuple(pre), tuple(post)
        for d in self.pre + self.post:
            if not isinstance(d, Derive):
                raise TypeError(f"pre= and post= take Derive kernels, not {d!r}")
        self.emit = None if emit is None else tuple(emit)
        intos = [s.into for s in self.access if not isinstance(s, Require) and s.into]
        dup = {x for x in intos if intos.count(x) > 1}
        if dup:
            raise ValueError(f"result column {sorted(dup)[0]!r} is written twice in one program")

    def bind(self, store, K, workers: int, kernel_wrap=None) -> "BoundProgram":
        """An instance's own binding (module doc: protocol): `K` the kernel module,
        `workers` the GIL's sharers (``funs.kernel_for``)."""
        return BoundProgram(self, store, K, workers, kernel_wrap)


_PAD = {np.dtype(np.int64): np.zeros((1, 1), np.int64), np.dtype(np.float64): np.zeros((1, 1), np.float64),
        np.dtype(np.bool_): np.zeros((1, 1), np.bool_)}


class BoundProgram:
    """A program bound to a store and to the columns of an instance's first packet."""

    def __init__(self, program: Program, store, K, workers: int, kernel_wrap=None):
        self.program, self.store = program, store
        self.K, self.workers = K, workers
        # the Derive kernels, wrapped like the kernel module (TxnConfig.kernel_wrap)
        wrap = (lambda f: kernel_wrap(types.SimpleNamespace(f=f)).f) if kernel_wrap else (lambda f: f)
        self.pre = [(d, wrap(d.fn)) for d in program.pre]
        self.post = [(d, wrap(d.fn)) for d in program.post]
        self.prog = None  # bound at the first packet (_bind)
        self.out = np.zeros(5, np.int64)

    def _bind(self, eb: EventBlotter) -> None:
        """Compile the steps against the store and the first packet's columns."""
        store = self.store
        self.groups = {np.dtype(np.int64): [], np.dtype(np.float64): [], np.dtype(np.bool_): []}
        self.cols: dict = {}  # column name -> (dtype of its group, index, width, 1-D?)
        rows, consts = [], []
        self.slots = []  # (into, step L, L as the blotter shows it: 0 for 1-D)
        self.ops_per_row = self.conds_per_row = 0
        self.has_src = False
        self.tables = []  # each step's table (its errors name it)
        for s in self.program.access:
            if isinstance(s, Require):
                for c in s.conds:
                    rows.append(self._cond_row(store, eb, c, s.where, consts))
                    self.conds_per_row += 1
                continue
            t = resolve_table(store, s.table)
            _, ki, kw, one_d = self._ref(eb, s.key, "key", ints=True)
            L = 1 if s.key.j is not None else kw
            if self.ops_per_row + L > MAX_OPS_PER_TXN:
                raise ValueError(f"more than {MAX_OPS_PER_TXN} operations in one transaction")
            r = self._row(s.kind, t, ki, s.key.j, L)
            r[_k.P_CODE] = s.fun
            self._value(eb, r, s.value, L, consts, "value" if s.kind == WRITE else "param")
            if s.src is not None:
                st = resolve_table(store, s.src[0])
                _, si, sw, _ = self._ref(eb, s.src[1], "src= key", ints=True)
                if s.src[1].j is None and sw not in (1, L):
                    raise ValueError(f"src= key {s.src[1].name!r}: {sw} columns, expected 1 or {L}")
                r[_k.P_SBASE], r[_k.P_SNK], r[_k.P_SI] = st.base, st.nkeys, si
                r[_k.P_SJ] = -1 if s.src[1].j is None else s.src[1].j
                self.has_src = True
            if s.into:
                r[_k.P_INTO] = 1
                self.slots.append((s.into, L, 0 if (one_d or s.key.j is not None) else L))
            self._filter(eb, r, s.where, consts)
            rows.append(r)
            self.ops_per_row += L
            self.tables.append(t)
        self.pc = np.array(consts, np.float64).reshape(len(rows), 2)
        self.prog = np.array(rows, np.int64).reshape(len(rows), _k.PW)

    # -- binding ---------------------------------------------------------------------------
    def _ref(self, eb, col: Col, what: str, ints: bool = False):
        """(group dtype, index, width, was 1-D) of column `col`, added to its group."""
        name = col.name
        if name in self.cols:
            dt, i, w, one_d = self.cols[name]
        else:
            if name not in eb:
                raise ValueError(f"the {what} column {name!r} is not a column of the event "
                                 f"(or of a pre= kernel)")
            a = np.asarray(eb[name])
            if a.ndim not in (1, 2) or a.shape[0] != eb.n:
                raise ValueError(f"column {name!r}: expected ({eb.n},) or ({eb.n}, width), got shape {a.shape}")
            k = a.dtype.kind
            dt = np.dtype(np.bool_ if k == "b" else np.int64 if k in "iu" else np.float64 if k == "f" else object)
            if dt == object:
                raise ValueError(f"column {name!r}: numbers or booleans are needed, not {a.dtype}")
            one_d = a.ndim == 1
            w = 1 if one_d else a.shape[1]
            i = len(self.groups[dt])
            self.groups[dt].append(name)
            self.cols[name] = (dt, i, w, one_d)
        if col.j is not None and col.j >= w:
            raise ValueError(f"{col!r}: the column has {w} columns")
        if ints and dt != np.dtype(np.int64):
            raise ValueError(f"the {what} column {name!r} must hold integers, not {dt}")
        return dt, i, w, one_d

    def _one(self, eb, col: Col, what: str, ints: bool = False):
        """(group dtype, index) of `col`, which must give one value per row: a 1-D
        column, or one column of a 2-D one."""
        dt, i, w, _ = self._ref(eb, col, what, ints)
        if col.j is None and w != 1:
            raise ValueError(f"the {what} column {col.name!r} has {w} columns: name one, Col(name)[j]")
        return dt, i

    @staticmethod
    def _row(kind, t, ki, j, L):
        r = np.zeros(_k.PW, np.int64)
        r[_k.P_KIND], r[_k.P_TBASE], r[_k.P_NKEYS], r[_k.P_KI] = kind, t.base, t.nkeys, ki
        r[_k.P_KJ] = -1 if j is None else j
        r[_k.P_L] = L
        r[_k.P_SBASE] = r[_k.P_WG] = -1
        r[_k.P_VG] = _k.G_CONST
        return r

    _GROUP = {np.dtype(np.int64): _k.G_I, np.dtype(np.float64): _k.G_F, np.dtype(np.bool_): _k.G_B}

    def _value(self, eb, r, v, L, consts, what) -> None:
        if isinstance(v, float):
            consts.append([v, 0.0])
            return
        dt, i, w, _ = self._ref(eb, v, what)
        if v.j is None and w not in (1, L):
            raise ValueError(f"{what} column {v.name!r}: {w} columns, expected 1 or {L}")
        r[_k.P_VG], r[_k.P_VI], r[_k.P_VJ] = self._GROUP[dt], i, -1 if v.j is None else v.j
        consts.append([0.0, 0.0])

    def _filter(self, eb, r, w, consts) -> None:
        if w is None:
            return
        dt, i = self._one(eb, w.col, "where=")
        r[_k.P_WG], r[_k.P_WI], r[_k.P_WJ] = self._GROUP[dt], i, -1 if w.col.j is None else w.col.j
        r[_k.P_WOP], r[_k.P_WNEG] = w.op, int(w.neg)
        consts[-1][1] = w.value

    def _cond_row(self, store, eb, c: Cond, where, consts):
        t = resolve_table(store, c.table)
        key = _col(c.keys, "condition key")
        _, ki = self._one(eb, key, "condition key", ints=True)
        r = self._row(_k.COND, t, ki, key.j, 1)
        r[_k.P_CODE] = c.cfun.code
        rhs = c.rhs
        if isinstance(rhs, tuple) and len(rhs) == 2 and not isinstance(rhs[0], numbers.Real):
            rt = resolve_table(store, rhs[0])
            rk = _col(rhs[1], "condition record key")
            _, ri = self._one(eb, rk, "condition record key", ints=True)
            r[_k.P_SBASE], r[_k.P_SNK], r[_k.P_SI], r[_k.P_SJ] = rt.base, rt.nkeys, ri, -1 if rk.j is None else rk.j
            consts.append([0.0, 0.0])
        else:
            v = _val(rhs, "condition operand")
            if isinstance(v, Col):
                dt, i = self._one(eb, v, "condition operand")
                r[_k.P_VG], r[_k.P_VI], r[_k.P_VJ] = self._GROUP[dt], i, -1 if v.j is None else v.j
                consts.append([0.0, 0.0])
            else:
                consts.append([v, 0.0])
        self._filter(eb, r, where, consts)
        self.tables.append(t)
        return r

    # -- per packet ------------------------------------------------------------------------
    def blotter(self, packet) -> EventBlotter:
        """The packet's blotter with the ``pre`` kernels' columns (the first packet's
        also binds the program: ``_bind``)."""
        eb = EventBlotter(packet)
        for d, f in self.pre:
            d.run(eb, f)
        if self.prog is None:
            self._bind(eb)
        return eb

    def _arrays(self, eb, dt) -> tuple:
        names = self.groups[dt]
        if not names:
            return (_PAD[dt],)
        n = eb.n
        out = []
        for name in names:
            a = eb[name]
            if a.dtype != dt or not a.flags.c_contiguous:
                a = np.ascontiguousarray(a, dt)
            _, _, w, one_d = self.cols[name]
            if a.shape != ((n,) if one_d else (n, w)):
                raise ValueError(f"column {name!r}: shape {a.shape}, the first packet's rows had "
                                 f"{'one value' if one_d else f'{w} columns'}")
            out.append(a.reshape(n, 1) if one_d else a)
        return tuple(out)

    def register(self, eb: EventBlotter, buf) -> None:
        """Register the packet's transactions, operations and conditions in `buf`: one
        kernel call (``kernels/program.run_program``)."""
        n = eb.n
        I = self._arrays(eb, np.dtype(np.int64))
        F = self._arrays(eb, np.dtype(np.float64))
        Bo = self._arrays(eb, np.dtype(np.bool_))
        buf.reserve_ops(n * self.ops_per_row)
        buf.reserve_conds(n * self.conds_per_row)
        txn0 = eb.txn0 = buf.add_txns(eb.ts)
        slot0 = buf.nslots
        ts = eb.ts if eb.ts.flags.c_contiguous else np.ascontiguousarray(eb.ts)
        out = self.out
        run = kernel_for(self.K, "run_program", n * self.ops_per_row, self.workers)
        if run(self.prog, self.pc, I, F, Bo, n, ts, buf.ib, buf.fb, buf.n, buf.cb, buf.cf, buf.nc, txn0, 0, slot0,
               out) < 0:
            p, r = int(out[3]), int(out[4])
            raise IndexError(f"table {self.tables[p].name!r}: a key (or its source key) of event ts={int(ts[r])} is "
                             f"outside 0..{self.tables[p].nkeys - 1} (access step {p})")
        buf.n, buf.nc, buf.nslots = int(out[0]), int(out[1]), int(out[2])
        if self.has_src:
            buf.has_src = True
        s = slot0
        slots = eb.slots
        for name, L, shown in self.slots:
            slots[name] = (s, shown)
            s += n * L

    def emit(self, eb: EventBlotter):
        """The output packet of a blotter whose results are in (None without ``emit``)."""
        for d, f in self.post:
            d.run(eb, f)
        names = self.program.emit
        if names is None:
            return None
        return Packet({name: _blotter_col(eb, name) for name in names}, eb.n)


__all__ = ["BoundProgram", "Col", "Derive", "Program", "Read", "ReadModify", "Require", "Where", "Write"]
