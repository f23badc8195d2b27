"""Issue 33's goals table from one run.sh's JSON lines (this folder, or the folder given).

    python3 measurements/2026-11-28-stream-shapes-batched/table.py [FOLDER]
"""

import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def last_json(name):
    with open(os.path.join(D, name + ".json")) as f:
        return json.loads(f.read().strip().splitlines()[-1])


st, ts, od = last_json("streams"), last_json("tstream"), last_json("ordered")
rows = []
dvm = st["dynamic_vs_manual"]
rows.append(("dynamic_vs_manual, mixed, batched, cost " + " / ".join(dvm), ">= 1.0", " / ".join(str(v) for v in dvm.values())))
if st.get("one_tuple"):
    ot = st["one_tuple"]
    rows.append(("  same, one-tuple hand-off", "(paper's setting)", " / ".join(str(d["dynamic_vs_manual"]) for d in ot.values())))
    rows.append(("  batched / one-tuple, manual; dynamic best", "", " / ".join(
        f"{d['batched_vs_one_tuple_manual']}; {d['batched_vs_one_tuple_dynamic']}" for d in ot.values())))
for key, label in (("elastic_vs_best_static", "cap 0.8"), ("elastic_uncapped_vs_best_static", "no cap")):
    pts = [(s, c, v) for s, d in st[key].items() for c, v in d.items()]
    ok = sum(1 for _, _, v in pts if v >= 0.9)
    miss = ", ".join(f"{s}@{c} {v}" for s, c, v in pts if v < 0.9)
    rows.append((f"elastic_vs_best_static ({label})", ">= 0.9 every point", f"{ok} of {len(pts)}" + (f" (miss: {miss})" if miss else "")))
lc = st.get("load_change", {})
for form, d in lc.items():
    rows.append((f"settle after a load change, {form} form", "<= 2 periods", f"{d['settle_periods']} (levels after: {d['levels_after']})"))
tv = ts["tstream_vs_best_baseline"]
rows.append(("tstream_vs_best_baseline GS / OB / TP (SL)", ">= 1.2", f"{tv['gs']} / {tv['ob']} / {tv['tp']} ({tv['sl']})"))
rows.append(("p99_latency_ms GS at 500 (p50)", "< 1.0", f"{ts['p99_latency_ms']['gs']['500']:.2f} ({ts['p50_latency_ms']['gs']['500']:.2f})"))
for app in ("gs", "ob", "sl", "tp"):
    rows.append((f"  {app} p50 / p99 ms at 500", "report", f"{ts['p50_latency_ms'][app]['500']:.2f} / {ts['p99_latency_ms'][app]['500']:.2f}"))
ct = od["goals"]["ct_peak_within_5pct"]
rows.append(("CT / best heuristic " + " ".join(ct), ">= 0.95", " / ".join(str(v) for v in ct.values())))
hp = od["hybrid_vs_partitioned_queries"]
rows.append(("hybrid / partitioned p = workers " + " ".join(hp), ">= 1.0", " / ".join(str(round(d["ratio"], 3)) for d in hp.values())))
rows.append(("identity: ordered_identical / serial_equivalent / fifo_ok", "true",
             f"{od['ordered_identical']} / {ts['serial_equivalent']} / {st['fifo_ok']}"))
print("| figure | goal | measured |\n|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
