"""Tier 4: a real Linux kernel with 4 NUMA nodes in QEMU (virtme-ng).

Everything here is checked against what the guest kernel reports, not against our own
bookkeeping. Skipped where QEMU/virtme-ng/a kernel image are missing, unless
BOBOX_REQUIRE_VM=1 (set by .ci/run), where a missing VM is a failure."""

import os
import subprocess
import sys

import pytest
from numa_vm import DISTANCES_2, DISTANCES_4, REPO, guest_data_dir, run_guest, unavailable_reason

# Each guest boots an emulated machine (QEMU TCG here) and its fixture first primes numba's
# cache on the host: minutes each (the 2-node guest, every 2-node check in one boot, took
# 527 s alone), more beside the other tiers (make test runs them in parallel).
pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.timeout(3000)]


def require_vm():
    reason = unavailable_reason()
    if reason:
        if os.environ.get("BOBOX_REQUIRE_VM") == "1":
            pytest.fail(f"NUMA-VM tier required but unavailable: {reason}")
        pytest.skip(reason)


def result(res: dict, check: str):
    """One check's result; a check that raised in the guest fails the tests that read it
    (all of the 4-node guest's, whose fixture asks for every check)."""
    r = res[check]
    assert not (isinstance(r, dict) and "error" in r), f"{check}: {r.get('error')}"
    return r


@pytest.fixture(scope="module")
def guest4():
    require_vm()
    res = run_guest(["topology", "pinning", "alloc", "numa_factor", "sched_pinning", "sched_balance"], nodes=4)
    for name in res:
        result(res, name)
    return res


def primed(name: str, checks: list[str], nodes: int, per_node: int, env: dict | None = None,
           commands: tuple = ()) -> dict:
    """Prime numba's cache for a guest of `nodes` x `per_node` CPUs on the host: run
    `checks` of tests/vm_guest.py (and each argument list in `commands` as
    ``python -m bobox_sched ...``) here, compiled for a generic CPU (NUMBA_CPU_NAME=generic:
    the same cache key in the emulated guest) into .vmdata/numba-<name>, with the guest's
    shape as virtual nodes (BOBOX_VM_PRIME_NODES: the worker count picks which kernels
    run, the node count some argument types). Returns the environment that makes the
    guest copy that cache before it imports numba (vm_guest._primed_cache): the guest
    runs under emulation (QEMU TCG here), where compiling takes minutes a kernel set;
    with the host's own shape the TStream guest compiled 4 kernels and ran past 600 s
    in CI."""
    vm = REPO / ".vmdata"
    cache = vm / f"numba-{name}"
    mpl = vm / "mplconfig"  # matplotlib's font cache, built by the host runs (vm_guest._primed_cache)
    base = {"NUMBA_CPU_NAME": "generic", "BOBOX_KERNEL_CACHE": str(vm / "kernels"), **(env or {})}
    host = {**os.environ, **base, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO),
            "BOBOX_VM_PRIME_NODES": f"{nodes}x{per_node}", "MPLCONFIGDIR": str(mpl)}
    def run(cmd):
        r = subprocess.run(cmd, cwd=REPO, env=host, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, (cmd, r.stderr[-3000:])
        return r.stdout

    if checks:
        got = run([sys.executable, str(REPO / "tests" / "vm_guest.py"), *checks])
        for c in checks:
            line = next((x for x in got.splitlines() if x.startswith(f"@@RESULT {c} ")), None)
            assert line is not None and '"error"' not in line, (c, got[-3000:])
    for c in commands:
        run([sys.executable, "-m", "bobox_sched", *c])
    return {**base, "BOBOX_VM_PRIMED_CACHE": str(cache), "NUMBA_CACHE_DIR": "/tmp/numba-primed",
            "BOBOX_VM_PRIMED_MPL": str(mpl), "MPLCONFIGDIR": "/tmp/mplconfig"}


def expected_matrix(n, table):
    return [[10 if a == b else table[(min(a, b), max(a, b))] for b in range(n)] for a in range(n)]


def test_probe_sees_four_nodes_with_configured_distances(guest4):
    t = guest4["topology"]
    assert [n["os_index"] for n in t["nodes"]] == [0, 1, 2, 3]
    assert [n["cpus"] for n in t["nodes"]] == [[0], [1], [2], [3]]
    assert [n["distances"] for n in t["nodes"]] == expected_matrix(4, DISTANCES_4)
    assert all(n["memory_bytes"] > 512 * 2**20 for n in t["nodes"])


def test_thread_pinned_to_node_gets_exactly_its_cpus(guest4):
    t = guest4["topology"]
    for n in t["nodes"]:
        got = guest4["pinning"][str(n["os_index"])]
        sep = got.index(-1)
        assert got[:sep] == n["cpus"]  # what pin_to_node reports
        assert got[sep + 1 :] == n["cpus"]  # what the kernel says afterwards


def test_buffer_on_node_k_has_all_pages_on_k(guest4):
    for k in ["0", "1", "2", "3"]:
        hist = guest4["alloc"][k]
        assert set(hist) == {k}, hist
        assert hist[k] == (8 << 20) // 4096


def test_numa_factor_is_4x4_with_unit_diagonal(guest4):
    m = guest4["numa_factor"]
    assert m["cpu_nodes"] == [0, 1, 2, 3] and m["mem_nodes"] == [0, 1, 2, 3]
    f = m["factors"]
    assert len(f) == 4 and all(len(r) == 4 for r in f)
    assert [f[i][i] for i in range(4)] == [1.0] * 4
    assert all(x > 0 for r in f for x in r)


def test_scheduler_workers_pinned_to_their_node(guest4):
    ws = guest4["sched_pinning"]
    assert sorted({w["node"] for w in ws}) == [0, 1, 2, 3]
    for w in ws:
        assert w["kernel_cpus"] == w["node_cpus"], w


def test_balancer_moves_work_off_an_overloaded_node(guest4):
    b = guest4["sched_balance"]
    assert b["results"] == [sum(range(1, 61)) * 4] * 6
    assert b["migrations"] + b["shares"] >= 1
    assert any(set(n) - {0} for n in b["request_nodes"])


@pytest.fixture(scope="module")
def guest2():
    """2 nodes x 2 CPUs, one boot for every 2-node check: the machine of the locality goal
    (topology, pinning, packet locality, the numa-factor and numa-placement experiments),
    parallel-region channels and TStream's state pages. Numba's cache is primed on the
    host for this shape first (``primed``). Three guests became this one: a boot and the
    guest's imports take minutes under emulation (the 4-node guest, which compiles
    nothing, took 177 s alone)."""
    require_vm()
    data = {"BOBOX_VM_DATA": str(guest_data_dir())}
    out = REPO / ".vmdata" / "prime-out"
    env = primed("two-node", ["tpch_mix", "regions_numa", "tstream_numa"], 2, 2, data,
                 commands=(["experiment", "numa-factor", "--quick", "--repeat", "1", "--out", str(out), "--data",
                               data["BOBOX_VM_DATA"], "--no-progress", "--bytes", "4M"],))
    return run_guest(["topology", "sched_pinning", "sched_locality", "experiments", "regions_numa", "tstream_numa",
                      "domains_numa"],
                     nodes=2, distances=DISTANCES_2, cpus_per_node=2, timeout=2400, env={**env, **data})


def test_two_node_guest_topology_and_pinning(guest2):
    t = result(guest2, "topology")
    assert [n["cpus"] for n in t["nodes"]] == [[0, 1], [2, 3]]
    assert [n["distances"] for n in t["nodes"]] == [[10, 21], [21, 10]]
    for w in result(guest2, "sched_pinning"):
        assert w["kernel_cpus"] == w["node_cpus"]


def test_packets_land_on_the_consuming_workers_node(guest2):
    loc = result(guest2, "sched_locality")
    assert loc["nodes"] == 2 and loc["pages"] > 0
    # Pages of consumed packets, per the kernel, on the consuming worker's node. Only a
    # packet consumed on another node than it was produced on (a shared request) can be
    # remote; the design keeps that rare.
    assert loc["local_fraction"] >= 0.95, loc


def test_two_domains_each_on_its_node_with_local_packets(guest2):
    """domains="auto" (2 CPUs per domain) on 2 nodes x 2 CPUs: one domain per node, each
    process pinned to its node's CPUs and preferring its memory (the kernel's answers),
    both ran work, and consumed packets' pages are on the consumer's node."""
    r = result(guest2, "domains_numa")
    assert [(d["cpus"], d["node"]) for d in r["domains"]] == [([0, 1], 0), ([2, 3], 1)]
    assert [d["kernel_cpus"] for d in r["domains"]] == ["0-1", "2-3"]
    for k, d in enumerate(r["domains"]):  # the process prefers its node; bobox's own mbind()s name it too
        assert f"prefer:{k}" in d["policies"], d
        assert all(p in ("local", "default") or p.endswith(f":{k}") for p in d["policies"]), d
    assert all(t > 0 for t in r["tasks"]) and r["pages"] > 0
    assert r["local_fraction"] >= 0.95, r
    # a plan's shared array: each domain maps its node's copy (shared_arrays, shm.prefer_node)
    assert r["array_pages"] == [[0], [1]], r["array_pages"]


def test_numa_experiments_on_two_nodes(guest2):
    e = result(guest2, "experiments")
    nf = e["numa-factor"]
    assert nf["png_ok"] and nf["csv_rows"] >= 2 * 2 * 2  # seconds per repeat + factors, 2x2 pairs
    assert nf["json"]["cpu_nodes"] == [0, 1] and [nf["json"]["factors"][i][i] for i in range(2)] == [1.0, 1.0]
    pl = e["numa-placement"]
    assert pl["png_ok"] and pl["csv_rows"] == 2  # local + remote, one repeat
    assert pl["json"]["local_s"] > 0 and pl["json"]["remote_s"] > 0
    assert "Figure 2: memory placement" in e["report"] and "Skipped" not in e["report"]


def test_region_channels_run_on_both_nodes_with_node_local_state(guest2):
    """Parallel-region channels spread over the nodes (channel c on node slot c): every
    channel ran only on its node, its state's pages are there (the kernel says), both
    nodes were used, and the output equals the sequential run's."""
    r = result(guest2, "regions_numa")
    assert r["identical"] and r["rows"] == 40000
    assert r["nodes"] == [0, 1]
    assert sorted(r["channels"]) == ["0", "1", "2", "3"]
    for c, info in r["channels"].items():
        node = r["nodes"][int(c) % 2]
        assert info["nodes"] == [node], (c, info)
        assert set(info["state_pages"]) == {str(node)}, (c, info)
    assert {n for info in r["channels"].values() for n in info["nodes"]} == {0, 1}


def test_tstream_state_pages_on_their_pools_nodes(guest2):
    """Every store segment's pages are on the node it was placed for (the kernel's
    answer), every run equals the serial oracle, and without stealing every pool task
    ran on its pool's node, with all its records' pages local."""
    t = result(guest2, "tstream_numa")
    assert sorted(set(t["workers"])) == [0, 1]
    for mode in ("shared-nothing", "shared-per-socket", "shared-everything"):
        m = t[mode]
        assert m["equal"], mode
        assert sorted(placed for placed, _ in m["segments"]) == [0, 1], mode
        for placed, hist in m["segments"]:
            assert set(hist) == {str(placed)}, (mode, placed, hist)
    assert t["shared-nothing"]["pools"] == 4 and t["shared-per-socket"]["pools"] == 2
    for mode in ("shared-nothing", "shared-per-socket"):
        assert t[mode]["placement_locality"] == 1.0 and t[mode]["page_locality"] == 1.0, t[mode]
    # one pool over both nodes' records, walked by any worker: about half local
    assert 0.2 < t["shared-everything"]["page_locality"] < 0.8, t["shared-everything"]
