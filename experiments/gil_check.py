"""``bobox bench gil``: the runtime's serial fraction cross-checked two other ways.

The runtime measures the serial fraction itself (``operators.released``: time in tasks
minus time in GIL-releasing calls, over time in tasks). Two independent estimates of the
same figure, on the same concurrent TPC-H mix, in one run:

1. **py-spy's GIL sampling.** Two ``py-spy record`` samplers watch this process at the
   same rate for the same number of intervals (``--duration``), without pausing it
   (``--nonblocking``), while the mix runs over and over:

   * ``--idle --threads``: every thread's stack at every interval. A worker-thread sample
     is *busy* when its stack is inside ``run_task`` (``bobox_sched/core/task.py``): the span
     the runtime times as ``busy_s``;
   * ``--gil --threads``: only the stack of the thread holding the GIL at that interval.
     A worker-thread sample inside ``run_task`` is busy *and* holding the GIL.

   Both samplers take the same number of intervals, so ``gil / busy`` (sample counts) is
   the share of worker busy time spent holding the GIL: py-spy's serial fraction. py-spy
   reads the GIL holder from the interpreter's state (``_PyRuntime``: the current thread
   state up to 3.11, ``ceval.gil.last_holder`` with ``locked`` from 3.12), so a worker
   inside a numba ``nogil`` kernel or a numpy call that released the GIL does not count.
   Samples are statistics: with ``b`` busy samples the standard error of the fraction
   ``p`` is ``sqrt(p (1 - p) / b)``, reported as ``pyspy_stderr``.

2. **Amdahl from the measured scaling.** The same mix on 1 worker and on 2 workers (the
   fastest of a few rounds each): with speedup ``S = t1 / t2``, Amdahl's law
   ``S = 1 / (s + (1 - s) / 2)`` gives ``s = 2 / S - 1``. It also charges to ``s``
   everything else that does not scale (memory bandwidth, a shared, busy machine), so it
   is an upper bound of the GIL's share.

py-spy attaches with ``ptrace``-level access (``process_vm_readv``). This process is
py-spy's parent, and Yama's default (``ptrace_scope`` 1) lets a process trace only its
descendants, so the command allows any tracer for its own pid while the samplers run
(``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)``; a kernel without Yama refuses the call,
which changes nothing there) and clears it afterwards. Whether py-spy may read this
process is checked with one ``py-spy dump`` before any work starts.

Protocol: the mix loop runs on one helper thread; the two samplers are child processes
started and waited for by two more threads (``experiments.cli.procs.run``: their group is
killed if we are interrupted); the main thread waits for the samplers, then sets the
loop's stop event and joins it. Only the loop thread submits; the result counters are
written by it and read after the join.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bobox_sched.core.errors import BoboxError

# Default sampling: 200 Hz for 6 s gives ~1200 intervals; on 1 worker busy ~95 % of
# the time that is ~1100 busy samples, a standard error of ~0.006 at p = 0.04.
RATE_HZ = 200
SECONDS = 6.0

_PR_SET_PTRACER = 0x59616D61  # "Yama"
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value

# "thread (1234): name;frame (file.py:12);... 17" (py-spy's raw format, with --threads)
_THREAD = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)")


def find_pyspy() -> str:
    from bobox_sched.tools import find_tool

    exe = find_tool("py-spy")
    if exe is None:
        raise BoboxError("py-spy not found next to the interpreter or on PATH (pip install py-spy, or the "
                         "project's 'test' extra)")
    return exe


def _set_ptracer(pid: int) -> None:
    """``prctl(PR_SET_PTRACER, pid)``: Yama's permission for `pid` (any process for
    PR_SET_PTRACER_ANY, nobody extra for 0) to trace us. Without Yama the call fails
    with EINVAL and nothing is needed."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        libc.prctl(_PR_SET_PTRACER, pid, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def check_pyspy(exe: str) -> None:
    """One ``py-spy dump`` of this process: raises BoboxError (one line) where py-spy
    may not read it (no ptrace permission: a container without CAP_SYS_PTRACE, Yama's
    ptrace_scope 3) or cannot run."""
    _set_ptracer(_PR_SET_PTRACER_ANY)
    try:
        r = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(os.getpid())], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BoboxError(f"py-spy ({exe}) could not run: {e}") from None
    finally:
        _set_ptracer(0)
    if r.returncode != 0:
        text = (r.stderr or r.stdout).strip()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        why = next((ln for ln in lines if "ermission" in ln or "not permitted" in ln), lines[-1] if lines else "")
        if "ermission" in text or "not permitted" in text:
            raise BoboxError(f"py-spy may not read this process (ptrace not permitted: {why}); allow ptrace "
                             f"(CAP_SYS_PTRACE, or kernel.yama.ptrace_scope <= 1)")
        raise BoboxError(f"py-spy dump of this process failed: {why}")


def parse_raw(text: str) -> list[tuple[int, list[str], int]]:
    """py-spy's raw output with ``--threads``: (native thread id, frames root first
    without the thread entry, count) per line."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        m = _THREAD.match(stack)
        if m is None or not n.isdigit():
            continue
        tid = int(m.group(1), 0)
        out.append((tid, stack.split(";")[1:], int(n)))
    return out


def _busy(frames: list[str]) -> bool:
    """Inside a task: a ``run_task`` frame of ``bobox_sched/core/task.py`` on the stack."""
    return any(f.startswith("run_task (") and "task.py" in f for f in frames)


def worker_samples(rows, workers: set[int]) -> int:
    """Samples of the `workers` (native thread ids) taken inside a task."""
    return sum(n for tid, frames, n in rows if tid in workers and _busy(frames))


def _sampler(exe: str, pid: int, flags: list[str], seconds: float, rate: int, out: Path, box: dict, key: str):
    cmd = [exe, "record", "--nonblocking", "--threads", "--format", "raw", "--rate", str(rate),
           "--duration", str(max(1, round(seconds))), "--pid", str(pid), "--output", str(out), *flags]
    from experiments.cli import procs

    try:
        box[key] = procs.run(cmd, timeout=seconds * 4 + 60)
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        box[key] = e


def _errors(cp) -> int:
    m = re.search(r"Errors: (\d+)", (cp.stdout or "") + (cp.stderr or ""))
    return int(m.group(1)) if m else 0


def pyspy_fraction(gil: int, busy: int) -> tuple[float | None, float | None]:
    """py-spy's serial fraction (GIL samples over busy samples) and its binomial standard
    error. The two samplers run independently, so a worker that holds the GIL nearly all
    the time can get more GIL samples than busy samples: the fraction is capped at 1."""
    if not busy:
        return None, None
    frac = min(1.0, gil / busy)
    return frac, math.sqrt(frac * (1 - frac) / busy)


def sample(sched, run_once, exe: str, seconds: float = SECONDS, rate: int = RATE_HZ) -> dict:
    """Call `run_once()` (a workload on `sched`, e.g. one concurrent mix) over and over
    while the two samplers watch; return the sample counts, py-spy's fraction and the
    runtime's serial fraction over the same runs (``sched.stats()`` before and after)."""
    from operators.released import serial_fraction

    workers = {w.thread.native_id for w in sched.workers}
    stop = threading.Event()
    done = {"runs": 0, "error": None}

    def loop():
        try:
            while not stop.is_set():
                run_once()
                done["runs"] += 1
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            done["error"] = e

    before = sched.stats()
    box: dict = {}
    with tempfile.TemporaryDirectory(prefix="bobox-gil-") as tmp:
        f_all, f_gil = Path(tmp) / "all.raw", Path(tmp) / "gil.raw"
        runner = threading.Thread(target=loop, name="bobox-gil-mix", daemon=True)
        runner.start()
        _set_ptracer(_PR_SET_PTRACER_ANY)
        try:
            ts = [threading.Thread(target=_sampler, args=(exe, os.getpid(), fl, seconds, rate, f, box, k), daemon=True)
                  for fl, f, k in ((["--idle"], f_all, "all"), (["--gil"], f_gil, "gil"))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        finally:
            _set_ptracer(0)
            stop.set()
            runner.join()
        if done["error"] is not None:
            raise done["error"]
        for k in ("all", "gil"):
            r = box.get(k)
            if isinstance(r, BaseException):
                raise r
            if r.returncode != 0:
                last = ((r.stderr or r.stdout).strip().splitlines() or ["no output"])[-1]
                raise BoboxError(f"py-spy record ({k}) failed: {last}")
        after = sched.stats()
        rows_all = parse_raw(f_all.read_text())
        rows_gil = parse_raw(f_gil.read_text())
    busy = worker_samples(rows_all, workers)
    gil = worker_samples(rows_gil, workers)
    frac, err = pyspy_fraction(gil, busy)
    return {
        "workers": len(workers),
        "seconds": seconds,
        "rate_hz": rate,
        "runs": done["runs"],
        "busy_samples": busy,
        "gil_samples": gil,
        "sample_errors": _errors(box["all"]) + _errors(box["gil"]),
        "pyspy_fraction": frac,
        "pyspy_stderr": err,
        "serial_fraction": serial_fraction(after["busy_s"] - before["busy_s"], after["released_s"] - before["released_s"]),
    }


def two_cpus(topo):
    """`topo` restricted to its first two CPUs (the 1 -> 2 worker scaling)."""
    picked = [(n.os_index, c) for n in topo.cpu_nodes for c in n.cpus][:2]
    if len(picked) < 2:
        raise BoboxError("bench gil needs at least 2 CPUs (it measures the 1 -> 2 worker scaling)")
    return topo.restrict(nodes=sorted({n for n, _ in picked}), cpus=[c for _, c in picked])


def bench_gil(data, queries=None, copies: int = 2, repeat: int = 3, seconds: float = SECONDS, rate: int = RATE_HZ,
              policy: str = "bobox", packet_bytes: int | None = None, exe: str | None = None,
              checked: bool = False) -> dict:
    """The serial fraction three ways on the concurrent mix (module doc): the runtime's
    (``operators.released``), py-spy's GIL samples over busy samples, and Amdahl's from
    the measured 1 -> 2 worker scaling; on 1 worker and on 2."""
    import topology
    from bobox_sched import Scheduler
    from operators import released, tpch

    from experiments.bench import _log, _timed_mix
    from experiments.workload import build_plans, run_mix

    exe = exe or find_pyspy()
    if not checked:
        check_pyspy(exe)
    queries = queries or tpch.DEFAULT_MIX
    topo = topology.probe()
    two = two_cpus(topo)
    one = two.restrict(cpus=[two.cpus[0].os_index])
    plans = build_plans(queries, data, 1)
    out: dict = {"policy": policy, "data": str(data), "queries": list(queries), "copies": copies,
                 "mix_requests": copies * len(queries), "pyspy": exe}
    was = released.enable(True)
    try:
        for n, topo_n in ((1, one), (2, two)):
            with Scheduler(topology=topo_n, policy=policy, packet_bytes=packet_bytes) as sched:
                run_mix(sched, plans, 1)  # warm-up: kernels compiled, pools filled
                m = _timed_mix(sched, plans, copies, max(1, repeat))
                _log(f"[gil] {n} worker(s): mix {m['wall_s']:.3f} s, serial fraction "
                     f"{_fmt(m['serial_fraction'])}; sampling with py-spy for {seconds:g} s ...")
                s = sample(sched, lambda: run_mix(sched, plans, copies), exe, seconds, rate)
                _log(f"[gil] {n} worker(s): py-spy {s['gil_samples']} GIL samples / {s['busy_samples']} busy samples "
                     f"= {_fmt(s['pyspy_fraction'])}; runtime over the same {s['runs']} mixes "
                     f"{_fmt(s['serial_fraction'])}")
                out[f"w{n}"] = {"mix_s": round(m["wall_s"], 4), "serial_fraction_timed": _r(m["serial_fraction"]),
                                "cores_used": round(m["cpu_s"] / m["wall_s"], 3), "cpu_wait_s": round(m["cpu_wait_s"], 3),
                                **{k: _r(v) if isinstance(v, float) else v for k, v in s.items()}}
    finally:
        released.enable(was)
    t1, t2 = out["w1"]["mix_s"], out["w2"]["mix_s"]
    speedup = t1 / t2
    out["speedup_2"] = round(speedup, 3)
    out["scaling_per_core"] = round(speedup / 2, 3)
    out["amdahl_fraction"] = round(2 / speedup - 1, 4)  # s of S = 1 / (s + (1 - s) / 2)
    out["serial_fraction"] = out["w1"]["serial_fraction"]
    out["pyspy_fraction"] = out["w1"]["pyspy_fraction"]
    a, b = out["serial_fraction"], out["pyspy_fraction"]
    out["pyspy_minus_runtime"] = _r(b - a) if a is not None and b is not None else None
    return out


def _r(x, digits: int = 4):
    return None if x is None else round(x, digits)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def format_report(r: dict) -> str:
    w1, w2 = r["w1"], r["w2"]
    lines = [f"serial fraction of the concurrent mix ({r['mix_requests']} requests, policy {r['policy']}):"]
    lines.append(f"{'':<10}{'runtime':>10}{'py-spy':>10}{'+-':>7}{'samples':>10}{'mix s':>8}")
    for name, w in (("1 worker", w1), ("2 workers", w2)):
        se = "" if w["pyspy_stderr"] is None else f"{w['pyspy_stderr']:.3f}"
        lines.append(f"{name:<10}{_fmt(w['serial_fraction']):>10}{_fmt(w['pyspy_fraction']):>10}{se:>7}"
                     f"{w['busy_samples']:>10}{w['mix_s']:>8.3f}")
    lines.append(f"the timed 2-worker mix used {w2['cores_used']:.2f} cores and waited {w2['cpu_wait_s']:.2f} s for a "
                 f"CPU (other processes on the machine)")
    lines.append(f"Amdahl from the measured 1 -> 2 worker scaling (speedup {r['speedup_2']:.3f}, "
                 f"{r['scaling_per_core']:.3f} per core): s = 2/S - 1 = {r['amdahl_fraction']:.3f}")
    if r["pyspy_minus_runtime"] is not None:
        lines.append(f"py-spy - runtime on 1 worker: {r['pyspy_minus_runtime']:+.3f}")
    return "\n".join(lines)
