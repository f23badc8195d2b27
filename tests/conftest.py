import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "hwloc-linux"
sys.path.insert(0, str(HERE))


def fixture_names():
    """Captures with hwloc's expected output: `NAME.console` (lstopo's text) or
    `NAME.xml` (for captures whose hwloc test compares XML), next to `NAME.tar.bz2`."""
    return sorted(p.name.rsplit(".", 1)[0] for p in FIXTURES.iterdir()
                  if p.suffix in (".console", ".xml") and (FIXTURES / f"{p.name.rsplit('.', 1)[0]}.tar.bz2").exists())


def _scratch_folder(tmp_path_factory, prefix: str, need_bytes: int) -> tuple[Path, bool]:
    """A fresh folder in the tmpfs /dev/shm when it is writable with four times
    `need_bytes` free (tmpfs is memory: the rest is left to the machine), and True: the
    caller removes it; else in pytest's tmp_path, and False: pytest cleans that one up."""
    shm = Path("/dev/shm")
    try:
        if os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 4 * need_bytes:
            return Path(tempfile.mkdtemp(prefix=prefix, dir=shm)), True
    except OSError:
        pass
    return tmp_path_factory.mktemp(prefix), False


@pytest.fixture(scope="session")
def hwloc_trees(tmp_path_factory):
    """Unpack every captured tree once; returns {fixture name: root folder}.

    The 41 archives hold about 50,000 small files (160 MiB unpacked). Python's tarfile
    took about 35 CPU-s for them on the 2-core CI machine, per xdist worker that needs
    them (per-member Python calls, and creating that many files on its ext4); GNU tar
    into the tmpfs /dev/shm takes about 2 s there (measured 2026-11-28:
    measurements/2026-11-27-test-time/README.md, eighth session)."""
    out, own = _scratch_folder(tmp_path_factory, "bobox-hwloc-", 160 << 20)
    try:
        roots = {}
        for name in fixture_names():
            dst = out / name
            dst.mkdir()
            # --no-same-owner: as root, tar would chown every file to the capture's owner
            subprocess.run(["tar", "-xjf", str(FIXTURES / f"{name}.tar.bz2"), "-C", str(dst), "--no-same-owner",
                            "-m"], check=True)
            (top,) = dst.iterdir()  # one folder per archive (its name may differ from the file's)
            roots[name] = top
        yield roots
    finally:
        if own:
            shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def frozen_module_heap():
    """Each module starts with the heap as it is then frozen (``gc.freeze``: out of the
    cyclic collector's sight) and gives it back at its end. A full collection of a test
    worker's heap (numba, pyarrow, hypothesis, pyspark: hundreds of thousands of objects)
    took 86 ms; tests that collect to check that packets, requests or schedulers were
    freed collect hundreds of times: 7.0 of test_stress.py's first test's 11.2 s went to
    82 gc.collect() calls (cProfile, 2026-11-28, measurements/2026-11-27-test-time/). In
    a frozen heap they walk only what the module made. Objects frozen are still freed by
    reference counting; only a cycle among them waits for the module's end. A test that
    unfreezes (tests/test_experiment_heap.py) gets the whole heap back for the rest of
    its module."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def tpch(tmp_path_factory):
    """TPC-H SF 0.01 as Parquet, generated once per session."""
    from experiments.datagen import datagen

    return datagen(0.01, tmp_path_factory.mktemp("tpch") / "sf0.01", progress=False)


@pytest.hookimpl(trylast=True)  # after -m has deselected what will not run
def pytest_collection_modifyitems(config, items):
    """Longest work first, module by module: the NUMA-VM modules (minutes of emulated
    guests each), then the modules with a test marked ``slow``, then the rest; collection
    order within each. `make test` runs the tiers in parallel (pytest-xdist,
    ``--dist loadscope``: a module's tests stay on one worker, so its module fixtures run
    once), and xdist deals modules out in this order (``--no-loadscope-reorder``; by
    default it sorts them by test count): a long module dealt last would run alone at
    the end. Without xdist only the order changes."""
    rank: dict = {}  # module path -> 0 (has a vm test), 1 (has a slow test) or 2
    for it in items:
        r = 0 if it.get_closest_marker("vm") else 1 if it.get_closest_marker("slow") else 2
        rank[it.path] = min(rank.get(it.path, 2), r)
    items.sort(key=lambda it: rank[it.path])
    config.bobox_vm_tests = 0 in rank.values()


# Niceness a parallel worker takes before its first test outside the NUMA-VM tier, when
# the run has VM tests. The emulated guests are make test's critical path (QEMU TCG keeps
# about one core busy): beside two workers of unit tests at equal priority they took
# 1486 s instead of 774 s alone (measurements/2026-11-27-test-time/). At nice 10 a
# unit-test worker gets what the guest leaves (CFS weights 110 against 1024).
UNIT_NICE = 10
_niced = []


def pytest_runtest_setup(item):
    if (_niced or "PYTEST_XDIST_WORKER" not in os.environ or item.get_closest_marker("vm")
            or not getattr(item.config, "bobox_vm_tests", False)):
        return
    _niced.append(os.nice(UNIT_NICE))
