"""Finding helper executables (``tpchgen-cli``, ``vng``, ...) without an activated venv.

pip installs a package's console scripts into the scripts folder of the environment it
installs into: ``<venv>/bin`` for a virtual environment, ``~/.local/bin`` for
``pip install --user``, the interpreter's own ``bin`` otherwise. Nothing puts that folder
on PATH unless the user activated the venv, and a console script run by its full path
(``/path/to/venv/bin/bobox``, pipx, a service unit) must work all the same. So a tool is
looked up, in order:

1. next to the running interpreter (``sys.executable``'s folder, *not* resolved: a venv's
   ``bin/python`` is a symlink to the base interpreter, and the tools sit beside the
   link);
2. in the scripts folders ``sysconfig`` names for this interpreter (the venv's, then the
   user scheme's);
3. on PATH, last: a tool the user installed system-wide.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path


def scripts_dirs() -> list[Path]:
    """The folders this interpreter's packages install executables into, most specific
    first, without duplicates."""
    dirs = [Path(sys.executable).parent]
    for scheme in (None, f"{os.name}_user"):
        try:
            p = sysconfig.get_path("scripts") if scheme is None else sysconfig.get_path("scripts", scheme)
        except KeyError:  # a scheme this platform does not have
            continue
        if p:
            dirs.append(Path(p))
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def find_tool(name: str) -> str | None:
    """The full path of executable `name` (see the module doc for the order), or None.

    A `name` with a slash is a path: returned if it is an executable file."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for d in scripts_dirs():
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


def tool_env(env: dict | None = None) -> dict:
    """A copy of `env` (default ``os.environ``) whose PATH starts with this interpreter's
    scripts folders, for child processes that look up *their* helpers on PATH (``vng``
    starts ``virtme-ng-init`` & co.)."""
    env = dict(os.environ if env is None else env)
    head = [str(d) for d in scripts_dirs() if d.is_dir()]
    rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p not in head]
    env["PATH"] = os.pathsep.join(head + rest)
    return env


__all__ = ["find_tool", "scripts_dirs", "tool_env"]
