"""Old (170066d) against new (HEAD): bench overhead, bench queries and experiment regions,
two alternating rounds each (perf.sh). Prints a Markdown table; each command's JSON is
the last line of its output file. The folder of the outputs is the argument (default:
this file's; `../2026-11-28-goals-cpu2/` is read the same way)."""
import json
import pathlib
import sys

HERE = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent
KEYS = [("old", 1), ("old", 2), ("new", 1), ("new", 2)]


def last_json(name):
    lines = [x for x in (HERE / name).read_text().strip().splitlines() if x.startswith("{")]
    return json.loads(lines[-1])


ov = {k: last_json(f"overhead-{k[0]}-{k[1]}.txt") for k in KEYS}
qu = {k: last_json(f"queries-{k[0]}-{k[1]}.txt") for k in KEYS}
rg = {k: last_json(f"regions-{k[0]}-{k[1]}.json") for k in KEYS}


def pick(d, *path):
    for p in path:
        d = d[p]
    return d


rows = []
for label, key in (("bench overhead: us per task", "bobox_us_per_task"), ("bench overhead: ratio to ThreadPoolExecutor", "ratio")):
    rows.append((label, [ov[k].get(key) for k in KEYS]))
for label, key in (("bench queries: geomean ratio to DuckDB", "geomean_ratio"), ("bench queries: scaling", "scaling")):
    rows.append((label, [qu[k].get(key) for k in KEYS]))
for kind in ("stateless", "stateful", "shuffle"):
    for n in ("2", "4"):
        for w in ("256", "65536"):
            rows.append((f"regions speedup {kind}, N={n}, w={w}", [pick(rg[k], "speedup", kind, n, w) for k in KEYS]))
for g in ("seqno_overhead_mid_w", "strict_overhead_mid_w", "relaxed_overhead_mid_w"):
    rows.append((f"regions {g}", [rg[k]["goals"][g] for k in KEYS]))
rows.append(("regions ordered_identical", [rg[k]["ordered_identical"] for k in KEYS]))
print("| | old 1 | old 2 | new 1 | new 2 |")
print("|---|---|---|---|---|")
for name, vals in rows:
    print(f"| {name} | " + " | ".join(str(v) for v in vals) + " |")
