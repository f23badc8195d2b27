"""TPC-H data generation, the table store, the query texts and DuckDB reference answers."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bobox_sched.tools import find_tool
from operators.data import MANIFEST, TABLES, Column, DataError, TableStore, find_tables, read_manifest
from experiments.datagen import datagen
from operators.tpch_sql import QUERIES, compare_tables, duckdb_answer, output_columns

# tpchgen-cli is a core dependency, found next to the interpreter (bobox_sched.tools).
TPCHGEN = find_tool("tpchgen-cli")

SF001_ROWS = {
    "lineitem": 60175,
    "orders": 15000,
    "customer": 1500,
    "part": 2000,
    "partsupp": 8000,
    "supplier": 100,
    "nation": 25,
    "region": 5,
}
EPOCH = datetime.date(1970, 1, 1)


def days(d: str) -> int:
    return (datetime.date.fromisoformat(d) - EPOCH).days


@pytest.fixture()
def tpch_copy(tpch, tmp_path) -> Path:
    """A private, modifiable copy of the SF 0.01 data set."""
    dst = tmp_path / "copy"
    shutil.copytree(tpch, dst)
    return dst


@pytest.fixture(scope="session")
def tpch_parts(tpch, tmp_path_factory) -> Path:
    """The same data set with lineitem split in 3 parts (DIR/lineitem/lineitem.<i>.parquet)."""
    dst = tmp_path_factory.mktemp("tpch_parts")
    subprocess.run(
        [TPCHGEN, "parquet", "-s", "0.01", "--parts", "3", "--tables", "lineitem", "--output-dir", str(dst)],
        check=True,
        capture_output=True,
    )
    for t in TABLES:
        if t != "lineitem":
            os.symlink(tpch / f"{t}.parquet", dst / f"{t}.parquet")
    return dst


def mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


# --------------------------------------------------------------------------- datagen


def test_datagen_writes_all_tables_with_expected_rows(tpch):
    files = find_tables(tpch)
    assert set(files) == set(TABLES)
    assert all(files[t] == [tpch / f"{t}.parquet"] for t in TABLES)
    manifest = read_manifest(tpch)
    assert manifest == json.loads((tpch / MANIFEST).read_text())
    assert manifest["sf"] == 0.01
    assert manifest["generator"]["name"] == "tpchgen-cli" and manifest["generator"]["version"]
    assert manifest["created"]
    assert {t: manifest["tables"][t]["rows"] for t in TABLES} == SF001_ROWS
    assert manifest["tables"]["lineitem"]["files"] == ["lineitem.parquet"]
    store = TableStore.open(tpch)
    assert {t: store.table(t).num_rows for t in TABLES} == SF001_ROWS
    assert store.sf() == 0.01
    # No temporary sibling is left behind.
    assert [p.name for p in tpch.parent.iterdir()] == [tpch.name]


def test_datagen_second_call_is_a_cached_no_op(tpch, capsys, monkeypatch):
    before = mtimes(tpch)
    t0 = time.monotonic()
    assert datagen(0.01, tpch, progress=True) == tpch
    assert time.monotonic() - t0 < 0.5
    assert mtimes(tpch) == before
    assert "cached" in capsys.readouterr().err
    # The generator is not even looked for when the data set is cached.
    monkeypatch.setenv("PATH", "")
    assert datagen(0.01, str(tpch), progress=False) == tpch


def test_datagen_refuses_a_folder_with_other_files(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(DataError, match="other files") as e:
        datagen(0.01, out, progress=False)
    assert str(out) in str(e.value) and "\n" not in str(e.value)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_datagen_refuses_a_data_set_of_another_sf(tpch):
    before = mtimes(tpch)
    with pytest.raises(DataError, match="SF 0.01, not SF 0.02") as e:
        datagen(0.02, tpch, progress=False)
    assert str(tpch) in str(e.value)
    assert mtimes(tpch) == before


def test_datagen_fills_an_empty_folder(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert datagen(0.001, out, progress=False) == out
    assert read_manifest(out)["sf"] == 0.001
    assert set(find_tables(out)) == set(TABLES)


@pytest.mark.parametrize("sf", [0, -1, float("nan"), float("inf")])
def test_datagen_rejects_bad_scale_factors(tmp_path, sf):
    with pytest.raises(DataError, match="scale factor"):
        datagen(sf, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_datagen_without_the_generator_says_how_to_install(tmp_path):
    with pytest.raises(DataError, match="pip install tpchgen-cli"):
        datagen(0.01, tmp_path / "out", progress=False, tool="no-such-tpchgen-cli-xyz")
    assert list(tmp_path.iterdir()) == []


def test_datagen_reports_a_failing_generator_and_leaves_nothing(tmp_path):
    fake = tmp_path / "bin" / "fake-tpchgen"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "fake-tpchgen 0.1"; exit 0; fi\n'
        'while [ "$1" != "--output-dir" ]; do shift; done\n'
        'echo half > "$2/lineitem.parquet"\n'
        'echo "starting" >&2; echo "error: disk on fire" >&2; exit 3\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "data" / "sf"
    with pytest.raises(DataError, match=r"failed \(exit 3\): error: disk on fire"):
        datagen(0.01, out, progress=False, tool=str(fake))
    assert not out.exists()
    assert list((tmp_path / "data").iterdir()) == []  # the temporary folder is gone too


# --------------------------------------------------------------------------- find_tables


def test_find_tables_errors(tmp_path, tpch_copy):
    with pytest.raises(DataError, match="does not exist"):
        find_tables(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="is not a folder"):
        find_tables(tmp_path / "file")
    (tpch_copy / "nation.parquet").unlink()
    with pytest.raises(DataError, match="'nation' not found") as e:
        find_tables(tpch_copy)
    assert str(tpch_copy) in str(e.value)


def test_find_tables_sorts_parts_numerically(tpch_copy):
    folder = tpch_copy / "region"
    folder.mkdir()
    src = tpch_copy / "region.parquet"
    for i in (10, 2, 1):
        shutil.copy(src, folder / f"region.{i}.parquet")
    src.unlink()
    assert [p.name for p in find_tables(tpch_copy)["region"]] == [
        "region.1.parquet",
        "region.2.parquet",
        "region.10.parquet",
    ]
    assert TableStore.open(tpch_copy).table("region").num_rows == 15


# --------------------------------------------------------------------------- columns


def test_column_kinds_and_values(tpch):
    li = TableStore.open(tpch).table("lineitem")
    raw = pq.read_table(tpch / "lineitem.parquet", columns=["l_shipdate", "l_extendedprice", "l_returnflag"])
    assert li.num_rows == 60175 and "l_comment" in li.column_names

    ship = li.column("l_shipdate")
    assert ship.kind == "date" and ship.values.dtype == np.int32 and ship.dictionary is None
    assert np.array_equal(ship.values, raw.column("l_shipdate").cast(pa.int32()).to_numpy())
    assert ship.values.min() >= days("1992-01-01") and ship.values.max() <= days("1998-12-31")

    price = li.column("l_extendedprice")
    assert price.kind == "float" and price.values.dtype == np.float64
    want = np.array([float(d) for d in raw.column("l_extendedprice").to_pylist()])
    assert np.array_equal(price.values, want)

    flag = li.column("l_returnflag")
    assert flag.kind == "string" and flag.values.dtype == np.int32
    assert flag.dictionary.type == pa.string()
    assert flag.dictionary.to_pylist() == ["A", "N", "R"]
    original = raw.column("l_returnflag").cast(pa.string()).to_pylist()
    assert flag.dictionary.take(pa.array(flag.values)).to_pylist() == original
    assert flag.decode().to_pylist() == original and flag.code_of("R") == 2 and flag.code_of("X") == -1

    assert li.column("l_linenumber").kind == "int" and li.column("l_linenumber").values.dtype == np.int32
    assert li.column("l_orderkey").kind == "int" and li.column("l_orderkey").values.dtype == np.int64
    assert li.column("l_quantity").values.max() == 50.0

    for col in (ship, price, flag):
        assert not col.values.flags.writeable
        with pytest.raises(ValueError):
            col.values[0] = 0
    assert li.column("l_shipdate") is ship  # cached
    assert [c.name for c in li.columns(["l_tax", "l_shipdate"])] == ["l_tax", "l_shipdate"]


def test_string_dictionary_is_sorted_for_long_strings(tpch):
    col = TableStore.open(tpch).table("customer").column("c_comment")
    values = col.dictionary.to_pylist()
    assert values == sorted(values) and len(set(values)) == len(values)
    assert col.values.min() >= 0 and col.values.max() == len(values) - 1
    raw = pq.read_table(tpch / "customer.parquet", columns=["c_comment"]).column(0).cast(pa.string())
    assert col.decode().to_pylist() == raw.to_pylist()


def test_unknown_table_and_column(tpch):
    store = TableStore.open(tpch)
    with pytest.raises(DataError, match="unknown TPC-H table 'lineitems'"):
        store.table("lineitems")
    with pytest.raises(DataError, match="table 'orders' has no column 'l_orderkey'"):
        store.table("orders").column("l_orderkey")


def test_parts_layout_reads_identically(tpch, tpch_parts):
    files = find_tables(tpch_parts)["lineitem"]
    assert [p.name for p in files] == [f"lineitem.{i}.parquet" for i in (1, 2, 3)]
    one = TableStore.open(tpch).table("lineitem")
    parts = TableStore.open(tpch_parts).table("lineitem")
    assert parts.num_rows == one.num_rows and parts.column_names == one.column_names
    for name in ("l_orderkey", "l_linenumber", "l_extendedprice", "l_shipdate", "l_shipmode", "l_comment"):
        a, b = one.column(name), parts.column(name)
        assert a.kind == b.kind and a.values.dtype == b.values.dtype
        assert np.array_equal(a.values, b.values), name
        assert (a.dictionary is None) == (b.dictionary is None)
        if a.dictionary is not None:
            assert a.dictionary.equals(b.dictionary)
    assert TableStore.open(tpch_parts).sf() is None  # no manifest there


def test_malformed_parquet_names_the_file(tpch_copy):
    bad = tpch_copy / "lineitem.parquet"
    bad.write_text("this is not a parquet file\n")
    with pytest.raises(DataError, match="lineitem.parquet") as e:
        TableStore.open(tpch_copy)
    assert str(bad.resolve()) in str(e.value) or str(bad) in str(e.value)
    assert "\n" not in str(e.value)


def test_malformed_parquet_part_names_the_file(tpch_copy):
    folder = tpch_copy / "orders"
    folder.mkdir()
    shutil.move(tpch_copy / "orders.parquet", folder / "orders.1.parquet")
    (folder / "orders.2.parquet").write_bytes(b"PAR1garbagePAR1")
    with pytest.raises(DataError, match="orders.2.parquet"):
        TableStore.open(tpch_copy)


def test_table_store_open_is_cached(tpch, tpch_copy):
    a = TableStore.open(tpch)
    assert TableStore.open(tpch) is a
    assert TableStore.open(str(tpch / ".." / tpch.name)) is a
    assert a.data_dir == tpch.resolve()
    c = TableStore.open(tpch_copy)
    assert c is not a
    nation = tpch_copy / "nation.parquet"
    st_ = nation.stat()
    os.utime(nation, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    assert TableStore.open(tpch_copy) is not c  # a changed file is a new data set


def test_table_store_concurrent_loads_share_one_column(tpch_copy):
    table = TableStore.open(tpch_copy).table("orders")
    got: list[Column] = []
    barrier = threading.Barrier(8)

    def load():
        barrier.wait()
        got.append(table.column("o_orderdate"))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(c is got[0] for c in got)


# --------------------------------------------------------------------------- TPC-H SQL


def test_query_set():
    assert {"q1", "q3", "q4", "q5", "q6", "q10", "q12", "q14", "q18", "q19"} <= set(QUERIES)
    assert output_columns("q1") == [
        "l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price",
        "sum_charge", "avg_qty", "avg_price", "avg_disc", "count_order",
    ]
    assert "date '1998-12-01' - interval '90' day" in QUERIES["q1"]
    assert "limit 10" in QUERIES["q3"] and "limit 20" in QUERIES["q10"] and "limit 100" in QUERIES["q18"]
    with pytest.raises(DataError, match="unknown TPC-H query"):
        output_columns("q99")


@pytest.mark.parametrize("query", sorted(QUERIES, key=lambda q: int(q[1:])))
def test_duckdb_answer_every_query(tpch, query):
    import duckdb

    ans = duckdb_answer(query, tpch)
    assert ans.column_names == output_columns(query)
    # DuckDB's own names agree with output_columns (no silent renaming needed).
    con = duckdb.connect()
    for t in TABLES:
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{tpch / (t + '.parquet')}')")
    assert con.sql(QUERIES[query]).columns == output_columns(query)
    for field in ans.schema:
        assert not pa.types.is_decimal(field.type) and field.type not in (pa.string_view(), pa.large_string())
    limit = re.search(r"\blimit\s+(\d+)\s*$", QUERIES[query].strip())
    assert ans.num_rows >= 1
    if limit:
        assert ans.num_rows <= int(limit.group(1))


def test_q1_against_numpy(tpch):
    ans = duckdb_answer("q1", tpch)
    assert ans.num_rows == 4
    assert list(zip(ans.column("l_returnflag").to_pylist(), ans.column("l_linestatus").to_pylist())) == [
        ("A", "F"), ("N", "F"), ("N", "O"), ("R", "F"),
    ]
    assert ans.schema.field("count_order").type == pa.int64()
    assert ans.schema.field("sum_qty").type == pa.float64()
    li = TableStore.open(tpch).table("lineitem")
    keep = li.column("l_shipdate").values <= days("1998-09-02")
    assert sum(ans.column("count_order").to_pylist()) == int(keep.sum())
    qty = li.column("l_quantity").values
    assert sum(ans.column("sum_qty").to_pylist()) == pytest.approx(qty[keep].sum(), rel=1e-12)


def test_q6_against_numpy(tpch):
    li = TableStore.open(tpch).table("lineitem")
    names = ["l_shipdate", "l_discount", "l_quantity", "l_extendedprice"]
    ship, disc, qty, price = (c.values for c in li.columns(names))
    keep = (ship >= days("1994-01-01")) & (ship < days("1995-01-01")) & (disc >= 0.05) & (disc <= 0.07) & (qty < 24)
    want = float((price[keep] * disc[keep]).sum())
    got = duckdb_answer("q6", tpch).column("revenue")[0].as_py()
    assert got == pytest.approx(want, rel=1e-9)


def test_duckdb_answer_parts_layout_and_threads(tpch, tpch_parts):
    want = duckdb_answer("q1", tpch)
    compare_tables(duckdb_answer("q1", tpch_parts), want)
    compare_tables(duckdb_answer("q3", tpch, threads=4), duckdb_answer("q3", tpch_parts, threads=1))
    q3 = duckdb_answer("q3", tpch)
    assert q3.schema.field("o_orderdate").type == pa.date32()
    assert q3.schema.field("o_shippriority").type == pa.int32()


# --------------------------------------------------------------------------- compare_tables


def test_compare_tables_accepts_and_rejects(tpch):
    want = duckdb_answer("q3", tpch)
    compare_tables(want, want)
    compare_tables(want.take(pa.array(range(want.num_rows - 1, -1, -1))), want, ordered=False)
    with pytest.raises(AssertionError, match="column 'l_orderkey' row 0"):
        compare_tables(want.take(pa.array(range(want.num_rows - 1, -1, -1))), want)

    revenue = want.column("revenue").to_numpy().copy()
    revenue[3] *= 1 + 1e-3
    off = want.set_column(1, "revenue", pa.array(revenue))
    with pytest.raises(AssertionError, match=r"column 'revenue' row 3: .*relative difference 0.001"):
        compare_tables(off, want)
    compare_tables(off, want, rel_tol=2e-3)

    with pytest.raises(AssertionError, match="row count differs: got 9, want 10"):
        compare_tables(want.slice(0, want.num_rows - 1), want)
    with pytest.raises(AssertionError, match="column names differ"):
        compare_tables(want.rename_columns(["l_orderkey", "rev", "o_orderdate", "o_shippriority"]), want)
    with pytest.raises(AssertionError, match="column names differ"):
        compare_tables(want.select([1, 0, 2, 3]), want)


def test_compare_tables_mixed_types():
    ints = pa.table({"k": pa.array([1, 2, 3], pa.int32()), "v": [10, 20, 30], "d": pa.array([0, 1, 2], pa.int32())})
    floats = pa.table(
        {
            "k": pa.array([1, 2, 3], pa.int64()),
            "v": [10.0, 20.0, 30.0],
            "d": pa.array([EPOCH + datetime.timedelta(days=i) for i in range(3)], pa.date32()),
        }
    )
    compare_tables(ints, floats)
    compare_tables(floats, ints, ordered=False)
    zeros = pa.table({"x": [0.0, 1e-12]})
    compare_tables(zeros, pa.table({"x": [1e-12, 0.0]}))
    with pytest.raises(AssertionError, match="types differ"):
        compare_tables(pa.table({"x": ["1"]}), pa.table({"x": [1]}))
    with pytest.raises(AssertionError, match="column 's' row 1: got 'b', want 'c'"):
        compare_tables(pa.table({"s": ["a", "b"]}), pa.table({"s": pa.array(["a", "c"], pa.string_view())}))
    with pytest.raises(AssertionError, match="column 'n' row 0: got None, want 1"):
        compare_tables(pa.table({"n": pa.array([None], pa.int64())}), pa.table({"n": [1]}))
    compare_tables(pa.table({"n": pa.array([None, 2.5])}), pa.table({"n": pa.array([None, 2.5])}))


rows = st.lists(
    st.tuples(
        st.integers(-1000, 1000),
        st.floats(-1e9, 1e9, allow_nan=False),
        st.sampled_from(["AIR", "MAIL", "SHIP", "TRUCK"]),
    ),
    min_size=1,
    max_size=30,
)


def _table(rs: list[tuple]) -> pa.Table:
    k, v, s = zip(*rs)
    return pa.table({"k": pa.array(k, pa.int64()), "v": pa.array(v, pa.float64()), "s": pa.array(s, pa.string())})


@settings(max_examples=60, deadline=None)
@given(rows, st.randoms(use_true_random=False), st.data())
def test_compare_tables_property(rs, rnd, data):
    t = _table(rs)
    compare_tables(t, t)
    shuffled = list(rs)
    rnd.shuffle(shuffled)
    compare_tables(_table(shuffled), t, ordered=False)
    # A value moved by 1e-3 relative (or by 1 where it is ~0) is always caught.
    i = data.draw(st.integers(0, len(rs) - 1))
    k, v, s = rs[i]
    bumped = list(rs)
    bumped[i] = (k, v * (1 + 1e-3) if abs(v) > 1e-6 else v + 1.0, s)
    with pytest.raises(AssertionError, match=f"column 'v' row {i}"):
        compare_tables(_table(bumped), t)
    with pytest.raises(AssertionError, match="row count differs"):
        compare_tables(_table(rs[:-1]) if len(rs) > 1 else _table(rs + rs), t)
