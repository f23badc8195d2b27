"""Stage 2 input: any TPC-H folder as partition views, cut on the fly where needed.

A folder from ``spark_datagen`` is read through its stored partition views. Any other
TPC-H folder (``bobox datagen``'s one file per table, folders of parts, or a Spark
folder asked for another partition count) is split on the fly: the driver chooses P-1
split keys that balance lineitem's rows (``plan_split``, from the footers alone), and
the executor task that needs partition p writes p's view into a cache folder on its own
host (``_split_view``): lineitem and orders rows of p's key range (files wholly inside
the range linked, the overlapping row groups of the others written), the small tables
linked. Views are named by a hash of the source files (path, size, mtime) and the split
keys, so later runs (and the TableStore columns cached in reused Python workers) reuse
them; a view whose source files changed since is removed when a new view is made.

Protocol of the view cache, shared by the threads of a task (one per partition it
needs), by the tasks of one host and by runs: a view appears only by the rename of a
complete folder private to its maker (``.part-<p>.tmp-<pid>-<random>``), is never
changed afterwards, and is removed only once its source files changed (then no run can
ask for it again: the set id hashes the files' sizes and mtimes). Two makers of one
view race harmlessly: the first rename wins, the other deletes its copy. The threads
share no Python objects (each writes its own folder); pyarrow reads, filters and writes
without the GIL, which is all the parallelism there is, so a free-threaded build needs
nothing more.

What the views are made of is ``split``'s row-group surgery; this module holds where
they live, when they are made, reused or removed, and which folder a task reads for
partition p (``partition_dirs``). ``run`` asks it, without knowing how views are made.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from experiments.spark.layout import KEY, PARTITIONED, VIEWS
from experiments.spark.messages import TAG, first_line
from experiments.spark.split import balanced_bounds, key_groups, pick, span, write_rows

VIEW_CACHE_ENV = "BOBOX_SPARK_VIEWS"
_SPLIT_FORMAT = 1


def view_cache_dir() -> Path:
    """Where executors keep on-the-fly partition views: ``$BOBOX_SPARK_VIEWS``, default
    ``~/.cache/bobox-sched/spark-views`` (on each executor's host)."""
    d = os.environ.get(VIEW_CACHE_ENV)
    return Path(d).expanduser() if d else Path.home() / ".cache" / "bobox-sched" / "spark-views"


def _fingerprint(files: dict) -> list:
    from operators.data import DataError

    out = []
    for t, paths in files.items():
        for p in paths:
            try:
                st = os.stat(p)
            except OSError as e:
                raise DataError(f"cannot stat Parquet file {p}: {e.strerror or e}") from None
            out.append([t, str(p), st.st_size, st.st_mtime_ns])
    return out


def plan_split(data, parts: int, cache=None) -> dict:
    """Driver side: how to cut the TPC-H folder `data` into `parts` partitions by order
    key (see the module doc). `cache`: the executors' view folder (default
    ``view_cache_dir()`` on each executor)."""
    from operators.data import DataError, find_tables

    data = Path(data).expanduser().absolute()
    files = {t: [str(p.absolute()) for p in ps] for t, ps in find_tables(data).items()}
    groups = key_groups(files["lineitem"], KEY["lineitem"], "lineitem")
    rows = sum(g.rows for g in groups)
    if rows < parts:
        raise DataError(f"table 'lineitem' in {data} has {rows} rows, too few for {parts} partitions")
    bounds = balanced_bounds(groups, parts)
    fingerprint = _fingerprint(files)
    key = json.dumps([_SPLIT_FORMAT, fingerprint, bounds])
    return {"id": hashlib.sha256(key.encode()).hexdigest()[:20], "data": str(data), "bounds": bounds,
            "files": files, "fingerprint": fingerprint, "cache": str(cache) if cache else None}


def _split_view(split: dict, part: int) -> Path:
    """Executor side: partition `part`'s view folder (made here unless a view of the same
    source and split keys is there already)."""
    import pyarrow.parquet as pq

    root = Path(split["cache"]) if split["cache"] else view_cache_dir()
    home = root / split["id"]
    view = home / f"part-{part}"
    if view.is_dir():
        return view
    if _fingerprint(split["files"]) != split["fingerprint"]:
        raise RuntimeError(f"the files in {split['data']} changed while the run was starting")
    home.mkdir(parents=True, exist_ok=True)
    source = home / "source.json"
    if not source.is_file():
        _remove_stale_views(root, split["id"])
        tmp = home / f".source.json.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps({"data": split["data"], "fingerprint": split["fingerprint"],
                                   "split_keys": split["bounds"]}) + "\n")
        os.replace(tmp, source)
    tmp = home / f".part-{part}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        lo, hi = span(split["bounds"], part)
        for t in PARTITIONED:
            files = [Path(f) for f in split["files"][t]]
            groups = key_groups(files, KEY[t], t)
            whole, cut = pick(groups, lo, hi)
            folder = tmp / t
            folder.mkdir()
            for fi in whole:
                os.symlink(files[fi], folder / f"part-{fi}.parquet")
            if cut or not whole:  # (an empty range still needs a file with the table's columns)
                write_rows(files, cut, KEY[t], lo, hi, folder / "rows.parquet", pq.read_schema(files[0]),
                            max((g.rows for g in groups), default=1))
        for t, paths in split["files"].items():
            if t in PARTITIONED:
                continue
            single = Path(split["data"]) / f"{t}.parquet"
            if paths == [str(single)]:
                os.symlink(single, tmp / f"{t}.parquet")
            else:
                os.symlink(Path(split["data"]) / t, tmp / t)
        try:
            os.rename(tmp, view)
        except OSError:
            if not view.is_dir():  # else another task made the same view at the same time
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return view


def _remove_stale_views(root: Path, keep: str) -> None:
    """Remove the views under `root` whose source files changed or are gone."""
    for home in root.iterdir():
        if home.name == keep or home.name.startswith(".") or not home.is_dir():
            continue
        try:
            recorded = json.loads((home / "source.json").read_text())["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being made, or not ours
        for _, path, size, mtime in recorded:
            try:
                st = os.stat(path)
                if (st.st_size, st.st_mtime_ns) == (size, mtime):
                    continue
            except OSError:
                pass
            shutil.rmtree(home, ignore_errors=True)
            break


def partition_dirs(cfg: dict, parts: list[int], threads: int) -> dict[int, Path]:
    """Executor side: the view folder of each partition in `parts` (on-the-fly views are
    made on `threads` threads: pyarrow reads, filters and writes without the GIL)."""
    split = cfg.get("split")
    if split is None:
        return {p: Path(cfg["data"]) / VIEWS / f"part-{p}" for p in parts}

    def one(p):
        try:
            return _split_view(split, p)
        except Exception as e:
            text = f"{type(e).__name__}: {first_line(e)}" if type(e) is not RuntimeError else first_line(e)
            raise RuntimeError(f"{TAG} partition {p}: cannot split {split['data']} by order key: {text}") from e

    if len(parts) == 1 or threads <= 1:
        return {p: one(p) for p in parts}
    with ThreadPoolExecutor(min(len(parts), threads)) as pool:
        return dict(zip(parts, pool.map(one, parts)))
