"""One validation point of the simulator in the NUMA VM (issue 34), run inside the guest:

    scripts/vm-run --nodes N -- python measurements/2026-12-02-sim-numa-vm/vm_point.py DATA COPIES

The TPC-H mix (8 queries x COPIES, all submitted at once) on this guest: once on one
worker, traced (the work the simulator replays), then on every worker with every packet
on the worker's node (local) and on the next node (remote), balancer off and every
consumed packet's pages looked up (``locality_sample=1``): wall times and the local
fraction. Prints the JSON (the trace inside it) zlib-compressed in base64 lines of 1000
characters, each starting "@@vm ", then "@@end" (the guest's console cut a 200-KB line
at 32 KB): ``collect.py`` puts it back together.""" 

import base64
import json
import sys
import zlib

import topology
from bobox_sched import Scheduler
from bobox_sched.trace import Tracer
from experiments.workload import build_plans, choose_parallel, run_mix
from operators import released

QUERIES = ["q1", "q3", "q5", "q6", "q10", "q12", "q14", "q18"]


def main():
    data, copies = sys.argv[1], int(sys.argv[2])
    released.enable()
    topo = topology.probe()
    out = {"nodes": len(topo.cpu_nodes), "cpus": [list(n.cpus) for n in topo.cpu_nodes],
           "distances": [list(n.distances) for n in topo.cpu_nodes], "copies": copies, "queries": QUERIES}
    first = topo.cpu_nodes[0]
    one = topo.restrict(nodes=[first.os_index], cpus=[first.cpus[0]])
    tr = Tracer()
    with Scheduler(topology=one, trace=tr, balance_interval=None) as s:
        plans = build_plans(QUERIES, data, 1)
        run_mix(s, plans, 1)  # warm-up: kernels, pools
        tr.begin_window()
        out["one_worker_s"] = run_mix(s, plans, copies).wall_s
    out["trace_1w"] = tr.document()
    for mode in ("local", "remote"):
        with Scheduler(memory=mode, locality_sample=1, balance_interval=None) as s:
            plans = build_plans(QUERIES, data, choose_parallel(copies * len(QUERIES), len(s.workers)))
            run_mix(s, plans, 1)
            walls = [run_mix(s, plans, copies).wall_s for _ in range(3)]
            st = s.stats()
            out[mode] = {"wall_s": sorted(walls)[1], "walls_s": walls, "workers": st["workers"],
                         "local_fraction": st["locality"]["local_fraction"], "pages": st["locality"]["pages"]}
    blob = base64.b64encode(zlib.compress(json.dumps(out).encode(), 9)).decode()
    for i in range(0, len(blob), 1000):
        print("@@vm " + blob[i:i + 1000])
    print("@@end")


if __name__ == "__main__":
    main()
