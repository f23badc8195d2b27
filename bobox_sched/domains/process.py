"""One domain: a process running the ordinary runtime (a ``Scheduler``) on its CPUs, fed
requests by the front (``front.py``) over a pipe.

Start-up (``boot_command``): the process is ``python -c BOOT`` with the interpreter of
the user's process. BOOT pins the process to its CPUs (``sched_setaffinity``) and, on a
machine with several NUMA nodes, makes its node's memory the preferred one
(``set_mempolicy(MPOL_PREFERRED)``) *before* it imports numpy or anything that
allocates, so that every page it touches first comes from its node. Then it imports
this module and runs :func:`main`: the topology it probes is restricted to its
affinity mask (``topology.probe``), so its Scheduler has exactly its CPUs.

Messages (``pickle`` tuples over a ``multiprocessing.connection.Connection`` on an
inherited socket; a plan travels as ``cloudpickle`` bytes, so operators defined in the
user's ``__main__`` or a notebook work):

==========================================  ============================================
front -> domain                             domain -> front
==========================================  ============================================
``("init", kwargs, sys_path, init_fn)``     ``("ready", pid, cpus, workers)`` or
                                            ``("failed", exception)`` (cloudpickled)
``("submit", rid, pid, bytes|None)``        ``("done", rid, ok, payload)``: payload is
                                            the result (``results.py``: Arrow IPC,
                                            through shared memory when large), or the
                                            exception (cloudpickle bytes; the
                                            exception's text if it cannot be)
``("cancel", rid)``                         (the request ends as cancelled: ``done``)
``("stats", token)``                        ``("stats", token, dict)``: the Scheduler's
``("rstats", token, rid)``                  ``("stats", token, dict or None)``: one
                                            running request's (``done`` carries the
                                            final ones and the failed operator, after
                                            the payload)
``("reset_peak",)``                         (none)
``("window", token, ns)``                   ``("stats", token, traced)``: the trace's
                                            window begins at `ns` (perf_counter_ns: one
                                            clock for every process of the machine)
``("cpu", token)``                          ``("stats", token, (cpu_s, wait_s))``: its
                                            workers' time on a CPU and waiting for one
``("rss", token)``                          ``("stats", token, bytes)``: its peak RSS
``("shutdown",)``                           the process exits
==========================================  ============================================

A plan's bytes come with the first request of it that a domain gets; later ones name it
by plan id (``PLAN_CACHE``: an LRU that the front mirrors message by message).

Who touches what: the main thread reads the pipe, unpickles and submits (``plans`` is
its own), and keeps reading until EOF, also after ``shutdown`` (which runs on a closer
thread: a cancel may still come); a request's end is reported by the worker thread that
ends it (``add_done_callback``). Every message out goes through ``_Sender``: queued by
any thread, written by its one thread, so that no thread here blocks on a full pipe. ``handles`` (rid -> handle) is written by the main thread on submit and
popped by the done callback; dict operations are atomic (sync's inventory: a dict
``pop`` and ``setitem`` under the GIL, or under the dict's own lock when free-threaded).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections import OrderedDict, deque

# Plans a domain keeps unpickled (an LRU of plan ids): a plan resubmitted unchanged travels
# once. The front mirrors the cache (front._Domain.submit), so both sides must use this
# one rule. 256: more distinct plans than the main job's mix (8) times its decompositions.
PLAN_CACHE = 256

# BOOT runs before anything else in the domain process: affinity and memory policy first,
# so that the interpreter's and numpy's first pages come from the domain's node.
BOOT = """\
import ctypes, os, sys
cpus = [int(c) for c in sys.argv[2].split(",")]
os.sched_setaffinity(0, cpus)
node = int(sys.argv[3])
if node >= 0:
    mask = ctypes.c_ulong(1 << node)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(238, 1, ctypes.byref(mask), 64)  # set_mempolicy(MPOL_PREFERRED, {node}); x86-64 only
from bobox_sched.domains.process import main
main(int(sys.argv[1]))
"""


def boot_command(fd: int, cpus: list[int], node: int | None) -> list[str]:
    """The argv that starts a domain on `cpus` (node: prefer its memory; None: leave the
    policy alone) talking over inherited descriptor `fd`."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        node = None  # set_mempolicy's syscall number above is x86-64's
    return [sys.executable, "-c", BOOT, str(fd), ",".join(map(str, cpus)), str(-1 if node is None else node)]


class _Sender:
    """The domain's one writer of its pipe: messages queue here and a thread writes them,
    so that no thread of the domain ever blocks on a full pipe. (The main loop blocked
    in a write while the front's reader blocked writing to us would wait for ever.)"""

    def __init__(self, conn):
        self.conn = conn
        self.q: deque = deque()
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="bobox-domain-sender", daemon=True)
        self.thread.start()

    def send(self, msg) -> None:
        data = pickle.dumps(msg, protocol=5)
        with self.cond:
            self.q.append(data)
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.q and not self.closed:
                    self.cond.wait()
                if not self.q:
                    return
                data = self.q.popleft()
            try:
                self.conn.send_bytes(data)
            except OSError:  # the front is gone: nobody to tell (the main loop ends on EOF)
                pass

    def close(self) -> None:
        """Write what is queued, then stop."""
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join()


def _close_after(sched, fd: int) -> None:
    """Shut the runtime down (its requests finish and report), then end the main loop's
    reading: ``shutdown(SHUT_RD)`` on the socket makes its ``recv`` return EOF."""
    import socket

    try:
        sched.shutdown(wait=True)
    finally:
        s = socket.socket(fileno=os.dup(fd))
        try:
            s.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        finally:
            s.close()


def _dump_exception(exc: BaseException) -> bytes:
    import cloudpickle

    try:
        return cloudpickle.dumps(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be pickled goes back as its text
        return cloudpickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def _worker_cpu(sched) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of this domain's worker
    threads (``core.worker.thread_schedstat``)."""
    from bobox_sched.core.worker import thread_schedstat

    times = [thread_schedstat(w.thread.native_id) for w in sched.workers]
    return sum(a for a, _ in times) / 1e9, sum(b for _, b in times) / 1e9


def _stats_of(h) -> dict | None:
    try:
        st = h.stats
        pickle.dumps(st)
        return st
    except Exception:  # noqa: BLE001 - statistics never fail a request
        return None


def main(fd: int) -> None:
    from multiprocessing.connection import Connection

    import cloudpickle

    from bobox_sched.domains.channel import expect as expect_channels, release as release_channels
    from bobox_sched.domains.loans import totals as channel_totals
    from bobox_sched.domains.results import encode as encode_result

    conn = Connection(fd)
    out = _Sender(conn)
    send = out.send

    tag, kwargs, path, init = pickle.loads(conn.recv_bytes())
    if tag != "init":
        raise SystemExit(f"domain {os.getpid()}: expected init, got {tag!r}")
    # The front's import path: a plan's classes that cloudpickle sent by reference (a
    # module the user's process imports, e.g. from its working folder) import here too.
    sys.path[:0] = [p for p in path if p not in sys.path]
    if init is not None:  # Scheduler(domain_init=fn): the user's set-up, before the runtime starts
        try:
            cloudpickle.loads(init)()
        except Exception as e:  # noqa: BLE001 - reported to the front, which raises it there
            send(("failed", _dump_exception(ValueError(f"domain_init failed: {type(e).__name__}: {e}"))))
            out.close()
            return
    from bobox_sched.core.scheduler import Scheduler

    try:
        sched = Scheduler(**kwargs)
    except Exception as e:  # noqa: BLE001 - reported to the front, which raises it there
        send(("failed", _dump_exception(e)))
        out.close()
        return
    _share_pools(sched)
    send(("ready", os.getpid(), sorted(os.sched_getaffinity(0)), len(sched.workers)))
    handles: dict = {}
    plans: OrderedDict = OrderedDict()  # plan id -> Plan, the LRU the front mirrors

    def finished(rid, h) -> None:
        handles.pop(rid, None)
        exc = h.exception()
        stats = (_stats_of(h), h.failed_operator)
        try:
            payload = ("done", rid, True, encode_result(h.result()), stats) if exc is None else \
                ("done", rid, False, _dump_exception(exc), stats)
            send(payload)
        except Exception as e:  # noqa: BLE001 - a result that cannot be pickled fails its request, not the domain
            send(("done", rid, False, _dump_exception(TypeError(f"the request's result cannot be sent back from "
                                                                 f"its domain: {type(e).__name__}: {e}")), stats))

    front_gone = False
    closer: threading.Thread | None = None
    try:
        while True:
            try:
                msg = pickle.loads(conn.recv_bytes())
            except EOFError:  # the front went away (or our closer ended the reading): end
                front_gone = closer is None
                break
            tag = msg[0]
            if tag == "submit":
                _, rid, pid, blob = msg  # parallelism/ordering: already rewritten into the plan
                try:
                    if blob is not None:  # new to us: unpickle and keep (front's mirror does the same)
                        plans[pid] = None  # its slot first: a plan that fails to load still takes one
                        if len(plans) > PLAN_CACHE:
                            plans.popitem(last=False)
                        try:
                            plans[pid] = cloudpickle.loads(blob)
                        except Exception as e:  # noqa: BLE001 - kept: every request of this plan fails with it
                            plans[pid] = e
                    elif pid in plans:
                        plans.move_to_end(pid)
                    else:  # the front's mirror and this cache disagree: a bug, reported on the request
                        raise RuntimeError(f"domain {os.getpid()}: plan {pid} was never sent here (plan cache out "
                                           "of step with the front's mirror)")
                    plan = plans[pid]
                    if isinstance(plan, BaseException):
                        raise plan
                    chans = expect_channels(plan)  # a spanning request's part: its channels drain from now on
                    try:
                        h = sched.submit(plan)
                    except BaseException:
                        release_channels(chans)
                        raise
                except Exception as e:  # noqa: BLE001 - a bad plan fails its request
                    send(("done", rid, False, _dump_exception(e), (None, None)))
                    continue
                handles[rid] = h
                h.add_done_callback(lambda hh, rid=rid, c=chans: (release_channels(c), finished(rid, hh)))
            elif tag == "cancel":
                h = handles.get(msg[1])
                if h is not None:
                    h.cancel()
            elif tag == "stats":
                send(("stats", msg[1], dict(sched.stats(), channels=channel_totals())))
            elif tag == "rstats":  # one running request's (None once it ended: its "done" carries them)
                h = handles.get(msg[2])
                send(("stats", msg[1], None if h is None else _stats_of(h)))
            elif tag == "reset_peak":
                sched.reset_peak()
            elif tag == "window":  # Tracer.begin_window of the front's tracer, at the front's clock reading
                if sched.tracer is not None:
                    sched.tracer.begin_window(msg[2])
                send(("stats", msg[1], sched.tracer is not None))
            elif tag == "cpu":
                send(("stats", msg[1], _worker_cpu(sched)))
            elif tag == "rss":
                import resource

                send(("stats", msg[1], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
            elif tag == "shutdown" and closer is None:
                # The running requests finish first, each one's "done" going out, on a
                # thread: this loop goes on reading, since the front may still cancel
                # (a spanning request's part whose other part failed waits for that).
                # Then the closer ends the reading side of the socket: EOF here.
                closer = threading.Thread(target=_close_after, args=(sched, fd), name="bobox-domain-closer")
                closer.start()
    finally:
        sched.shutdown(wait=True, cancel=front_gone)
        if closer is not None:
            closer.join()
        out.close()
        conn.close()
        # The arenas' segments stay: another domain may still map a loan queued for it;
        # the front unlinks them once every domain ended (front._join; arena.py).


def _share_pools(sched) -> None:
    """Make the domain's packet pools take their blocks from shared arenas (one per node
    pool, ``arena.py``), so its packets can be lent to other domains (``loans.py``).
    Before the first request: a pool's blocks all come from one place. An arena whose
    /dev/shm lacks room (a container's 64 MiB) gives none, and the pool's blocks stay
    private (``arena.MIN_SHM_ROOM``)."""
    from bobox_sched.domains.arena import SharedArena
    from topology.memory import live_nodes

    live = set(live_nodes())
    for node, pool in sched.pools.items():
        pool.block_source = SharedArena(node if node in live and len(live) > 1 else None).alloc


__all__ = ["BOOT", "boot_command", "main"]
