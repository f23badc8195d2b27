"""The partitioned TPC-H folder: what ``datagen`` writes and stage 2 reads. Layout::

    DIR/lineitem/part-<i>.parquet   DIR/orders/part-<i>.parquet      (i = 0 .. P-1)
    DIR/customer.parquet ... DIR/region.parquet                       (replicated)
    DIR/_partitions/part-<i>/<table>.parquet -> relative links: partition i's view
    DIR/_bobox_spark_manifest.json  sf, partitions, split keys, rows per table and part,
                                    generator

``DIR`` is also an ordinary data folder (``bobox run --data DIR``, DuckDB): a table is
either ``<table>.parquet`` or a folder of parts.

The names of this layout, the tables' roles (partitioned by order key or replicated)
and the readers of what any TPC-H folder holds (``read_spark_manifest``,
``stored_partitions``, ``data_sf``) are kept apart from the writer (``datagen``) since
the run, the on-the-fly views, the bench and the command line read them without
generating anything.
"""

from __future__ import annotations

import json
from pathlib import Path

from bobox_sched.core.errors import BoboxError

MANIFEST = "_bobox_spark_manifest.json"
MANIFEST_FORMAT = 1
VIEWS = "_partitions"
PARTITIONED = ("lineitem", "orders")
REPLICATED = ("customer", "part", "partsupp", "supplier", "nation", "region")
# The key both partitioned tables are split on (see ``split``).
KEY = {"orders": "o_orderkey", "lineitem": "l_orderkey"}


def default_spark_data_dir(sf: float) -> Path:
    """``data/tpch-sf<SF>-spark``: next to ``bobox run``'s single-file data sets."""
    return Path("data") / f"tpch-sf{sf:g}-spark"


def read_spark_manifest(data_dir) -> dict:
    """The manifest of a folder written by ``spark_datagen``; DataError without one."""
    from operators.data import DataError

    data_dir = Path(data_dir)
    if not data_dir.exists():
        raise DataError(f"Spark data folder {data_dir} does not exist "
                        f"(generate it with: bobox spark datagen --sf 0.1 --out {data_dir})")
    path = data_dir / MANIFEST
    if not path.is_file():
        raise DataError(f"{data_dir} is not a partitioned TPC-H folder (no {MANIFEST}; "
                        f"generate one with: bobox spark datagen --sf 0.1 --out DIR)")
    try:
        manifest = json.loads(path.read_text())
        float(manifest["sf"])
        int(manifest["partitions"])
        manifest["tables"]["lineitem"]["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"unreadable manifest {path}: {e}") from None
    return manifest


def stored_partitions(data) -> int | None:
    """The partition count of a folder written by ``spark_datagen``; None for any other
    TPC-H folder. DataError where `data` is neither (missing, or a table missing)."""
    from operators.data import find_tables

    data = Path(data).expanduser()
    if (data / MANIFEST).is_file():
        return int(read_spark_manifest(data)["partitions"])
    find_tables(data)
    return None


def data_sf(data) -> float | None:
    """The scale factor a manifest (``spark_datagen``'s or ``bobox datagen``'s) records."""
    from operators.data import read_manifest

    data = Path(data).expanduser()
    if (data / MANIFEST).is_file():
        return float(read_spark_manifest(data)["sf"])
    try:
        m = read_manifest(data)
        return None if m is None else float(m["sf"])
    except (BoboxError, OSError, ValueError, KeyError, TypeError):
        return None
