"""Batched ports of policy ``streams``: what a sender stages per output before one queue
operation hands the whole batch to the receiving port (``Scheduler(policy="streams",
batch=64, batch_latency_s=0.001)``; ``batch=1`` is the paper's one-tuple hand-off).

Why: in C++ a hand-off (a push into an SPSC queue, a try-lock, a pop) costs tens of
nanoseconds; here each is a Python step of microseconds, so the unit that changes hands
must carry many tuples. A tuple stays what the paper's is (one packet, often of one row);
only the *hand-off* moves a batch: the queue, the producer and consumer try-locks,
reSchedule and the LRU free list all work on batches, and the receiver's operator sees the
batch's tuples in its input buffer at once (``ctx.recv_many`` takes them in one call, so
an operator can run one nogil kernel per batch).

When a staged batch leaves (the latency bound), for output i of operator X:

1. *full*: ``batch`` rows staged (at the send that filled it; ``ctx.send_many`` may
   make it larger by what it added). A tuple of one row, the paper's, counts one; a
   packet of ``batch`` rows or more leaves at once: it amortizes its hand-off alone, and
   holding it back would only add latency (measured on the policies workload, packets
   of thousands of rows: p99 31 ms counting packets against 18 ms one by one,
   ``measurements/2026-11-28-batched-ports/README.md``);
2. *not data*: a punctuation or the end of stream leaves at once, with what was staged
   before it (in order): progress is never held back by a batch;
3. *idle*: at the end of an execution of X, when the port it executed has nothing more
   queued (``flush_idle``: the dynamic and dedicated models): nothing will fill the batch
   soon, so it leaves now; a source, whenever its ``process`` returns without asking to
   run again at once;
4. *aged*: at a send and at the end of any execution of X, a batch whose oldest tuple
   was staged ``batch_latency_s`` ago or earlier leaves; and a timer (the scheduler's timer thread)
   looks every ``batch_latency_s`` at every operator of the request with staged tuples
   that old and queues a ``FLUSH`` marker on its first input port: X executes it under
   its own locks, which flushes the aged batches without calling ``process`` (manual:
   only if X is free at that moment; the timer thread never waits for an operator).

So a staged tuple waits at most about two latency bounds (its age, plus up to one timer
period) unless X is busy executing, and then X's executions check the age. One exception:
a source whose ``process`` never returns (a loop on a socket) has no port for the timer's
marker: its batch leaves at rules 1-2 and at its next send after the bound, so tuples it
staged before it stopped sending wait for that send (or its end).

Protocol (who may touch what, when):

* ``OpRecord.stage[i]`` (the staged list of output i), ``OpRecord.born[i]`` (when its
  first tuple was staged, ``time.perf_counter``) and ``OpRecord.rows[i]`` (its rows) are
  touched only by the thread executing
  X: it holds X's port consumer lock and, for several inputs, X's state lock, or it is
  X's source thread. A flush replaces the list (``stage[i] = []``) before it hands the
  old one on, so a nested execution that sends on the same output (it cannot in a DAG)
  would start a new batch. Operators whose ports run concurrently
  (``max_parallelism > 1``) have no stage (``stage is None``): their sends hand off one
  tuple each.
* The timer reads ``stage[i]`` and ``born[i]`` without a lock: a stale read only queues a
  FLUSH that finds nothing aged, or misses a batch the next tick sees. ``flush_queued``
  (one FLUSH marker of X at a time) is set by the timer and cleared by X's execution of
  the marker; a lost update queues one marker too many or waits one tick.
* A batch in a queue is a ``list``: a packet is never a list, so ``execute`` tells a
  batch from a tuple by its class. Batches hold packets, punctuations and the end of
  stream only, never a RERUN or FLUSH marker (those are queued alone).
"""

from __future__ import annotations

# How long a staged tuple may wait for its batch to fill (rule 4), seconds. Measured on
# the 2-core VM (``measurements/2026-11-28-batched-ports/sweep.json``: mixed graph, 100
# operators, batch 64, cost 1, sink tuples/s, median of 2 rounds): bound 0.1 ms 186k
# manual / 113k dynamic-2; 1 ms 222k / 133k; 10 ms 216k / 122k; 1 s 229k / 120k. 1 ms is
# the smallest bound that costs no throughput (the idle rule, 3, flushes most batches
# before they age) while a tuple's added wait per hop stays below the GIL's 5 ms switch
# interval, which a waiting thread already pays.
DEFAULT_LATENCY_S = 0.001

# Rows per batch when batching (rule 1; the sweep's tuples have one row). Same sweep, sink tuples/s by batch 1 / 8 / 16 /
# 32 / 64 / 128 / 256: cost 1, manual 34k / 145k / 172k / 195k / 225k / 223k / 208k,
# dynamic-2 25k / 111k / 111k / 138k / 128k / 120k / 100k; cost 1000, manual 27k / 68k /
# 70k / 75k / 81k / 81k / 72k, dynamic-2 21k / 52k / 50k / 70k / 80k / 91k / 82k. 64 is
# where manual's curve flattens and the smallest batch at which dynamic reaches manual at
# cost 1000; beyond 128 both fall (a batch's packets no longer fit the caches).
DEFAULT_BATCH = 64


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<streams {self.name}>"


# A queue item that flushes the aged batches of the port's operator (rule 4).
FLUSH = _Marker("FLUSH")


def new_stage(n_outputs: int) -> tuple[list, list, list]:
    """An operator's empty stage: a list per output, when each one's oldest tuple was
    staged, and how many rows each holds."""
    return [[] for _ in range(n_outputs)], [0.0] * n_outputs, [0] * n_outputs


def aged(stage: list, born: list, now: float, bound: float) -> bool:
    """Some output of the stage holds a batch whose oldest tuple is `bound` old."""
    for i, b in enumerate(stage):
        if b and now - born[i] >= bound:
            return True
    return False


__all__ = ["DEFAULT_BATCH", "DEFAULT_LATENCY_S", "FLUSH", "aged", "new_stage"]
