"""Boot a real Linux kernel with several NUMA nodes in QEMU and run Python in it.

The NUMA-VM tier (design.md section 7, tier 4). virtme-ng (`vng`) boots the host's
Debian kernel over the host's filesystem, read-only, so the guest runs this very
checkout with the host's Python. KVM hangs on our machines, hence `--disable-kvm`
(TCG emulation: slow, but a real kernel with real NUMA nodes and real page placement).

The guest prints `@@RESULT <name> <json>` lines on stdout; `run_guest` parses them.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bobox_sched.tools import find_tool, tool_env  # noqa: E402

# A 4-node "ring-ish" matrix: neighbours 21, two hops 31, three hops 41 (QEMU needs one
# value per unordered pair; the kernel reports the matrix symmetric).
DISTANCES_4 = {(0, 1): 21, (0, 2): 31, (0, 3): 41, (1, 2): 21, (1, 3): 31, (2, 3): 21}
DISTANCES_2 = {(0, 1): 21}


def kernel_image() -> str | None:
    env = os.environ.get("BOBOX_VM_KERNEL")
    if env:
        return env if os.path.exists(env) else None
    images = sorted(glob.glob("/boot/vmlinuz-*"))
    return images[-1] if images else None


def unavailable_reason() -> str | None:
    if not find_tool("vng"):
        return "virtme-ng (vng) is not installed"
    if not find_tool("qemu-system-x86_64"):
        return "qemu-system-x86_64 is not installed"
    if not kernel_image():
        return "no kernel image in /boot (install linux-image-amd64)"
    if not any(find_tool(b) for b in ("busybox-static", "busybox")):
        return "no busybox (install busybox-static)"
    return None


def vng_command(guest_cmd: str, nodes: int, distances: dict, cpus_per_node: int = 1,
                mem_per_node_mb: int = 1024) -> list[str]:
    cmd = [
        find_tool("vng") or "vng", "--disable-kvm", "-r", kernel_image(),
        "--cpus", str(nodes * cpus_per_node),
        "-m", f"{nodes * mem_per_node_mb}M",
    ]
    for n in range(nodes):
        lo, hi = n * cpus_per_node, (n + 1) * cpus_per_node - 1
        cpus = str(lo) if lo == hi else f"{lo}-{hi}"
        cmd += ["--numa", f"{mem_per_node_mb}M,cpus={cpus}"]
    for (a, b), d in sorted(distances.items()):
        cmd += ["--numa-distance", f"{a},{b}={d}"]
    cmd += ["--exec", guest_cmd]
    return cmd


def emulator_aborted(proc: subprocess.CompletedProcess) -> bool:
    """Whether QEMU aborted on an assertion of its own before the guest wrote a line."""
    return (proc.returncode != 0 and not proc.stdout.strip() and "qemu-system" in proc.stderr
            and "Assertion" in proc.stderr)


def run_guest(checks: list[str], nodes: int = 4, distances: dict | None = None,
              cpus_per_node: int = 1, timeout: int = 1200, env: dict | None = None) -> dict:
    """Boot a guest, run `tests/vm_guest.py CHECK...` in it; return {check: result}.
    `env`: extra environment variables for the guest (paths must lie outside /tmp, which
    the guest does not share)."""
    distances = DISTANCES_4 if distances is None else distances
    if os.environ.get("BOBOX_VM_PROFILE"):  # a check to run under cProfile (vm_guest._profiled)
        env = {**(env or {}), "BOBOX_VM_PROFILE": os.environ["BOBOX_VM_PROFILE"]}
    extra = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items())
    guest = (
        f"cd {REPO} && export NUMBA_CACHE_DIR=/tmp/numba-cache PYTHONPATH={REPO} "
        f"PYTHONUNBUFFERED=1 {extra} && {sys.executable} {REPO / 'tests' / 'vm_guest.py'} {' '.join(checks)}"
    )
    for attempt in (1, 2):
        proc = subprocess.run(
            vng_command(guest, nodes, distances, cpus_per_node),
            capture_output=True, text=True, timeout=timeout, cwd=REPO,
            stdin=subprocess.DEVNULL, env=tool_env(),
        )
        if not emulator_aborted(proc) or attempt == 2:
            break
        # QEMU itself died before the guest printed anything (seen once under a loaded
        # host: "msix_table_mmio_write: Assertion ... failed" while booting the 4-node
        # guest under TCG): an emulator fault, not a result; boot once more.
    results = {}
    times = []
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT "):
            _, name, payload = line.split(" ", 2)
            results[name] = json.loads(payload)
        elif line.startswith("@@TIME "):
            times.append(" ".join(line.split()[1:3]) + " s")
        elif line.startswith("@@PROF "):
            print(line, file=sys.stderr)
    print(f"guest ({nodes} nodes) seconds: " + ", ".join(times), file=sys.stderr)
    missing = [c for c in checks if c not in results]
    if missing:
        raise RuntimeError(
            f"guest produced no result for {missing} (vng exit {proc.returncode})\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
        )
    return results


def guest_data_dir() -> Path:
    """SF 0.01 TPC-H data where the guest can read it (inside the repository: the guest
    has its own /tmp). Generated once; ignored by git."""
    from experiments.datagen import datagen

    return datagen(0.01, REPO / ".vmdata" / "tpch-sf0.01", progress=False)
