"""The split by order key of the Spark pipeline (``experiments/spark/``: ``split.py``,
``datagen.py``, ``views.py``), without Spark: split keys from row-group statistics,
partitions written from row groups, stage 1's placement of misaligned generator parts,
and the on-the-fly partition views of stage 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from operators.data import DataError, find_tables

from experiments.spark.datagen import PIECES, _place_pieces, _plan_placement
from experiments.spark.layout import REPLICATED, data_sf, stored_partitions
from experiments.spark.split import balanced_bounds, key_groups, pick, piece_bounds, span, write_rows
from experiments.spark.views import _split_view, plan_split

VIEW = getattr(pa, "string_view", pa.string)()  # tpchgen-cli writes strings as string_view (pyarrow >= 16)


def write(path: Path, keys, row_group_size: int, text: bool = True) -> Path:
    """A table with an integer key, a value derived from it and (optionally) a
    string_view column, as tpchgen-cli writes strings."""
    keys = np.asarray(keys, dtype=np.int64)
    cols = {"k": pa.array(keys), "v": pa.array(keys * 3 + 1)}
    if text:
        cols["s"] = pa.array([f"row-{k}" for k in keys], type=pa.string()).cast(VIEW)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path, row_group_size=max(1, row_group_size))
    return path


def split_files(files, parts, tmp: Path):
    """Every partition of `files` as the pipeline cuts them: (bounds, [table per partition])."""
    groups = key_groups(files, "k", "t")
    bounds = balanced_bounds(groups, parts)
    schema = pq.read_schema(files[0])
    out = []
    for p in range(parts):
        lo, hi = span(bounds, p)
        whole, cut = pick(groups, lo, hi)
        tables = [pq.read_table(files[i]) for i in whole]
        dest = tmp / f"part-{p}.parquet"
        n = write_rows(files, cut, "k", lo, hi, dest, schema, 7)
        written = pq.read_table(dest)
        assert written.num_rows == n and written.schema == schema
        assert not list(tmp.glob(".*tmp*"))  # the temporary file was renamed
        out.append(pa.concat_tables(tables + [written]))
    return bounds, out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.lists(st.integers(-50, 400), max_size=60), min_size=1, max_size=4),
    parts=st.integers(1, 6),
    group=st.integers(1, 25),
    sort=st.booleans(),
)
def test_every_row_lands_in_exactly_one_partition(tmp_path_factory, files, parts, group, sort):
    tmp = tmp_path_factory.mktemp("split")
    paths = [write(tmp / "src" / f"f{i}.parquet", sorted(keys) if sort else keys, group)
             for i, keys in enumerate(files)]
    bounds, tables = split_files(paths, parts, tmp)
    assert bounds == sorted(set(bounds)) and len(bounds) == parts - 1
    everything = sorted(k for keys in files for k in keys)
    got = []
    for p, t in enumerate(tables):
        lo, hi = span(bounds, p)
        keys = t.column("k").to_pylist()
        assert all((lo is None or k >= lo) and (hi is None or k < hi) for k in keys)
        # whole rows travel: every column still matches its key
        assert t.column("v").to_pylist() == [3 * k + 1 for k in keys]
        assert t.column("s").cast(pa.string()).to_pylist() == [f"row-{k}" for k in keys]
        got += keys
    assert sorted(got) == everything


def test_balanced_bounds_balance_sorted_keys(tmp_path):
    keys = np.arange(1, 600_001) * 4  # sparse keys, like TPC-H order keys
    f = write(tmp_path / "t.parquet", keys, 40_000, text=False)
    groups = key_groups([f], "k", "t")
    assert len(groups) == 15 and groups[0].lo == 4 and groups[-1].hi == 2_400_000
    bounds = balanced_bounds(groups, 7)
    counts = np.diff(np.searchsorted(keys, [keys[0]] + bounds + [keys[-1] + 1]))
    assert counts.sum() == len(keys)
    assert counts.max() - counts.min() <= 2, counts  # interpolated inside row groups


def test_piece_bounds_keep_disjoint_pieces_whole(tmp_path):
    files = [write(tmp_path / f"p{i}.parquet", range(100 * i + 1, 100 * i + 90), 10) for i in range(3)]
    groups = key_groups(files, "k", "t")
    bounds = piece_bounds(groups, 3)
    assert bounds == [101, 201]
    for p in range(3):
        assert pick(groups, *span(bounds, p)) == ([p], [])
    # overlapping pieces: balanced split keys instead
    files.append(write(tmp_path / "p3.parquet", range(50, 60), 10))
    assert piece_bounds(key_groups(files, "k", "t"), 4) == balanced_bounds(
        key_groups(files, "k", "t"), 4)


def test_key_groups_refuse_bad_keys(tmp_path):
    pq.write_table(pa.table({"k": pa.array([1.5, 2.5])}), tmp_path / "f.parquet")
    with pytest.raises(DataError, match="column 'k' in .* is double, expected an integer type"):
        key_groups([tmp_path / "f.parquet"], "k", "t")
    pq.write_table(pa.table({"k": pa.array([1, None, 3])}), tmp_path / "n.parquet")
    with pytest.raises(DataError, match="holds 1 nulls"):
        key_groups([tmp_path / "n.parquet"], "k", "t")
    pq.write_table(pa.table({"j": pa.array([1])}), tmp_path / "j.parquet")
    with pytest.raises(DataError, match="has no column 'k'"):
        key_groups([tmp_path / "j.parquet"], "k", "t")
    # row groups without statistics: the key is read
    pq.write_table(pa.table({"k": pa.array([5, 9, 7])}), tmp_path / "s.parquet", write_statistics=False)
    (g,) = key_groups([tmp_path / "s.parquet"], "k", "t")
    assert (g.lo, g.hi, g.rows) == (5, 9, 3)


def orders_and_lineitem(order_keys, lines_per_order):
    """A miniature orders/lineitem pair: every order has 1..7 line items."""
    okeys = np.asarray(order_keys, dtype=np.int64)
    lkeys = np.repeat(okeys, lines_per_order)
    orders = pa.table({"o_orderkey": okeys, "o_comment": pa.array([f"o{k}" for k in okeys]).cast(VIEW)})
    lineitem = pa.table({"l_orderkey": lkeys, "l_linenumber": pa.array(
        np.concatenate([np.arange(1, n + 1) for n in lines_per_order]).astype(np.int32))})
    return orders, lineitem


def test_stage1_places_misaligned_generator_parts(tmp_path):
    """Generator parts whose orders and lineitem cuts differ (as tpchgen-cli 4.0's do at
    SF 1 with 4 parts) come out co-partitioned, with no row lost or doubled."""
    rng = np.random.default_rng(7)
    n = 2000
    okeys = (np.arange(n) // 8) * 32 + np.arange(n) % 8 + 1  # tpchgen's sparse order keys
    lines = rng.integers(1, 8, n)
    orders, lineitem = orders_and_lineitem(okeys, lines)
    parts = 4
    o_cuts = [0, 500, 1000, 1500, n]  # orders parts: 500 orders each
    l_cuts = [0, 497, 990, 1497, n]  # lineitem parts: other orders
    line_start = np.concatenate([[0], np.cumsum(lines)])
    for i in range(parts):
        for t, table, a, b in (("orders", orders, o_cuts[i], o_cuts[i + 1]),
                               ("lineitem", lineitem, line_start[l_cuts[i]], line_start[l_cuts[i + 1]])):
            path = tmp_path / PIECES / t / f"piece-{i}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table.slice(a, b - a), path, row_group_size=128)
    plan = _plan_placement(tmp_path, parts)
    assert plan["bounds"] == [int(okeys[c]) for c in l_cuts[1:-1]]
    assert all(s["move"] == j for j, s in enumerate(plan["place"]["lineitem"]))  # lineitem stays
    assert all(s["move"] is None for s in plan["place"]["orders"])  # orders rows move at the cuts
    cfg = {"tmp": str(tmp_path), "partitions": parts, **plan}
    # a retried task finds its renames done; the result is the same
    first = [json.loads(r) for r in _place_pieces(cfg, [1])]
    infos = [json.loads(r) for r in _place_pieces(cfg, range(parts))]
    assert first[0] == infos[1]
    assert sum(i["rows"]["orders"] for i in infos) == n
    assert sum(i["rows"]["lineitem"] for i in infos) == lineitem.num_rows
    for j in range(parts):
        o = pq.read_table(tmp_path / "orders" / f"part-{j}.parquet")
        li = pq.read_table(tmp_path / "lineitem" / f"part-{j}.parquet")
        assert o.schema == orders.schema and li.schema == lineitem.schema
        assert o.column("o_orderkey").to_pylist() == okeys[l_cuts[j]:l_cuts[j + 1]].tolist()
        assert set(li.column("l_orderkey").to_pylist()) == set(o.column("o_orderkey").to_pylist())
        assert o.column("o_comment").cast(pa.string()).to_pylist() == [f"o{k}" for k in okeys[l_cuts[j]:l_cuts[j + 1]]]


def test_stage1_placement_check_catches_orphan_line_items(tmp_path):
    orders, lineitem = orders_and_lineitem([1, 2, 3, 4], [1, 2, 1, 1])
    for t, table in (("orders", orders.slice(0, 3)), ("lineitem", lineitem)):  # order 4 missing
        path = tmp_path / PIECES / t / "piece-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    cfg = {"tmp": str(tmp_path), "partitions": 1, **_plan_placement(tmp_path, 1)}
    with pytest.raises(RuntimeError, match="lineitem holds order keys that orders partition 0 lacks"):
        list(_place_pieces(cfg, [0]))


def tpch_like(root: Path, order_keys, lines, row_group_size=50):
    orders, lineitem = orders_and_lineitem(order_keys, lines)
    pq.write_table(orders, root / "orders.parquet", row_group_size=row_group_size)
    (root / "lineitem").mkdir()
    half = lineitem.num_rows // 2
    pq.write_table(lineitem.slice(0, half), root / "lineitem" / "a.parquet", row_group_size=row_group_size)
    pq.write_table(lineitem.slice(half), root / "lineitem" / "b.parquet", row_group_size=row_group_size)
    for t in REPLICATED:
        pq.write_table(pa.table({"x": [1]}), root / f"{t}.parquet")
    return orders, lineitem


def test_split_views_of_any_folder_cached_and_stale_ones_removed(tmp_path):
    src = tmp_path / "data"
    src.mkdir()
    orders, lineitem = tpch_like(src, range(1, 301), [(k % 7) + 1 for k in range(300)])
    cache = tmp_path / "views"
    split = plan_split(src, 3, cache)
    views = [_split_view(split, p) for p in range(3)]
    got_o, got_l = [], []
    for v in views:
        files = find_tables(v)  # an ordinary data folder
        assert files["customer"][0].resolve() == (src / "customer.parquet").resolve()
        o = pa.concat_tables(pq.read_table(f) for f in files["orders"]).column("o_orderkey").to_pylist()
        li = pa.concat_tables(pq.read_table(f) for f in files["lineitem"]).column("l_orderkey").to_pylist()
        assert set(li) == set(o) and 80 <= len(o) <= 120
        got_o += o
        got_l += li
    assert sorted(got_o) == sorted(orders.column("o_orderkey").to_pylist())
    assert sorted(got_l) == sorted(lineitem.column("l_orderkey").to_pylist())
    # made once: a second call finds the view
    stamp = (views[0] / "orders" / "rows.parquet").stat().st_mtime_ns
    assert _split_view(split, 0) == views[0]
    assert (views[0] / "orders" / "rows.parquet").stat().st_mtime_ns == stamp
    # one partition: the source files are linked, not copied
    one = _split_view(plan_split(src, 1, cache), 0)
    assert sorted(p.name for p in (one / "lineitem").iterdir()) == ["part-0.parquet", "part-1.parquet"]
    assert all(p.is_symlink() for p in (one / "lineitem").iterdir())
    # the source changes: a new view set; the old ones are removed when it is made
    planned = plan_split(src, 2, cache)
    os.utime(src / "orders.parquet", ns=(1, 1))
    with pytest.raises(RuntimeError, match="changed"):
        _split_view(planned, 0)  # planned before the change
    fresh = _split_view(plan_split(src, 3, cache), 0)
    assert fresh.exists() and not views[0].exists() and not one.exists()


def test_plan_split_refuses_non_tpch_folders(tmp_path):
    with pytest.raises(DataError, match="not found"):
        plan_split(tmp_path, 2)
    with pytest.raises(DataError, match="does not exist"):
        stored_partitions(tmp_path / "nope")
    src = tmp_path / "tiny"
    src.mkdir()
    tpch_like(src, [1, 2], [1, 1])
    with pytest.raises(DataError, match="has 2 rows, too few for 3 partitions"):
        plan_split(src, 3)
    assert stored_partitions(src) is None and data_sf(src) is None
