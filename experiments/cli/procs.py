"""Child processes that never outlive the command, and commands that end cleanly on
SIGTERM and SIGINT.

``kill`` of ``bobox datagen`` used to leave ``tpchgen-cli`` running as an orphan, writing
hundreds of MB into a staging folder nobody removed; Ctrl-C of ``bobox spark datagen``
left one too. So:

* ``run(cmd)`` starts a child in its own process group (the terminal's Ctrl-C reaches
  only us, and we decide), with the parent-death signal set to SIGKILL on Linux (the
  kernel kills it if the thread that started it dies, even by SIGKILL: this covers Spark's
  Python workers, which their daemon kills with SIGKILL when a task is cancelled). On any
  exception while it runs, KeyboardInterrupt included, its whole group is killed
  (SIGTERM, then SIGKILL after a grace period) before the exception goes on.
* ``install_signal_handlers()`` (the ``bobox`` command does it) turns SIGTERM and SIGHUP
  into ``Terminated``, a KeyboardInterrupt, in the main thread: ``finally`` blocks and the
  kill above run, as for Ctrl-C.
* ``kill_all()``: on the way out of an interrupted command, every child group still
  registered and then every remaining descendant (the Spark JVM and its Python workers
  in local mode) is terminated, so that the temporary paths can be removed for good
  (``experiments.cli.outputs.remove_owned``).

Protocol: ``_live`` (the children now running) is a set guarded by ``_live_lock``; any
thread may call ``run`` (it adds and discards its own child); ``kill_all`` runs in the
main thread after the command's code returned. The signal handler only raises: it never
takes a lock (it runs between bytecodes of the main thread, which may hold one). A
free-threaded build needs nothing more. ``preexec_fn`` is documented as unsafe with
threads because arbitrary Python code then runs between fork and exec; ours is a single
pre-resolved ``prctl`` call and a ``getppid``, with no allocation or lock.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading

# Seconds a child group gets between SIGTERM and SIGKILL: tpchgen-cli exits at once on
# SIGTERM; Spark's JVM shuts down in about a second (local mode, 2-core VM).
GRACE_S = 3.0

_PR_SET_PDEATHSIG = 1

_live: set = set()
_live_lock = threading.Lock()


class Terminated(KeyboardInterrupt):
    """The command received SIGTERM or SIGHUP (``signum``)."""

    def __init__(self, signum: int):
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


def _death_signal_setup():
    """A preexec_fn that makes the child die with its parent (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    sig = int(signal.SIGKILL)

    def setup():
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody will kill us
            os._exit(1)

    return setup


def kill_group(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """SIGTERM to `proc`'s process group, SIGKILL after `grace` seconds; reaps `proc`."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # The leader is reaped; a member of its group that ignored SIGTERM may live on.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(cmd: list[str], timeout: float | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `cmd` to the end with its output captured as text (see the module doc); like
    ``subprocess.run(cmd, capture_output=True, text=True)``. Raises OSError where it
    cannot start and ``subprocess.TimeoutExpired`` after `timeout` (the group killed)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, process_group=0, preexec_fn=_death_signal_setup())
    with _live_lock:
        _live.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill_group(proc)
        proc.communicate()  # drain and close the pipes
        raise
    finally:
        with _live_lock:
            _live.discard(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def live_children() -> list[subprocess.Popen]:
    with _live_lock:
        return list(_live)


def kill_all(grace: float = GRACE_S) -> None:
    """Kill every registered child group, then every remaining descendant of this
    process (``psutil``), SIGTERM first and SIGKILL after `grace` seconds."""
    for proc in live_children():
        kill_group(proc, grace)
    import psutil

    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def reraise_interrupt(e: BaseException) -> None:
    """Raise the Ctrl-C or kill (``KeyboardInterrupt``, ``Terminated``) hidden in `e`'s
    cause/context chain, if there is one.

    A library may turn our interrupt into an ordinary error: py4j cleans up its socket on
    ``KeyboardInterrupt`` and re-raises it, but pyspark's ``SCCallSiteSync.__exit__`` then
    calls the dead gateway and its ``Py4JError`` replaces the interrupt (as ``__context__``).
    Whoever catches ``Exception`` around such a call passes it here first, so that a kill
    ends the command as a kill (exit 128 + signal), never as a retried or failed job."""
    seen = set()
    cur = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            raise cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise ``Terminated`` in the main thread (no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)


def ignore_interrupts() -> None:
    """While cleaning up after an interrupt: a second Ctrl-C or kill must not cut the
    cleanup short (SIGKILL still ends the process; children then die with it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


__all__ = ["GRACE_S", "Terminated", "run", "kill_group", "kill_all", "live_children", "install_signal_handlers",
           "ignore_interrupts", "reraise_interrupt"]
