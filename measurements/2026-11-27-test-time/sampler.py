"""Samples the machine every 2 s until killed: system-wide busy CPU ticks (/proc/stat) and
each live process's CPU ticks (utime+stime) with its command name, as JSON lines to argv[1].
Processes that exit between samples lose at most 2 s of their CPU. For attributing a test
run's busy CPU-s (JVMs, QEMU, pip) that per-test counts in cpu_report.py cannot see."""
import json, os, sys, time

def busy():
    with open("/proc/stat") as f:
        v = f.readline().split()[1:]
    return sum(int(v[i]) for i in (0, 1, 2, 5, 6, 7))

def procs():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1 : s.rindex(")")]
        rest = s[s.rindex(")") + 2 :].split()
        out[p] = (comm, int(rest[11]) + int(rest[12]))
    return out

with open(sys.argv[1], "a", buffering=1) as f:
    while True:
        f.write(json.dumps({"t": time.time(), "busy": busy(), "procs": procs()}) + "\n")
        time.sleep(2)
