"""One edge of a request that spans domains: packets from an operator in one domain
process to an operator in another, through shared memory.

A channel is one segment (``shm.Segment``, made by the front for one request and
unlinked when the request ends):

====================================  ==============================================
bytes 0 .. R                          a ring (``ring.py``) of ``SLOTS`` descriptors of
                                      4 words: kind, rows, bytes, loan (or -1)
R .. R + 64                           word 0 (``GONE``): set to 1 by the consumer's
                                      receiver when it reads no more; word 2
                                      (``READER``): the consumer's pid
R + 64 .. L                           the loan table: ``LOANS`` words (``loans.py``)
L ...                                 ``SLOTS`` slots of ``SLOT_BYTES``: the data of
                                      descriptor i lives in slot ``i % SLOTS``
====================================  ==============================================

Descriptors: ``SCHEMA`` (its slot holds the column names and dtypes, pickled: metadata,
not data; sent before the first packet and whenever they change), ``LOAN`` (a packet
lent, not copied: its slot holds each column's place in the producer's shared arena,
``loans.py``), ``ARENA`` (the key of the arena the next loans are in, pickled: sent
before the first loan and whenever it changes), ``DATA`` (a packet copied: its slot
holds ``rows`` rows, column after column in schema order, each column at a 64-byte
boundary), ``PUNCT`` (a punctuation, pickled: a parallel region's pulse, a latency
marker, a watermark, in its place among the packets), ``END`` (end of stream). A packet
travels as a loan when its columns live in the producing domain's arena (every packet a
domain's operator made with ``ctx.new_packet``) and it has at least
``loans.LEND_MIN_BYTES`` (below, a copy costs less); otherwise it is copied, split into
several when larger than a slot.

Each receiving domain has a *bell* (a segment of 2 words, made by the front once per
domain): word 0 counts the descriptors pushed to any of that domain's channels, word 1
says its receiver is asleep (or going to sleep) on word 0 with ``futex`` (a shared, not
private, futex: it works across processes on a shared mapping).

Protocol (who touches what, when):

* the producer is the one ``ChannelOut`` operator of the edge, run by one worker at a
  time in the producing domain: it alone writes free slots and the ring's tail. It
  waits for room (the ring full: every slot holds unread data) by sleeping with
  backoff, and gives up with ``ChannelGone`` once ``gone`` is set or its own request
  ended (a cancel does not otherwise reach a task that waits: a receiving side that
  never started, so never set ``gone``, would hold that worker for ever);
* a slot is free once the consumer advanced past its descriptor. The consumer is the
  receiving domain's ``Receiver`` thread (one per domain process), which *peeks* a
  descriptor, copies the slot's columns into new arrays, and only then advances
  (``ring_peek`` / ``ring_advance``): the producer can never overwrite a slot being
  read. The copies go into the ``StreamChannel`` of the edge's ``ChannelIn`` (a
  ``QueueSource``), unbounded, so the receiver never waits for a worker, and a
  producer waits only for a receiver, which always makes progress: no cycle of
  domains waiting on each other's workers can form (an all-to-all exchange between
  two one-worker domains would deadlock on slots held until a worker consumed them);
* after a push the producer adds 1 to the bell's count and, if the receiver's flag
  says it sleeps, wakes it (``FUTEX_WAKE``). The receiver reads the count, drains every
  channel, and if it found nothing sets its flag, re-reads the count and sleeps only
  if it is unchanged (``FUTEX_WAIT`` on that value, at most ``SLEEP_S``). Both sides'
  accesses are sequentially consistent atomics (``core/atomics.py``): a push after the
  receiver's last look is either seen by its re-read or wakes it;
* the consumer sets ``gone`` when its request ended before the end of stream
  (cancelled, failed): a producer waiting for room stops.

Copies: none for a lent packet (``loans.py``). A copied packet (its columns made
elsewhere than a pool: a kernel's own arrays, a view of the table store) is copied
twice: into the slot, and out of it by the receiver. ``loans.totals()`` counts both
kinds (a domain's ``stats()["channels"]``).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import platform
import threading
import time
import weakref

import numpy as np
from numba import njit

from bobox_sched.core.atomics import atomic_add, atomic_load, cas_word, load_word, store_word
from bobox_sched.core.operator import StreamOperator
from bobox_sched.core.sources import QueueSource, StreamChannel
from bobox_sched.domains import loans
from bobox_sched.domains.arena import Mapped
from bobox_sched.domains.loans import LOANS, LoanBook
from bobox_sched.domains.ring import Ring, ring_bytes
from bobox_sched.domains.shm import Segment, _alive

SLOTS = 8  # descriptors (and slots) per channel: a power of two
# A slot holds a default packet (the bobox policy's half of a 2 MiB L2: 1 MiB) with room
# for column alignment; a larger packet travels in several.
SLOT_BYTES = (1 << 20) + 4096
DATA, SCHEMA, END, PUNCT, LOAN, ARENA = 1, 2, 3, 4, 5, 6
GONE, READER = 0, 2  # control words: the consumer stopped reading; the consumer's pid
WIDTH = 4
ALIGN = 64
SLEEP_S = 0.2  # a receiver's longest sleep: a missed wake-up (none is known) costs at most this
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())


class ChannelGone(RuntimeError):
    """The receiving side of a channel ended before the end of the stream."""


class ChannelBroken(RuntimeError):
    """What arrived through a channel cannot be read (the request reading it fails)."""


def channel_bytes() -> int:
    return ring_bytes(SLOTS, WIDTH) + 64 + 8 * LOANS + SLOTS * SLOT_BYTES


def create_channel() -> Segment:
    """A new channel segment (the front's; module doc), its ring laid out."""
    seg = Segment.create(channel_bytes(), "chan")
    Ring.create(seg.array(np.int64, count=ring_bytes(SLOTS, WIDTH) // 8), SLOTS, WIDTH)
    return seg


def create_bell() -> Segment:
    return Segment.create(4096, "bell")


@njit(nogil=True, cache=True)
def _count(bell):
    """After a push: count it; True if the receiver sleeps (then wake it)."""
    atomic_add(bell, 0, 1)
    return atomic_load(bell, 1) != 0


def ring_bell(bell: np.ndarray) -> None:
    """Tell the receiver of `bell` that a channel of its has something (module doc)."""
    if _count(bell):
        _futex(bell.ctypes.data, _FUTEX_WAKE, 1)


def close_reader(name: str) -> None:
    """The front, once every part of channel `name`'s request ended, before it unlinks
    it: a reader that never came never will (``loans.py``, case c: its producer frees
    its loans)."""
    try:
        m = _Mapped(name)
    except FileNotFoundError:
        return
    cas_word(m.ctl, READER, 0, -1)


_libc = None


def _futex(addr: int, op: int, val: int, timeout: float | None = None) -> None:
    global _libc
    if _SYS_FUTEX is None:  # no futex number known here: the receiver polls (SLEEP_S / 100)
        if op == _FUTEX_WAIT:
            time.sleep(SLEEP_S / 100)
        return
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if timeout is None:
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), op, ctypes.c_int(val), None, None, 0)
    else:
        ts = (ctypes.c_long * 2)(int(timeout), int((timeout % 1) * 1e9))
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), op, ctypes.c_int(val), ts, None, 0)


def _layout(schema: list, rows: int) -> tuple[list[int], int]:
    """Each column's byte offset in a slot for `rows` rows, and the bytes in all."""
    offs, at = [], 0
    for _, dt in schema:
        offs.append(at)
        at += -(-rows * np.dtype(dt).itemsize // ALIGN) * ALIGN
    return offs, at


class _Mapped:
    """A channel's segment mapped here: its ring, control words and slots."""

    def __init__(self, name: str):
        self.seg = Segment.attach(name)
        rb = ring_bytes(SLOTS, WIDTH)
        self.ring = Ring(self.seg.array(np.int64, count=rb // 8))
        self.ctl = self.seg.array(np.int64, offset=rb, count=8)
        self.loans = self.seg.array(np.int64, offset=rb + 64, count=LOANS)
        self.data = self.seg.array(np.uint8, offset=rb + 64 + 8 * LOANS, count=SLOTS * SLOT_BYTES)

    def slot(self, i: int) -> np.ndarray:
        k = i % SLOTS
        return self.data[k * SLOT_BYTES:(k + 1) * SLOT_BYTES]


class ChannelWriter:
    """The producing side of one channel (module doc)."""

    def __init__(self, name: str, bell: str):
        self.m = _Mapped(name)
        self.bell_seg = Segment.attach(bell)
        self.bell = self.bell_seg.array(np.int64, count=2)
        self.pushed = 0  # descriptors pushed: the next one's slot is pushed % SLOTS
        self.schema: list | None = None
        self.arena: str | None = None  # the arena key the consumer was last told (ARENA)
        self.d = np.zeros(WIDTH, np.int64)
        self.alive = None  # () -> False once the producing request ended (cancelled): a wait stops
        self.book = LoanBook(self.m.loans)
        self.at = np.full(SLOTS, -1, np.int64)  # the loan descriptor j carries, at j % SLOTS (-1: none)
        self.broken = False  # the keeper could not settle it (loans.py)

    def _room(self) -> None:
        wait = 20e-6
        while len(self.m.ring) >= SLOTS:
            if load_word(self.m.ctl, GONE):
                raise ChannelGone("the receiving domain's request ended")
            if self.alive is not None and not self.alive():
                raise ChannelGone("this request ended while its channel was full")
            time.sleep(wait)
            wait = min(wait * 2, 1e-3)

    def _push(self, kind: int, rows: int, nbytes: int, loan: int = -1) -> None:
        self.d[0], self.d[1], self.d[2], self.d[3] = kind, rows, nbytes, loan
        self.at[self.pushed % SLOTS] = loan
        if not self.m.ring.push(self.d):
            raise AssertionError("channel ring full after waiting for room")  # only this side pushes
        self.pushed += 1
        ring_bell(self.bell)

    def _blob(self, kind: int, obj) -> None:
        blob = pickle.dumps(obj)
        if len(blob) > SLOT_BYTES:
            raise ValueError(f"a channel message of {len(blob)} bytes does not fit a channel slot")
        self._room()
        self.m.slot(self.pushed)[:len(blob)] = np.frombuffer(blob, np.uint8)
        self._push(kind, 0, len(blob))

    def _lend(self, cols: list, rows: int) -> bool:
        """Send `cols` as a loan if they live in an arena (``loans.py``); False: copy them."""
        where = loans.place_of(cols)
        if where is None:
            return False
        key, meta = where
        if key != self.arena:
            self._blob(ARENA, key)
            self.arena = key
        self._room()  # before the loan is taken: a ChannelGone here leaves none out
        i = self.book.lend(cols)
        if i is None:
            return False
        self.m.slot(self.pushed)[:meta.nbytes] = meta.view(np.uint8)
        self._push(LOAN, rows, meta.nbytes, i)
        return True

    def settle(self) -> None:
        """The keeper's round for this writer, which sends no more (``loans.py``): take
        back what was given back, and free the loans nobody will give back."""
        book = self.book
        book.reap()
        if not book.n_out:
            return
        if load_word(self.m.ctl, GONE):  # the consumer pops no more: what is still queued was never borrowed
            queued = len(self.m.ring)
            book.forget([int(self.at[j % SLOTS]) for j in range(self.pushed - queued, self.pushed)
                         if self.at[j % SLOTS] >= 0])
        pid = int(load_word(self.m.ctl, READER))
        if book.n_out and (pid == -1 or (pid > 0 and not _alive(pid))):  # no reader came; its process ended
            book.forget(book.out[:book.n_out].tolist())

    def send(self, columns: dict, rows: int) -> None:
        arrays = {k: np.asarray(v) for k, v in columns.items()}
        for k, v in arrays.items():
            if v.dtype.hasobject:
                raise TypeError(f"column {k!r} holds Python objects: it cannot cross domains")
        schema = [(k, v.dtype.str) for k, v in arrays.items()]
        if schema != self.schema:
            self._blob(SCHEMA, schema)
            self.schema = schema
        self.book.reap()
        cols = list(arrays.values())
        data = sum(c.nbytes for c in cols)
        if data >= loans.LEND_MIN_BYTES and self._lend(cols, rows):
            loans.tally(data, 0, 1, 0)
            return
        loans.tally(data, 2 * data, 0, 1)  # into the slots here, out of them in the receiver
        cols = [np.ascontiguousarray(c) for c in cols]
        per_row = sum(np.dtype(dt).itemsize for _, dt in schema)
        step = max(1, (SLOT_BYTES - ALIGN * len(schema)) // per_row) if per_row else max(rows, 1)
        a = 0
        while True:
            b = min(rows, a + step)
            offs, nbytes = _layout(schema, b - a)
            self._room()
            slot = self.m.slot(self.pushed)
            for c, off in zip(cols, offs):
                part = c[a:b]
                slot[off:off + part.nbytes] = part.view(np.uint8).reshape(-1)
            self._push(DATA, b - a, nbytes)
            a = b
            if a >= rows:
                break

    def punct(self, p) -> None:
        self._blob(PUNCT, p)

    def end(self) -> None:
        self._room()
        self._push(END, 0, 0)


class ChannelOut(StreamOperator):
    """The producing end of a cross-domain edge: every packet it gets goes into
    channel `name`, whose receiving domain rings `bell` (module doc)."""

    outputs = ()
    punct_in = "expecting"  # punctuations cross too, in their place (control.model.EXPECTING)

    def __init__(self, name: str, bell: str):
        self.channel_name, self.bell_name = name, bell  # (an operator's `name` is its name in the plan)
        self._w: ChannelWriter | None = None

    def _writer(self) -> ChannelWriter:
        if self._w is None:
            w = self._w = ChannelWriter(self.channel_name, self.bell_name)
            loans.start_keeper()
            # A failed or cancelled request never calls on_end: the keeper takes the
            # writer's loans when this operator dies (loans.py, "Reaping").
            weakref.finalize(self, loans.adopt, w)
        return self._w

    def _writer_of(self, ctx) -> ChannelWriter:
        w = self._writer()
        if w.alive is None:
            req = ctx.task.req
            w.alive = lambda: req.state is req.ACTIVE  # a cancel reaches a worker waiting for room
        return w

    def on_packet(self, ctx, port, pkt):
        self._writer_of(ctx).send(pkt.columns, pkt.nrows)

    def on_punct(self, ctx, port, p):
        self._writer_of(ctx).punct(p)

    def on_end(self, ctx):
        w = self._writer_of(ctx)
        w.end()
        loans.adopt(w)  # it sends no more: the keeper takes back its loans from now on


class _Reader:
    """One channel's consuming side, driven by its domain's receiver."""

    def __init__(self, name: str, chan: StreamChannel):
        self.m = _Mapped(name)
        self.chan = chan
        self.schema: list | None = None
        self.arena: str | None = None  # the producer's arena (ARENA), whose loans follow
        self.popped = 0
        self.dropped = False  # set by Receiver.drop (another thread): stop reading (a plain flag: no data)
        loans.warm()  # an _Ack's __del__ must find its kernel compiled (loans.py, "Borrowing")
        if cas_word(self.m.ctl, READER, 0, os.getpid()) != 0:  # before the first pop (loans.py, cases b, c)
            self.dropped = True  # the request ended before its reader came: read nothing, and say so
            chan.fail(ChannelGone(f"channel {name}: its request ended before this part began reading"))

    def ended(self) -> bool:
        """Whether the request reading this channel ended (its source was collected or
        its request is no longer active)."""
        ref = self.chan._consumer
        if ref is None:
            return False  # not bound yet: its first run is to come
        task = ref()
        return task is None or task.req.state is not task.req.ACTIVE

    def drain(self) -> tuple[int, bool]:
        """Move what the ring holds into the StreamChannel: (descriptors moved, done)."""
        ring, moved = self.m.ring, 0
        while True:
            d = ring.peek()
            if d is None:
                return moved, False
            kind, rows = int(d[0]), int(d[1])
            slot = self.m.slot(self.popped)
            if kind == LOAN:
                meta = slot[:int(d[2])].view(np.int64)
                self.chan.put(loans.borrow(_arenas, self.arena, meta, self.schema, rows, self.m.loans, int(d[3])))
            elif kind in (SCHEMA, ARENA, PUNCT):  # a pickled object in the slot
                obj = pickle.loads(slot[:int(d[2])].tobytes())
                if kind == SCHEMA:
                    self.schema = obj
                elif kind == ARENA:
                    self.arena = obj
                else:
                    self.chan.put(obj)
            elif kind == DATA:
                offs, _ = _layout(self.schema, rows)
                cols = {}
                for (k, dt), off in zip(self.schema, offs):
                    dt = np.dtype(dt)
                    cols[k] = slot[off:off + rows * dt.itemsize].view(dt).copy()  # the slot is reused after advance
                self.chan.put(cols)
            ring.advance()
            self.popped += 1
            moved += 1
            if kind == END:
                self.chan.close()
                return moved, True


class Receiver:
    """The thread of one domain process that moves every incoming channel's packets into
    its ``ChannelIn`` sources (module doc). One per bell, started on first use."""

    _by_bell: dict = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, bell: str) -> "Receiver":
        with cls._lock:
            r = cls._by_bell.get(bell)
            if r is None:
                r = cls._by_bell[bell] = cls(bell)
            return r

    def __init__(self, bell: str):
        self.seg = Segment.attach(bell)
        self.bell = self.seg.array(np.int64, count=2)
        self._lock = threading.Lock()  # guards _readers (added and dropped by other threads, walked by the receiver)
        self._readers: list[_Reader] = []
        self.thread = threading.Thread(target=self._run, name="bobox-receiver", daemon=True)
        self.thread.start()

    def add(self, name: str, chan: StreamChannel) -> None:
        rd = _Reader(name, chan)
        with self._lock:
            self._readers.append(rd)
        ring_bell(self.bell)

    def drop(self, name: str) -> None:
        """Stop reading channel `name` (its request ended): the receiver thread, the
        channel's one reader, sets its ``gone`` (then its producer stops waiting) and
        pops it no more (``loans.py``, case a, relies on that)."""
        with self._lock:
            for r in self._readers:
                if r.m.seg.name == name:
                    r.dropped = True
        ring_bell(self.bell)

    @staticmethod
    def _drain(rd: "_Reader") -> tuple[int, bool]:
        try:
            return rd.drain()
        except Exception as e:  # noqa: BLE001 - this channel ends; the receiver goes on with the others
            if not (isinstance(e, RuntimeError) and (rd.chan.closed or rd.ended())):  # not put() refused: fail it
                rd.chan.fail(ChannelBroken(f"cross-domain channel {rd.m.seg.name} cannot be read: "
                                           f"{type(e).__name__}: {e}"))
            return 0, True

    def _run(self) -> None:
        bell = self.bell
        while True:
            seen = load_word(bell, 0)
            with self._lock:
                readers = list(self._readers)
            moved, finished = 0, []
            for rd in readers:
                n, done = (0, True) if rd.dropped else self._drain(rd)
                if not done and rd.ended():
                    done = True
                if done:
                    store_word(rd.m.ctl, GONE, 1)  # gone: a producer still waiting for room stops; no pop after this
                    finished.append(rd)
                moved += n
            if finished:
                with self._lock:
                    self._readers = [r for r in self._readers if r not in finished]
            if moved:
                continue
            store_word(bell, 1, 1)  # asleep; then look once more (module doc)
            if load_word(bell, 0) == seen:
                _futex(bell.ctypes.data, _FUTEX_WAIT, int(np.int64(seen).astype(np.int32)), SLEEP_S)
            store_word(bell, 1, 0)


_arenas = Mapped()  # the producers' arena segments mapped in this process (loans.py, "Borrowing")
_expected: dict = {}  # channel name -> its StreamChannel, from expect() to release()
_expected_lock = threading.Lock()


def expect(plan) -> list:
    """In a domain, before it submits a spanning request's part: every channel into the
    part gets its StreamChannel and its receiver starts draining it now, before the
    part's ``ChannelIn`` first runs (a producer must never wait for a worker of this
    domain: two domains' workers could wait on each other). Returns what ``release``
    takes when the part ends."""
    out = []
    try:
        for factory, args, _ in plan._specs.values():
            if factory is ChannelIn:
                name, bell = args
                ch = StreamChannel(capacity=None)
                with _expected_lock:
                    _expected[name] = ch
                out.append((name, bell))
                Receiver.of(bell).add(name, ch)
    except BaseException:  # the part is not submitted: what was added reads no more
        release(out)
        raise
    return out


def release(chans: list) -> None:
    """The part ended: its channels are read no more (a producer still waiting stops)."""
    for name, bell in chans:
        with _expected_lock:
            _expected.pop(name, None)
        try:
            Receiver.of(bell).drop(name)
        except OSError:  # its bell could not be mapped: no reader of it was ever added
            pass


class ChannelIn(QueueSource):
    """The consuming end of a cross-domain edge: a source of the packets that arrive
    through channel `name` (its domain's receiver, listening on `bell`, feeds it). In a
    domain the channel was expected (``expect``) when the part was submitted; elsewhere
    it joins the receiver when it first runs (a plan's operators are also made to be
    checked, ``Plan.validate``, in the front too, and those must touch nothing)."""

    def __init__(self, name: str, bell: str):
        with _expected_lock:
            ch = _expected.get(name)
        super().__init__(ch if ch is not None else StreamChannel(capacity=None))
        self.channel_name, self.bell_name = name, bell
        self._joined = ch is not None

    def process(self, ctx):
        if not self._joined:
            self._joined = True
            Receiver.of(self.bell_name).add(self.channel_name, self.channel)
        super().process(ctx)


__all__ = ["ChannelBroken", "ChannelGone", "ChannelIn", "ChannelOut", "ChannelWriter", "Receiver", "SLOTS", "SLOT_BYTES",
           "channel_bytes", "create_bell", "create_channel", "expect", "release"]
