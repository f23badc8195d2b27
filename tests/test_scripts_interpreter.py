"""The Python scripts in ``scripts/`` (``#!/usr/bin/env python3``: whatever python3 is
first on PATH) run under the project's interpreter when started by one that lacks the
project's packages (``scripts/_project_python.py``), and say so in one line, exit 2,
when there is none. An interpreter without them: this one with ``-S`` (no site-packages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
PYTHON_SCRIPTS = ("tstream-knobs", "hotpath-breakdown", "vm-run")


def _run(script: str, venv: Path, *args):
    env = dict(os.environ, BOBOX_VENV=str(venv))
    return subprocess.run([sys.executable, "-S", str(SCRIPTS / script), *args], capture_output=True, text=True,
                          env=env, cwd="/", timeout=120)


def test_bare_interpreter_lacks_the_packages():
    r = subprocess.run([sys.executable, "-S", "-c", "import numpy"], capture_output=True, text=True)
    assert r.returncode != 0 and "numpy" in r.stderr


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_reruns_under_the_project_venv(script, tmp_path):
    # a stand-in for .venv: its bin/python is this interpreter (with its site-packages)
    (tmp_path / "bin").mkdir()
    py = tmp_path / "bin" / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    r = _run(script, tmp_path, "--help")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"usage: {script}")


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_one_line_and_exit_2_without_a_venv(script, tmp_path):
    r = _run(script, tmp_path / "absent", "--help")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: ") and "make setup" in lines[0]
    assert "numpy" in lines[0] and str(tmp_path / "absent" / "bin" / "python") in lines[0]
