"""TPC-H data generation with ``tpchgen-cli``: ``datagen(sf, out)`` writes the eight tables
as Parquet into `out`, atomically (a private staging folder, then one rename) and cached by
a manifest (``operators.data.MANIFEST``): a folder that already holds SF `sf` from the same
generator is reused. The table store that reads the result is ``operators.data``.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bobox_sched.core import limits
from bobox_sched.tools import find_tool
from experiments.cli import outputs, procs
from operators.data import MANIFEST, MANIFEST_FORMAT, TABLES, DataError, _parquet_file, find_tables, read_manifest


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"datagen: {msg}", file=sys.stderr, flush=True)


def fmt_sf(sf: float) -> str:
    """The scale factor as the generator's command line wants it (``1``, ``0.01``)."""
    return str(int(sf)) if float(sf).is_integer() else repr(float(sf))


def _generator_version(tool: str, exe: str) -> tuple[str, str]:
    """(name, version) from ``tool --version`` (``tpchgen-cli 4.0.0``)."""
    try:
        proc = procs.run([exe, "--version"], timeout=60)
    except OSError as e:
        raise DataError(f"cannot run TPC-H generator {tool!r}: {e}") from None
    except subprocess.TimeoutExpired:
        raise DataError(f"TPC-H generator {tool!r} did not answer --version in 60 s") from None
    words = proc.stdout.split()
    if proc.returncode != 0 or not words:
        raise DataError(f"TPC-H generator {tool!r} --version failed: {_last_line(proc.stderr)}")
    if len(words) == 1:
        return Path(tool).name, words[0]
    return words[0], words[-1]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output on stderr)"


def _check_existing(out: Path, sf: float, tool_name: str) -> bool:
    """True where ``out`` already holds this data set; raises DataError where it holds
    something else; False where it is absent or an empty folder."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise DataError(f"datagen output {out} exists and is not a folder")
    manifest = read_manifest(out)
    if manifest is None:
        if any(out.iterdir()):
            raise DataError(
                f"datagen output {out} already holds other files and no {MANIFEST}; "
                "choose another folder (nothing was changed)"
            )
        return False
    have_sf = float(manifest["sf"])
    have_gen = manifest["generator"]["name"]
    known_as = {have_gen, manifest["generator"].get("tool", have_gen)}
    if not math.isclose(have_sf, sf, rel_tol=1e-12):
        raise DataError(
            f"datagen output {out} holds TPC-H SF {have_sf:g}, not SF {sf:g}; "
            "choose another folder (nothing was changed)"
        )
    if tool_name not in known_as:
        raise DataError(
            f"datagen output {out} holds SF {have_sf:g} data from {have_gen!r}, not {tool_name!r}; "
            "choose another folder (nothing was changed)"
        )
    missing = [
        f
        for info in manifest.get("tables", {}).values()
        for f in info.get("files", [])
        if not (out / f).is_file()
    ]
    if missing or set(manifest.get("tables", {})) != set(TABLES):
        what = f"file {missing[0]} is missing" if missing else "its manifest lacks tables"
        raise DataError(f"datagen output {out} is incomplete ({what}); remove the folder to regenerate it")
    return True


def target_of(out: Path) -> Path:
    """Where a data set at `out` really goes: a symlink named as the output is followed
    (``datagen --out`` a symlink to an empty folder used to fail after generating
    everything, and the data was deleted)."""
    out = Path(out)
    return out.resolve() if out.is_symlink() else out


# Parquet bytes per unit of scale factor written by tpchgen-cli: 3.25 MB at SF 0.01
# (tpchgen-cli 4.0), 10% added for the temporary copies of stage 1 and the generator's
# buffers. datagen refuses to start where the disk has less free space than that.
DATAGEN_BYTES_PER_SF = 360 * 2**20


def check_datagen_out(out, sf: float, what: str = "datagen output") -> Path:
    """Before generating SF `sf` into `out` (not cached there): its parent must be a
    folder this process can write (the staging sibling goes there), and the file system
    must have room for the data. Returns the target (``target_of``). Nothing is written."""
    if not str(out).strip():
        raise DataError(f"{what} must not be empty")
    target = target_of(Path(out).expanduser())
    outputs.check_creatable(target, what)
    need = int(sf * DATAGEN_BYTES_PER_SF)
    free = outputs.free_bytes(target.parent)
    if free < need:
        raise DataError(f"{what} {out}: TPC-H SF {sf:g} needs about {need / 2**20:.0f} MiB, only "
                        f"{free / 2**20:.0f} MiB free there (nothing was written)")
    return target


def staging_dir(out: Path) -> Path:
    """A private sibling folder of `out` (``outputs.private_name``: it holds this host and
    pid) to generate into before publishing. Staging folders of processes that are gone
    (a killed datagen) are removed first. The folder is registered with
    ``outputs.own``: an interrupted command removes it after its children are gone.
    Not created here."""
    out = target_of(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create {out.parent}: {e.strerror or e}") from None
    for stale in outputs.remove_stale(out.parent, out.name):
        print(f"datagen: removed {stale}, left by a process that is gone", file=sys.stderr, flush=True)
    return outputs.own(out.parent / outputs.private_name(out.name))


def publish(tmp: Path, out: Path, manifest_name: str, manifest: dict, already_there) -> bool:
    """Write the manifest into `tmp`, then rename `tmp` to `out` (an empty `out` the user
    made is replaced; a symlink named `out` is followed, ``target_of``). False if the
    rename lost a race to a concurrent generation whose result `already_there()` accepts:
    that copy is kept. DataError otherwise."""
    out = target_of(out)
    (tmp / manifest_name).write_text(json.dumps(manifest, indent=2) + "\n")
    try:
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        os.rename(tmp, out)
        return True
    except OSError as e:
        if already_there():
            return False
        raise DataError(f"cannot move generated data into {out}: {e.strerror or e}") from None


def check_sf(sf) -> float:
    """A scale factor as a positive finite float, or a one-line DataError."""
    try:
        sf = float(sf)
    except (TypeError, ValueError):
        raise DataError(f"scale factor must be a number, got {sf!r}") from None
    if not math.isfinite(sf) or sf <= 0:
        raise DataError(f"scale factor must be > 0, got {sf:g}")
    if sf > limits.MAX_SF:
        raise DataError(f"scale factor must be at most {limits.MAX_SF:g} (bobox_sched/core/limits.py), got {sf:g}")
    return sf


def datagen(sf: float, out: str | os.PathLike, progress: bool = True, tool: str = "tpchgen-cli") -> Path:
    """Generate the 8 TPC-H tables at scale factor ``sf`` as Parquet into ``out``.

    Cached by ``out/_bobox_manifest.json`` (same sf and generator: nothing to do);
    atomic (generated into a temporary sibling folder, then renamed into place; a symlink
    named `out` is followed). Raises DataError for a bad sf, an ``out`` holding other
    data, an unwritable or full place, a missing or failing generator, all before the
    generator starts where they can be known then. The generator runs in its own process
    group and dies with this process (``experiments.cli.procs``). Returns ``out`` as a Path.
    """
    sf = check_sf(sf)
    given = Path(out).expanduser()
    if not str(out).strip():
        raise DataError("datagen output must not be empty")
    out = target_of(given)
    tool_name = Path(tool).name

    if _check_existing(out, sf, tool_name):
        _say(progress, f"{given} already holds TPC-H SF {sf:g} (cached)")
        return given
    check_datagen_out(given, sf)

    exe = find_tool(tool)
    if exe is None:
        raise DataError(
            f"TPC-H generator {tool!r} not found next to {sys.executable} nor on PATH; "
            "install it with: pip install tpchgen-cli"
        )
    gen_name, gen_version = _generator_version(tool, exe)

    tmp = staging_dir(out)
    cmd = [exe, "parquet", "-s", fmt_sf(sf), "--output-dir", str(tmp)]
    t0 = time.monotonic()
    _say(progress, f"generating TPC-H SF {sf:g} with {gen_name} {gen_version} into {given} ...")
    try:
        tmp.mkdir()
        try:
            proc = procs.run(cmd)
        except OSError as e:
            raise DataError(f"cannot run TPC-H generator {tool!r}: {e}") from None
        if proc.returncode != 0:
            raise DataError(
                f"TPC-H generator {tool!r} failed (exit {proc.returncode}): {_last_line(proc.stderr)}"
            )
        try:
            files = find_tables(tmp)
        except DataError as e:
            raise DataError(f"TPC-H generator {tool!r} did not write every table: {e}") from None
        tables = {}
        for name, paths in files.items():
            rows = sum(_parquet_file(p).metadata.num_rows for p in paths)
            tables[name] = {"rows": rows, "files": [str(p.relative_to(tmp)) for p in paths]}
        manifest = {
            "format": MANIFEST_FORMAT,
            "sf": sf,
            "generator": {"name": gen_name, "version": gen_version, "tool": tool_name},
            "command": [tool_name, "parquet", "-s", fmt_sf(sf), "--output-dir", str(given)],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "tables": tables,
        }
        if not publish(tmp, out, MANIFEST, manifest, lambda: _check_existing(out, sf, tool_name)):
            _say(progress, f"{given} was generated concurrently (kept that copy)")
            return given
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        outputs.disown(tmp)
    summary = ", ".join(f"{t} {tables[t]['rows']}" for t in TABLES)
    _say(progress, f"done in {time.monotonic() - t0:.1f} s ({summary} rows)")
    return given
