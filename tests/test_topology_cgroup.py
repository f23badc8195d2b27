"""The cgroup cpuset: how it is found (v1, v2, the legacy cpuset file system, the
container layout) and what it does to the probe, on small synthetic roots and on the
live machine. The captured trees of hwloc's test suite are in test_topology_fixtures."""

import os
import re
from pathlib import Path

import pytest

from topology import TopologyError, cgroup, probe
from topology.sysfs import SysfsReader, parse_cpulist


def tree(root, files: dict):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def machine(root, cgroup_files: dict):
    """4 CPUs on 2 nodes (0-1 on node 0, 2-3 on node 1), plus the cgroup files."""
    files = {
        "sys/devices/system/cpu/online": "0-3\n",
        "sys/devices/system/node/node0/cpumap": "00000003\n",
        "sys/devices/system/node/node1/cpumap": "0000000c\n",
        "sys/devices/system/node/node0/distance": "10 21\n",
        "sys/devices/system/node/node1/distance": "21 10\n",
    }
    for c in range(4):
        files[f"sys/devices/system/cpu/cpu{c}/topology/core_id"] = f"{c}\n"
    return tree(root, {**files, **cgroup_files})


def allowed(root):
    return cgroup.allowed(SysfsReader(root), cpu_limit=4, node_limit=2)


def test_cgroup_v2_standard_mount(tmp_path):
    root = machine(tmp_path, {
        "sys/fs/cgroup/cpuset.cpus.effective": "0-3\n",
        "sys/fs/cgroup/job/cpuset.cpus.effective": "2-3\n",
        "sys/fs/cgroup/job/cpuset.mems.effective": "1\n",
        "proc/self/cgroup": "0::/job\n",
    })
    a = allowed(root)
    assert (a.cgroup, a.cpus, a.mems) == ("/job", {2, 3}, {1})
    assert a.cpus_file == str(root / "sys/fs/cgroup/job/cpuset.cpus.effective")
    topo = probe(root)
    assert topo.node_ids == [1] and [c.os_index for c in topo.cpus] == [2, 3]


def test_cgroup_v1_prefixed_files_from_proc_mounts(tmp_path):
    root = machine(tmp_path, {
        "proc/mounts": "cgroup /cg\\040dir cgroup rw,nosuid,cpuset 0 0\n",  # "\040" is a space
        "cg dir/batch/cpuset.cpus": "1\n",
        "cg dir/batch/cpuset.mems": "0\n",
        "proc/self/cpuset": "/batch\n",
    })
    a = allowed(root)
    assert (a.cpus, a.mems) == ({1}, {0})
    assert [c.os_index for c in probe(root).cpus] == [1]


def test_legacy_cpuset_and_noprefix_cgroup(tmp_path):
    for fstype, opts in (("cpuset", "rw"), ("cgroup", "rw,cpuset,noprefix")):
        root = machine(tmp_path / fstype, {
            "proc/mounts": f"none /cpusets {fstype} {opts} 0 0\n",
            "cpusets/a/cpus": "0,3\n",
            "cpusets/a/mems": "0-1\n",
            "proc/self/cpuset": "/a\n",
        })
        topo = probe(root)
        assert [c.os_index for c in topo.cpus] == [0, 3], fstype
        assert topo.node(0).cpus == (0,) and topo.node(1).cpus == (3,)


def test_cgroup2_without_cpuset_controller_is_skipped(tmp_path):
    root = machine(tmp_path, {
        "proc/mounts": "cgroup2 /unified cgroup2 rw 0 0\ncgroup /v1 cgroup rw,cpuset 0 0\n",
        "unified/cgroup.controllers": "cpu io memory pids\n",
        "unified/cpuset.cpus.effective": "0\n",  # not a cpuset hierarchy: ignored
        "v1/cpuset.cpus": "0-2\n",
        "proc/self/cgroup": "12:cpuset:/\n0::/\n",
    })
    assert allowed(root).cpus == {0, 1, 2}


def test_container_reads_its_own_cgroup_at_the_mount_point(tmp_path):
    # Docker without a cgroup namespace: /proc/self/cgroup names the host's path, the
    # container sees its own cgroup mounted at /sys/fs/cgroup/cpuset. hwloc applies no
    # restriction then; we read the mount point's files (a superset of any cgroup below).
    root = machine(tmp_path, {
        "sys/fs/cgroup/cpuset/cpuset.cpus": "1-2\n",
        "sys/fs/cgroup/cpuset/cpuset.mems": "0\n",
        "proc/self/cgroup": "5:cpuset:/docker/0123abcd\n",
    })
    a = allowed(root)
    assert (a.cgroup, a.cpus, a.mems) == ("/docker/0123abcd", {1, 2}, {0})
    topo = probe(root)
    # CPU 2's node is not allowed: it goes to the nearest allowed node, with a note
    assert topo.node_ids == [0] and topo.node(0).cpus == (1, 2)
    assert any(n.startswith("CPUs in no usable NUMA node attached to the nearest node: 2") for n in topo.notes)


def test_no_cpuset_anywhere_means_no_restriction(tmp_path):
    root = machine(tmp_path, {"proc/mounts": "proc /proc proc rw 0 0\n"})
    a = allowed(root)
    assert a.cpus is None and a.mems is None
    assert len(probe(root).cpus) == 4


@pytest.mark.parametrize("bad", ["garbage\n", "-1\n", "0-3\0junk", "\xff\xfe"])
def test_malformed_cgroup_file_is_noted_and_ignored(tmp_path, bad):
    root = machine(tmp_path, {
        "sys/fs/cgroup/cpuset/cpuset.cpus": bad,
        "sys/fs/cgroup/cpuset/cpuset.mems": "0-1\n",
        "proc/self/cpuset": "/\n",
    })
    topo = probe(root)
    assert len(topo.cpus) == 4
    f = str(root / "sys/fs/cgroup/cpuset/cpuset.cpus")
    noted = any(n.startswith(f) and "cgroup restriction ignored" in n for n in topo.notes)
    # "0-3\0junk" is read up to the NUL, like hwloc: a valid list, nothing to note
    assert noted == (not bad.startswith("0-3"))


@pytest.mark.parametrize("empty", ["\n", "\0\n"])
def test_empty_cpuset_is_an_error_naming_the_file(tmp_path, empty):
    root = machine(tmp_path, {"sys/fs/cgroup/cpuset/cpuset.cpus": empty, "proc/self/cpuset": "/\n"})
    with pytest.raises(TopologyError, match=re.escape(str(root / "sys/fs/cgroup/cpuset/cpuset.cpus"))):
        probe(root)


def test_cpuset_name_cannot_escape_the_root(tmp_path):
    root = machine(tmp_path, {
        "sys/fs/cgroup/cpuset/cpuset.cpus": "0-3\n",
        "proc/self/cpuset": "/../../../etc\n",
    })
    r = SysfsReader(root)
    assert cgroup.cpuset_name(r) is None
    assert any("not a cpuset name" in n for n in r.notes)


# -- the live machine (containers) -------------------------------------------------

def status_list(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return set(parse_cpulist(line.split(":", 1)[1])[0])
    return None


def test_live_cpuset_agrees_with_the_kernel():
    a = cgroup.allowed(SysfsReader(Path("/")), cpu_limit=1 << 14, live=True)
    if a.cpus is not None:
        # the kernel keeps a task's affinity inside its cpuset
        assert os.sched_getaffinity(0) <= a.cpus
    mems = status_list("Mems_allowed_list")
    topo = probe("/")
    if mems is not None:
        assert set(topo.node_ids) <= mems
        assert a.mems is None or a.mems <= mems
    assert {c.os_index for c in topo.cpus} <= os.sched_getaffinity(0)
