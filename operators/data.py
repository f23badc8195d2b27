"""TPC-H data: an in-memory columnar table store over Parquet folders.

``experiments.datagen.datagen`` writes the eight TPC-H tables as Parquet (cached by a
manifest, atomically); ``TableStore.open`` maps a data folder to lazily loaded numpy columns:

    store = TableStore.open("data/sf0.01")
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

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from operators.errors import DataError
from operators.tpch_schema import check_types

TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")
MANIFEST = "_bobox_manifest.json"
MANIFEST_FORMAT = 1
KINDS = ("int", "float", "date", "string")

_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)  # pyarrow >= 16

__all__ = [
    "TABLES",
    "MANIFEST",
    "DataError",
    "find_tables",
    "check_data_types",
    "read_manifest",
    "decimal_to_float64",
    "Column",
    "Table",
    "TableStore",
]


# --------------------------------------------------------------------------- manifest


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


def check_data_types(data_dir: str | os.PathLike) -> None:
    """Check every TPC-H column of every file of a data folder (Parquet footers only)."""
    import pyarrow.parquet as pq

    for table, files in find_tables(data_dir).items():
        schemas = []
        for p in files:
            try:
                schemas.append(pq.read_schema(p))
            except (pa.ArrowException, OSError, ValueError) as e:
                text = str(e).strip().splitlines()
                raise DataError(f"cannot read Parquet file {Path(p)}: {text[0] if text else type(e).__name__}") \
                    from None
        check_types(table, files, schemas)


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
    """The column as it is kept: contiguous, read-only and, while a Scheduler with
    domains runs, in its shared memory (one copy for this process and every domain:
    ``bobox_sched.domains.shared_arrays``)."""
    from bobox_sched.domains.shared_arrays import place_if_shared

    arr = place_if_shared(np.ascontiguousarray(arr))
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
