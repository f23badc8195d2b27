"""Tier 4: a real Linux kernel with 4 NUMA nodes in QEMU (virtme-ng).

Everything here is checked against what the guest kernel reports, not against our own
bookkeeping. Skipped where QEMU/virtme-ng/a kernel image are missing, unless
BOBOX_REQUIRE_VM=1 (set by .ci/run), where a missing VM is a failure."""

import os

import pytest
from numa_vm import DISTANCES_4, run_guest, unavailable_reason

pytestmark = [pytest.mark.vm, pytest.mark.slow]


@pytest.fixture(scope="module")
def guest4():
    reason = unavailable_reason()
    if reason:
        if os.environ.get("BOBOX_REQUIRE_VM") == "1":
            pytest.fail(f"NUMA-VM tier required but unavailable: {reason}")
        pytest.skip(reason)
    res = run_guest(["topology", "pinning", "alloc", "numa_factor"], nodes=4)
    for name, r in res.items():
        assert not (isinstance(r, dict) and "error" in r), f"{name}: {r.get('error')}"
    return res


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
