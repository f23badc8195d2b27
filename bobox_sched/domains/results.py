"""A request's result on its way from its domain back to the front.

An Arrow table (``pyarrow.Table`` or ``RecordBatch``: every TPC-H answer, and any plan
that finishes into Arrow) travels as an Arrow IPC stream. From ``INLINE_BYTES`` on the
domain writes the stream into a shared-memory segment of its own (``shm.Segment``) and
sends only its name; the front maps the segment and reads the stream from the mapping,
so the table's columns *are* the mapped pages: no copy of column data, no pickling.
Smaller streams ride in the message itself. Anything else goes as cloudpickle bytes.

Payloads (the ``done`` message's fourth item): ``bytes`` (cloudpickle), ``("ipc",
bytes)`` (a small stream, inline) or ``("shm", name, nbytes, kind)``.

Lifetime of a result segment: made by the domain, which never touches it again once it
sent the name; the front unlinks it as soon as it mapped it (the mapping lives as long
as the table's buffers). Segments whose name was sent but never read (the front's
reader stopped: shutdown or a dead domain) are unlinked by the front once that domain
process has exited (``shm.unlink_of``, with the rest of that process's segments); a dead front's domains exit on their own, and their
leftovers go with the next Scheduler's ``shm.sweep_stale``.
"""

from __future__ import annotations

import pickle

from bobox_sched.domains.shm import Segment, unlink

# Below this a stream goes inline: a segment costs a file, an mmap, an unlink and a page
# of rounding (~30-60 us here), more than copying 64 KiB through the pipe (~10 us).
INLINE_BYTES = 64 << 10


def encode(value) -> bytes | tuple:
    """In a domain: the payload that carries `value` (module doc)."""
    import cloudpickle

    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return cloudpickle.dumps(value)
    if isinstance(value, pa.RecordBatch):
        kind, table = "batch", pa.Table.from_batches([value])
    elif isinstance(value, pa.Table):
        kind, table = "table", value
    else:
        return cloudpickle.dumps(value)
    sink = pa.MockOutputStream()
    _write(sink, table)
    n = sink.size()
    if n < INLINE_BYTES:
        out = pa.BufferOutputStream()
        _write(out, table)
        return ("ipc", out.getvalue().to_pybytes(), kind)
    seg = Segment.create(n, "result")
    try:
        _write(pa.FixedSizeBufferWriter(pa.py_buffer(seg.mm)), table)
    except BaseException:
        seg.close()
        seg.unlink()
        raise
    seg.close()
    return ("shm", seg.name, n, kind)


def _write(sink, table) -> None:
    import pyarrow as pa

    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def decode(payload):
    """In the front: the value a payload carries (the segment unlinked once mapped)."""
    if isinstance(payload, bytes):
        return pickle.loads(payload)
    import pyarrow as pa

    if payload[0] == "ipc":
        _, data, kind = payload
        buf = pa.py_buffer(data)
    else:
        _, name, n, kind = payload
        seg = Segment.attach(name, readonly=True)
        seg.unlink()  # ours now; the mapping stays as long as the table's buffers
        buf = pa.py_buffer(seg.mm)[:n]
    table = pa.ipc.open_stream(buf).read_all()
    if kind == "batch":
        return table.combine_chunks().to_batches()[0] if table.num_rows else \
            pa.RecordBatch.from_pylist([], schema=table.schema)
    return table


def discard(payload) -> None:
    """A payload nobody will read (its request was already failed): its segment goes."""
    if isinstance(payload, tuple) and payload[0] == "shm":
        unlink(payload[1])


__all__ = ["INLINE_BYTES", "decode", "discard", "encode"]
