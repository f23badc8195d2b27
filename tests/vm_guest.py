"""Checks run *inside* the NUMA-VM guest (see numa_vm.py). Each check prints one
`@@RESULT <name> <json>` line with what the kernel says; the host-side tests assert.

Usage (in the guest): python tests/vm_guest.py CHECK [CHECK...]
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def in_thread(fn):
    out = {}

    def run():
        try:
            out["v"] = fn()
        except BaseException:  # noqa: BLE001 - reported to the host
            out["e"] = traceback.format_exc()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise RuntimeError(out["e"])
    return out["v"]


@check
def topology():
    import topology as t

    return t.probe().to_json()


@check
def pinning():
    import topology as t

    topo = t.probe()
    res = {}
    for n in topo.nodes:
        res[str(n.os_index)] = in_thread(
            lambda n=n: sorted(t.pin_to_node(topo, n.os_index)) + [-1] + sorted(os.sched_getaffinity(0))
        )
    return res


@check
def alloc():
    import numpy as np

    import topology as t

    topo = t.probe()
    res = {}
    for n in topo.nodes:
        # allocate from a thread pinned to *another* node: placement must not depend on
        # where the allocating thread runs
        other = topo.nodes[(topo.nodes.index(n) + 1) % len(topo.nodes)].os_index

        def work(n=n, other=other):
            t.pin_to_node(topo, other)
            a = t.alloc_on_node(8 << 20, n.os_index, np.int64)
            a[:] = 1
            return {str(k): v for k, v in t.node_histogram(a).items()}

        res[str(n.os_index)] = in_thread(work)
    return res


@check
def numa_factor():
    import subprocess

    r = subprocess.run(
        [sys.executable, "-m", "bobox_sched", "topology", "--numa-factor", "--bytes", "4M",
         "--repeat", "1", "--json"],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(names):
    for name in names:
        try:
            result = CHECKS[name]()
        except Exception:  # noqa: BLE001 - reported to the host
            result = {"error": traceback.format_exc()}
        print(f"@@RESULT {name} {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
