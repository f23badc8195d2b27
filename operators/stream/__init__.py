"""Stream operators on the bobox runtime (one concept per module).

Row operators -- ``map.Map``, ``filter.Filter``, ``flatmap.FlatMap`` -- run their
per-row work in numba ``nogil`` kernels (generated from expressions, or the user's) and
send their outputs with their parent rows (``derive.send_derived``), so hidden columns
such as a parallel region's ``__seq`` follow the rows. Stateful operators:
``window.WindowAggregate`` (tumbling, sliding and punctuation-delimited windows),
``session.Sessionize``, ``tsmerge.TimeMerge``. Sources: ``parquet_source.ParquetReplay``,
``socket_source.SocketSource``, ``generators.EventSource``; sink:
``parquet_sink.ParquetSink``. ``report`` prints throughput with marker latency.
Every operator declares its operator model (``bobox_sched.control.model``).
"""

from operators.stream.derive import SEQ, send_derived
from operators.stream.filter import Filter
from operators.stream.flatmap import FlatMap
from operators.stream.generators import EventSource, events
from operators.stream.map import Map
from operators.stream.parquet_sink import ParquetSink
from operators.stream.parquet_source import ParquetReplay
from operators.stream.report import CountSink, format_report, report_table, stream_report
from operators.stream.session import Sessionize
from operators.stream.socket_source import END_FRAME, SocketSource, arrow_frame
from operators.stream.tsmerge import TimeMerge
from operators.stream.window import Punctuated, Sliding, Tumbling, WindowAggregate

__all__ = [
    "END_FRAME",
    "SEQ",
    "CountSink",
    "EventSource",
    "Filter",
    "FlatMap",
    "Map",
    "ParquetReplay",
    "ParquetSink",
    "Punctuated",
    "Sessionize",
    "Sliding",
    "SocketSource",
    "TimeMerge",
    "Tumbling",
    "WindowAggregate",
    "arrow_frame",
    "events",
    "format_report",
    "report_table",
    "send_derived",
    "stream_report",
]
