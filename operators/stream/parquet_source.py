"""Replaying a Parquet file as a stream: row groups in order, at a given rate, optionally
looping forever."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bobox_sched.core.sources import GeneratorSource

from operators.stream.schemas import arrow_schema, from_arrow, sorted_dictionary


class ParquetReplay(GeneratorSource):
    """Emits the rows of the Parquet file `path` (``columns``: a subset), one row group
    after the other, cut into packets of the scheduler's size.

    ``rate`` (rows per second) paces it on the timer thread (no worker held while it
    waits); None replays as fast as the consumers take it. With ``loop`` it starts over
    at the end, forever (an unbounded source: its request ends by ``cancel()``); with
    ``time`` naming an integer timestamp column, each lap shifts that column by the
    file's time span (max - min + 1) so event time keeps increasing. ``marker_every`` = k
    sends a latency marker after every k-th packet.

    String columns are coded against one sorted dictionary per column, read from the
    whole file when the source is made (so codes mean the same in every row group and
    lap). The file is opened, and checked, when the plan is submitted: a missing or
    unreadable file raises ValueError there.
    """

    state = "unknown"

    def __init__(self, path, rate: float | None = None, loop: bool = False, columns=None,
                 time: str | None = None, marker_every: int = 0):
        super().__init__(self._next, rate, marker_every)
        self.path = Path(path)
        try:
            self.file = pq.ParquetFile(self.path)
        except (OSError, pa.ArrowException) as e:
            raise ValueError(f"ParquetReplay: cannot read {self.path}: {str(e).splitlines()[0]}") from None
        aschema = self.file.schema_arrow
        names = list(columns) if columns is not None else aschema.names
        missing = [c for c in names if c not in aschema.names]
        if missing:
            raise ValueError(f"ParquetReplay: {self.path} has no column {missing[0]!r}")
        aschema = pa.schema([aschema.field(c) for c in names])
        dicts = {}
        for f in aschema:
            t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                dicts[f.name] = sorted_dictionary(self.file.read(columns=[f.name]).column(0))
        self.columns = names
        self.schema = arrow_schema(aschema, dicts)
        self.loop = bool(loop)
        self.time = time
        self.shift = 0
        if time is not None:
            if self.schema[time].kind not in ("int", "date"):
                raise ValueError(f"ParquetReplay: time column {time!r} must hold integers")
            if loop and self.file.metadata.num_rows:
                t = self.file.read(columns=[time]).column(0)
                t = t.cast(pa.int64()) if not pa.types.is_integer(t.type) else t
                mm = pc.min_max(t).as_py()
                self.shift = int(mm["max"]) - int(mm["min"]) + 1
        self.groups = self.file.num_row_groups
        self.rows_in_file = self.file.metadata.num_rows
        self._group = 0
        self.lap = 0
        self._cur = None
        self._pos = 0
        self._n = 0

    def _load_next(self) -> bool:
        """Read the next row group (starting a new lap when looping); False at the end."""
        while True:
            if self._group >= self.groups:
                if not self.loop or self.rows_in_file == 0:
                    return False
                self._group = 0
                self.lap += 1
            table = self.file.read_row_group(self._group, columns=self.columns)
            self._group += 1
            if table.num_rows == 0:
                continue
            cols = from_arrow(table, self.schema)
            if self.time is not None and self.lap:
                t = cols[self.time]
                cols[self.time] = t + np.asarray(self.lap * self.shift, t.dtype)
            self._cur, self._pos, self._n = cols, 0, table.num_rows
            return True

    def _next(self, ctx, i):
        if self._cur is None or self._pos >= self._n:
            if not self._load_next():
                self._cur = None
                return None
        spec = self.schema.spec
        a = self._pos
        b = min(self._n, a + ctx.rows_for(spec))
        self._pos = b
        pkt = ctx.new_packet(spec, b - a)
        for name in spec.names:
            np.copyto(pkt.columns[name], self._cur[name][a:b], casting="unsafe")
        return pkt


__all__ = ["ParquetReplay"]
