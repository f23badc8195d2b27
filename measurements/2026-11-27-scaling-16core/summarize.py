"""The table in README.md, from the raw files of both rounds:
    python measurements/2026-11-27-scaling-16core/summarize.py"""
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROUNDS = sorted(p for p in HERE.glob("round-*") if p.is_dir())


def lines(p):
    return [json.loads(s) for s in p.read_text().splitlines() if s.strip()]


print("TPC-H mix, SF 1, 128 requests (`bobox run --threads-per-node T --concurrency 4 --repeat 4`):"
      " wall s (speedup over the same tree's 1 worker)\n")
print("| workers | " + " | ".join(f"old r{r.name[-1]} | new r{r.name[-1]}" for r in ROUNDS) + " |")
print("|---|" + "---|---|" * len(ROUNDS))
data = {r.name: {(x["tree"], x["threads"]): x["summary"]["wall_s"] for x in lines(r / "scaling.jsonl")}
        for r in ROUNDS}
for t in (1, 2, 4, 8, 16):
    cells = []
    for r in ROUNDS:
        for tree in ("old", "new"):
            w = data[r.name][(tree, t)]
            cells.append(f"{w:.2f} ({data[r.name][(tree, 1)] / w:.2f}x)")
    print(f"| {t} | " + " | ".join(cells) + " |")
print("\n`bench overhead` (16 workers): us per task, ratio to ThreadPoolExecutor\n")
print("| round | old us | old ratio | new us | new ratio |\n|---|---|---|---|---|")
for r in ROUNDS:
    o = {x["tree"]: x["overhead"] for x in lines(r / "overhead.jsonl")}
    print(f"| {r.name} | {o['old']['bobox_us_per_task']} | {o['old']['ratio']} | "
          f"{o['new']['bobox_us_per_task']} | {o['new']['ratio']} |")
print("\n`bench queries --data SF1 --repeat 3` (new tree only)\n")
print("| round | geomean vs DuckDB 1 thread (Parquet / in memory) | mix of 32: 1 -> 16 workers | serial fraction (16) | DuckDB 16 threads / bobox 16 workers |\n|---|---|---|---|---|")
for r in ROUNDS:
    q = json.loads((r / "queries-new.txt").read_text().strip().splitlines()[-1])
    txt = (r / "queries-new.txt").read_text()
    geo = re.search(r"geomean ratio .*?: ([\d.]+) on Parquet, ([\d.]+) on in-memory", txt)
    mix = re.search(r"1 worker ([\d.]+) s, 16 workers ([\d.]+) s: scaling ([\d.]+)", txt)
    sf = re.search(r"\(([\d.]+) on 16\)", txt)
    duck = re.search(r"duckdb_mix_s / mix_tall_s = ([\d.]+)", txt)
    print(f"| {r.name} | {geo[1]} / {geo[2]} | {mix[1]} -> {mix[2]} s = {mix[3]}x | {sf[1]} | {duck[1]} |")
