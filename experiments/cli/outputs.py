"""Where commands write: output folders checked before any work, files written atomically,
complete sets marked by a manifest, and private temporary paths that no later run trips on.

* ``check_output_dir(path, "--output")`` refuses, with one line, an output that cannot be
  written: an empty path, a file, a folder under a file, a read-only file system, ``/sys``,
  a folder (or working directory) without write permission. It is called before the work
  (a 14 s run used to end in ``FileExistsError`` and lose its results). It writes nothing:
  the write test is a private file created and removed at once.
* ``ResultSet``: the files of one command in a folder. Each is written to a private
  temporary name, flushed to disk and renamed into place; a manifest listing every file
  and its size is written last, the same way, and removed first when the folder is written
  again. A folder holds a complete set exactly when ``complete(folder, manifest)`` says so:
  a full disk leaves at most some files and no manifest, never a set that looks complete.
* ``private_name(name)`` / ``remove_stale(folder, name)``: temporary siblings are named
  ``.<name>.tmp-<host>-<pid>-<8 hex>``; a later run removes those whose process is gone
  (same host, and no live process with that pid started before the path was last
  changed), never another host's or a live one's.
* ``own(path)`` / ``remove_owned()``: temporary paths this process must not leave behind
  when it is interrupted (``experiments.cli.main`` removes them after the child processes are
  gone, ``experiments.cli.procs``).

Protocol for the ``own`` registry: any thread may add or discard paths (a set under
``_owned_lock``, never taken from a signal handler, ``__del__`` or a weakref callback);
``remove_owned`` runs in the main thread once the command is ending.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bobox_sched.core.errors import BoboxError

RESULTS_MANIFEST = "_bobox_results.json"


class OutputError(BoboxError):
    """An output that cannot be written, or whose writing failed (one-line message)."""


def _reason(e: OSError) -> str:
    if e.errno:
        return os.strerror(e.errno)
    text = (e.strerror or str(e)).strip().splitlines()
    return text[0] if text else type(e).__name__


# --------------------------------------------------------------------------- checking


def _absolute(path: Path, what: str) -> Path:
    try:
        return path.absolute()
    except FileNotFoundError:
        raise OutputError(f"{what} {path}: the working directory no longer exists") from None


def nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (following symlinks)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_creatable(path, what: str) -> Path:
    """Refuse a path that this process could not create (with its missing parents): the
    closest existing ancestor of its parent must be a folder it can write. Nothing is
    created."""
    out = Path(path).expanduser()
    base = nearest_existing(_absolute(out, what).parent)
    if not base.is_dir():
        raise OutputError(f"{what} {out}: cannot create it under {base}, which is not a folder")
    check_writable(base, what, out)
    return out


def check_output_dir(path, what: str = "--output") -> Path:
    """Refuse an output folder that cannot be written (see the module doc); returns it
    as a Path. Nothing is created."""
    if path is None or not str(path).strip():
        raise OutputError(f"{what} must not be empty")
    out = Path(path).expanduser()
    absolute = _absolute(out, what)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{what} {out} exists and is not a folder")
    if out.is_symlink() and not out.exists():
        raise OutputError(f"{what} {out} is a symlink to a missing {os.readlink(out)}")
    base = nearest_existing(absolute)
    if not base.is_dir():
        raise OutputError(f"{what} {out}: cannot create output folder under {base}, which is not a folder")
    check_writable(base, what, out)
    return out


def check_writable(folder: Path, what: str, named=None) -> None:
    """Create and remove a private file in `folder`: a read-only file system, /sys and a
    missing permission all show up here (``os.access`` says yes to root on /sys)."""
    named = folder if named is None else named
    try:
        fd, name = tempfile.mkstemp(prefix=".bobox-write-check-", dir=folder)
    except OSError as e:
        if Path(named) == Path(folder):
            where = "there"
        else:
            try:
                cwd = Path.cwd()
            except OSError:
                cwd = None
            where = f"in {folder}" + (" (the working directory)" if Path(folder) == cwd else "")
        raise OutputError(f"{what} {named}: cannot write {where}: {_reason(e)}") from None
    os.close(fd)
    os.unlink(name)


def free_bytes(path) -> int:
    """Free bytes for an unprivileged user on the file system that holds `path` (or would
    hold it: its nearest existing ancestor)."""
    st = os.statvfs(nearest_existing(Path(path).absolute()))
    return st.f_bavail * st.f_frsize


# --------------------------------------------------------------------------- private names

HOST = socket.gethostname()


def private_name(name: str) -> str:
    """A temporary sibling name for `name`, unique and owned by this process."""
    return f".{name}.tmp-{HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _owner(path: Path, name: str) -> tuple[str, int] | None:
    """(host, pid) of a private path of `name`, or None where it is not one. Names
    without a host (``.<name>.tmp-<pid>-<hex>``, before hosts were recorded) are this
    host's."""
    prefix = f".{name}.tmp-"
    if not path.name.startswith(prefix):
        return None
    parts = path.name[len(prefix):].rsplit("-", 2)
    if len(parts) == 2:
        parts = [HOST] + parts
    host, pid, tag = parts
    if not pid.isdigit() or len(tag) != 8 or any(c not in "0123456789abcdef" for c in tag):
        return None
    return host, int(pid)


def owner_alive(path: Path, host: str, pid: int) -> bool:
    """True unless `path` belongs to a process of this host that is gone. A pid in use by
    a process started after `path` last changed is a reuse of the number: gone too."""
    if host != HOST:
        return True  # another host's: never ours to judge
    import psutil

    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, not ours to inspect
    try:
        st = path.lstat()
    except FileNotFoundError:
        return True
    return started <= min(st.st_mtime, st.st_ctime) + 1.0


def remove_stale(folder: Path, name: str) -> list[Path]:
    """Remove the private paths of `name` in `folder` whose owner is gone; returns them."""
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for p in entries:
        who = _owner(p, name)
        if who is None or owner_alive(p, *who):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                p.unlink()
            except OSError:
                continue
        removed.append(p)
    return removed


_owned: set[Path] = set()
_owned_lock = threading.Lock()


def own(path) -> Path:
    """Remember `path` as a temporary path to remove if the command is interrupted."""
    path = Path(path)
    with _owned_lock:
        _owned.add(path)
    return path


def disown(path) -> None:
    with _owned_lock:
        _owned.discard(Path(path))


def remove_owned() -> None:
    """Remove every owned path still there (the command is ending on an interrupt)."""
    with _owned_lock:
        paths = list(_owned)
        _owned.clear()
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            try:
                p.unlink()
            except OSError:
                pass


# --------------------------------------------------------------------------- writing


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(final: Path, write) -> int:
    """``write(tmp_path)`` then flush to disk and rename to `final`; returns its size.
    On any failure the temporary file is removed and `final` is left as it was."""
    final = Path(final)
    tmp = own(final.parent / private_name(final.name))
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # ENOSPC shows up by here on file systems that delay allocation
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    finally:
        disown(tmp)
    return size


class ResultSet:
    """The result files of one command in `folder` (see the module doc).

        with ResultSet("out", command=["bobox", "run", ...]) as rs:
            rs.write("q1.parquet", lambda tmp: pq.write_table(table, tmp))
        # on a clean exit the manifest lists q1.parquet; on an error there is none

    Raises OutputError (one line, naming the file and saying the set is incomplete)
    when a file cannot be written."""

    def __init__(self, folder, manifest: str = RESULTS_MANIFEST, what: str = "--output", command=None):
        self.folder = check_output_dir(folder, what)
        self.manifest = manifest
        self.what = what
        self.command = list(command) if command is not None else None
        self.files: dict[str, int] = {}

    def __enter__(self) -> "ResultSet":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            remove_stale(self.folder, self.manifest)
            (self.folder / self.manifest).unlink(missing_ok=True)  # incomplete from here on
        except OSError as e:
            raise OutputError(f"{self.what} {self.folder}: cannot write there: {_reason(e)}") from None
        return self

    def write(self, name: str, write) -> Path:
        """``write(tmp_path)`` creates the file; it is renamed to ``folder/name``."""
        if Path(name).name != name or name in ("", ".", "..") or name == self.manifest:
            raise OutputError(f"not a result file name: {name!r}")
        final = self.folder / name
        remove_stale(self.folder, name)
        try:
            self.files[name] = write_atomic(final, write)
        except OSError as e:
            raise OutputError(f"cannot write {final}: {_reason(e)}; {self.folder} holds no complete result set "
                              f"(no {self.manifest})") from None
        return final

    def write_text(self, name: str, text: str) -> Path:
        return self.write(name, lambda tmp: Path(tmp).write_text(text))

    def commit(self, **extra) -> Path:
        """Write the manifest: the set is complete."""
        body = {
            "format": 1,
            "complete": True,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": HOST,
            "command": self.command,
            "files": {n: {"bytes": b} for n, b in sorted(self.files.items())},
            **extra,
        }
        final = self.folder / self.manifest
        try:
            write_atomic(final, lambda tmp: Path(tmp).write_text(json.dumps(body, indent=2) + "\n"))
        except OSError as e:
            raise OutputError(f"cannot write {final}: {_reason(e)}; {self.folder} holds no complete result set") \
                from None
        _fsync_dir(self.folder)
        return final

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()


def complete(folder, manifest: str = RESULTS_MANIFEST) -> bool:
    """True where `folder` holds a complete set: its manifest, and every file it lists
    with the listed size."""
    folder = Path(folder)
    try:
        body = json.loads((folder / manifest).read_text())
        files = body["files"]
        return bool(body.get("complete")) and all(
            (folder / n).is_file() and (folder / n).stat().st_size == info["bytes"] for n, info in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


__all__ = [
    "RESULTS_MANIFEST",
    "OutputError",
    "check_output_dir",
    "check_writable",
    "free_bytes",
    "nearest_existing",
    "private_name",
    "owner_alive",
    "remove_stale",
    "own",
    "disown",
    "remove_owned",
    "write_atomic",
    "ResultSet",
    "complete",
]
