"""The probe, pinning and node-local memory on the machine the tests run on."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import topology
from topology import TopologyError


@pytest.fixture(scope="module")
def topo():
    return topology.probe()


def in_thread(fn):
    out = {}

    def run():
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def test_probe_agrees_with_affinity(topo):
    assert topo.live
    assert sorted(c.os_index for c in topo.cpus) == sorted(os.sched_getaffinity(0))
    assert sum(len(n.cpus) for n in topo.nodes) == len(topo.cpus)
    assert topo.packet_bytes > 0
    assert all(len(n.distances) == len(topo.nodes) for n in topo.nodes)
    assert topo.cpu_model


def test_pinning_a_thread_takes_effect_and_only_for_that_thread(topo):
    before = topology.current_mask()
    target = max(c.os_index for c in topo.cpus)
    got = in_thread(lambda: (topology.pin_to_cpu(topo, target), os.sched_getaffinity(0)))
    assert got[0] == {target} and got[1] == {target}
    assert topology.current_mask() == before  # the calling thread keeps its mask


def test_pin_to_node(topo):
    node = topo.cpu_nodes[-1]
    got = in_thread(lambda: topology.pin_to_node(topo, node.os_index))
    assert got == set(node.cpus)


def test_pin_unknown_node_or_cpu_is_an_error(topo):
    with pytest.raises(TopologyError, match="unknown NUMA node 999"):
        topology.pin_to_node(topo, 999)
    with pytest.raises(TopologyError, match="unknown CPU"):
        topology.pin_to_cpu(topo, 100000)


def test_pinning_impossible_warns_not_crashes():
    # CPU 100000 does not exist: the kernel refuses; we warn and keep the mask.
    def attempt():
        with pytest.warns(topology.PinningWarning):
            return topology.pin_to_cpus([100000])

    assert in_thread(attempt) == topology.current_mask()


def test_alloc_on_node_pages_are_on_that_node(topo):
    for node in topo.node_ids:
        a = topology.alloc_on_node(4 << 20, node, np.int64)
        assert a.dtype == np.int64 and a.nbytes == 4 << 20 and not a.any()
        pages = topology.page_nodes(a)
        assert len(pages) == (4 << 20) // topology.memory.PAGE_SIZE
        assert set(pages.tolist()) == {node}


def test_buffer_freed_when_last_view_dies():
    import gc
    import weakref

    a = topology.alloc_on_node(1 << 20, 0)
    block = a.base
    while not isinstance(block, topology.memory._NodeBlock):
        block = block.base
    ref = weakref.ref(block)
    view = a[100:200]
    del a, block
    gc.collect()
    assert ref() is not None  # a view still holds it
    del view
    gc.collect()
    assert ref() is None


def test_alloc_bad_input():
    with pytest.raises(TopologyError, match="unknown NUMA node 77"):
        topology.alloc_on_node(4096, 77)
    with pytest.raises(TopologyError, match="positive"):
        topology.alloc_on_node(0, 0)


def test_untouched_plain_memory_reports_enoent():
    import mmap

    m = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    arr = np.frombuffer(m, dtype=np.uint8)
    assert set(topology.page_nodes(arr).tolist()) == {-2}  # -ENOENT: never faulted in
    arr2 = np.frombuffer(m, dtype=np.uint8)  # noqa: F841
    del arr, arr2
    m.close()


def test_numa_factor_live_unit_diagonal(topo):
    from topology.numa_factor import measure

    nf = measure(topo, nbytes=2 << 20, repeat=1)
    assert nf.cpu_nodes == [n.os_index for n in topo.cpu_nodes]
    for i, c in enumerate(nf.cpu_nodes):
        assert nf.factors[i][nf.mem_nodes.index(c)] == 1.0
        assert all(x > 0 for x in nf.factors[i])


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("entry", [("topology",), ("bobox_sched", "topology")])
def test_cli_bad_roots(entry, tmp_path):
    r = run_cli(*entry, "--root", str(tmp_path / "missing"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"error: topology root does not exist: {tmp_path / 'missing'}"]
    r = run_cli(*entry, "--root", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no sys/ directory" in r.stderr and str(tmp_path) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_tree_json_and_numa_factor():
    r = run_cli("bobox_sched", "topology")
    assert r.returncode == 0 and "Machine" in r.stdout and "PU L#0" in r.stdout
    r = run_cli("bobox_sched", "topology", "--json", "--packet-bytes", "64K")
    import json

    assert json.loads(r.stdout)["packet_bytes"] == 65536
    r = run_cli("bobox_sched", "topology", "--numa-factor", "--bytes", "1M", "--repeat", "1", "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert m["factors"][0][m["mem_nodes"].index(m["cpu_nodes"][0])] == 1.0
    r = run_cli("bobox_sched", "topology", "--packet-bytes", "-5")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = run_cli("bobox_sched", "topology", "--help")
    assert r.returncode == 0 and "--numa-factor" in r.stdout
