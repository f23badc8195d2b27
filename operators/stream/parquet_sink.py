"""A sink that writes its input to a Parquet file incrementally and publishes it
atomically at end of stream."""

from __future__ import annotations

import os
import uuid
import weakref
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bobox_sched import StreamOperator

from operators.ops import to_arrow
from operators.stream.schemas import as_schema

# Rows per row group by default: 64 Ki rows (~1-2 MiB for a handful of numeric columns)
# keeps the buffered packets small and a row group big enough that Parquet's per-group
# metadata and per-column-chunk overhead stay well under 1% (a streaming trade-off:
# offline Parquet writers use 1 Mi rows or more).
DEFAULT_GROUP_ROWS = 1 << 16


def _discard(path: str) -> None:
    """Remove an unpublished temporary file (nothing if it was published: renamed away).
    Runs from the request's done callback, or a weakref finalizer at exit: it takes no
    lock and calls nothing that does."""
    try:
        os.unlink(path)
    except OSError:
        pass


class ParquetSink(StreamOperator):
    """Writes every row it receives to the Parquet file `path`, one row group per batch
    of packets holding at least ``group_rows`` rows (the last one smaller), while the
    stream runs.

    Atomicity: rows go to a temporary file next to `path` (``.<name>.<unique>.tmp``); at
    end of stream the file is closed, flushed to disk (fsync) and renamed onto `path`
    (``os.replace``: a reader sees the old file or the complete new one). If the request
    fails or is cancelled the temporary file is removed -- at once when the sink's own
    write fails, otherwise by a callback on the request's end (on the thread that ends
    it, right after its result is set; a finalizer covers a process exiting first) -- so
    partial output never looks complete. (A cancel racing with the end of stream may
    find the file already published: then it is complete.) Strings and dates are decoded (``output``:
    ``[(file column, schema column)]``, default every column). The request's result is
    ``{"path", "rows", "row_groups"}``. Latency markers are measured here by the runtime
    (a sink has no outputs).
    """

    outputs = ()

    def __init__(self, schema, path, group_rows: int = DEFAULT_GROUP_ROWS, output=None,
                 compression: str | None = "snappy"):
        self.schema = as_schema(schema)
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ValueError(f"ParquetSink: folder {self.path.parent} does not exist")
        if self.path.is_dir():
            raise ValueError(f"ParquetSink: {self.path} is a folder")
        if not isinstance(group_rows, int) or group_rows < 1:
            raise ValueError(f"group_rows must be a positive integer, got {group_rows!r}")
        self.group_rows = group_rows
        self.output = output or [(n, n) for n in self.schema.names]
        for _, n in self.output:
            self.schema[n]
        self.compression = compression
        # Dictionary pages only for string columns: on numbers Parquet's dictionary
        # attempt cost 353 vs 65 ns/row for (ts, key, value) rows in 64 Ki-row groups with
        # snappy, and the file came out 19% larger (measured with events(), pyarrow 26).
        self._dictionary = [o for o, n in self.output if self.schema[n].kind == "string"]
        self.rows = 0
        self.row_groups = 0
        self._parts: list = []  # packets of the row group being collected
        self._buffered = 0
        self._tmp: str | None = None
        self._writer = None
        self._finalizer = None

    def _open(self, ctx, table) -> None:
        tmp = self._tmp = str(self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp"))
        # When the request ends, however it ends, the temporary file goes: after a
        # publication it no longer exists, otherwise it is partial. The callback runs on
        # the thread that ends the request, just after the request's result is set.
        ctx.request.future.add_done_callback(lambda _f: _discard(tmp))
        # And if the process exits first.
        self._finalizer = weakref.finalize(self, _discard, tmp)
        self._writer = pq.ParquetWriter(tmp, table.schema, compression=self.compression,
                                        use_dictionary=self._dictionary or False)

    def _flush(self, ctx) -> None:
        parts = self._parts
        if not parts:
            return
        cols = {}
        for f in self.schema.fields:
            arrs = [p.columns[f.name] for p in parts]
            cols[f.name] = arrs[0] if len(arrs) == 1 else np.concatenate(arrs)
        table = to_arrow(self.schema, cols, self.output)
        if self._writer is None:
            self._open(ctx, table)
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.rows += table.num_rows
        self.row_groups += 1
        self._parts = []
        self._buffered = 0

    def _abort(self) -> None:
        """The sink's own step failed: close and remove the temporary file now."""
        w, self._writer = self._writer, None
        try:
            if w is not None:
                w.close()
        except Exception:  # noqa: BLE001 - the original error is what matters
            pass
        if self._finalizer is not None:
            self._finalizer()  # unlinks, once

    def on_packet(self, ctx, port, pkt):
        if pkt.nrows == 0:
            return
        self._parts.append(pkt)
        self._buffered += pkt.nrows
        if self._buffered >= self.group_rows:
            try:
                self._flush(ctx)
            except BaseException:
                self._abort()
                raise

    def on_end(self, ctx):
        try:
            self._flush(ctx)
            if self._writer is None:  # no rows: a valid file with the schema and no row group
                empty = {f.name: np.empty(0, f.dtype) for f in self.schema.fields}
                self._open(ctx, to_arrow(self.schema, empty, self.output))
            self._writer.close()
            self._writer = None
            fd = os.open(self._tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp, self.path)
            self._finalizer.detach()
            _fsync_dir(self.path.parent)
        except BaseException:
            self._abort()
            raise
        ctx.set_result({"path": str(self.path), "rows": self.rows, "row_groups": self.row_groups})


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (POSIX: the directory entry lives in the folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["DEFAULT_GROUP_ROWS", "ParquetSink"]
