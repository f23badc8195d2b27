"""The split by order key: row-group surgery on Parquet files, without Spark.

Both stages cut orders and lineitem into P partitions such that partition i of both
tables holds the rows of the same order keys: P-1 increasing split keys
b_1 < ... < b_{P-1}, and partition i holds the rows with b_i <= key < b_{i+1}
(b_0 = -inf, b_P = +inf) of both tables. Whatever the split keys, every row lands in
exactly one partition and every order's line items in its order's partition; the keys
only decide the balance. Row groups are chosen by the key range in the footers'
statistics, so a partition reads only the row groups that overlap its range, and a
file lying wholly inside one range is moved or linked instead of being rewritten.

Stage 1 (``datagen``: placing the generator's pieces) and stage 2's input (``views``:
splitting any folder on the fly) both cut with these functions, which know nothing of
either: files, a key column and split keys in, row groups and written rows out.
"""

from __future__ import annotations

import math
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from experiments.spark.messages import first_line


@dataclass(frozen=True)
class Group:
    """One non-empty row group of a Parquet file: the key's range and its row count."""

    file: int  # index into the table's file list
    index: int  # row group number in that file
    lo: int
    hi: int
    rows: int


def key_groups(files, key: str, table: str) -> list[Group]:
    """Every non-empty row group of `files`, with the range of the integer column `key`
    from the footer's statistics (the column is read where a group has none)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from operators.data import DataError

    groups = []
    for fi, f in enumerate(files):
        try:
            pf = pq.ParquetFile(f)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise DataError(f"cannot read Parquet file {f}: {first_line(e)}") from None
        with pf:
            names = pf.schema_arrow.names
            if key not in names:
                raise DataError(f"table {table!r}: {f} has no column {key!r}")
            typ = pf.schema_arrow.field(key).type
            if not pa.types.is_integer(typ):
                raise DataError(f"table {table!r}: column {key!r} in {f} is {typ}, expected an integer type")
            md = pf.metadata
            col = None
            for r in range(md.num_row_groups):
                rg = md.row_group(r)
                if rg.num_rows == 0:
                    continue
                if col is None:
                    col = next(c for c in range(rg.num_columns) if rg.column(c).path_in_schema == key)
                st = rg.column(col).statistics
                if st is not None and st.has_min_max and st.has_null_count and st.null_count == 0:
                    lo, hi = int(st.min), int(st.max)
                else:
                    keys = pf.read_row_group(r, columns=[key]).column(0)
                    if keys.null_count:
                        raise DataError(f"table {table!r}: column {key!r} in {f} holds {keys.null_count} nulls")
                    mm = pc.min_max(keys).as_py()
                    lo, hi = int(mm["min"]), int(mm["max"])
                groups.append(Group(fi, r, lo, hi, rg.num_rows))
    return groups


def balanced_bounds(groups: list[Group], parts: int) -> list[int]:
    """P-1 increasing split keys cutting `groups` into P parts of about equal row counts,
    the keys of a row group taken as spread evenly over its range."""
    if parts <= 1:
        return []
    if not groups:  # no rows: any increasing keys will do
        return list(range(parts - 1))
    gs = sorted(groups, key=lambda g: (g.lo, g.hi))
    total = sum(g.rows for g in gs)
    bounds: list[int] = []
    cum, i = 0, 0
    for k in range(1, parts):
        target = total * k / parts
        while i < len(gs) - 1 and cum + gs[i].rows < target:
            cum += gs[i].rows
            i += 1
        g = gs[i]
        frac = min(1.0, max(0.0, (target - cum) / g.rows))
        b = g.lo + math.ceil(frac * (g.hi - g.lo))
        if bounds and b <= bounds[-1]:
            b = bounds[-1] + 1
        bounds.append(b)
    return bounds


def piece_bounds(groups: list[Group], parts: int) -> list[int]:
    """Split keys for P pieces (file i = piece i): each piece's first key where the
    pieces cover disjoint ascending key ranges (then none of that table moves), else
    balanced ones."""
    spans: dict[int, list[int]] = {}
    for g in groups:
        s = spans.setdefault(g.file, [g.lo, g.hi])
        s[0], s[1] = min(s[0], g.lo), max(s[1], g.hi)
    if sorted(spans) == list(range(parts)) and all(spans[i][1] < spans[i + 1][0] for i in range(parts - 1)):
        return [spans[i][0] for i in range(1, parts)]
    return balanced_bounds(groups, parts)


def span(bounds: list[int], p: int) -> tuple[int | None, int | None]:
    """Partition p's key range [lo, hi); None: unbounded."""
    return (bounds[p - 1] if p > 0 else None, bounds[p] if p < len(bounds) else None)


def _inside(g: Group, lo, hi) -> bool:
    return (lo is None or g.lo >= lo) and (hi is None or g.hi < hi)


def _overlaps(g: Group, lo, hi) -> bool:
    return (lo is None or g.hi >= lo) and (hi is None or g.lo < hi)


def pick(groups: list[Group], lo, hi) -> tuple[list[int], list[Group]]:
    """What the partition [lo, hi) is made of: (files wholly inside it, the row groups of
    the other files that overlap it)."""
    by_file: dict[int, list[Group]] = {}
    for g in groups:
        by_file.setdefault(g.file, []).append(g)
    whole, cut = [], []
    for fi in sorted(by_file):
        gs = by_file[fi]
        if all(_inside(g, lo, hi) for g in gs):
            whole.append(fi)
        else:
            cut.extend(g for g in gs if _overlaps(g, lo, hi))
    return whole, cut


def _filter(t, mask):
    """``t.filter(mask)``; view-typed columns (tpchgen-cli writes strings as string_view)
    go through their plain type, since pyarrow has no take/filter kernel for them."""
    import pyarrow as pa

    views = {"string_view": pa.string(), "binary_view": pa.binary()}
    if not any(str(f.type) in views for f in t.schema):
        return t.filter(mask)
    cols = []
    for f, c in zip(t.schema, t.columns):
        plain = views.get(str(f.type))
        cols.append(c.filter(mask) if plain is None else c.cast(plain).filter(mask).cast(f.type))
    return pa.Table.from_arrays(cols, schema=t.schema)


def write_rows(files, groups: list[Group], key: str, lo, hi, dest: Path, schema, group_rows: int) -> int:
    """Write the rows of `groups` whose `key` is in [lo, hi) to `dest` (a temporary file
    renamed into place), in row groups of `group_rows` rows; returns the row count. One
    row group is read at a time, so memory stays at about two row groups."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    group_rows = max(1, int(group_rows))
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    opened: dict[int, object] = {}
    n = 0
    try:
        with pq.ParquetWriter(tmp, schema) as w:
            held: list = []
            count = 0
            for g in groups:
                pf = opened.get(g.file)
                if pf is None:
                    pf = opened[g.file] = pq.ParquetFile(files[g.file])
                t = pf.read_row_group(g.index)
                if not _inside(g, lo, hi):
                    k = t.column(key)
                    mask = None
                    if lo is not None:
                        mask = pc.greater_equal(k, lo)
                    if hi is not None:
                        below = pc.less(k, hi)
                        mask = below if mask is None else pc.and_(mask, below)
                    t = _filter(t, mask)
                if t.num_rows == 0:
                    continue
                if not t.schema.equals(schema):
                    t = t.cast(schema)
                held.append(t)
                count += t.num_rows
                if count >= group_rows:
                    full = pa.concat_tables(held)
                    cut = (count // group_rows) * group_rows
                    w.write_table(full.slice(0, cut), row_group_size=group_rows)
                    n += cut
                    held, count = [full.slice(cut)], count - cut
            if count:
                w.write_table(pa.concat_tables(held), row_group_size=group_rows)
                n += count
        os.replace(tmp, dest)
    finally:
        for pf in opened.values():
            pf.close()
        if tmp.exists():
            tmp.unlink()
    return n
