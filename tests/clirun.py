"""`bobox ARGS...` as a real child process, without a new interpreter's imports each time.

A new interpreter spends about 0.9 CPU-s importing numba, numpy and pyarrow before the
command reads its first argument, and ``test_bad_input.py`` runs the command about a
hundred times to watch it refuse input (166 CPU-s of subprocesses, measured with
``measurements/2026-11-27-test-time/cpu_report.py``). The standard library's
``multiprocessing`` forkserver imports the command once, in a server process that starts
no thread (checked: ``threading.active_count()`` is 1 after the import), and forks each
child from it.

Each child is a process of its own, as ``python -m bobox_sched ARGS`` would be: it changes
into the working directory, takes the environment, points file descriptors 1 and 2 at
files, runs the command's ``main(argv)``, runs the atexit handlers and exits with the
command's status, so signal handlers, files, exit codes and stray output are its own.

What differs from a new interpreter: modules are imported before the environment is set
(a variable read at import time is the server's), and ``sys.argv`` is the server's
(``main`` is given ``argv``). A test that depends on either starts ``python -m
bobox_sched`` itself, as the kill and Ctrl-C tests do.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

_context = None


def _ctx():
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["experiments.cli.main"])
        _context = ctx
    return _context


def _exit_status(code) -> int:
    """The status ``sys.exit(code)`` gives a process: None is 0, an int itself, anything
    else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(argv: list[str], cwd: str, env: dict, out_path: str, err_path: str) -> None:
    import atexit

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    from experiments.cli.main import main

    try:
        status = _exit_status(main(argv))
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def bobox(*args, cwd=None, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``bobox ARGS`` in a forked child (see the module doc); a CompletedProcess with
    text stdout and stderr, like ``subprocess.run(..., capture_output=True, text=True)``.
    Raises subprocess.TimeoutExpired after `timeout` seconds (the child is killed)."""
    argv = [str(a) for a in args]
    with tempfile.TemporaryDirectory(prefix="bobox-cli-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        p = _ctx().Process(target=_child, args=(argv, str(cwd or os.getcwd()), dict(env or os.environ),
                                                str(out), str(err)))
        p.start()
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
            raise subprocess.TimeoutExpired(["bobox", *argv], timeout)
        read = lambda f: f.read_text(errors="replace") if f.exists() else ""
        return subprocess.CompletedProcess(["bobox", *argv], p.exitcode, read(out), read(err))


def in_process(*args) -> subprocess.CompletedProcess:
    """``bobox ARGS`` by the command's ``main(argv)`` in this process, its output captured;
    a CompletedProcess like `bobox`'s. For callers that have the imports already and pay
    for each new interpreter (the NUMA-VM guest: about 100 s each under emulation), or
    that change a module of this process first (a test's smaller work budget). What
    ``main`` sets for the process, its signal handlers and the warnings' one-line format,
    is put back."""
    import contextlib
    import io
    import signal
    import warnings

    from experiments.cli.main import main

    argv = [str(a) for a in args]
    sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    saved = [signal.getsignal(sig) for sig in sigs]
    fmt = warnings.formatwarning
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = _exit_status(main(argv))
            except SystemExit as e:
                status = _exit_status(e.code)
    finally:
        for sig, handler in zip(sigs, saved):
            signal.signal(sig, handler)
        warnings.formatwarning = fmt
    return subprocess.CompletedProcess(["bobox", *argv], status, out.getvalue(), err.getvalue())
