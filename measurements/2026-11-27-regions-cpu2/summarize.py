"""Old against new: `experiment regions --quick --repeat 3` speedups, two rounds each
(perf.sh). Prints a Markdown table; the JSON is the last line of each regions-*.json."""
import json
import pathlib

HERE = pathlib.Path(__file__).parent


def load(tree, rnd):
    return json.loads((HERE / f"regions-{tree}-{rnd}.json").read_text().strip().splitlines()[-1])


runs = {(t, r): load(t, r) for t in ("old", "new") for r in (1, 2)}
rows = []
for kind in ("stateless", "stateful", "shuffle"):
    for n in ("2", "4"):
        for w in ("256", "65536"):
            rows.append((f"speedup {kind}, N={n}, w={w}", [runs[k]["speedup"][kind][n][w] for k in sorted(runs)]))
for g in ("seqno_overhead_mid_w", "strict_overhead_mid_w", "relaxed_overhead_mid_w"):
    rows.append((g, [runs[k]["goals"][g] for k in sorted(runs)]))
rows.append(("ceiling", [runs[k]["ceiling"] for k in sorted(runs)]))
rows.append(("ordered_identical", [runs[k]["ordered_identical"] for k in sorted(runs)]))
keys = sorted(runs)  # (new,1) (new,2) (old,1) (old,2)
print("| | old 1 | old 2 | new 1 | new 2 |")
print("|---|---|---|---|---|")
for name, vals in rows:
    v = dict(zip(keys, vals))
    print(f"| {name} | {v[('old', 1)]} | {v[('old', 2)]} | {v[('new', 1)]} | {v[('new', 2)]} |")
