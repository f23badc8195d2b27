"""Per worker, each module's span in a timeline JSONL of cpu_report.py (start, end, CPU
seconds of the worker and its waited-for children): python timeline.py FILE.jsonl"""
import collections, json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
t0 = min(r["start"] for r in rows)
by_worker = collections.defaultdict(list)
for r in rows:
    by_worker[r.get("worker", "?")].append(r)
for w, rs in sorted(by_worker.items()):
    print(f"{w}: last test ends at {max(r['end'] for r in rs) - t0:.0f} s")
    mods = {}
    for r in sorted(rs, key=lambda r: r["start"]):
        m = r["id"].split("::")[0]
        a = mods.setdefault(m, [r["start"], r["end"], 0.0])
        a[1] = r["end"]
        a[2] += r["self"] + r["children"]
    for m, (s, e, c) in mods.items():
        print(f"  {s - t0:6.0f} {e - t0:6.0f} {e - s:5.0f} s wall {c:6.1f} CPU-s  {m}")
