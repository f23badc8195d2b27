"""Bad input to ``bobox``: one line on stderr, exit status 2, checked before any work, and
nothing written or lost (issue 9, "Bad input"). Each case of the issue has its test here:

* wrong column types (``l_shipdate`` as text, ``l_orderkey`` as float) gave silent wrong
  answers: refused naming table, column, expected and found types;
* outputs checked before the work: a file, a folder under a file, ``/sys``, a read-only
  file system (a tmpfs in a private mount namespace), a working directory that cannot be
  written; result files written atomically with a manifest, a full disk (a tiny tmpfs, and
  an injected ENOSPC) leaves no set that looks complete;
* ``kill`` / Ctrl-C of ``bobox datagen`` (real signals): no generator left running, no
  staging folder left; a staging folder whose process is gone is removed by the next run;
* ``datagen --out`` a symlink to an empty folder; ``run q6 q6 Q6``; ``--output ""``;
  ``--packet-bytes inf``, ``bench idle --seconds inf``, ``topology --numa-factor --bytes``
  beyond the memory; ``--threads-per-node 40000``, ``--concurrency 99999999999999999999``;
  and every number argument of every subcommand bounded (walked from the parser).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import clirun
from bobox_sched import BoboxError, Scheduler
from bobox_sched.core import limits
from experiments.cli import outputs
from experiments.cli.main import build_parser
from bobox_sched.core.scheduler import OversubscriptionWarning
from operators.data import MANIFEST, DataError, TableStore
from experiments.datagen import datagen, staging_dir
from operators.data import check_data_types
from operators.tpch_schema import COLUMNS, check_types

ROOT = Path(__file__).resolve().parent.parent


def bobox(*args, cwd=None, timeout=300):
    """`bobox ARGS` as a child process forked from one that imported the command once
    (tests/clirun.py: a new interpreter's imports cost about 0.9 CPU-s a call, and this
    module makes about a hundred). The processes the command starts itself (tpchgen-cli,
    Spark's workers) get this checkout's code on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return clirun.bobox(*args, cwd=cwd or ROOT, env=env, timeout=timeout)


def refused(r, *words) -> str:
    """Exit 2, exactly one line on stderr, ``error: ...`` holding every word."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-3000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def failed_late(r, *words) -> str:
    """Exit 2 after the work (its progress lines on stderr), the error the one last line."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and sum(ln.startswith("error") for ln in lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[-1], lines[-1]
    return lines[-1]


def snapshot(path: Path) -> dict | None:
    """Every entry under `path` (hidden ones too) with its size and mtime; None if absent."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_file():
        st = path.stat()
        return {".": (st.st_size, st.st_mtime_ns)}
    return {str(p.relative_to(path)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(path.rglob("*"))}


# ============================================================================ column types


def rewrite_column(src: Path, dst: Path, column: str, to: pa.DataType) -> Path:
    shutil.copytree(src, dst)
    path = dst / "lineitem.parquet"
    t = pq.read_table(path)
    i = t.column_names.index(column)
    pq.write_table(t.set_column(i, column, t.column(i).cast(to)), path)
    return dst


@pytest.fixture(scope="module", params=[("l_shipdate", "string", "a date"), ("l_orderkey", "double", "an integer")],
                ids=["shipdate-as-text", "orderkey-as-float"])
def mistyped(request, tpch, tmp_path_factory):
    column, found, expected = request.param
    data = rewrite_column(tpch, tmp_path_factory.mktemp("mistyped") / "data", column, pa.type_for_alias(found))
    return data, column, found, expected


@pytest.mark.parametrize("cmd", [
    ["run", "--no-progress"],                       # the default mix
    ["run", "q6", "q3", "--no-progress"],
    ["bench", "queries", "q6"],
    ["spark", "run", "q6"],                         # on the driver, before a JVM starts
])
def test_wrong_column_type_is_refused_before_any_work(mistyped, tmp_path, cmd):
    data, column, found, expected = mistyped
    before = snapshot(data)
    out = tmp_path / "out"
    args = cmd + ["--data", data] + (["--output", out] if cmd[0] in ("run", "spark") else [])
    r = bobox(*args)
    line = refused(r, "'lineitem'", repr(column), f"expected {expected}", f"found {found}", "lineitem.parquet")
    assert r.stdout == "" and "Traceback" not in r.stderr, line
    assert not out.exists()
    assert snapshot(data) == before


def test_wrong_column_type_in_the_python_api(mistyped):
    from operators import tpch

    data, column, found, expected = mistyped
    TableStore.clear_cache()
    with pytest.raises(DataError, match=f"'lineitem' column '{column}'.*expected {expected} .*, found {found}"):
        tpch.plan("q3", data)  # q3 scans both columns
    with pytest.raises(DataError, match=f"found {found}"):
        TableStore.open(data).table("lineitem").column(column)
    with pytest.raises(DataError, match=column):
        check_data_types(data)


def test_right_types_pass(tpch):
    check_data_types(tpch)


WRONG_FOR = {"int": pa.float64(), "decimal": pa.string(), "date": pa.string(), "string": pa.int64()}


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_every_tpch_column_is_checked(table):
    """Every column of the TPC-H schema, given a type of another kind, is refused naming it;
    the right kinds (and their other Arrow spellings) pass."""
    good = {"int": [pa.int64(), pa.int32(), pa.uint16()], "decimal": [pa.decimal128(15, 2), pa.float64()],
            "date": [pa.date32(), pa.date64()],
            "string": [pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string())]}
    spec = COLUMNS[table]
    for variant in range(3):
        fields = [pa.field(c, good[k][min(variant, len(good[k]) - 1)]) for c, k in spec.items()]
        check_types(table, ["f.parquet"], [pa.schema(fields)])
    for column, kind in spec.items():
        fields = [pa.field(c, WRONG_FOR[k] if c == column else good[k][0]) for c, k in spec.items()]
        with pytest.raises(DataError, match=f"table '{table}' column '{column}' in f.parquet: expected"):
            check_types(table, ["f.parquet"], [pa.schema(fields)])
        # Asked only for other columns: not refused (the check is per scanned column).
        others = [c for c in spec if c != column]
        check_types(table, ["f.parquet"], [pa.schema(fields)], others)


# ============================================================================ outputs


@pytest.fixture()
def results_dir(tmp_path) -> Path:
    """A folder with one experiment CSV (input of bobox spark report)."""
    d = tmp_path / "results-in"
    d.mkdir()
    (d / "x.csv").write_text("experiment,host,run_id,series,x,metric,value,repeat\nx,h,r,s,1,m,1.0,0\n")
    return d


def output_commands(tpch, results_dir, out):
    """Every command that writes an output folder, writing to `out`."""
    return {
        "run": ["run", "q6", "--data", tpch, "--output", out, "--no-progress"],
        "datagen": ["datagen", "--sf", "0.01", "--out", out],
        "spark datagen": ["spark", "datagen", "--sf", "0.01", "--out", out],
        "spark report": ["spark", "report", results_dir, "--out", out],
        "spark run": ["spark", "run", "q6", "--output", out],
        "experiment": ["experiment", "numa-factor", "--out", out],
    }


@pytest.mark.parametrize("which", ["run", "datagen", "spark datagen", "spark report", "spark run", "experiment"])
@pytest.mark.parametrize("where", ["a file", "under a file", "/sys"])
def test_unwritable_output_is_refused_before_any_work(tpch, results_dir, tmp_path, which, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("precious\n")
    out = {"a file": blocker, "under a file": blocker / "sub", "/sys": Path("/sys/bobox-test-output")}[where]
    if which in ("datagen", "spark datagen") and where == "a file":
        words = ["not a folder"]
    else:
        words = [str(out)]
    before = snapshot(tmp_path)
    r = bobox(*output_commands(tpch, results_dir, out)[which], timeout=120)
    refused(r, *words)
    assert r.stdout == ""
    assert snapshot(tmp_path) == before
    assert blocker.read_text() == "precious\n"
    assert not Path("/sys/bobox-test-output").exists()


@pytest.mark.parametrize("cmd", [
    ["datagen"],
    ["spark", "datagen"],
    ["spark", "report", "{results}"],
    ["run", "q6", "--no-progress"],   # generates data/tpch-sf0.1 there first
    ["experiment", "numa-factor"],
    ["bench", "queries", "q6"],
])
def test_working_directory_not_writable(results_dir, cmd):
    """Default outputs are relative to the working directory: /sys cannot be written by
    anyone (root included), so the command must refuse before it starts."""
    r = bobox(*[str(a).format(results=results_dir) for a in cmd], cwd="/sys", timeout=120)
    refused(r, "cannot write in /sys (the working directory)")
    assert r.stdout == ""


def test_output_that_is_a_file_keeps_the_file_and_runs_nothing(tpch, tmp_path):
    """A 14 s run used to end in FileExistsError and lose its results."""
    f = tmp_path / "answers"
    f.write_text("mine\n")
    r = bobox("run", "q1", "q6", "q18", "--data", tpch, "--output", f, "--no-progress")
    refused(r, "--output", "exists and is not a folder")
    assert r.stdout == "" and "warming up" not in r.stderr
    assert f.read_text() == "mine\n"


def test_results_are_a_complete_set_with_a_manifest(tpch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("kept\n")
    r = bobox("run", "q1", "q6", "--data", tpch, "--output", out, "--concurrency", "1", "--repeat", "1",
              "--no-progress")
    assert r.returncode == 0, r.stderr
    assert outputs.complete(out)
    manifest = json.loads((out / outputs.RESULTS_MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["q1.parquet", "q6.parquet"]
    assert manifest["command"][:2] == ["bobox", "run"]
    assert sorted(p.name for p in out.iterdir()) == ["_bobox_results.json", "notes.txt", "q1.parquet", "q6.parquet"]
    # A file changed behind the manifest's back: the set is no longer complete.
    (out / "q6.parquet").write_bytes(b"x")
    assert not outputs.complete(out)


def test_injected_enospc_leaves_no_set_that_looks_complete(tmp_path):
    """The second file hits a full disk: the manifest of the earlier complete set is gone,
    no temporary file is left, and the error is one line naming the file."""
    out = tmp_path / "out"
    with outputs.ResultSet(out) as rs:
        rs.write_text("a.txt", "old a\n")
        rs.write_text("b.txt", "old b\n")
    assert outputs.complete(out)

    def full(tmp):
        Path(tmp).write_text("partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))

    with pytest.raises(outputs.OutputError) as e:
        with outputs.ResultSet(out) as rs:
            rs.write_text("a.txt", "new a\n")
            rs.write("b.txt", full)
    msg = str(e.value)
    assert "\n" not in msg and "b.txt" in msg and "No space left on device" in msg and "no complete" in msg
    assert not outputs.complete(out)
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "b.txt"]  # no manifest, no temporary file
    assert (out / "b.txt").read_text() == "old b\n"  # a file is replaced whole or not at all


def test_a_stale_private_file_is_removed_a_live_one_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".a.txt.tmp-{socket.gethostname()}-{dead.pid}-0123abcd"
    live = tmp_path / f".a.txt.tmp-{socket.gethostname()}-{os.getpid()}-0123abcd"
    other_host = tmp_path / f".a.txt.tmp-elsewhere.example-{dead.pid}-0123abcd"
    for p in (stale, live, other_host):
        p.write_text("x")
    if psutil.pid_exists(dead.pid):  # the pid was reused at once: nothing to learn
        pytest.skip("pid reused")
    assert outputs.remove_stale(tmp_path, "a.txt") == [stale]
    assert live.exists() and other_host.exists() and not stale.exists()


# ---------------------------------------------------------------------------- tmpfs in a private mount namespace


def unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_unshare = pytest.mark.skipif(not unshare_works(), reason="no unprivileged mount namespaces (unshare -rm)")


def in_tmpfs(tmp_path: Path, script: str, size: str, read_only: bool = False) -> dict:
    """Run `script` (Python, with ``MNT`` a tmpfs of `size` mounted for it and ``bobox``
    as above) inside a private mount namespace; it fills ``result`` (a dict), returned."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    result = tmp_path / "ns-result.json"
    driver = tmp_path / "ns-driver.py"
    opts = f"size={size}" + (",ro" if read_only else "")
    driver.write_text(textwrap.dedent(f"""
        import json, subprocess, sys
        from pathlib import Path
        MNT = Path({str(mnt)!r})
        subprocess.run(["mount", "-t", "tmpfs", "-o", {opts!r}, "tmpfs", str(MNT)], check=True)
        def bobox(*args):
            p = subprocess.run([sys.executable, "-m", "bobox_sched", *map(str, args)], capture_output=True,
                               text=True, timeout=600, cwd={str(ROOT)!r})
            return {{"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}}
        result = {{}}
    """) + textwrap.dedent(script) + textwrap.dedent(f"""
        Path({str(result)!r}).write_text(json.dumps(result))
    """))
    p = subprocess.run(["unshare", "-rm", sys.executable, str(driver)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(result.read_text())


class R:
    """A bobox result from inside the namespace, shaped like subprocess's."""

    def __init__(self, d):
        self.returncode, self.stdout, self.stderr = d["rc"], d["stdout"], d["stderr"]


@needs_unshare
def test_read_only_file_system(tpch, results_dir, tmp_path):
    cmds = output_commands(tpch, results_dir, "MNT_OUT")
    script = f"""
        cmds = {json.dumps({k: [str(a) for a in v] for k, v in cmds.items()})}
        for name, args in cmds.items():
            result[name] = bobox(*[str(MNT / "out") if a == "MNT_OUT" else a for a in args])
        result["listing"] = sorted(p.name for p in MNT.iterdir())
    """
    res = in_tmpfs(tmp_path, script, "1m", read_only=True)
    assert res.pop("listing") == []
    for name, r in res.items():
        refused(R(r), "Read-only file system")


@needs_unshare
def test_full_disk_leaves_no_complete_result_set(tpch, tmp_path):
    """A 64 KiB tmpfs with one free page: q1's result fits, q6's does not."""
    script = f"""
        filler = MNT / "filler"
        filler.write_bytes(b"x" * (60 * 1024))
        result["run"] = bobox("run", "q1", "q6", "q18", "--data", {str(tpch)!r}, "--output", MNT / "out",
                              "--concurrency", "1", "--repeat", "1", "--no-progress")
        out = MNT / "out"
        result["listing"] = sorted(p.name for p in out.iterdir()) if out.exists() else None
        sys.path.insert(0, {str(ROOT)!r})
        from experiments.cli.outputs import complete
        result["complete"] = complete(out)
        result["datagen"] = bobox("datagen", "--sf", "0.01", "--out", MNT / "data")
        result["after"] = sorted(p.name for p in MNT.iterdir())
    """
    res = in_tmpfs(tmp_path, script, "64k")
    failed_late(R(res["run"]), "q6.parquet", "No space left on device", "no complete result set")
    assert res["complete"] is False
    assert outputs.RESULTS_MANIFEST not in res["listing"]
    assert not [n for n in res["listing"] if ".tmp-" in n], res["listing"]
    # datagen measures the free space first: refused before the generator starts.
    refused(R(res["datagen"]), "needs about", "free there")
    assert res["after"] == ["filler", "out"]


# ============================================================================ signals


def tpchgen_children(pid: int) -> list[psutil.Process]:
    try:
        return [c for c in psutil.Process(pid).children(recursive=True) if "tpchgen" in c.name()]
    except psutil.Error:
        return []


def gone(procs, timeout=15.0) -> bool:
    """True once every process has exited (a zombie has: nobody reaped it yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


# The scale factor of the datagen runs that a test interrupts once the generator wrote its
# first MB. tpchgen-cli writes SF 1 in about 10 s here, its first MB after about 5 s; SF 4
# keeps about 35 s between the first MB and the end (margin for a loaded machine), and
# interrupted it writes as little.
INTERRUPTED_SF = "4"


def start_and_wait_for_staging(args, parent: Path, name: str, log: Path, new_session=False):
    """Start bobox (stdout and stderr to `log`: Spark writes more than a pipe holds);
    return (process, generator processes, staging folder) once the generator has written
    at least 1 MB into the staging folder in `parent`."""
    with open(log, "w") as fh:
        # SIGINT as a terminal's foreground process has it: a test run started in the
        # background (`cmd &` in a script) ignores SIGINT, and a child inherits that.
        p = subprocess.Popen([sys.executable, "-m", "bobox_sched", *map(str, args)], stdout=fh, stderr=fh,
                             cwd=ROOT, start_new_session=new_session,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert p.poll() is None, log.read_text()[-3000:]
        kids = tpchgen_children(p.pid)
        staging = [d for d in parent.iterdir() if d.name.startswith(f".{name}.tmp-")]
        if kids and staging:
            written = sum(f.stat().st_size for f in staging[0].rglob("*") if f.is_file())
            if written >= 2**20:
                return p, kids, staging[0]
        time.sleep(0.1)
    p.kill()
    raise AssertionError("the generator never started writing")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_killed_datagen_leaves_no_generator_and_no_staging(tmp_path, sig):
    work, log = tmp_path / "work", tmp_path / "log"
    work.mkdir()
    p, kids, staging = start_and_wait_for_staging(["datagen", "--sf", INTERRUPTED_SF, "--out", work / "d"], work, "d",
                                                  log)
    p.send_signal(sig)
    p.wait(timeout=60)
    err = log.read_text()
    assert p.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1].startswith("interrupted")
    assert gone(kids), kids
    assert list(work.iterdir()) == []


@pytest.mark.slow
def test_sigkilled_datagen_generator_dies_and_next_run_removes_the_staging(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    p, kids, staging = start_and_wait_for_staging(["datagen", "--sf", INTERRUPTED_SF, "--out", work / "d"], work,
                                                  "d", tmp_path / "log")
    p.kill()  # nothing of ours runs: the kernel's parent-death signal ends the generator
    p.wait(timeout=60)
    assert gone(kids), kids
    assert staging.is_dir()
    # A staging folder of a live process (this one) and one of another host are kept.
    live = work / f".d.tmp-{socket.gethostname()}-{os.getpid()}-0123abcd"
    other = work / f".d.tmp-elsewhere.example-{p.pid}-0123abcd"
    live.mkdir()
    other.mkdir()
    r = bobox("datagen", "--sf", "0.01", "--out", work / "d")
    assert r.returncode == 0, r.stderr
    assert f"removed {staging}" in r.stderr
    assert sorted(x.name for x in work.iterdir()) == sorted(["d", live.name, other.name])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_interrupted_spark_datagen_leaves_nothing(tmp_path, sig):
    """Ctrl-C as a terminal sends it (SIGINT to the whole foreground process group), and
    ``kill`` (SIGTERM to bobox alone): no generator, no JVM, no staging folder left."""
    work, log = tmp_path / "work", tmp_path / "log"
    work.mkdir()
    p, kids, staging = start_and_wait_for_staging(
        ["spark", "datagen", "--sf", "1", "--partitions", "2", "--master", "local[2]", "--out", work / "d"],
        work, "d", log, new_session=True)
    descendants = psutil.Process(p.pid).children(recursive=True)
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    p.wait(timeout=120)
    assert p.returncode == 128 + sig, log.read_text()[-3000:]
    assert gone(kids + descendants, timeout=30), [d for d in kids + descendants if d.is_running()]
    assert list(work.iterdir()) == []


def test_a_kill_hidden_in_a_library_error_stays_a_kill():
    """pyspark's call-site ``__exit__`` calls the gateway py4j just closed on our Terminated,
    and its error replaces the kill (as ``__context__``): the Spark commands raise the kill
    again instead of reporting (or retrying) a failed job. The CI failure this covers:
    ``kill`` during ``spark datagen`` exited 2 with 'Answer from Java side is empty'."""
    from experiments.cli import procs
    from experiments.spark.messages import job_error

    class CallSite:  # the shape of pyspark.traceback_utils.SCCallSiteSync
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise RuntimeError("Answer from Java side is empty")

    for interrupt in (procs.Terminated(signal.SIGTERM), KeyboardInterrupt()):
        try:
            with CallSite():
                raise interrupt
        except Exception as e:
            hidden = e
        assert isinstance(hidden, RuntimeError) and hidden.__context__ is interrupt
        with pytest.raises(KeyboardInterrupt) as ei:
            job_error(hidden, "Spark datagen", 4)
        assert ei.value is interrupt
    # an ordinary failure is still reported as one
    assert "Spark datagen failed in all 4 attempts" in str(job_error(RuntimeError("boom"), "Spark datagen", 4))


# ============================================================================ other cases


def test_datagen_into_a_symlink_to_an_empty_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to("real")
    r = bobox("datagen", "--sf", "0.001", "--out", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and (real / MANIFEST).is_file() and (real / "lineitem.parquet").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    r = bobox("datagen", "--sf", "0.001", "--out", link)
    assert r.returncode == 0 and "cached" in r.stderr
    # The API too, and a link that points nowhere yet is created where it points.
    dangling = tmp_path / "later"
    dangling.symlink_to("made-by-datagen")
    assert datagen(0.001, dangling, progress=False) == dangling
    assert (tmp_path / "made-by-datagen" / MANIFEST).is_file()


def test_staging_folders_carry_host_and_pid(tmp_path):
    tmp = staging_dir(tmp_path / "out")
    assert tmp.name.startswith(f".out.tmp-{socket.gethostname()}-{os.getpid()}-")
    outputs.disown(tmp)


@pytest.mark.parametrize("cmd,words", [
    (["run", "q6", "q6", "Q6"], ["query 'q6' given 3 times", "q6 q6 Q6"]),
    (["bench", "queries", "q1", "Q1"], ["query 'q1' given 2 times", "--copies"]),
    (["spark", "run", "q6", "Q6"], ["'q6' given twice"]),
])
def test_duplicate_queries_are_refused(tpch, tmp_path, cmd, words):
    out = ["--output", tmp_path / "out"] if cmd[0] in ("run", "spark") else []
    r = bobox(*cmd, "--data", tpch, *out, "--no-progress" if cmd[0] == "run" else "--json", cwd=tmp_path)
    refused(r, *words)
    assert r.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cmd", [
    ["run", "q6", "--data", "{tpch}", "--output", ""],
    ["run", "q6", "--data", ""],
    ["datagen", "--out", ""],
    ["spark", "datagen", "--out", ""],
    ["spark", "run", "q6", "--data", "{tpch}", "--output", ""],
    ["spark", "report", "", "--out", "x"],
    ["experiment", "numa-factor", "--out", ""],
    ["bench", "queries", "--data", ""],
    ["topology", "--root", ""],
])
def test_empty_paths_are_refused(tpch, tmp_path, cmd):
    r = bobox(*[a.format(tpch=tpch) for a in cmd], cwd=tmp_path)
    refused(r, "must not be empty")
    assert list(tmp_path.iterdir()) == []


def test_issue_numbers(tpch, tmp_path):
    """Run in an empty working directory, with outputs there: exit 2, one line, nothing
    on stdout, nothing written (the defaults, data/ and results/, are relative to it)."""
    out = ["--output", tmp_path / "out"]

    def no(*args, words):
        r = bobox(*args, cwd=tmp_path)
        refused(r, *words)
        assert r.stdout == "" and list(tmp_path.iterdir()) == [], (args, r.stdout[-500:])

    no("run", "q6", "--data", tpch, *out, "--packet-bytes", "inf", words=["--packet-bytes", "not a byte size: 'inf'"])
    no("topology", "--packet-bytes", "inf", words=["--packet-bytes"])
    no("bench", "idle", "--seconds", "inf", words=["--seconds must be a finite number"])
    no("bench", "idle", "--seconds", "nan", words=["--seconds must be a finite number"])
    too_big = 2 * psutil.virtual_memory().total
    no("topology", "--numa-factor", "--bytes", too_big, words=["--bytes", "more than half"])
    if psutil.virtual_memory().available < 2 * 100 * 2**30:  # the issue's own case, where it is too big
        no("topology", "--numa-factor", "--bytes", "100G", words=["--bytes", "more than half"])
    no("run", "q6", "--data", tpch, *out, "--threads-per-node", "40000",
       words=["--threads-per-node must be at most 1024"])
    no("run", "q6", "--data", tpch, *out, "--concurrency", "99999999999999999999",
       words=["--concurrency must be at most 10000"])
    no("run", "--data", tpch, *out, "--concurrency", "5000", "--repeat", "3", words=["120000 requests", "cap"])
    no("run", "--data", tpch, *out, "--parallel", "100000", words=["--parallel must be at most"])
    no("datagen", "--sf", "1e9", "--out", tmp_path / "d", words=["--sf must be at most"])
    no("spark", "run", "q6", "--data", tpch, *out, "--master", "local[40000]", words=["local cores must be at most"])


def test_more_threads_than_cpus_warns_in_one_line(tpch):
    cpus = max(len(n.cpus) for n in __import__("topology").probe().cpu_nodes)
    r = bobox("run", "q6", "--data", tpch, "--threads-per-node", cpus + 1, "--concurrency", "1", "--repeat", "1",
              "--no-progress")
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and f"{cpus + 1} worker threads per node exceed" in warnings[0]
    assert "Warning" not in r.stderr.replace("warning:", "")  # no two-line warnings.warn output


# ---------------------------------------------------------------------------- every number argument


def number_arguments():
    """(command words, option, argparse type name) of every option of every subcommand
    that takes a value, walked from the parser itself."""
    found = []

    def walk(parser, words):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, words + [name])
            elif action.option_strings and action.nargs != 0 and action.choices is None:
                found.append((words, action.option_strings[-1], getattr(action.type, "__name__", repr(action.type))))

    walk(build_parser(), [])
    return found


ARGS = number_arguments()
NUMERIC = [(w, o, t) for w, o, t in ARGS if t in ("count", "number", "byte size", "scale_factor", "_repeat",
                                                 "_packet_bytes", "array_bytes")]


def test_no_argument_is_an_unbounded_number():
    """Every option is one of the bounded types (or a path, a URL, a spec): none is a bare
    int/float (whose inf, nan and huge values reached the code), none an unchecked str
    that names a path."""
    bare = [(w, o, t) for w, o, t in ARGS if t in ("int", "float")]
    assert not bare, bare
    assert len(NUMERIC) >= 30
    for words, option, kind in ARGS:
        if option in ("--data", "--out", "--output", "--root"):
            assert kind in ("path", "_root"), (words, option, kind)


@pytest.mark.parametrize("words,option,kind", NUMERIC, ids=[" ".join(w + [o]) for w, o, _ in NUMERIC])
def test_every_number_argument_is_bounded(words, option, kind):
    parser = build_parser()
    for bad in ("0", "-1", "inf", "nan", "1e999", "x", "99999999999999999999999"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
            parser.parse_args(words + [option, bad])
        assert e.value.code == 2, (option, bad)
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {option}"), (option, bad, lines)


# ---------------------------------------------------------------------------- the Python API


@pytest.mark.parametrize("kw,match", [
    (dict(threads_per_node=40000), "threads_per_node must be at most 1024"),
    (dict(threads_per_node=0), "threads_per_node must be positive"),
    (dict(threads_per_node=True), "threads_per_node must be an integer"),
    (dict(threads_per_node=2.0), "threads_per_node must be an integer"),
    (dict(packet_bytes=2**40), "packet_bytes must be at most"),
    (dict(packet_bytes=float("inf")), "packet_bytes must be an integer"),
    (dict(packet_bytes=16), "packet_bytes must be at least 64"),
    (dict(buffer_packets=10**9), "buffer_packets must be at most"),
    (dict(balance_interval=float("nan")), "balance_interval must be a finite number"),
    (dict(balance_interval=-1), "balance_interval must be positive"),
    (dict(locality_sample=-3), "locality_sample must be at least 0"),
])
def test_scheduler_refuses_what_the_cli_refuses(kw, match):
    with pytest.raises(BoboxError, match=match):
        Scheduler(**kw)


def test_scheduler_warns_when_threads_exceed_cpus():
    import topology

    cpus = max(len(n.cpus) for n in topology.probe().cpu_nodes)
    with pytest.warns(OversubscriptionWarning, match="exceed"):
        s = Scheduler(threads_per_node=cpus + 1, pin=False)
    s.shutdown()
    assert limits.MAX_THREADS_PER_NODE >= cpus


def test_bench_packets_runs_and_refuses_bad_counts():
    import json as _json

    r = bobox("bench", "packets", "--count", "2000", "--repeat", "1", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = _json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out) >= {"1col_us", "1col_noacct_us", "3col_us", "3col_noacct_us"}
    assert all(out[k] > 0 for k in out if k.endswith("_us"))
    refused(bobox("bench", "packets", "--count", "0"), "--count must be positive")
    refused(bobox("bench", "packets", "--count", "1e9"), "--count")
