"""Worker-thread py-spy samples of q1_mix.py runs, by function (inclusive): the numbers
of the README's Q1 split. Usage: python3 q1_profile.py RAW.txt [RAW.txt ...]"""
import collections
import gzip
import re
import sys

KEYS = ["OrderedPolicy.next_task", "Stage.consume", "Stage._run_slices", "_PS.on_slices", "_SL.on_packet",
        "Stage._group_done", "Stage.accept", "PartitionedOperator.state_for", "SpanCollector.__call__",
        "HybridQueue._run_batches", "ReorderBuffer.send"]
for path in sys.argv[1:]:
    incl = collections.Counter()
    tot = 0
    for line in (gzip.open(path, "rt") if path.endswith(".gz") else open(path)):
        stack, n = line.rsplit(" ", 1)
        n = int(n)
        frames = stack.split(";")
        if not any("_main (bobox_sched/core/worker.py" in f for f in frames):
            continue
        tot += n
        for fn in {re.sub(r" \(.*$", "", f) for f in frames}:
            incl[fn] += n
    print(path, "worker samples", tot, {k: incl[k] for k in KEYS})
