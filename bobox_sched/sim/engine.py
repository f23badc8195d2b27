"""The simulator: the unchanged scheduling policy on virtual workers and a virtual clock.

A :class:`Simulation` makes a real ``SchedulerCore`` for the machine it simulates (the
policy's own ``create_workers``, per-node state, pools, requests), whose threads never
start (:class:`VirtualCore`). One thread, this one, then plays every worker, in virtual
time, through a heap of events ordered by (time, sequence number):

* **look** (a worker wants work): the policy's own task search (``find_task``: bobox's
  locality order, simple's own list then round-robin stealing). Found: the task
  *starts*. Not found: the policy's own sleeping step (bobox: ``try_sleep``, its sleeping
  rule, and the worker's park lock; simple: its one counting semaphore, a FIFO of
  sleepers here);
* **end** (a task's virtual time is over): the runtime's own ``run_task`` runs the
  operator now -- it takes its input, sends its packets, and delivery pushes the tasks it
  triggers through the policy (``push_immediate``, ``push_deferred``, wake-ups), exactly
  as on a worker thread; then the worker looks again;
* **submit** (a request arrives: ``SchedulerCore.submit``, the policy's placement), and
  **balance** (the policy's balancing round, ``balance_once``, every ``balance_ns``).

After every event the simulator looks at each sleeping worker's park lock (or the
semaphore): a waker that released it has woken that worker, who looks again
``wake_ns`` later.

Time (``costs``): a task's duration is decided when it starts, from the rows waiting in
its inputs and its operator's :class:`~bobox_sched.sim.workload.Cost`: the GIL-held part
(plus the scheduler's own ``sched_ns`` per task) and the released part, which runs at the
local rate times the NUMA penalty when the packet's home node is another node than the
worker's (``1 + numa * (distance / local - 1)``); both times a per-task jitter drawn
from the seed.

Memory bandwidth shared per node (``costs.node_bandwidth_gbs``: GB/s per NUMA node, that
is bytes per ns; None, the default, is unlimited and leaves the model above exactly as it
is): a task's released part reads ``rows * bytes_row`` bytes (its operator's ``Cost``)
from node H, the home node of its packet (``home_node(task)``; the worker's own node when
no packet waits). When that part starts (a **release** event, once the task's GIL-held
head is over) let k be the number of tasks whose released part is reading from H at that
moment, this one included: its memory time is ``bytes * k / bandwidth`` -- a
processor-sharing estimate fixed at its start, so deterministic (a reader that starts
later does not slow it down, nor does one that ends speed it up) -- and its released part
lasts the longer of its compute time (the local rate, times the NUMA penalty, with its
jitter) and its memory time. H's count drops when that released part ends (the task's
**resume**, or its **end** when it takes the GIL no more). The summary counts the bytes
read (``bytes``) and the tasks whose memory time exceeded their compute time
(``bandwidth_bound``).

The GIL: the interpreter's one GIL is a FIFO queue that a task joins twice -- when it
starts, for its Python before the kernels, and when its kernels return, for the rest
(``gil_tail`` of its held time) -- so that past some number of workers they wait for each
other. A wait is not free: the thread that gets the GIL from a waiting queue gets it
``gil_handoff_ns`` after its holder let it go (the holder signals a condition variable,
the waiter's thread is woken on its core; CPython's ``take_gil``), and meanwhile no one
holds it. Under contention each taking of the GIL then costs held time plus a hand-off,
which is why measured speedups flatten below Amdahl's bound for the held share
(``measurements/2026-12-02-sim-calibration/``). With ``gil_barging`` a thread that asks
for the GIL while it lies idle in such a hand-off (released, the woken waiter not running
yet) takes it at once if it is done before that waiter runs -- CPython lets a thread that
is awake take a free GIL before the one it signalled -- so the idle windows fill as more
threads contend; off by default: on the 16-core sweep it reproduces the 8 -> 16 shape but
overshoots 4 and 8 workers by 11-26 % (``barging.txt`` there), where the FIFO queue's
worst error is 13 %.

Invariants, checked at every step (a :class:`Violation` names the first one broken):
a task is never handed to two workers at once; no worker sleeps with tasks in its own
list (bobox; simple's workers sleep on one semaphore, a permit per task, and any of them
takes any list's task); when nothing is left to happen, no request is unfinished (a lost wake-up or a lost
task) and no livelock (events going on for ``STALL_NS`` of virtual time without a task
ending); every request's sink got every row its source sent, once; the packet memory
held returns to zero.

Determinism: the same machine, work, policy and seed give the same events in the same
order, hence a byte-identical trace (``bobox_sched/trace``'s format, with virtual times):
the policies' only inputs from outside are overridden (a node's free memory is its
description's), the generator is seeded, the heap breaks ties by sequence number.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from bobox_sched.core.scheduler import SchedulerCore
from bobox_sched.sim.workload import Cost, home_node, queued_rows
from bobox_sched.trace.recorder import MEMORY_SAMPLE_NS, Tracer, WorkerTrace


# Virtual time without a task ending, with events still happening, that counts as a livelock
# (a worker the sleeping rule keeps awake with nothing it can find, forever): far longer than
# any task of the workloads simulated here (milliseconds).
STALL_NS = 10_000_000_000


class Violation(AssertionError):
    """A runtime invariant broken in a simulation (its message names it and the time)."""


class VirtualCore(SchedulerCore):
    """A SchedulerCore whose threads never start: the simulation plays its workers."""

    def _start_threads(self) -> None:
        pass


@dataclass(frozen=True)
class Costs:
    """The machine's costs outside the operators (module doc), in nanoseconds.

    Defaults, measured on this project's 2-vCPU VM: ``sched_ns`` 3,500, the scheduler's
    own work per task (``bobox bench overhead``: 3.5 us a trivial task, 2026-12-02);
    ``wake_ns`` 7,000, waking a sleeping worker (``bobox bench ring``: a sleeping
    consumer adds ~7 us, measurements/2026-11-28-domains-span); ``numa`` 0.5, a remote
    packet's kernel time grows by half the distance ratio's excess (21/10: 1.55x, within
    the 1.3-1.7x NUMA factors ``bobox topology --numa-factor`` reports on two-socket
    hosts); ``jitter`` 0.1, the spread of a task's time around its cost (log-normal
    sigma); ``balance_ns`` 100 ms, the bobox balancer's period.

    ``node_bandwidth_gbs``: the memory bandwidth of one NUMA node in GB/s (bytes per ns),
    shared by the tasks reading from that node at once (module doc). None (the default):
    unlimited -- a machine description gives no bandwidth unless it says one
    (``bandwidth 40G``, ``machine.bandwidth_of``), and without one the runs are those of
    the model without memory, byte for byte. A typical value is a measured STREAM-like
    figure of the node to simulate; the model counts bytes read. For reference, this
    project's 2-vCPU VM copies 512 MiB with ``np.copyto`` at 23.7-24.5 GB/s as STREAM
    counts a copy (bytes read plus written), 11.8-12.2 GB/s of bytes read, one thread
    (2026-12-02: the best of 7 copies, in two runs; a median fell to 18 GB/s while
    other work shared the 2 vCPUs)."""

    sched_ns: float = 3_500.0
    wake_ns: float = 7_000.0
    numa: float = 0.5
    jitter: float = 0.1
    balance_ns: int = 100_000_000
    # The GIL's hand-off (module doc, "the GIL"): a thread that waited for the GIL gets it
    # this long after its holder let it go -- the holder signals, the waiter's core wakes
    # it -- and meanwhile nobody holds it. 0: an ideal queue. 40 us: fitted to the 16-core
    # sweep of the TPC-H mix (measurements/2026-11-27-scaling-16core/, both rounds),
    # replaying a 1-worker trace of the same mix: worst error 13 % over 2-16 workers, where
    # 30 us gave 18 % and 50 us 24 % (measurements/2026-12-02-sim-calibration/). It lies
    # near the one-way thread wake-up measured on the 2-core VM the same day (median
    # 29-32 us, p90 34-41 us: experiments/handoff.py wake_us). ``gil_tail``: the share of a
    # task's GIL-held time that comes after its kernels, when it takes the GIL back (an
    # assumption: the trace says how long a task held the GIL, not when).
    gil_handoff_ns: float = 40_000.0
    gil_tail: float = 0.5
    # Barging (module doc, "the GIL"): a thread that asks for the GIL while it lies idle in
    # a hand-off -- released, the woken waiter not running yet -- takes it at once if it
    # is done before that waiter runs. False: the strict FIFO queue.
    gil_barging: bool = False
    node_bandwidth_gbs: float | None = None


class Simulation:
    """One simulated run (module doc): `plans` submitted at `arrivals_ns` (default: all
    at time 0) on `topology` under `policy`."""

    def __init__(self, topology, plans, policy: str = "bobox", threads_per_node: int | None = None,
                 seed: int = 0, costs: Costs | None = None, arrivals_ns=None, label: str | None = None,
                 memory: str = "local"):
        self.costs = costs or Costs()
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        # memory: where workers' packets live -- "local" (their node's pool) or "remote"
        # (the next node's: the runtime's own Scheduler(memory=...), figure 2's setting)
        self.core = VirtualCore(topology=topology, policy=policy, threads_per_node=threads_per_node, pin=False,
                                balance_interval=None, memory=memory)
        self.homed = self.local_tasks = 0  # tasks whose input packet has a home node; of them, on the worker's
        # memory bandwidth (module doc): node -> tasks whose released part reads from it now (a
        # DomainsSimulation gives its domains one such dict); id(task) -> the node it reads from
        self.reading: dict = {}
        self._reading_of: dict = {}
        self.bytes_read = 0.0
        self.bandwidth_bound = 0
        self.policy = self.core.policy
        self.workers = list(self.core.workers)
        self.topology = topology
        for nd in getattr(self.policy, "nodes", ()):  # the policy's only outside input: a node's free memory
            mem = topology.node(nd.os_index).free_bytes
            nd._free, nd._free_t = mem or 0, math.inf
        if hasattr(self.policy, "try_sleep"):
            self.wait_kind = "park"
        elif hasattr(self.policy, "sem"):
            self.wait_kind = "sem"
        else:
            raise ValueError(f"the {self.policy.name} policy cannot be simulated (it has neither a per-worker park "
                             "nor one semaphore to sleep on)")
        self.local = min(min(n.distances) for n in topology.nodes) if topology.nodes else 10
        self.node_index = {n.os_index: i for i, n in enumerate(topology.nodes)}
        self.plans = list(plans)
        self.arrivals = list(arrivals_ns) if arrivals_ns is not None else [0] * len(self.plans)
        if len(self.arrivals) != len(self.plans):
            raise ValueError("one arrival time per plan")
        self.now = 0
        self._heap: list = []
        self._seq = 0
        self._permits: set = set()  # workers holding a semaphore permit (simple's sleeping)
        self.running: dict = {}  # id(task) -> worker
        self.sleeping: dict = {}  # worker -> time it fell asleep (insertion order: FIFO for the semaphore)
        self.gil_free = 0  # when the interpreter's GIL is next free
        self._gaps = deque()  # idle hand-off windows (start, end), in time order (gil_barging)
        self.handles: list = []
        self.expected: dict = {}  # request id -> rows its sources send
        self.done: set = set()
        self.events = 0
        self.tracer = Tracer(label=label)
        self.tracer.t0 = 0
        self.tracer.wall0 = 0.0
        self.tracer.meta = {"policy": self.policy.name, "simulated": True, "machine": topology.root, "seed": seed,
                            "nodes": [n.os_index for n in topology.cpu_nodes]}
        self.traces = {}
        for w in self.workers:
            wt = WorkerTrace(w.id, w.node_id, f"sim-w{w.id}")
            self.traces[w.id] = wt
            self.tracer.workers.append(wt)
        self.next_sample = 0
        self.last_progress = 0  # when a task last ended (or the last request arrived): the livelock check

    # -- the event heap ---------------------------------------------------------------------
    def _push(self, t: float, kind: str, x=None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (int(t), self._seq, kind, x))

    def _fail(self, what: str) -> None:
        raise Violation(f"t={self.now / 1e6:.3f} ms: {what}")

    # -- running ------------------------------------------------------------------------------
    def run(self) -> dict:
        """Play every event; returns the run's figures (``summary``). Raises
        :class:`Violation` at the first broken invariant."""
        self.start()
        while self.step():
            pass
        return self.finish()

    def start(self) -> None:
        """Queue the plans' arrivals, every worker's first look and the balancer (``run``
        does it; a driver of several simulations, ``domains.py``, steps them itself)."""
        for t, plan in sorted(zip(self.arrivals, self.plans), key=lambda x: x[0]):
            self._push(t, "submit", plan)
        for w in self.workers:
            self._push(0, "look", w)
        if hasattr(self.policy, "migrate") and len(self.topology.cpu_nodes) > 1:
            self._push(self.costs.balance_ns, "balance")

    def next_time(self):
        """The time of the next event (None: nothing left to happen)."""
        return self._heap[0][0] if self._heap else None

    def submit_at(self, t: float, plan) -> None:
        """Submit `plan` at time `t` (not before ``now``), after ``start``: a request sent
        from outside (the front of simulated domains)."""
        self.plans.append(plan)
        self._push(max(t, self.now), "submit", plan)

    def step(self) -> bool:
        """Play the next event; False when none is left."""
        heap = self._heap
        if not heap:
            return False
        t, _, kind, x = heapq.heappop(heap)
        self.now = t
        self.events += 1
        if t - self.last_progress > STALL_NS:
            self._fail(f"livelock: events go on but no task ended for {STALL_NS / 1e9:.0f} s of virtual time")
        if kind == "end":
            self._end(*x)
        elif kind == "look":
            self._look(x)
        elif kind == "resume":
            self._resume(*x)
        elif kind == "release":
            self._release(*x)
        elif kind == "submit":
            self._submit(x)
        elif kind == "balance":
            self._balance()
        self._after_event()
        return True

    def finish(self) -> dict:
        """The checks once nothing is left to happen, then ``summary``."""
        self._final_checks()
        return self.summary()

    def _submit(self, plan) -> None:
        h = self.core.submit(plan)
        self.last_progress = self.now
        self.handles.append(h)
        req = h._request
        self.expected[req.id] = sum(t.op.packets * t.op.rows for t in req.tasks.values() if hasattr(t.op, "packets"))
        self.tracer.requests[req.id] = [req.name or "", self.now, None, None]

    def _balance(self) -> None:
        from bobox_sched.policies.bobox.balancer import balance_once

        for kind, rid, src, dst in balance_once(self.policy):
            self.tracer.actions.append((self.now, kind, rid, src, dst))
        # Again while anything else can happen: with nothing else queued every worker sleeps, and a
        # balancing round acts only on a node none of whose workers sleeps.
        if len(self.done) < len(self.plans) and self._heap:
            self._push(self.now + self.costs.balance_ns, "balance")

    def _look(self, w) -> None:
        if self.wait_kind == "sem" and w not in self._permits:
            if not self.policy.sem.acquire(False):
                w.steps[5] += 1
                w.sleeps += 1
                self.sleeping[w] = self.now
                return
            self._permits.add(w)
        task = self.policy.find_task(w)
        if task is None:
            if self.wait_kind == "sem":
                self._fail(f"worker {w.id} holds a semaphore permit and finds no task")
            if self.policy.try_sleep(w):
                if w.imm:
                    self._fail(f"worker {w.id} went to sleep with {len(w.imm)} tasks in its own list")
                self.sleeping[w] = self.now
            else:  # the sleeping rule kept it awake: it looks again (the real loop spins)
                self._push(self.now + self.costs.sched_ns, "look", w)
            return
        self._permits.discard(w)
        self._start(w, task)

    def _start(self, w, task) -> None:
        key = id(task)
        if key in self.running:
            self._fail(f"task {task.name} of request {task.req.id} handed to worker {w.id} while worker "
                       f"{self.running[key].id} runs it")
        self.running[key] = w
        op = task.op
        rows = op.sim_rows(task) if hasattr(op, "sim_rows") else queued_rows(task)
        cost = getattr(op, "cost", Cost())
        held, rel = cost.of(rows)
        held += self.costs.sched_ns
        nbytes = rows * cost.bytes_row
        home = home_node(task)
        if home is not None and w.node_id is not None:
            self.homed += 1
            if home == w.node_id:
                self.local_tasks += 1
            elif home in self.node_index:
                d = self.topology.nodes[self.node_index[w.node_id]].distances[self.node_index[home]]
                rel *= 1 + self.costs.numa * (d / self.local - 1)
        if self.costs.jitter:
            f = float(np.exp(self.rng.normal(0.0, self.costs.jitter)))
            held, rel = held * f, rel * f
        step = w.last_step
        victim = w.stolen_from if step == 4 else -1
        reads = nbytes > 0 and self.costs.node_bandwidth_gbs is not None  # its time depends on the others'
        tail = held * self.costs.gil_tail if rel > 0 or reads else 0.0  # taken again after the kernels
        start = self._gil(self.now, held - tail)
        if reads:
            node = home if home is not None else w.node_id
            self._push(start + held - tail, "release", (w, task, self.now, rel, step, victim, rows, nbytes, node, tail))
            return
        x = (w, task, self.now, int(rel), step, victim, rows, nbytes)
        if tail > 0:
            self._push(start + held - tail + rel, "resume", (x, tail))
        else:
            self._push(start + held + rel, "end", x)

    def _gil(self, t: float, held: float) -> float:
        """Take the interpreter's GIL at `t` for `held` ns (module doc): when it holds
        it; a waiter gets it ``gil_handoff_ns`` after the holder let it go."""
        # whole nanoseconds, as the event heap's times: the end of a holder's task and
        # the GIL's free time must compare equal, not differ by a truncated fraction
        t = int(t)
        gaps = self._gaps
        if gaps:
            while gaps and gaps[0][1] <= t:  # calls come in time order: older gaps are gone
                gaps.popleft()
            for k, (a, b) in enumerate(gaps):
                if a > t:
                    break
                if t + held <= b:  # it arrives in an idle hand-off and is done before the waiter runs
                    del gaps[k]
                    if t > a:
                        gaps.insert(k, (a, t))
                    if t + held < b:
                        gaps.insert(k + (t > a), (int(t + held), b))
                    return t
        if self.gil_free > t:
            start = self.gil_free + int(self.costs.gil_handoff_ns)
            if self.costs.gil_barging and start > self.gil_free:
                gaps.append((self.gil_free, start))
            t = start
        self.gil_free = int(t + held)
        return t

    def _release(self, w, task, t0, rel, step, victim, rows, nbytes, node, tail) -> None:
        """A task's released part starts reading `nbytes` from `node`: its memory time,
        shared with the node's other readers now, against its compute time `rel` (module
        doc)."""
        k = self.reading.get(node, 0) + 1
        self.reading[node] = k
        self._reading_of[id(task)] = node
        mem = nbytes * k / self.costs.node_bandwidth_gbs
        if mem > rel:
            self.bandwidth_bound += 1
            rel = mem
        x = (w, task, t0, int(rel), step, victim, rows, nbytes)
        if tail > 0:
            self._push(self.now + rel, "resume", (x, tail))
        else:
            self._push(self.now + rel, "end", x)

    def _read_done(self, task) -> None:
        """`task`'s released part is over: it no longer reads from its node."""
        node = self._reading_of.pop(id(task), None)
        if node is not None:
            self.reading[node] -= 1

    def _resume(self, x, tail: float) -> None:
        """A task's kernels are over: it takes the GIL back for the rest of its Python."""
        if self._reading_of:
            self._read_done(x[1])
        self._push(self._gil(self.now, tail) + tail, "end", x)

    def _end(self, w, task, t0, rel, step, victim, rows, nbytes) -> None:
        if self._reading_of:
            self._read_done(task)
        del self.running[id(task)]
        self.last_progress = self.now
        req = task.req
        w.tasks += 1
        req.wsteps[w.id][step] += 1
        self.policy.run_task(w, task)
        w.busy_ns += self.now - t0
        w.released_ns += rel
        self.bytes_read += nbytes
        self.traces[w.id].tasks.append((t0, self.now, task.name, req.id, step, rows, round(nbytes), rel, victim))
        rid = req.id  # a request ends in one of its own tasks' runs: only this one can have ended now
        if rid not in self.done and req.future.done():
            self.done.add(rid)
            rec = self.tracer.requests[rid]
            rec[2], rec[3] = self.now, req.state
        if self.now >= self.next_sample:
            self.next_sample = self.now + MEMORY_SAMPLE_NS
            self.traces[w.id].memory.append((self.now, *self.core.bytes.held_by_request()))
        self._push(self.now, "look", w)

    def _after_event(self) -> None:
        if not self.sleeping:
            return
        if self.wait_kind == "park":
            woken = [w for w in self.sleeping if w.park.acquire(False)]
        else:
            woken = []
            for w in self.sleeping:
                if not self.policy.sem.acquire(False):
                    break
                woken.append(w)
                self._permits.add(w)
        for w in woken:
            t_sleep = self.sleeping.pop(w)
            w.wakeups += 1
            t = self.now + self.costs.wake_ns
            self.traces[w.id].sleeps.append((t_sleep, t))
            self._push(t, "look", w)
        if self.wait_kind == "park":  # (simple's workers may sleep with tasks in their lists: a permit each)
            for w in self.sleeping:
                if w.imm:
                    self._fail(f"worker {w.id} sleeps with {len(w.imm)} tasks in its own list")

    def _final_checks(self) -> None:
        unfinished = [h for h in self.handles if not h.done()]
        if unfinished:
            queued = sum(len(w.imm) for w in self.workers) + sum(len(h._request.deferred) for h in unfinished)
            self._fail(f"lost wake-up: nothing is left to happen but {len(unfinished)} requests are unfinished "
                       f"({queued} tasks queued, {len(self.sleeping)} of {len(self.workers)} workers asleep)")
        for h in self.handles:
            exc = h.exception(0)
            if exc is not None:
                self._fail(f"request {h.id} failed: {type(exc).__name__}: {exc}")
            res = h.result(0)
            got = res.get("rows") if isinstance(res, dict) else None
            want = self.expected.get(h.id)
            if got is not None and want is not None and got != want:
                self._fail(f"request {h.id}: its sink got {got} rows, its sources sent {want}")
        held = self.core.bytes._collect()[2]
        if held:
            self._fail(f"{held} bytes of packet memory still held after every request ended")

    # -- results ------------------------------------------------------------------------------
    def summary(self) -> dict:
        span = max((wt.tasks[-1][1] for wt in self.traces.values() if wt.tasks), default=0)
        busy = sum(w.busy_ns for w in self.workers)
        return {
            "policy": self.policy.name, "machine": self.topology.root, "seed": self.seed,
            "workers": len(self.workers), "nodes": len(self.topology.cpu_nodes), "requests": len(self.handles),
            "makespan_ms": round(span / 1e6, 4),
            "tasks": sum(w.tasks for w in self.workers), "steals": sum(w.steals for w in self.workers),
            "sleeps": sum(w.sleeps for w in self.workers), "migrations": getattr(self.policy, "migrations", 0),
            "shares": getattr(self.policy, "shares", 0), "events": self.events,
            "busy_ms": round(busy / 1e6, 4),
            "utilisation": round(busy / (span * len(self.workers)), 4) if span else 0.0,
            "steps": {str(k): sum(w.steps[k] for w in self.workers) for k in range(1, 6)},
            # tasks whose oldest input packet lay on the worker's own node, of those with one
            "local_fraction": round(self.local_tasks / self.homed, 4) if self.homed else None,
            # bytes the tasks' released parts read; tasks whose memory time exceeded their compute time
            "bytes": round(self.bytes_read), "bandwidth_bound": self.bandwidth_bound,
        }

    def document(self) -> dict:
        """The run's Chrome trace (virtual times; ``bobox_sched/trace/chrome.py``)."""
        return self.tracer.document()


def simulate(topology, plans, **kw) -> tuple[dict, dict]:
    """Run one simulation: (its summary, its trace document)."""
    sim = Simulation(topology, plans, **kw)
    out = sim.run()
    return out, sim.document()


__all__ = ["Costs", "Simulation", "Violation", "VirtualCore", "simulate"]
