"""Stage 1, data (``spark_datagen``): TPC-H generated as Parquet, partitioned by order
key for the executors (the layout is in ``layout``).

Two Spark jobs. First, one task per data partition runs ``tpchgen-cli --parts P --part i``
for ``orders`` and ``lineitem``, and one more task writes the six small tables whole.
Then one task per partition places orders and lineitem by order key, so that partition
``i`` of both tables holds the same orders. tpchgen-cli does not guarantee that by
itself: its generators make an order's line items with the order, but the CLI cuts each
table's part ``i`` into ``c`` generator chunks of its own, ``c`` estimated from the
table's bytes per row and the row-group size (4.0: lineitem 14, orders 4 at SF 1 with 4
parts), and a chunk starts at order ``floor(T / (P*c)) * k`` (T orders). Where P*c does
not divide T the two tables' parts start at different orders (SF 1, P 4: lineitem part 2
after 374,990 orders, orders part 2 after 375,000: c = 14 and 4, T/(P*c) rounded down;
read in tpchgen-cli's ``GenerationPlan`` and tpchgen's ``calculate_start_index``, and
measured), so the run failed there.
Placing: the split keys are lineitem's parts' first order keys (``_plan_placement``), so
lineitem, 4x the rows, stays as generated (renamed), and only the orders rows near the
cuts move (the overlapping row groups are rewritten, with ``split``); every task then
checks that each of its line items has its order in the same partition.

This module holds both jobs' executor tasks, the driver's plan between them, the
generator's invocation and the folder's publication: everything that writes a
partitioned folder, and nothing that reads one for a run.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import shutil
import socket
import time
from dataclasses import astuple
from pathlib import Path

from bobox_sched.tools import find_tool
from experiments.spark.layout import (KEY, MANIFEST, MANIFEST_FORMAT, PARTITIONED, REPLICATED, VIEWS,
                                      read_spark_manifest)
from experiments.spark.messages import TAG, first_line, job_error, say
from experiments.spark.session import DEFAULT_MASTER, default_partitions, max_failures, spark_session
from experiments.spark.split import Group, key_groups, pick, piece_bounds, span, write_rows

PIECES = "_work/pieces"  # stage 1: the generator's parts, before they are placed


def _check_existing(out: Path, sf: float, partitions: int | None) -> bool:
    """True where `out` holds this data set already (cached); DataError where it holds
    something else; False where it is absent or empty."""
    from operators.data import DataError

    if not out.exists():
        return False
    if not out.is_dir():
        raise DataError(f"Spark datagen output {out} exists and is not a folder")
    if not (out / MANIFEST).is_file():
        if any(out.iterdir()):
            raise DataError(f"Spark datagen output {out} already holds other files and no {MANIFEST}; "
                            "choose another folder (nothing was changed)")
        return False
    m = read_spark_manifest(out)
    if not math.isclose(float(m["sf"]), sf, rel_tol=1e-12):
        raise DataError(f"Spark datagen output {out} holds TPC-H SF {float(m['sf']):g}, not SF {sf:g}; "
                        "choose another folder (nothing was changed)")
    if partitions is not None and int(m["partitions"]) != partitions:
        raise DataError(f"Spark datagen output {out} holds {m['partitions']} partitions, not {partitions}; "
                        "choose another folder (nothing was changed)")
    missing = [f for info in m["tables"].values() for f in info["files"] if not (out / f).is_file()]
    missing += [v for v in m.get("views", []) if not (out / v).is_dir()]
    if missing:
        raise DataError(f"Spark datagen output {out} is incomplete ({missing[0]} is missing); "
                        "remove the folder to regenerate it")
    return True


def _find_tool(tool: str, hint: str | None) -> str:
    """The generator's path on this host: `hint` (the driver's) if it exists here, else
    next to this interpreter, else PATH (``bobox_sched.tools.find_tool``)."""
    for cand in (hint, find_tool(tool)):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError(f"TPC-H generator {tool!r} not found on host {socket.gethostname()}; "
                       "install it with: pip install tpchgen-cli")


def _run_tool(cmd: list[str], what: str) -> None:
    # Own process group, killed with this Python worker (experiments.cli.procs): a cancelled
    # task (Ctrl-C of the driver) must not leave the generator writing on.
    from experiments.cli import procs

    proc = procs.run(cmd)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        raise RuntimeError(f"{what}: {Path(cmd[0]).name} exited {proc.returncode}: "
                           f"{lines[-1] if lines else '(no output)'}")


def _tagged(work, cfg: dict, indexes):
    """Executor side of stage 1: `work`'s records, its errors tagged for the driver
    (see ``job_error``)."""
    try:
        yield from work(cfg, indexes)
    except Exception as e:
        text = first_line(e) if type(e) is RuntimeError else f"{type(e).__name__}: {first_line(e)}"
        raise RuntimeError(f"{TAG} {text}") from e


def _datagen_task(cfg: dict, indexes):
    yield from _tagged(_datagen_pieces, cfg, indexes)


def _place_task(cfg: dict, indexes):
    yield from _tagged(_place_pieces, cfg, indexes)


def _datagen_pieces(cfg: dict, indexes):
    """Stage 1, step 1 (executor side). Index i < P: tpchgen-cli's part i of orders and
    lineitem, moved to ``_work/pieces/<table>/piece-<i>.parquet``; index P: the six small
    tables, moved into place. Files are generated into a folder private to this attempt
    and then renamed, so a retried attempt never meets a half-written file."""
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tmp, parts = Path(cfg["tmp"]), cfg["partitions"]
    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx else 0
    threads = max(1, ctx.cpus() if ctx else 1)
    from experiments.cli import procs

    exe = _find_tool(cfg["tool"], cfg["tool_hint"])
    version = procs.run([exe, "--version"], timeout=60).stdout.split()
    for i in indexes:
        if not tmp.is_dir():  # the driver gave up and removed it: never create it again
            raise RuntimeError(f"staging folder {tmp} is gone (the run was cancelled)")
        work = tmp / "_work" / f"{i}-attempt-{attempt}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        base = [exe, "parquet", "-s", cfg["sf_text"], "--output-dir", str(work), "--num-threads", str(threads),
                "--quiet"]
        rows = {}
        if i < parts:
            what = f"datagen part {i} of {parts}"
            _run_tool(base + ["--tables", ",".join(PARTITIONED), "--parts", str(parts), "--part", str(i + 1)], what)
            files = {t: work / t / f"{t}.{i + 1}.parquet" for t in PARTITIONED}
            for t, f in files.items():
                if not f.is_file():
                    raise RuntimeError(f"{what}: the generator wrote no {f.relative_to(work)}")
            for t, f in files.items():
                rows[t] = pq.ParquetFile(f).metadata.num_rows
                (tmp / PIECES / t).mkdir(parents=True, exist_ok=True)
                os.replace(f, tmp / PIECES / t / f"piece-{i}.parquet")
        else:
            what = "datagen of the small tables"
            _run_tool(base + ["--tables", ",".join(REPLICATED)], what)
            for t in REPLICATED:
                f = work / f"{t}.parquet"
                if not f.is_file():
                    raise RuntimeError(f"{what}: the generator wrote no {t}.parquet")
                rows[t] = pq.ParquetFile(f).metadata.num_rows
                os.replace(f, tmp / f"{t}.parquet")
        shutil.rmtree(work, ignore_errors=True)
        yield json.dumps({"index": i, "rows": rows, "attempt": attempt, "host": socket.gethostname(),
                          "generator": version})


def _place_pieces(cfg: dict, indexes):
    """Stage 1, step 2 (executor side): partition j of orders and lineitem from the
    pieces, as the driver planned it (``_plan_placement``): one piece wholly inside j's
    key range is renamed into place, anything else is written from the overlapping row
    groups of the pieces. Then the check that every line item of partition j has its
    order in partition j. An attempt may find its renames done by an earlier one.

    Tasks of different partitions never touch one file: a piece renamed into partition j
    lies wholly inside j's key range, so no other partition reads it; the pieces that
    straddle a cut are only read, and removed with ``_work`` by the driver at the end."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tmp, parts = Path(cfg["tmp"]), cfg["partitions"]
    for j in indexes:
        lo, hi = span(cfg["bounds"], j)
        rewritten = []
        for t in PARTITIONED:
            spec = cfg["place"][t][j]
            pieces = [tmp / PIECES / t / f"piece-{k}.parquet" for k in range(parts)]
            dest = tmp / t / f"part-{j}.parquet"
            dest.parent.mkdir(exist_ok=True)
            if spec["move"] is not None:
                src = pieces[spec["move"]]
                if src.is_file():
                    os.replace(src, dest)
                elif not dest.is_file():
                    raise RuntimeError(f"placing {t} partition {j}: {src.name} is gone")
            else:
                schema = pa.ipc.read_schema(pa.py_buffer(cfg["schemas"][t]))
                groups = [Group(*g) for g in spec["groups"]]
                write_rows(pieces, groups, KEY[t], lo, hi, dest, schema, cfg["group_rows"][t])
                rewritten.append(t)
        okeys = pq.read_table(tmp / "orders" / f"part-{j}.parquet", columns=[KEY["orders"]]).column(0)
        lkeys = pq.read_table(tmp / "lineitem" / f"part-{j}.parquet", columns=[KEY["lineitem"]]).column(0)
        if not pc.all(pc.is_in(lkeys, value_set=okeys)).as_py():
            raise RuntimeError(f"partition {j}: lineitem holds order keys that orders partition {j} lacks")
        yield json.dumps({"index": j, "rows": {"orders": len(okeys), "lineitem": len(lkeys)},
                          "rewritten": rewritten})


def _plan_placement(tmp: Path, parts: int) -> dict:
    """Driver side of stage 1, between the two steps: the split keys and, per table and
    partition, which piece to rename or which row groups to write (see ``_place_pieces``).

    The split keys are lineitem's pieces' first keys where those pieces are disjoint and
    ascending (tpchgen's are): lineitem, four times the rows of orders, then stays as
    generated, and only orders rows near the cuts move."""
    import pyarrow.parquet as pq

    groups = {t: key_groups([tmp / PIECES / t / f"piece-{k}.parquet" for k in range(parts)], KEY[t], t)
              for t in PARTITIONED}
    bounds = piece_bounds(groups["lineitem"], parts)
    place: dict[str, list] = {}
    for t in PARTITIONED:
        place[t] = []
        for j in range(parts):
            whole, cut = pick(groups[t], *span(bounds, j))
            if len(whole) == 1 and not cut:
                place[t].append({"move": whole[0]})
            else:
                take = sorted([g for g in groups[t] if g.file in whole] + cut, key=lambda g: (g.file, g.index))
                place[t].append({"move": None, "groups": [astuple(g) for g in take]})
    return {
        "bounds": bounds,
        "place": place,
        "schemas": {t: pq.read_schema(tmp / PIECES / t / "piece-0.parquet").serialize().to_pybytes()
                    for t in PARTITIONED},
        "group_rows": {t: max((g.rows for g in groups[t]), default=1) for t in PARTITIONED},
    }


def spark_datagen(sf: float, out, master: str = DEFAULT_MASTER, partitions: int | None = None, spark=None,
                  progress: bool = True, tool: str = "tpchgen-cli") -> Path:
    """Generate TPC-H at scale factor `sf` into `out`, partitioned for the executors.

    `partitions` P defaults to ``default_partitions`` (one per executor and NUMA node).
    Two Spark jobs: P + 1 tasks generate (tpchgen-cli's part i of orders and lineitem,
    and the small tables), then P tasks place partition i of orders and lineitem by
    order key (see the module docstring: tpchgen-cli's parts of the two tables need not
    cover the same orders). Cached (same sf, and same P where given: nothing to do),
    atomic (generated into a temporary sibling folder that is renamed into place), and a
    folder holding other data is refused with a one-line DataError. `out` must be
    visible at the same path to the driver and every executor (a local path in local
    mode, a shared file system on a cluster). Returns `out` as an absolute Path.
    """
    from operators.data import DataError
    from experiments.datagen import check_sf, fmt_sf, publish, staging_dir

    sf = check_sf(sf)
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise DataError(f"partitions must be a positive integer, got {partitions!r}")
    out = Path(out).expanduser().absolute()
    if _check_existing(out, sf, partitions):
        say(progress, f"{out} already holds TPC-H SF {sf:g} in {read_spark_manifest(out)['partitions']} "
                       "partitions (cached)")
        return out
    spark = spark or spark_session(master)
    sc = spark.sparkContext
    parts = partitions or default_partitions(spark)

    tmp = staging_dir(out)
    sf_text = fmt_sf(sf)
    cfg = {"tmp": str(tmp), "partitions": parts, "sf": sf, "sf_text": sf_text, "tool": tool,
           "tool_hint": find_tool(tool)}
    t0 = time.monotonic()
    say(progress, f"generating TPC-H SF {sf:g} in {parts} partitions into {out} "
                   f"({parts + 1} Spark tasks, master {sc.master}) ...")
    try:
        tmp.mkdir()
        n = parts + 1
        # parallelize(range(n), n) puts exactly element i in Spark partition i.
        rdd = sc.parallelize(range(n), n).mapPartitions(functools.partial(_datagen_task, cfg))
        sc.setJobDescription(f"bobox datagen SF {sf:g} x{parts}")
        try:
            infos = [json.loads(s) for s in rdd.collect()]
        except Exception as e:
            raise DataError(str(job_error(e, "Spark datagen", max_failures(spark)))) from None
        got = sorted(info["index"] for info in infos)
        if got != list(range(n)):
            raise DataError(f"Spark datagen returned pieces {got}, expected 0..{n - 1}")
        infos.sort(key=lambda info: info["index"])
        gen = infos[-1]["generator"]

        t1 = time.monotonic()
        plan = _plan_placement(tmp, parts)
        moved = {t: [j for j, s in enumerate(plan["place"][t]) if s["move"] is None] for t in PARTITIONED}
        say(progress, f"generated in {t1 - t0:.1f} s; placing orders and lineitem by order key ({parts} Spark "
                       f"tasks; rows to rewrite: " + ", ".join(
                           f"{t} in {len(moved[t])} of {parts} partitions" for t in PARTITIONED) + ") ...")
        cfg.update(plan)
        rdd = sc.parallelize(range(parts), parts).mapPartitions(functools.partial(_place_task, cfg))
        sc.setJobDescription(f"bobox datagen SF {sf:g} x{parts}: placing by order key")
        try:
            placed = sorted((json.loads(s) for s in rdd.collect()), key=lambda info: info["index"])
        except Exception as e:
            raise DataError(str(job_error(e, "Spark datagen", max_failures(spark)))) from None
        if [info["index"] for info in placed] != list(range(parts)):
            raise DataError(f"Spark datagen placed partitions {[info['index'] for info in placed]}, "
                            f"expected 0..{parts - 1}")
        for t in PARTITIONED:
            generated = sum(info["rows"][t] for info in infos[:parts])
            kept = sum(info["rows"][t] for info in placed)
            if kept != generated:
                raise DataError(f"Spark datagen: {t} has {kept} rows after placing by order key, "
                                f"the generator wrote {generated}")
        tables = {}
        for t in PARTITIONED:
            part_rows = [info["rows"][t] for info in placed]
            tables[t] = {"rows": sum(part_rows), "part_rows": part_rows,
                         "files": [f"{t}/part-{i}.parquet" for i in range(parts)]}
        for t in REPLICATED:
            tables[t] = {"rows": infos[-1]["rows"][t], "files": [f"{t}.parquet"]}
        views = _write_views(tmp, parts)
        manifest = {
            "format": MANIFEST_FORMAT,
            "sf": sf,
            "partitions": parts,
            "co_partitioned_on": dict(KEY),
            "split_keys": plan["bounds"],
            "rewritten": {t: [info["index"] for info in placed if t in info["rewritten"]] for t in PARTITIONED},
            "replicated": list(REPLICATED),
            "generator": {"name": gen[0] if len(gen) > 1 else tool, "version": gen[-1] if gen else "?", "tool": tool},
            "command": [tool, "parquet", "-s", sf_text, "--parts", str(parts), "--part", "I"],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "hosts": sorted({info["host"] for info in infos}),
            "tables": tables,
            "views": views,
        }
        shutil.rmtree(tmp / "_work", ignore_errors=True)
        if not publish(tmp, out, MANIFEST, manifest, lambda: _check_existing(out, sf, partitions)):
            say(progress, f"{out} was generated concurrently (kept that copy)")
            return out
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    summary = ", ".join(f"{t} {tables[t]['rows']}" for t in PARTITIONED + REPLICATED)
    say(progress, f"done in {time.monotonic() - t0:.1f} s ({summary} rows)")
    return out


def _write_views(root: Path, parts: int) -> list[str]:
    """``_partitions/part-<i>/<table>.parquet``: relative links to partition i's parts and
    to the replicated tables. A view is a data folder ``operators.data`` reads as is."""
    views = []
    for i in range(parts):
        rel = f"{VIEWS}/part-{i}"
        v = root / rel
        v.mkdir(parents=True)
        for t in PARTITIONED:
            os.symlink(f"../../{t}/part-{i}.parquet", v / f"{t}.parquet")
        for t in REPLICATED:
            os.symlink(f"../../{t}.parquet", v / f"{t}.parquet")
        views.append(rel)
    return views
