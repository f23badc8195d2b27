"""Kernels compiled before the workers start (``bobox_sched/core/precompile.py``): what a
free-threaded build needs. Each check runs in a fresh interpreter, where nothing is
compiled yet (and ``watch`` changes numba's dispatcher class for the whole process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

KMOD = '''
import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def total(a):
    s = a[0] * 0
    for x in a:
        s += x
    return s


@njit(nogil=True)
def uncached(a):
    return a.sum()
'''


def run(tmp_path, code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_cached_signatures_are_loaded_before_any_call(tmp_path):
    (tmp_path / "kmod.py").write_text(KMOD)
    run(tmp_path, """
        import numpy as np, kmod
        kmod.total(np.arange(3)); kmod.total(np.ones(3))  # compiled once: the cache's index has both
    """)
    out = run(tmp_path, """
        import kmod
        from bobox_sched.core.precompile import cached_signatures, precompile
        assert kmod.total.signatures == []
        assert len(cached_signatures(kmod.total)) == 2 and cached_signatures(kmod.uncached) == []
        r = precompile([kmod])
        assert r["kernels"] == 2 and r["signatures"] == 2 and r["failed"] == 0, r
        print(sorted(str(s) for s in kmod.total.signatures))
        import numpy as np
        assert kmod.total(np.arange(4)) == 6 and kmod.total(np.ones(2)) == 2.0  # the loaded code runs
        assert len(kmod.total.signatures) == 2 and not kmod.total._cache_misses  # nothing compiled
    """)
    assert "float64" in out and "int64" in out


def test_the_scheduler_precompiles_before_its_workers_start(tmp_path):
    (tmp_path / "kmod.py").write_text(KMOD)
    run(tmp_path, "import numpy as np, kmod; kmod.total(np.arange(3))")
    run(tmp_path, """
        import kmod
        from bobox_sched import Scheduler
        with Scheduler(threads_per_node=1, precompile=True) as s:
            assert s.precompiled["signatures"] >= 1 and len(kmod.total.signatures) == 1
        with Scheduler(threads_per_node=1, precompile=False) as s:  # the GIL build's default
            assert s.precompiled is None
    """)


def test_a_kernel_compiling_on_a_worker_is_reported(tmp_path):
    (tmp_path / "kmod.py").write_text(KMOD)
    run(tmp_path, """
        import warnings
        import numpy as np
        import kmod
        from bobox_sched import Plan, Scheduler, Sink, Source, StreamOperator
        from bobox_sched.core.errors import SchedulerWarning
        from bobox_sched.core.precompile import watch

        class One(Source):
            def __init__(self):
                self.done = False
            def next_packet(self, ctx):
                if self.done:
                    return None
                self.done = True
                p = ctx.new_packet({"x": np.int64}, 4)
                p["x"][:] = 2
                return p

        class Sum(StreamOperator):
            def on_packet(self, ctx, port, pkt):
                out = ctx.new_packet({"s": np.int64}, 1)
                out["s"][0] = kmod.uncached(pkt["x"])
                ctx.send("out", out)

        class Keep(Sink):
            def finalize(self, packets):
                return [int(p["s"][0]) for p in packets]

        p = Plan("p")
        p.add("src", One)
        p.add("sum", Sum)
        p.add("sink", Keep)
        p.connect("src", "sum")
        p.connect("sum", "sink")
        watch()
        kmod.total(np.arange(3))  # compiled on this thread, not a worker's: no warning
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with Scheduler(threads_per_node=1) as s:
                assert s.submit(p).result(60) == [8]
        msgs = [str(w.message) for w in seen if issubclass(w.category, SchedulerWarning)]
        assert len(msgs) == 1 and "uncached" in msgs[0] and "threads-per-node 1" in msgs[0], msgs
    """)
