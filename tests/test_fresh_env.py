"""A newcomer's environment: the console script called by its full path, with
``PATH=/usr/bin:/bin``, no VIRTUAL_ENV and no PYSPARK_PYTHON, must find everything it needs
(its helper tools next to its own interpreter, Spark workers on the driver's interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bobox_sched.tools import find_tool, scripts_dirs, tool_env

BIN = Path(sys.executable).parent
BOBOX = BIN / "bobox"


def newcomer_env() -> dict:
    """The environment of a service unit or a fresh login shell: a minimal PATH, HOME for
    caches, nothing that points at a venv."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    for k in ("TMPDIR", "NUMBA_CACHE_DIR", "BOBOX_KERNEL_CACHE", "JAVA_HOME"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def run_bobox(*args, timeout=600):
    return subprocess.run([str(BOBOX), *args], capture_output=True, text=True, timeout=timeout,
                          env=newcomer_env(), cwd="/")


def test_console_script_is_installed_next_to_the_interpreter():
    assert BOBOX.is_file() and os.access(BOBOX, os.X_OK), f"no console script at {BOBOX}"


def test_tools_are_found_next_to_the_interpreter_first(tmp_path, monkeypatch):
    assert find_tool("tpchgen-cli") == str(BIN / "tpchgen-cli")  # a core dependency
    assert scripts_dirs()[0] == BIN
    # A tool of the same name earlier on PATH loses to the interpreter's own.
    fake = tmp_path / "tpchgen-cli"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert find_tool("tpchgen-cli") == str(BIN / "tpchgen-cli")
    assert find_tool("no-such-tool-xyz") is None
    assert tool_env({"PATH": "/usr/bin"})["PATH"].split(os.pathsep)[0] == str(BIN)


def test_run_by_full_path_with_a_minimal_path(tmp_path):
    """`bobox run` generates its data with tpchgen-cli and answers, with PATH=/usr/bin:/bin."""
    data = tmp_path / "d"
    r = run_bobox("run", "q6", "q1", "--sf", "0.01", "--data", str(data), "--concurrency", "1",
                  "--repeat", "1", "--no-progress", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["requests"] == 2 and summary["mismatches"] == []
    assert (data / "_bobox_manifest.json").is_file()


def test_datagen_and_help_by_full_path(tmp_path):
    r = run_bobox("datagen", "--sf", "0.01", "--out", str(tmp_path / "g"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "g" / "lineitem.parquet").is_file()
    for sub in ("topology", "datagen", "run", "bench", "experiment", "spark"):
        r = run_bobox(sub, "--help")
        assert r.returncode == 0 and "usage: bobox" in r.stdout, (sub, r.stderr)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_run_by_full_path_with_a_minimal_path(tmp_path):
    """Spark's Python workers must start the driver's interpreter, not the first python3
    on PATH (which has none of our packages)."""
    data = tmp_path / "sd"
    r = run_bobox("spark", "datagen", "--sf", "0.01", "--partitions", "2", "--out", str(data), "--master", "local[2]",
                  timeout=900)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    r = run_bobox("spark", "run", "q6", "--data", str(data), "--master", "local[2]", "--output", str(out), timeout=900)
    assert r.returncode == 0, r.stderr
    assert (out / "q6.parquet").is_file()


@pytest.mark.spark
@pytest.mark.slow
def test_spark_workers_run_the_drivers_interpreter_unless_the_user_chose_one(tmp_path):
    """Inside a Spark task, sys.executable is the driver's (local mode, no PYSPARK_PYTHON);
    a user's choice (spark.pyspark.python in conf, or PYSPARK_PYTHON) wins: here a wrapper
    that marks its environment, then runs ours. One process makes the four sessions in
    turn (one JVM, as a user's program would), so a choice must not outlive its session:
    the third session, with none, is back on the driver's interpreter."""
    wrapper = tmp_path / "my-python"
    wrapper.write_text(f"#!/bin/sh\nBOBOX_WRAPPED=yes exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    code = (
        "import json, os, sys\n"
        "from experiments.spark.session import spark_session\n"
        "def seen(conf=None):\n"
        "    s = spark_session('local[1]', conf=conf)\n"
        "    f = lambda _: (__import__('sys').executable, __import__('os').environ.get('BOBOX_WRAPPED'))\n"
        "    return s.sparkContext.parallelize([0], 1).map(f).collect()[0]\n"
        f"w = {str(wrapper)!r}\n"
        "got = {'driver': sys.executable, 'none': seen(), 'conf': seen({'spark.pyspark.python': w}),\n"
        "       'none again': seen()}\n"
        "os.environ['PYSPARK_PYTHON'] = w\n"
        "got['env'] = seen()\n"
        "print(json.dumps(got))\n"
    )
    env = newcomer_env()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    ours = [sys.executable, None]
    assert got["driver"] == sys.executable
    assert got["none"] == ours and got["none again"] == ours
    assert got["conf"][1] == "yes" and got["env"][1] == "yes"


# -- what a fresh machine is given: packaging and documentation ------------------------

ROOT = Path(__file__).resolve().parent.parent


def test_tpchgen_is_a_core_dependency():
    """`pip install bobox-sched` alone must give a `bobox run` that can make its data."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]]
    assert "tpchgen-cli" in names
    assert project["requires-python"].replace(" ", "") == ">=3.11"


def test_system_packages_and_fresh_machine_docs():
    script = (ROOT / "scripts" / "install-system-packages.sh").read_text()
    # the NUMA-VM tier's initramfs needs a static busybox: listed and installed
    assert "missing+=(busybox-static)" in script
    readme = (ROOT / "README.md").read_text()
    assert "scripts/fresh-check" in readme and (ROOT / "scripts" / "fresh-check").stat().st_mode & 0o111
    # what a Spark cluster needs: the workers' interpreter
    cluster = readme[readme.index("### Running on a standalone cluster"):]
    cluster = cluster[: cluster.index("\n## ")] if "\n## " in cluster else cluster
    assert "spark.pyspark.python" in cluster and "PYSPARK_PYTHON" in cluster
    ci = (ROOT / ".ci" / "run").read_text()
    assert "unset VIRTUAL_ENV PYSPARK_PYTHON" in ci and "scripts/test-pythons" in ci
