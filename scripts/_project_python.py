"""The project's interpreter for the Python scripts in this folder.

``scripts/tstream-knobs`` and its siblings start through ``#!/usr/bin/env python3``, that
is whatever ``python3`` comes first on PATH: on a fresh machine after ``make setup`` that
is the system's, which lacks numba, pyarrow and the rest (they are in ``.venv``), and
nothing here relies on an activated virtual environment. ``ensure`` is called before the
script imports anything outside the standard library: when a package the project depends
on is missing, it runs the script again under ``.venv/bin/python`` (``make setup`` makes
it; ``BOBOX_VENV`` names another), with the same arguments; when that is missing too, or
is the interpreter already running, it prints one line and exits with 2.

Standard library only: it runs before anything else is known to import.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the runtime dependencies of pyproject.toml that the scripts import, by module name
NEEDED = ("numpy", "numba", "pyarrow", "psutil", "cpuinfo")


def missing() -> list:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def ensure(script: str) -> None:
    """Return if this interpreter has the project's packages; otherwise re-run `script`
    (its ``__file__``) under the project's virtual environment, or exit 2 saying why."""
    lack = missing()
    if not lack:
        return
    name = Path(script).name
    venv = Path(os.environ.get("BOBOX_VENV") or REPO / ".venv")
    py = venv / "bin" / "python"
    here = Path(sys.prefix).resolve()
    if py.exists() and here != venv.resolve():
        os.execv(str(py), [str(py), os.path.abspath(script), *sys.argv[1:]])
    where = f"{py} lacks them too" if py.exists() else f"there is no {py}"
    print(f"{name}: {sys.executable} lacks {', '.join(lack)} and {where}: run `make setup` in {REPO} first",
          file=sys.stderr)
    sys.exit(2)
