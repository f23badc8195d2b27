"""A source fed from a TCP connection: text lines (CSV fields) or length-prefixed Arrow
IPC frames, read by a reader thread into a :class:`~bobox_sched.core.sources.StreamChannel`.

Reader-thread protocol (who touches what, when): the thread is started by the source's
first run and owns the socket. It turns what it reads into column dicts -- one
``pyarrow.csv`` parse per received block of complete lines, or one IPC read per frame:
vectorised C++ code, no per-row Python -- and ``put``s them into the source's channel
(bounded: a full channel blocks the thread, and TCP's flow control pushes back on the
sender). The source operator, run by a worker, takes them from the channel as a
``QueueSource`` does. The thread ends at end of input (it closes the channel: end of
stream), when the request ends (``put`` raises, or a poll of the socket every
``_POLL_S`` sees the request no longer active), or on an error: it stores the error in
``_error`` *before* closing the channel, so the worker that takes the close finds it (the
channel's lock orders the two) and fails the request with it instead of ending the
stream normally. ``_error`` is written once by the thread and read by the worker only
after that.
"""

from __future__ import annotations

import socket
import struct
import threading

import pyarrow as pa
import pyarrow.csv as pcsv

from bobox_sched.control.punct import Marker, Punctuation
from bobox_sched.core.sources import _CLOSE, QueueSource, StreamChannel

from operators.stream.schemas import as_schema, from_arrow

# How often a reader blocked on a silent socket checks that its request is still active.
# Short enough that a cancelled request's thread exits within a blink; long enough to
# cost nothing.
_POLL_S = 0.1
_FRAME = struct.Struct("<I")  # Arrow frame header: payload length, little-endian uint32
# Bytes asked per recv; the complete lines of each block received become one packet. A
# fast sender fills it (64 KiB of short CSV lines: ~2000 rows, a packet of the usual
# size); a slow one gets a packet per burst, which keeps latency low. Not tuned further.
_RECV = 1 << 16


def arrow_frame(data) -> bytes:
    """One frame of the ``arrow`` format: a 4-byte little-endian length, then an Arrow IPC
    stream (schema and record batches) holding `data` (a Table or RecordBatch)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as w:
        w.write(data)
    body = sink.getvalue().to_pybytes()
    return _FRAME.pack(len(body)) + body


END_FRAME = _FRAME.pack(0)  # end of stream in the ``arrow`` format


class _Closed(Exception):
    """The request ended while reading: stop quietly."""


class SocketSource(QueueSource):
    """Connects to ``host:port`` and emits what the peer sends, in order.

    ``format="lines"``: each line is a row, fields separated by ``sep``, in the order of
    ``schema`` (a ``{column: numpy dtype}`` dict or a Schema; numbers only). End of stream
    when the peer closes the connection.

    ``format="arrow"``: frames made by :func:`arrow_frame` (a 4-byte little-endian length
    and an Arrow IPC stream); :data:`END_FRAME` or the peer closing the connection
    between frames ends the stream. Columns are taken by name and converted to
    ``schema``.

    A broken connection or unparsable input fails the request with the reader's error.
    ``capacity`` bounds the packets waiting in the channel; ``marker_every`` = k sends a
    latency marker after every k-th packet.
    """

    def __init__(self, host: str, port: int, schema, format: str = "lines", sep: str = ",",
                 capacity: int = 64, marker_every: int = 0, connect_timeout: float = 10.0):
        super().__init__(StreamChannel(capacity), marker_every=marker_every)
        if format not in ("lines", "arrow"):
            raise ValueError(f"SocketSource format must be 'lines' or 'arrow', got {format!r}")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"SocketSource port must be 1..65535, got {port!r}")
        self.schema = as_schema(schema)
        if format == "lines":
            kinds = {f.kind for f in self.schema.fields}
            if not kinds <= {"int", "float", "bool"}:
                raise ValueError("SocketSource lines carry numbers only")
        self.host, self.port, self.format, self.sep = host, port, format, sep
        self.connect_timeout = connect_timeout
        self.rows = 0
        self._thread = None
        self._error = None

    # -- worker side ------------------------------------------------------------------------
    def process(self, ctx):
        ch = self.channel
        if not self._bound:
            ch._bind(ctx.task)
            self._bound = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._read, args=(ctx.request,), daemon=True,
                                            name=f"bobox-socket-{self.host}:{self.port}")
            self._thread.start()
        for _ in range(self.batch):
            if ctx.blocked:
                break
            item = ch._take()
            if item is None:
                return  # the next put schedules us
            if item is _CLOSE:
                ch._unbind(ctx.task)
                if self._error is not None:
                    raise self._error
                ctx.close()
                ctx.finish()
                return
            if isinstance(item, Punctuation):
                ctx.punctuate(item)
                continue
            ctx.send("out", item)
            self._sent += 1
            if self.marker_every and self._sent % self.marker_every == 0:
                ctx.punctuate(Marker())
        if len(ch) and not ctx.blocked:
            ctx.reschedule()

    # -- reader thread ----------------------------------------------------------------------
    def _read(self, req) -> None:
        sock = None
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
            sock.settimeout(_POLL_S)
            if self.format == "lines":
                self._read_lines(req, sock)
            else:
                self._read_arrow(req, sock)
        except _Closed:
            return
        except BaseException as e:  # noqa: BLE001 - handed to the worker, which fails the request
            if self._active(req):
                self._error = e if isinstance(e, Exception) else RuntimeError(repr(e))
        finally:
            if sock is not None:
                sock.close()
            try:
                self.channel.close()
            except RuntimeError:
                pass

    @staticmethod
    def _active(req) -> bool:
        return req.state is req.ACTIVE

    def _recv(self, req, sock, n: int) -> bytes:
        """Up to `n` bytes (b"" at end of input), polling the request's state."""
        while True:
            try:
                return sock.recv(n)
            except socket.timeout:
                if not self._active(req):
                    raise _Closed from None

    def _put(self, cols: dict) -> None:
        n = len(next(iter(cols.values()))) if cols else 0
        if n == 0:
            return
        try:
            self.channel.put(cols)
        except RuntimeError:
            raise _Closed from None
        self.rows += n

    def _read_lines(self, req, sock) -> None:
        names = self.schema.names
        types = {f.name: pa.from_numpy_dtype(f.dtype) for f in self.schema.fields}
        ropts = pcsv.ReadOptions(column_names=names, use_threads=False)
        popts = pcsv.ParseOptions(delimiter=self.sep)
        copts = pcsv.ConvertOptions(column_types=types)

        def parse(block: bytes) -> None:
            table = pcsv.read_csv(pa.py_buffer(block), read_options=ropts, parse_options=popts,
                                  convert_options=copts)
            self._put(from_arrow(table, self.schema))

        buf = bytearray()
        while True:
            data = self._recv(req, sock, _RECV)
            if not data:
                if buf.strip():
                    parse(bytes(buf) + b"\n")
                return
            buf += data
            cut = buf.rfind(b"\n")
            if cut >= 0:
                block = bytes(buf[: cut + 1])
                del buf[: cut + 1]
                if block.strip():
                    parse(block)

    def _exact(self, req, sock, n: int, what: str) -> bytes | None:
        """Exactly `n` bytes; None at end of input before the first byte."""
        parts = []
        got = 0
        while got < n:
            data = self._recv(req, sock, min(n - got, 1 << 20))
            if not data:
                if got == 0:
                    return None
                raise ConnectionError(f"connection closed inside {what} ({got} of {n} bytes)")
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def _read_arrow(self, req, sock) -> None:
        while True:
            head = self._exact(req, sock, _FRAME.size, "a frame header")
            if head is None:
                return
            (length,) = _FRAME.unpack(head)
            if length == 0:
                return
            body = self._exact(req, sock, length, "a frame")
            if body is None:
                raise ConnectionError("connection closed inside a frame")
            with pa.ipc.open_stream(pa.py_buffer(body)) as reader:
                for batch in reader:
                    self._put(from_arrow(batch, self.schema))


__all__ = ["END_FRAME", "SocketSource", "arrow_frame"]
