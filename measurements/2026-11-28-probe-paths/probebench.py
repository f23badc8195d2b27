"""Probe time of two big captures, median of 15 probes after one warm-up: python probebench.py"""
import json, sys, time
from pathlib import Path
from topology.probe import probe
out = {}
for name in ("256ppc-8n8s4t", "128arm-2pa2n8cluster4co"):
    (root,) = (Path("/dev/shm/tp") / name).iterdir()
    probe(root)
    ts = []
    for _ in range(15):
        t = time.perf_counter(); probe(root); ts.append(time.perf_counter() - t)
    ts.sort()
    out[name] = round(ts[7] * 1000, 1)
print(json.dumps(out))
