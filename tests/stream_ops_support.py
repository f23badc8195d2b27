"""Helpers of the stream-operator tests (tests/test_stream_ops*.py): a source that emits
a scripted list of packets and punctuations, a sink that records everything in order,
random packetisations, one scheduler per policy (and bobox in two domain processes), and
a bounded wait for another
thread (`wait_for`)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bobox_sched import Plan, Scheduler, Source, StreamOperator
from bobox_sched.control import model as M
from bobox_sched.control.punct import Punctuation

# "domains": bobox in two domain processes (bobox_sched/domains): the same operators'
# egress after their plans crossed to another interpreter by cloudpickle.
POLICIES = ["bobox", "simple", "streams", "domains"]


def wait_for(cond, timeout, poll=0.01) -> bool:
    """Poll `cond` until it holds or `timeout` seconds passed (a bound on a wait for
    something another thread does, not a timing assertion); returns its last value."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return bool(cond())
        time.sleep(poll)
    return True


class Feed(Source):
    """Emits `items` in order: column dicts become packets (empty ones too), punctuations
    are sent as they are. With `delay` (seconds) it waits that long after each packet
    (on the timer: other operators run meanwhile)."""

    def __init__(self, items, dtypes: dict, delay: float = 0.0):
        self.items = list(items)
        self.dtypes = dtypes
        self.delay = delay
        self.i = 0

    def process(self, ctx):
        while self.i < len(self.items):
            it = self.items[self.i]
            self.i += 1
            if isinstance(it, Punctuation):
                ctx.punctuate(it)
            else:
                n = len(next(iter(it.values())))
                p = ctx.new_packet(self.dtypes | {k: v.dtype for k, v in it.items() if k.startswith("__")}, n)
                for k, v in it.items():
                    p.columns[k][:] = v
                ctx.send("out", p)
                if self.delay:
                    ctx.reschedule(self.delay)
                    return
            if ctx.blocked:
                ctx.reschedule()
                return
        ctx.close()
        ctx.finish()


class Record(StreamOperator):
    """Sink recording packets (copied column dicts) and punctuations in arrival order."""

    outputs = ()
    punct_in = M.EXPECTING

    def __init__(self):
        self.seen = []

    def on_packet(self, ctx, port, pkt):
        self.seen.append({k: np.array(v) for k, v in pkt.columns.items()})

    def on_punct(self, ctx, port, p):
        self.seen.append(p)

    def on_end(self, ctx):
        ctx.set_result(self.seen)


def rows(seen, names=None) -> dict:
    """The rows of a recording, concatenated per column."""
    parts = [s for s in seen if isinstance(s, dict)]
    if not parts:
        return {n: np.empty(0) for n in (names or [])}
    names = names or list(parts[0])
    return {n: np.concatenate([p[n] for p in parts]) for n in names}


def puncts(seen) -> list:
    return [s for s in seen if isinstance(s, Punctuation)]


def cut(cols: dict, sizes) -> list[dict]:
    """`cols` cut into consecutive packets of the given sizes (zeros: empty packets); the
    rest in one more packet."""
    n = len(next(iter(cols.values())))
    out = []
    a = 0
    for s in sizes:
        b = min(n, a + s)
        out.append({k: v[a:b] for k, v in cols.items()})
        a = b
    if a < n:
        out.append({k: v[a:] for k, v in cols.items()})
    return out


def chain_plan(name, items, dtypes, *ops) -> Plan:
    """Feed(items) -> ops... -> Record. `ops` are (factory, args, kwargs) triples."""
    plan = Plan(name)
    plan.add("src", Feed, items, dtypes)
    names = ["src"]
    for i, (factory, args, kwargs) in enumerate(ops):
        plan.add(f"op{i}", factory, *args, **kwargs)
        names.append(f"op{i}")
    plan.add("sink", Record)
    names.append("sink")
    plan.chain(*names)
    return plan


@pytest.fixture(scope="module")
def scheds():
    """One scheduler per policy, shared by a module's tests (2 workers, unpinned, small
    buffers so that back-pressure happens)."""
    out = {p: Scheduler(policy=p, threads_per_node=2, pin=False, buffer_packets=2) for p in POLICIES
           if p != "domains"}
    out["domains"] = Scheduler(domains=2, policy="bobox", threads_per_node=1, pin=False, buffer_packets=2)
    yield out
    for s in out.values():
        s.shutdown(wait=True, cancel=True)  # a test that failed midway must not hang the rest


def skewed_keys(rng, n: int, n_keys: int, skew: float) -> np.ndarray:
    """Keys 0..n_keys-1, Zipf-like (skew 0: uniform)."""
    w = 1.0 / np.power(np.arange(1, n_keys + 1, dtype=np.float64), skew)
    return rng.choice(n_keys, size=n, p=w / w.sum()).astype(np.int64)
