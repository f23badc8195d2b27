"""Step machines of the non-blocking reorder buffer (Figure 4) and of the hybrid queue
(Figure 7), for exhaustive interleaving checks (spec 000, T1, T2, T4).

Each worker is a program counter plus locals; each step is one line of the paper's
pseudocode (one atomic action, as the GIL makes each of them in
``bobox_sched/policies/ordered/reorder.py`` and ``hybrid.py``, whose comments carry the same line
numbers). ``explore`` visits every reachable state once (depth-first, memoised), so all
interleavings are covered, and checks the safety invariants at every state and the
end-state properties at every final state. Mutations reproduce the bugs the tests must
catch.
"""

from __future__ import annotations

from collections import namedtuple

EMPTY = None


class Violation(AssertionError):
    pass


# ---------------------------------------------------------------------------------------
# the reorder buffer (Figure 4)

# worker pcs. Each step does one access to shared state; purely local lines (F4:L16,
# L31, L41, L10) are folded into the step before them, which changes no interleaving
# outcome (a local step commutes with every other worker's step).
DEQ, L15, L18, L25, L28, L30, L32, L33, L34, L36, L40, DONE = range(12)
EXIT_SECTION = {L28, L30, L32, L33, L34}


class ReorderMachine:
    """Workers take serials 1..n in order from a shared counter (the worklist) and call
    ``send`` (F4:L7-43) for each. ``empty`` serials have no output (a filter's empty
    unit). ``gated``: a worker dequeues only while fewer than `capacity` units are in
    flight (spec A4); otherwise a full window makes ``try_add`` fail and the worker retries
    (the paper's loop).

    Mutations: ``no_recheck`` (drop F4:L40-42), ``swap_33_34`` (move next before clearing
    the slot), ``window_le`` (entry condition t <= n + s), ``skip_empty`` (a worker does not
    call send for a unit with no output)."""

    def __init__(self, workers: int, capacity: int, n: int, empty=(), gated=True, mutation=None):
        self.W = workers
        self.s = capacity
        self.n = n
        self.empty = frozenset(empty)
        self.gated = gated
        self.mut = mutation

    def initial(self):
        # shared: next, buffer, flag, sent, taken; per worker: (pc, t, nloc, i, o, success)
        shared = (1, (EMPTY,) * self.s, False, (), 0)
        return shared, ((DEQ, 0, 0, 0, EMPTY, False),) * self.W

    def steps(self, state):
        """[(successor state)] of every enabled worker step."""
        shared, ws = state
        out = []
        for k, w in enumerate(ws):
            r = self.step(shared, w)
            if r is not None:
                sh2, w2 = r
                out.append((sh2, ws[:k] + (w2,) + ws[k + 1:]))
        return out

    def step(self, shared, w):
        nxt, buf, flag, sent, taken = shared
        pc, t, n, i, o, ok = w
        s = self.s
        if pc == DONE:
            return None
        if pc == DEQ:  # take the next unit from the worklist
            if taken >= self.n:
                return shared, (DONE, 0, 0, 0, EMPTY, False)
            if self.gated and taken - (nxt - 1) >= s:
                return None  # no credit: wait (disabled)
            t = taken + 1
            shared = (nxt, buf, flag, sent, t)
            if self.mut == "skip_empty" and t in self.empty:
                return shared, (DEQ, 0, 0, 0, EMPTY, False)
            return shared, (L15, t, 0, 0, EMPTY, False)
        if pc == L15:  # F4:L15 (load next) with L16, the local test of the entry condition
            n = nxt
            hi = n + s + (1 if self.mut == "window_le" else 0)
            if t < n:
                raise Violation(f"unit {t} sent after next passed it ({n})")
            if t < hi:
                return shared, (L18, t, n, i, o, ok)
            return shared, (L25, t, n, i, o, False)
        if pc == L18:
            j = t % s
            if buf[j] is not EMPTY:
                raise Violation(f"R3: unit {t} overwrote unit {buf[j]} in slot {j}")
            buf = buf[:j] + (t,) + buf[j + 1:]
            return (nxt, buf, flag, sent, taken), (L25, t, n, i, o, True)
        if pc == L25:  # test_and_set; a failed one returns (L10, local, folded in)
            if flag:
                return shared, self._ret(t, ok)
            return (nxt, buf, True, sent, taken), (L28, t, n, i, o, ok)
        if pc == L28:
            return shared, (L30, t, nxt, i, o, ok)
        if pc == L30:  # L29-30 load the slot, with L31's local branch
            j = n % s
            o = buf[j]
            return shared, ((L32 if o is not EMPTY else L36), t, n, j, o, ok)
        if pc == L32:
            if o != n:
                raise Violation(f"R4: slot {i} holds {o} while next is {n}")
            return (nxt, buf, flag, sent + (o,), taken), (L33, t, n, i, o, ok)
        if pc == L33:
            if self.mut == "swap_33_34":
                return (nxt + 1, buf, flag, sent, taken), (L34, t, n, i, o, ok)
            buf = buf[:i] + (EMPTY,) + buf[i + 1:]
            return (nxt, buf, flag, sent, taken), (L34, t, n, i, o, ok)
        if pc == L34:
            if self.mut == "swap_33_34":
                buf = buf[:i] + (EMPTY,) + buf[i + 1:]
                return (nxt, buf, flag, sent, taken), (L28, t, n, i, o, ok)
            return (nxt + 1, buf, flag, sent, taken), (L28, t, n, i, o, ok)
        if pc == L36:
            flag_off = (nxt, buf, False, sent, taken)
            if self.mut == "no_recheck":
                return flag_off, self._ret(t, ok)
            return flag_off, (L40, t, n, i, o, ok)
        if pc == L40:  # re-check the slot, with L41's local branch
            o = buf[i]
            if o is not EMPTY:
                return shared, (L25, t, n, i, o, ok)
            return shared, self._ret(t, ok)
        raise AssertionError(pc)

    @staticmethod
    def _ret(t, ok):
        """F4:L10 (local): next unit, or retry the same one after a failed add."""
        if ok:
            return (DEQ, 0, 0, 0, EMPTY, False)
        return (L15, t, 0, 0, EMPTY, False)

    def check_state(self, state):
        shared, ws = state
        inside = sum(1 for w in ws if w[0] in EXIT_SECTION)
        if inside > 1:
            raise Violation("R1: two workers in the exit section")

    def check_final(self, state):
        (nxt, buf, flag, sent, taken), ws = state
        if sent != tuple(range(1, self.n + 1)):
            raise Violation(f"R2/R4: sent {sent}, expected 1..{self.n}")
        if any(x is not EMPTY for x in buf):
            raise Violation(f"R6: units left in the buffer after every worker returned: {buf}")
        if nxt != self.n + 1:
            raise Violation(f"R6: next is {nxt} after every worker returned, expected {self.n + 1}")

    def is_final(self, state):
        return all(w[0] == DONE for w in state[1])


# ---------------------------------------------------------------------------------------
# the hybrid queue (Figure 7)

H_L9, H_L10, H_L12, H_L13, H_L13E, H_L14, H_DONE = range(7)
P_L4, P_L5, P_DONE = range(3)


class HybridMachine:
    """One producer adds `inputs` (a bucket per tuple; tuple ids 0..) with F7:L3-5; workers
    run consumeInputs (F7:L9-14), with operate split in start (L13) and end (L13E) so that
    concurrent operation on one bucket is visible. A worker whose master dequeue finds
    nothing waits while the producer may still add, and returns once it is done.

    Mutations: ``master_first`` (F7:L5 before L4), ``sub_gt0`` (F7:L14 tests > 0)."""

    def __init__(self, workers: int, inputs, mutation=None):
        self.W = workers
        self.inputs = tuple(inputs)
        self.p = max(self.inputs) + 1 if self.inputs else 1
        self.mut = mutation

    def initial(self):
        # shared: parts, master, count, operating (worker per bucket or -1), done order, produced index
        p = self.p
        shared = (((),) * p, (), (0,) * p, (-1,) * p, ((),) * p)
        prod = (P_L4, 0)
        return shared, prod, ((H_L9, -1, -1),) * self.W

    def steps(self, state):
        shared, prod, ws = state
        out = []
        r = self.produce(shared, prod)
        if r is not None:
            out.append((r[0], r[1], ws))
        for k, w in enumerate(ws):
            r = self.step(shared, prod, k, w)
            if r is not None:
                out.append((r[0], prod, ws[:k] + (r[1],) + ws[k + 1:]))
        return out

    def produce(self, shared, prod):
        parts, master, count, opr, done = shared
        pc, j = prod
        if pc == P_DONE:
            return None
        b = self.inputs[j]
        first, second = (P_L5, P_L4) if self.mut == "master_first" else (P_L4, P_L5)
        stage = 0 if pc == P_L4 else 1
        action = first if stage == 0 else second
        if action == P_L4:
            parts = parts[:b] + (parts[b] + (j,),) + parts[b + 1:]
        else:
            master = master + (b,)
        if stage == 0:
            return (parts, master, count, opr, done), (P_L5, j)
        j += 1
        return (parts, master, count, opr, done), ((P_DONE, j) if j == len(self.inputs) else (P_L4, j))

    def step(self, shared, prod, k, w):
        parts, master, count, opr, done = shared
        pc, b, tup = w
        if pc == H_DONE:
            return None
        if pc == H_L9:
            if not master:
                if prod[0] == P_DONE:
                    return shared, (H_DONE, -1, -1)
                return None  # wait for the producer
            return (parts, master[1:], count, opr, done), (H_L10, master[0], -1)
        if pc == H_L10:
            c = count[b]
            count = count[:b] + (c + 1,) + count[b + 1:]
            return (parts, master, count, opr, done), ((H_L12 if c == 0 else H_L9), b, -1)
        if pc == H_L12:
            if not parts[b]:
                raise Violation(f"F7:L12: partition queue {b} empty")
            tup = parts[b][0]
            parts = parts[:b] + (parts[b][1:],) + parts[b + 1:]
            return (parts, master, count, opr, done), (H_L13, b, tup)
        if pc == H_L13:
            if opr[b] != -1:
                raise Violation(f"H1: workers {opr[b]} and {k} operate on bucket {b} at once")
            opr = opr[:b] + (k,) + opr[b + 1:]
            done = done[:b] + (done[b] + (tup,),) + done[b + 1:]
            return (parts, master, count, opr, done), (H_L13E, b, tup)
        if pc == H_L13E:
            opr = opr[:b] + (-1,) + opr[b + 1:]
            return (parts, master, count, opr, done), (H_L14, b, -1)
        if pc == H_L14:
            c = count[b]
            count = count[:b] + (c - 1,) + count[b + 1:]
            again = c > 0 if self.mut == "sub_gt0" else c > 1
            return (parts, master, count, opr, done), ((H_L12 if again else H_L9), b, -1)
        raise AssertionError(pc)

    def check_state(self, state):
        pass  # H1 is checked at L13

    def is_final(self, state):
        return state[1][0] == P_DONE and all(w[0] == H_DONE for w in state[2])

    def check_final(self, state):
        parts, master, count, opr, done = state[0]
        for b in range(self.p):
            expect = tuple(j for j, x in enumerate(self.inputs) if x == b)
            if done[b] != expect:
                raise Violation(f"H2: bucket {b} processed {done[b]}, expected {expect} once each, in order")
        if any(count):
            raise Violation(f"counts not back to 0 at quiescence: {count}")
        if master or any(parts):
            raise Violation("queues not empty at quiescence")


# ---------------------------------------------------------------------------------------
# SHARED-QUEUE (Figure 5, made safe with a dequeue lock) inside an ordered stage

(Q_IDLE, Q_TAKE, Q_DQ, Q_POP, Q_BLK, Q_UNL, Q_WAKE, Q_RUN, Q_REL, Q_UADD, Q_URECHECK,
 Q_DONE) = range(12)

# The shared state. queue: unit ids waiting in S; uwait/dwait: U waits for room in S / S
# for room in D; udrain/sdrain: U's / S's drain pushed on the policy's drain queue; dq and
# locks: the holder's worker id or -1; nxt: the next unit the reorder buffer sends; buf:
# units whose output waits in the window; d: items in D; ran: per bucket, units in run order.
QShared = namedtuple("QShared", "queue produced uwait udrain dq locks credits nxt buf d dwait sdrain ran consumed")


class SharedQueueMachine:
    """A partitioned stage S under SHARED-QUEUE between its producer U (the upstream
    stage's drain) and its receiver D (a bounded worklist), with the dequeue credits of
    the window (spec A4) and the wake-ups between them: the lock steps of
    ``bobox_sched.policies.ordered.hybrid.SharedQueue.consume`` one by one, the rest one
    step each.

    Units 0..n-1 go to buckets ``inputs[u]`` (one slice of a packet each; -1: a control
    unit, a punctuation or the end of stream, run under no bucket lock). Workers are
    program counters; an idle worker may run any task the policy could hand it: S's
    consume (when schedulable: a unit queued and a credit free), U's drain (pushed when S's
    consumer took a unit while U waited for room), S's drain (pushed when D's consumer took
    an item while S waited), or D's consumer. A worker blocks only where the real one
    does: on the dequeue lock and on a bucket lock (a disabled step). So "stuck" (no worker
    can move, work left) is a deadlock, and "no progress" a livelock.

    One step each, as checked elsewhere: the reorder buffer's send and exit section
    (``ReorderMachine``), and a Port's register-then-look (the producer's registration
    and re-check are two steps here). Not modelled: the sleep/wake-up of idle workers (an
    enabled task is eventually run by some worker).

    S's consume, line by line (``SharedQueue.consume`` and ``Stage._run``): take a credit
    (none: return), acquire the dequeue lock, pop the head (none: give the credit back,
    release, return), acquire the unit's bucket lock, release the dequeue lock, wake U if
    it waits (``_wake_up``), run the unit and send its output (the drain moves every
    consecutive output the receiver takes: one item each, a credit back each; a full
    receiver makes S its waiter), release the bucket lock, then take the next unit or
    return (the quota: both are explored).

    Mutations: ``lock_after_dq`` (the bucket lock taken after the dequeue lock is released:
    Figure 5's race, two units of one bucket out of order), ``keep_credit`` (an empty pop
    keeps its credit)."""

    def __init__(self, workers: int, inputs, capacity: int = 1, qcap: int = 1, dcap: int = 1, mutation=None):
        self.W = workers
        self.inputs = tuple(inputs)
        self.n = len(self.inputs)
        self.p = max(max(self.inputs) + 1, 1) if self.inputs else 1
        self.capacity = capacity
        self.qcap = qcap
        self.dcap = dcap
        self.mut = mutation

    def initial(self):
        shared = QShared((), 0, False, True, -1, (-1,) * self.p, self.capacity, 0, frozenset(), 0, False, False,
                         ((),) * self.p, 0)
        return shared, ((Q_IDLE, -1),) * self.W

    def steps(self, state):
        shared, ws = state
        out = []
        for k, w in enumerate(ws):
            for sh2, w2 in self.step(shared, k, w):
                out.append((sh2, ws[:k] + (w2,) + ws[k + 1:]))
        return out

    def _drain(self, sh):
        """S's exit section: send consecutive outputs while D takes them (a credit back
        per unit sent); a full D makes S its waiter, then looks again (A5)."""
        nxt, buf, d, dwait, credits = sh.nxt, sh.buf, sh.d, sh.dwait, sh.credits
        while nxt in buf:
            if d >= self.dcap:
                dwait = True
                if d >= self.dcap:
                    break
            d += 1
            buf = buf - {nxt}
            nxt += 1
            credits += 1
        return sh._replace(nxt=nxt, buf=buf, d=d, dwait=dwait, credits=credits)

    def step(self, sh, k, w):
        """[(shared, worker)] after each step worker `k` may take now (several when an
        idle worker may pick among tasks)."""
        queue, produced, uwait, udrain, dq, locks, credits, nxt, buf, d, dwait, sdrain, ran, consumed = sh
        pc, u = w
        put = sh._replace

        if pc == Q_DONE:
            return []
        if pc == Q_IDLE:
            out = []
            if queue and credits > 0:  # Stage.schedulable
                out.append((sh, (Q_TAKE, -1)))
            if udrain:
                out.append((put(udrain=False), (Q_UADD, -1)))
            if sdrain:
                out.append((self._drain(put(sdrain=False)), (Q_IDLE, -1)))
            if d > 0:  # D's consumer takes an item and wakes its waiter (S's drain)
                out.append((put(d=d - 1, consumed=consumed + 1, dwait=False, sdrain=sdrain or dwait), (Q_IDLE, -1)))
            if not out and consumed == self.n:
                out.append((sh, (Q_DONE, -1)))
            return out
        if pc == Q_UADD:  # U's drain: add while S has room; full: register, then look again
            if produced == self.n:
                return [(sh, (Q_IDLE, -1))]
            if len(queue) < self.qcap:
                return [(put(queue=queue + (produced,), produced=produced + 1), (Q_UADD, -1))]
            return [(put(uwait=True), (Q_URECHECK, -1))]
        if pc == Q_URECHECK:
            return [(sh, (Q_UADD if len(queue) < self.qcap else Q_IDLE, -1))]
        if pc == Q_TAKE:
            if credits == 0:
                return [(sh, (Q_IDLE, -1))]
            return [(put(credits=credits - 1), (Q_DQ, -1))]
        if pc == Q_DQ:
            if dq != -1:
                return []  # blocked on the dequeue lock
            return [(put(dq=k), (Q_POP, -1))]
        if pc == Q_POP:
            if not queue:
                back = credits if self.mut == "keep_credit" else credits + 1
                return [(put(credits=back, dq=-1), (Q_IDLE, -1))]
            u = queue[0]
            nxt_pc = Q_UNL if self.mut == "lock_after_dq" or self.inputs[u] < 0 else Q_BLK
            return [(put(queue=queue[1:]), (nxt_pc, u))]
        if pc == Q_BLK:
            b = self.inputs[u]
            if locks[b] == k:
                raise Violation(f"worker {k} waits for bucket {b}, which it holds itself")
            if locks[b] != -1:
                return []  # blocked on the bucket lock
            locks = locks[:b] + (k,) + locks[b + 1:]
            after = Q_WAKE if self.mut == "lock_after_dq" else Q_UNL
            return [(put(locks=locks), (after, u))]
        if pc == Q_UNL:
            blk = self.mut == "lock_after_dq" and self.inputs[u] >= 0
            return [(put(dq=-1), ((Q_BLK if blk else Q_WAKE), u))]
        if pc == Q_WAKE:  # Stage._run: a consumer took a unit, U's drain may go on
            return [(put(uwait=False, udrain=udrain or uwait), (Q_RUN, u))]
        if pc == Q_RUN:  # run the unit, send its output (reorder send + exit section)
            b = self.inputs[u]
            if u >= nxt + self.capacity:
                raise Violation(f"unit {u} beyond the window (next {nxt}, capacity {self.capacity}) with credits")
            if b >= 0:
                ran = ran[:b] + (ran[b] + (u,),) + ran[b + 1:]
            return [(self._drain(put(ran=ran, buf=buf | {u})), (Q_REL, u))]
        if pc == Q_REL:
            b = self.inputs[u]
            sh2 = put(locks=locks[:b] + (-1,) + locks[b + 1:]) if b >= 0 else sh
            return [(sh2, (Q_TAKE, -1)), (sh2, (Q_IDLE, -1))]  # next unit, or the quota is used up
        raise AssertionError(pc)

    def check_state(self, state):
        pass

    def is_final(self, state):
        return all(w[0] == Q_DONE for w in state[1])

    def check_final(self, state):
        ran, nxt, buf, d, credits = state[0].ran, state[0].nxt, state[0].buf, state[0].d, state[0].credits
        for b in range(self.p):
            expect = tuple(u for u, x in enumerate(self.inputs) if x == b)
            if ran[b] != expect:
                raise Violation(f"bucket {b} ran {ran[b]}, expected {expect} once each, in order")
        if nxt != self.n or buf or d:
            raise Violation(f"outputs left: next {nxt}, window {sorted(buf)}, {d} in the receiver")
        if credits != self.capacity:
            raise Violation(f"credits {credits} at the end, expected {self.capacity}")


# ---------------------------------------------------------------------------------------

def explore(machine, limit: int = 5_000_000, progress: bool = True) -> dict:
    """Visit every reachable state; raise Violation at the first broken property.
    With `progress`, also check that a final state stays reachable from every reachable
    state (no livelock: e.g. a worker retrying for ever a unit nobody lets in).
    Returns {"states": visited, "finals": final states}."""
    start = machine.initial()
    index = {start: 0}
    states = [start]
    preds: list = [[]]
    stack = [0]
    finals = []
    while stack:
        k = stack.pop()
        st = states[k]
        machine.check_state(st)
        succ = machine.steps(st)
        if not succ:
            if machine.is_final(st):
                machine.check_final(st)
                finals.append(k)
            else:
                raise Violation(f"stuck: no worker can move in a non-final state {st}")
        for s2 in succ:
            j = index.get(s2)
            if j is None:
                j = index[s2] = len(states)
                if j > limit:
                    raise RuntimeError(f"more than {limit} states")
                states.append(s2)
                preds.append([])
                stack.append(j)
            if progress:
                preds[j].append(k)
    if progress:
        ok = bytearray(len(states))
        todo = list(finals)
        for k in todo:
            ok[k] = 1
        while todo:
            k = todo.pop()
            for j in preds[k]:
                if not ok[j]:
                    ok[j] = 1
                    todo.append(j)
        bad = ok.count(0)
        if bad:
            k = ok.index(0)
            raise Violation(f"no progress: {bad} reachable states can never finish (livelock), e.g. {states[k]}")
    return {"states": len(states), "finals": len(finals)}
