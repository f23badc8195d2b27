"""TPC-H data: generation with ``tpchgen-cli`` and an in-memory columnar table store.

``datagen`` writes the eight TPC-H tables as Parquet (cached by a manifest, atomically);
``TableStore.open`` maps a data folder to lazily loaded numpy columns:

    store = TableStore.open(datagen(0.01, "data/sf0.01"))
    ship = store.table("lineitem").column("l_shipdate")   # kind "date", int32 days
    flag = store.table("lineitem").column("l_returnflag") # kind "string", int32 codes

Column representation (shared read-only by concurrent readers):

* ``int``: int64, or int32 where the Parquet type is int32;
* ``float``: float64 (decimals converted);
* ``date``: int32 days since 1970-01-01;
* ``string``: int32 codes into ``dictionary``, the *sorted* unique values, so comparing
  codes compares strings.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bobox_sched import limits, outputs, procs
from bobox_sched.errors import BoboxError
from bobox_sched.tools import find_tool

TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")
MANIFEST = "_bobox_manifest.json"
MANIFEST_FORMAT = 1
KINDS = ("int", "float", "date", "string")

_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)  # pyarrow >= 16

__all__ = [
    "TABLES",
    "MANIFEST",
    "DataError",
    "datagen",
    "find_tables",
    "read_manifest",
    "decimal_to_float64",
    "Column",
    "Table",
    "TableStore",
]


class DataError(BoboxError):
    """Bad or missing TPC-H data, or a failed generator (one-line message)."""


# --------------------------------------------------------------------------- generation


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"datagen: {msg}", file=sys.stderr, flush=True)


def fmt_sf(sf: float) -> str:
    """The scale factor as the generator's command line wants it (``1``, ``0.01``)."""
    return str(int(sf)) if float(sf).is_integer() else repr(float(sf))


def read_manifest(data_dir: str | os.PathLike) -> dict | None:
    """The manifest of a data folder written by ``datagen``, or None where it has none."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        float(manifest["sf"])
        manifest["generator"]["name"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"unreadable data set manifest {path}: {e}") from None
    return manifest


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
        raise DataError(f"scale factor must be at most {limits.MAX_SF:g} (bobox_sched/limits.py), got {sf:g}")
    return sf


def datagen(sf: float, out: str | os.PathLike, progress: bool = True, tool: str = "tpchgen-cli") -> Path:
    """Generate the 8 TPC-H tables at scale factor ``sf`` as Parquet into ``out``.

    Cached by ``out/_bobox_manifest.json`` (same sf and generator: nothing to do);
    atomic (generated into a temporary sibling folder, then renamed into place; a symlink
    named `out` is followed). Raises DataError for a bad sf, an ``out`` holding other
    data, an unwritable or full place, a missing or failing generator, all before the
    generator starts where they can be known then. The generator runs in its own process
    group and dies with this process (``bobox_sched.procs``). Returns ``out`` as a Path.
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


# --------------------------------------------------------------------------- discovery


def _natural_key(path: Path) -> list:
    """Sort key: by name, with digit runs compared as numbers (part 2 before part 10)."""
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", path.name)]


def find_tables(data_dir: str | os.PathLike) -> dict[str, list[Path]]:
    """Map each TPC-H table to its Parquet file(s) in ``data_dir``.

    A table is ``DIR/<table>.parquet`` or a folder ``DIR/<table>/`` of ``*.parquet`` parts
    (sorted by name, numbers in names compared numerically).
    """
    root = Path(data_dir).expanduser()
    if not root.exists():
        raise DataError(f"TPC-H data folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"TPC-H data folder {root} is not a folder")
    found: dict[str, list[Path]] = {}
    for table in TABLES:
        single = root / f"{table}.parquet"
        folder = root / table
        if single.is_file():
            found[table] = [single]
        elif folder.is_dir():
            parts = sorted((p for p in folder.glob("*.parquet") if p.is_file()), key=_natural_key)
            if not parts:
                raise DataError(f"TPC-H table {table!r}: folder {folder} holds no .parquet files")
            found[table] = parts
        else:
            raise DataError(
                f"TPC-H table {table!r} not found in {root} (expected {table}.parquet or {table}/*.parquet)"
            )
    return found


# --------------------------------------------------------------------------- table store


def _parquet_file(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise DataError(f"cannot read Parquet file {path}: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


@dataclass
class Column:
    """One loaded column: ``values`` (read-only numpy) and, for strings, the dictionary."""

    name: str
    kind: str
    values: np.ndarray
    dictionary: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.values)

    def decode(self, codes: np.ndarray | None = None) -> pa.Array:
        """Strings for ``codes`` (default: the whole column); only for kind ``string``."""
        if self.dictionary is None:
            raise DataError(f"column {self.name!r} is not a string column")
        return self.dictionary.take(pa.array(self.values if codes is None else codes))

    def code_of(self, value: str) -> int:
        """The code of ``value``, or -1 where the column never holds it."""
        if self.dictionary is None:
            raise DataError(f"column {self.name!r} is not a string column")
        found = pc.index(self.dictionary, pa.scalar(value, pa.string())).as_py()
        return int(found)


def decimal_to_float64(data: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Decimals as the nearest float64 (``float(Decimal)``), NaN where null.

    pyarrow's own cast multiplies by a rounded power of ten, so it is often one ulp off
    (24710.35 -> 24710.350000000002); we divide the unscaled integer by 10**scale instead
    (correctly rounded while it is below 2**53).
    """
    chunks = data.chunks if isinstance(data, pa.ChunkedArray) else [data]
    parts = [_decimal_chunk(c) for c in chunks]
    return np.concatenate(parts) if parts else np.empty(0, np.float64)


def _decimal_chunk(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_decimal128(t) and arr.null_count == 0 and 0 <= t.scale <= 22:
        words = np.frombuffer(arr.buffers()[1], dtype="<i8", count=2 * (arr.offset + len(arr)))
        words = words.reshape(-1, 2)[arr.offset :]
        lo, hi = words[:, 0], words[:, 1]
        if np.array_equal(hi, lo >> 63):  # every value fits int64
            return lo.astype(np.float64) / (10.0**t.scale)
    return arr.cast(pa.float64()).to_numpy(zero_copy_only=False)


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.flags.writeable = False
    return arr


def _to_column(name: str, data: pa.ChunkedArray, where: str) -> Column:
    """Convert an Arrow column to our representation (see the module docstring)."""
    t = data.type
    if data.null_count:
        raise DataError(f"{where}: column {name!r} holds {data.null_count} nulls (not supported)")
    if pa.types.is_dictionary(t):
        data = data.cast(t.value_type)
        t = data.type
    if pa.types.is_int32(t):
        return Column(name, "int", _frozen(data.to_numpy().astype(np.int32, copy=False)), None)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        try:
            values = data.cast(pa.int64()).to_numpy()
        except pa.ArrowInvalid as e:
            raise DataError(f"{where}: column {name!r} does not fit int64: {_one_line(e)}") from None
        return Column(name, "int", _frozen(values.astype(np.int64, copy=False)), None)
    if pa.types.is_decimal(t):
        return Column(name, "float", _frozen(decimal_to_float64(data)), None)
    if pa.types.is_floating(t):
        values = data.cast(pa.float64()).to_numpy()
        return Column(name, "float", _frozen(values.astype(np.float64, copy=False)), None)
    if pa.types.is_date(t):
        if pa.types.is_date64(t):
            data = data.cast(pa.date32())
        values = data.cast(pa.int32()).to_numpy()
        return Column(name, "date", _frozen(values.astype(np.int32, copy=False)), None)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        if not pa.types.is_string(t):
            data = data.cast(pa.string())
        uniq = pc.unique(data)
        dictionary = uniq.take(pc.array_sort_indices(uniq))
        if isinstance(dictionary, pa.ChunkedArray):
            dictionary = dictionary.combine_chunks()
        codes = pc.index_in(data, value_set=dictionary).cast(pa.int32())
        return Column(name, "string", _frozen(codes.to_numpy()), dictionary)
    raise DataError(f"{where}: column {name!r} has unsupported type {t}")


class Table:
    """One TPC-H table over its Parquet file(s); columns load lazily and are cached."""

    def __init__(self, name: str, files: list[Path]):
        self.name = name
        self.files = list(files)
        metas = [_parquet_file(p) for p in self.files]
        schema = metas[0].schema_arrow
        for p, m in zip(self.files[1:], metas[1:]):
            if m.schema_arrow.names != schema.names:
                raise DataError(f"table {name!r}: part {p} has columns unlike {self.files[0]}")
        self.schema: pa.Schema = schema
        self.file_schemas: list[pa.Schema] = [m.schema_arrow for m in metas]
        self.column_names: list[str] = list(schema.names)
        self.num_rows: int = sum(m.metadata.num_rows for m in metas)
        self._columns: dict[str, Column] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Table({self.name!r}, rows={self.num_rows}, files={len(self.files)})"

    def check_columns(self, names) -> None:
        """DataError (one line) unless every column of `names` exists and has the type
        the TPC-H schema gives it in every file (``operators.tpch_schema``): metadata
        only, nothing is read."""
        from .tpch_schema import check_types

        for name in names:
            if name not in self.column_names:
                raise DataError(f"table {self.name!r} has no column {name!r}")
        check_types(self.name, self.files, self.file_schemas, list(names))

    def column(self, name: str) -> Column:
        """The column ``name``, reading only that column from every file (once)."""
        col = self._columns.get(name)
        if col is not None:
            return col
        self.check_columns([name])
        with self._lock:
            col = self._columns.get(name)
            if col is None:
                col = self._load(name)
                self._columns[name] = col
        return col

    def columns(self, names: list[str] | tuple[str, ...]) -> list[Column]:
        """The columns ``names``, in that order."""
        return [self.column(n) for n in names]

    def _load(self, name: str) -> Column:
        chunks: list[pa.Array] = []
        for path in self.files:
            try:
                part = pq.read_table(path, columns=[name])
            except (pa.ArrowException, OSError, ValueError) as e:
                raise DataError(f"cannot read column {name!r} from Parquet file {path}: {_one_line(e)}") from None
            chunks.extend(part.column(0).chunks)
        types = {c.type for c in chunks}
        if len(types) > 1:
            raise DataError(f"table {self.name!r}: column {name!r} has differing types across parts: {types}")
        data = pa.chunked_array(chunks, type=chunks[0].type if chunks else self.schema.field(name).type)
        if len(data) != self.num_rows:
            raise DataError(f"table {self.name!r}: column {name!r} has {len(data)} rows, metadata says {self.num_rows}")
        return _to_column(name, data, f"table {self.name!r}")


class TableStore:
    """The TPC-H tables of one data folder, shared process-wide (see ``open``)."""

    _cache: dict[Path, tuple[tuple, "TableStore"]] = {}
    _cache_lock = threading.Lock()

    def __init__(self, data_dir: Path, files: dict[str, list[Path]]):
        self.data_dir = data_dir
        self.files = files
        self._tables = {name: Table(name, paths) for name, paths in files.items()}

    def __repr__(self) -> str:
        return f"TableStore({str(self.data_dir)!r})"

    @classmethod
    def open(cls, data_dir: str | os.PathLike) -> "TableStore":
        """The store of ``data_dir``; the same object while its files are unchanged
        (keyed by the resolved path and every file's size and mtime)."""
        root = Path(data_dir).expanduser()
        files = find_tables(root)
        root = root.resolve()
        key = cls._fingerprint(files)
        with cls._cache_lock:
            hit = cls._cache.get(root)
            if hit is not None and hit[0] == key:
                return hit[1]
            store = cls(root, {t: [p.resolve() for p in ps] for t, ps in files.items()})
            cls._cache[root] = (key, store)
            return store

    @staticmethod
    def _fingerprint(files: dict[str, list[Path]]) -> tuple:
        items = []
        for table, paths in files.items():
            for p in paths:
                try:
                    st = p.stat()
                except OSError as e:
                    raise DataError(f"cannot stat Parquet file {p}: {_one_line(e)}") from None
                items.append((table, str(p.resolve()), st.st_size, st.st_mtime_ns))
        return tuple(items)

    @classmethod
    def clear_cache(cls) -> None:
        """Forget every cached store (their columns are freed once unreferenced)."""
        with cls._cache_lock:
            cls._cache.clear()

    def table(self, name: str) -> Table:
        """The table ``name`` (one of TABLES)."""
        try:
            return self._tables[name]
        except KeyError:
            raise DataError(f"unknown TPC-H table {name!r} (known: {', '.join(TABLES)})") from None

    def sf(self) -> float | None:
        """The scale factor from the data set's manifest, or None without one."""
        manifest = read_manifest(self.data_dir)
        return None if manifest is None else float(manifest["sf"])
