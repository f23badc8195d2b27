"""Busy CPU-seconds of a sampler.py recording by process name (python, qemu-system-x86,
java, ...) and every JVM/QEMU process's span and CPU. Usage: python sampler_report.py FILE
(FILE may be gzipped)."""
import collections, gzip, json, sys

opener = gzip.open if sys.argv[1].endswith(".gz") else open
with opener(sys.argv[1], "rt") as f:
    rows = [json.loads(line) for line in f]
t0, tick = rows[0]["t"], 100.0  # CLK_TCK
first = {(p, c): t for p, (c, t) in rows[0]["procs"].items()}
last, span = {}, {}
for r in rows:
    for p, (c, t) in r["procs"].items():
        last[(p, c)] = t
        span.setdefault((p, c), [r["t"] - t0, 0])[1] = r["t"] - t0
by = collections.Counter()
for k, t in last.items():
    by[k[1]] += t - first.get(k, 0)
print(f"{rows[-1]['t'] - t0:.0f} s sampled, {(rows[-1]['busy'] - rows[0]['busy']) / tick:.0f} busy CPU-s")
for name, t in by.most_common(6):
    print(f"{t / tick:8.1f} CPU-s  {name}")
for (p, c), (a, b) in sorted(span.items(), key=lambda x: x[1][0]):
    if c in ("java", "qemu-system-x86"):
        print(f"   {c:16} {a:6.0f}-{b:6.0f} s  {(last[(p, c)] - first.get((p, c), 0)) / tick:6.1f} CPU-s")
