"""The settings one group of transactional-operator instances shares (``TxnConfig``).

``cc`` picks the concurrency control: ``"tstream"`` (dual-mode scheduling and operation
chains, the default), or a baseline run coarse-grained, one transaction at a time per
executor: ``"lock"`` (S2PL with lock-ahead), ``"mvlk"`` (multi-version locks with a
low-water mark per record), ``"pat"`` (S-Store's per-partition lock-ahead) and
``"nolock"`` (no synchronisation: an upper bound, not a correct scheme).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bobox_sched.txn.table import StateStore

SCHEMES = ("tstream", "lock", "mvlk", "pat", "nolock")
NUMA_MODES = ("shared-nothing", "shared-per-socket", "shared-everything")
DEFAULT_INTERVAL = 500  # events per executor between punctuations (paper L307)
# How long (microseconds) a baseline kernel spins on a counter or lock word before it
# returns "blocked" so that its worker can run something else -- bounded by time, not by
# tries (a try's cost differs across machines). With no more executors than worker
# threads the executor waited for is running, or will be soon: its Python phase
# (post-processing a 500-row packet and registering the next) takes a few hundred us
# (profiled on GS), and giving up costs a trip through the scheduler that takes the GIL
# that executor needs -- so spin 1 ms. (On the 2-vCPU development VM, 200 us and 3 ms
# budgets gave the same SL throughput for LOCK and PAT within the host's load noise.)
# With more executors than threads the one waited for may not be running at all: give
# the worker back after 50 us.
SPIN_US_OWN_THREAD = 1000.0
SPIN_US_SHARED = 50.0


@dataclass
class TxnConfig:
    """Settings of one group of transactional-operator instances.

    store          the shared tables (:class:`StateStore`)
    executors      number of instances (executors) of the operator
    interval       events per executor between batch punctuations (the progress
                   controller's ``punctuation_interval``)
    cc             concurrency control, one of ``SCHEMES``
    dual_mode      postpone state access to batch ends (TStream); default: cc == "tstream"
    numa_mode      chain pools: one per worker (``shared-nothing``), per NUMA node
                   (``shared-per-socket``) or one (``shared-everything``)
    work_stealing  let every worker of a pool's node (everything: every worker) walk the
                   pool's chains, claiming one chain at a time
    pat_partitions PAT's partition count (default: executors)
    pat_seq        PAT: ``pat_seq[ts, p]`` = number of earlier transactions touching
                   partition p (``baselines.pat_sequence``); required for cc="pat"
    spin_us        how long a baseline's wait spins before it returns "blocked" (default:
                   1 ms if every executor can have a worker thread, else 50 us)
    pipeline       dual mode only: instances compute batch k+1 (pre-process, register)
                   while batch k is in state access; False (the default): the paper's
                   form, no new input from a punctuation until the batch's results are
                   post-processed (spec 2, steps 4 and 8)
    name           names the group (several groups may share a request)
    kernel_wrap    a function applied to the kernel module before use (default: none),
                   e.g. ``operators.released.timed_namespace`` so that time in the nogil
                   kernels counts as GIL-released time of the calling worker (the
                   serial fraction, measured by ``bobox experiment tstream``)
    """

    store: StateStore
    executors: int
    interval: int = DEFAULT_INTERVAL
    cc: str = "tstream"
    dual_mode: bool | None = None
    numa_mode: str = "shared-nothing"
    work_stealing: bool = False
    pat_partitions: int | None = None
    pat_seq: np.ndarray | None = None
    spin_us: float | None = None
    pipeline: bool = False
    name: str = "txn"
    kernel_wrap: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.store, StateStore):
            raise ValueError(f"store must be a StateStore, got {type(self.store).__name__}")
        if not isinstance(self.executors, int) or isinstance(self.executors, bool) or self.executors < 1:
            raise ValueError(f"executors must be a positive integer, got {self.executors!r}")
        if not isinstance(self.interval, int) or isinstance(self.interval, bool) or self.interval < 1:
            raise ValueError(f"interval (punctuation_interval) must be a positive integer, got {self.interval!r}")
        if self.cc not in SCHEMES:
            raise ValueError(f"cc must be one of {', '.join(SCHEMES)}, got {self.cc!r}")
        if self.dual_mode is None:
            self.dual_mode = self.cc == "tstream"
        if self.dual_mode != (self.cc == "tstream"):
            raise ValueError("dual_mode=True goes with cc='tstream' (the baselines are coarse-grained: "
                             "dual_mode=False)")
        if not isinstance(self.pipeline, bool):
            raise ValueError(f"pipeline must be True or False, got {self.pipeline!r}")
        if self.numa_mode not in NUMA_MODES:
            raise ValueError(f"numa_mode must be one of {', '.join(NUMA_MODES)}, got {self.numa_mode!r}")
        if self.pat_partitions is None:
            self.pat_partitions = self.executors
        if not isinstance(self.pat_partitions, int) or self.pat_partitions < 1:
            raise ValueError(f"pat_partitions must be a positive integer, got {self.pat_partitions!r}")
        if self.cc == "pat":
            if self.pat_seq is None:
                raise ValueError("cc='pat' needs pat_seq (per-partition sequence numbers of every transaction: "
                                 "bobox_sched.txn.baselines.pat_sequence)")
            if self.pat_seq.ndim != 2 or self.pat_seq.shape[1] != self.pat_partitions:
                raise ValueError(f"pat_seq must be [ts, {self.pat_partitions}], got shape {self.pat_seq.shape}")
        if self.kernel_wrap is not None and not callable(self.kernel_wrap):
            raise ValueError(f"kernel_wrap must be callable, got {self.kernel_wrap!r}")
        if self.spin_us is not None and not (isinstance(self.spin_us, (int, float)) and self.spin_us > 0):
            raise ValueError(f"spin_us must be a positive number, got {self.spin_us!r}")

    def spin_ticks(self, workers: int) -> int:
        """The spin budget in cycle-counter ticks, for `workers` worker threads."""
        from bobox_sched.core.atomics import cycles_per_second

        us = self.spin_us
        if us is None:
            us = SPIN_US_OWN_THREAD if self.executors <= workers else SPIN_US_SHARED
        return max(1, int(us * 1e-6 * cycles_per_second()))

    @property
    def punctuation_interval(self) -> int:
        return self.interval


def partition_of_key(keys, nparts: int):
    """Records are partitioned (pools, PAT partitions) by key, the same for every table:
    key mod P -- consecutive keys in consecutive partitions, equal sizes (spec 5)."""
    return np.asarray(keys) % nparts


__all__ = ["DEFAULT_INTERVAL", "SPIN_US_OWN_THREAD", "SPIN_US_SHARED", "NUMA_MODES", "SCHEMES", "TxnConfig", "partition_of_key"]
