"""Where the batched ports' defaults come from (bobox_sched/policies/streams/batching.py):
sink tuples/s of the streams experiment's mixed graph (100 worker operators, one-row
tuples) per tuples-per-batch and per latency bound, manual against dynamic with 1 and 2
scheduler threads, costs 1 and 1000 FLOPs per tuple. Rounds alternate the settings so
that a slow minute of the machine hits all of them; each point is the median over the
rounds of a run's median 1 s sample.

    .venv/bin/python measurements/2026-11-28-batched-ports/sweep.py OUT.json [--rounds 2] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from experiments.streams_exp import queue_for, run_once, static_value  # noqa: E402
from experiments.streams_ops import burn, burn_held, burn_rows, burn_rows_held  # noqa: E402


def machine() -> dict:
    try:
        import cpuinfo

        brand = cpuinfo.get_cpu_info().get("brand_raw")
    except Exception:  # noqa: BLE001 - a description only
        brand = platform.processor()
    return {"cpus": len(os.sched_getaffinity(0)), "brand": brand, "python": platform.python_version(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1), "loadavg_start": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    burn(1.0, 10), burn_held(1.0, 10)
    one = np.zeros(1, np.int64)
    burn_rows(one, 10), burn_rows_held(one, 10)
    models = {"manual": {"model": "manual"}, "dynamic-1": {"threads": 1}, "dynamic-2": {"threads": 2}}
    points = [("batch", b, 0.001, c, m) for c in (1, 1000) for b in (1, 8, 16, 32, 64, 128, 256) for m in models]
    points += [("bound", 64, lat, 1, m) for lat in (0.0001, 0.001, 0.01, 1.0) for m in ("manual", "dynamic-2")]
    raw: dict = {}
    t0 = time.time()
    for rnd in range(a.rounds):
        for k, (kind, b, lat, c, m) in enumerate(points):
            kw = {"queue_capacity": queue_for("mixed", 100, b), "batch_latency_s": lat, **models[m]}
            r = run_once("mixed", 100, c, kw, a.seconds, 1.0, batch=b)
            key = f"{kind}|batch={b}|bound_s={lat}|cost={c}|{m}"
            raw.setdefault(key, []).append({"tuples_per_s": static_value(r["samples"]),
                                            "tuples_per_cpu_s": r["tuples_per_cpu_s"],
                                            "violations": r["violations"], "loadavg": r["loadavg"]})
            print(f"[{rnd + 1}/{a.rounds} {k + 1}/{len(points)} {time.time() - t0:.0f}s] {key}: "
                  f"{raw[key][-1]['tuples_per_s']:.0f}", file=sys.stderr, flush=True)
    summary = {k: round(statistics.median(x["tuples_per_s"] for x in v)) for k, v in raw.items()}
    out = {"machine": machine(), "rounds": a.rounds, "seconds": a.seconds, "summary": summary, "raw": raw,
           "command": " ".join(sys.argv)}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.out)
    for k, v in summary.items():
        print(f"{k}\t{v}")


if __name__ == "__main__":
    main()
