"""Bounds on every number the runtime and the ``bobox`` command accept, in one place.

A count beyond its cap is refused with a one-line error before any work starts (the CLI
through ``experiments.cli.argtypes``, the Python API through ``Scheduler.__init__``). Each cap
says where it comes from; most were measured on the 2-core development VM and are far
above any useful value, so that they only catch typos and runaway values (``--threads-per-node
40000`` printed nothing for minutes while it started threads; ``--concurrency
99999999999999999999`` submitted requests until memory ran out).

The ``bobox`` argument types (``argtypes.py``), ``Scheduler.__init__``, the operators'
data generator and ``topology``'s command line all read their bounds from here.
"""

from __future__ import annotations

import math
import numbers

from bobox_sched.core.errors import BoboxError
from topology.limits import MAX_PACKET_BYTES, MAX_REPEAT, MIN_PACKET_BYTES, count_problem  # noqa: F401

# Worker threads per NUMA node. The largest NUMA node sold today has 384 hardware threads
# (AMD EPYC 9965, 192 cores x 2, one node per socket); 1024 leaves room for
# oversubscription experiments. Starting 1024 workers took 4.7 s on the 2-core VM, 40000
# took minutes.
MAX_THREADS_PER_NODE = 1024

# Packet size and timed repetitions: topology/limits.py (python -m topology applies them too).

# Requests submitted at once by one command (queries x concurrency x repeat for bobox
# run, requests or copies for the benchmarks). Submitting 2000 q18 requests at once took
# 8 s and 45 KiB each (bobox run's path, 2-core VM): 10 000 is ~40 s and ~0.5 GB of
# bookkeeping before the first answer.
MAX_REQUESTS = 10_000

# Ways to decompose one query (bobox run --parallel). 256 ways gave 26 656 operators for
# the 10 TPC-H plans, built in 3 s; shuffles grow with the square of the ways.
MAX_PARALLEL = 256


# Synthetic benchmarks (bobox bench overhead/speedup/locality): packets per request
# (50x bench overhead's default of 2000), operators per chain, kernel rounds per element.
MAX_PACKETS = 100_000
MAX_CHAIN = 1000
MAX_ROUNDS = 100_000

# Seconds of a timed idle measurement (bobox bench idle --seconds): one hour.
MAX_SECONDS = 3600.0

# TPC-H scale factor. SF 0.01 is 3.25 MB of Parquet from tpchgen-cli (so SF 1 ~0.33 GB,
# SF 1000 ~330 GB): SF 1000 is the largest size the TPC publishes single-server results
# for. operators.data also checks the free disk space (DATAGEN_BYTES_PER_SF there).
MAX_SF = 1000.0

# Spark: data partitions (each a Spark task running the generator) and cores per
# executor (as threads per node).
MAX_PARTITIONS = 1024
MAX_EXECUTOR_CORES = MAX_THREADS_PER_NODE

# Input buffer capacity per operator port, in packets (Scheduler(buffer_packets=...));
# the default of 4 was measured best, more only holds memory.
MAX_BUFFER_PACKETS = 1024

# Channels per parallel region (Scheduler.submit(parallelism=N), fission.parallelize(degree=N)):
# every channel is a fresh instance of each region member, so channels beyond the worker
# threads only add queues. The largest servers sold have 8 sockets x 384 hardware threads
# = 3072 workers; 4096 leaves room. On the 2-core VM a two-operator region at 4096
# channels (8196 operators) was submitted and ran 10,000 rows in 5.2 s, instantiating the
# plan taking 2.6 s of it (0.14 s at 1024 channels: it grows faster than the channels);
# parallelism=10**6 was found still running after 40 s.
MAX_CHANNELS = 4096

# Seconds between balancer rounds (Scheduler(balance_interval=...)): the paper's 100 ms
# is the default, a round a minute is as good as off.
MAX_BALANCE_INTERVAL = 60.0

# The experiments' own knobs (``bobox experiment``; experiments/cli/experiment.py):
# operators per graph of the streams experiment (``dedicated`` starts a thread each);
MAX_STREAM_OPS = 10_000
# rows per query of the ordered experiment (a day of one core at most);
MAX_QUERY_ROWS = 1_000_000_000
# events per run of the tstream experiment (same bound);
MAX_EVENTS = 1_000_000_000
# rows per tuple of the streams experiment: a tuple is one packet of int64 rows (128 KiB
# at most). A graph's queues hold about 1,000 tuples (streams_exp.GRAPH_SLOTS), and up to
# 2 per input port with more than 1,000 operators (one slot per port): 128 MiB, or 2.5 GiB
# at 10,000 operators; and a tuple at 100,000 FLOPs per row is about a second of kernel.
MAX_TUPLE_ROWS = 16_384
# Tuples per batched hand-off of policy streams (``batch=``): a batch is a Python list
# staged by its sender; far beyond the ~64 that amortize a hand-off it only adds latency.
MAX_STREAM_BATCH = 65_536


def real_problem(value, cap: float, minimum: float = 0.0, open_min: bool = True) -> str | None:
    """Why `value` is not a finite number in (minimum, cap] (or [minimum, cap] without
    `open_min`), or None where it is one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"must be a number, got {value!r}"
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if value < minimum or (open_min and value == minimum):
        if minimum == 0 and open_min:
            return f"must be positive, got {value:g}"
        return f"must be {'>' if open_min else '>='} {minimum:g}, got {value:g}"
    if value > cap:
        return f"must be at most {cap:g} (the cap in bobox_sched/core/limits.py), got {value:g}"
    return None


def check_degree_cap(degree, what: str = "degree") -> None:
    """A one-line BoboxError when `degree` (an int, or a dict's values) asks for more
    than ``limits.MAX_CHANNELS`` channels; cheap, so callers run it before any work
    (the analysis, the expansion). Other bad degrees are parallelize's ValueError."""
    for d in (degree.values() if isinstance(degree, dict) else (degree,)):
        if isinstance(d, int) and not isinstance(d, bool) and d > MAX_CHANNELS:
            raise BoboxError(f"{what} must be at most {MAX_CHANNELS} channels per region "
                             f"(the cap in bobox_sched/core/limits.py), got {d}")


def check_count(what: str, value, cap: int, minimum: int = 1) -> int:
    """`value` as an int in [minimum, cap], or a one-line BoboxError naming `what`."""
    problem = count_problem(value, cap, minimum)
    if problem:
        raise BoboxError(f"{what} {problem}")
    return int(value)


def check_real(what: str, value, cap: float, minimum: float = 0.0, open_min: bool = True) -> float:
    """`value` as a finite float in (minimum, cap] (or [minimum, cap] without
    `open_min`), or a one-line BoboxError naming `what`."""
    problem = real_problem(value, cap, minimum, open_min)
    if problem:
        raise BoboxError(f"{what} {problem}")
    return float(value)


__all__ = [
    "MAX_THREADS_PER_NODE",
    "MIN_PACKET_BYTES",
    "MAX_PACKET_BYTES",
    "MAX_REQUESTS",
    "MAX_PARALLEL",
    "MAX_REPEAT",
    "MAX_PACKETS",
    "MAX_CHAIN",
    "MAX_ROUNDS",
    "MAX_SECONDS",
    "MAX_SF",
    "MAX_PARTITIONS",
    "MAX_EXECUTOR_CORES",
    "MAX_BUFFER_PACKETS",
    "MAX_CHANNELS",
    "MAX_BALANCE_INTERVAL",
    "MAX_STREAM_OPS",
    "MAX_QUERY_ROWS",
    "MAX_EVENTS",
    "MAX_TUPLE_ROWS",
    "MAX_STREAM_BATCH",
    "count_problem",
    "real_problem",
    "check_count",
    "check_real",
]
