"""Issue 32's NUMA-VM figure: Scheduler(domains="auto", domain_workers=2) in a 2-node x
2-CPU guest (QEMU, a real Linux kernel: scripts/vm-run), as the VM test tier runs it
(tests/vm_guest.py's ``domains_numa``): each domain's CPUs and memory policy as the
kernel reports them, and the share of consumed packets' pages on the consuming worker's
node (move_pages). Prints one JSON line. From the repository root:

    .venv/bin/python measurements/2026-11-28-domains-loans/vm.py > measurements/2026-11-28-domains-loans/vm.txt
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import test_numa_vm as T  # noqa: E402  (the tier's own set-up: numba's cache primed on the host)
from numa_vm import DISTANCES_2, guest_data_dir, run_guest  # noqa: E402

data = {"BOBOX_VM_DATA": str(guest_data_dir())}
env = T.primed("two-node", ["tpch_mix"], 2, 2, data)  # as the tier primes (domains_numa itself runs only in a guest)
r = run_guest(["domains_numa"], nodes=2, distances=DISTANCES_2, cpus_per_node=2, timeout=2400, env={**env, **data})
print(json.dumps(r["domains_numa"]))
