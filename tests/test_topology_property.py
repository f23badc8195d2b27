"""Property test: random corruptions of every kind of file in every captured tree.

Each example takes one fixture, one to three kinds of file in it (a kind is a path with
its numbers generalised: ``sys/devices/system/cpu/cpuN/cache/indexN/shared_cpu_map``),
one file of each kind, and corrupts it: truncation, NUL bytes, random text, huge
ranges, negative numbers, an empty file, a missing file, binary noise, a file over the
size cap. Then:

* the probe returns a coherent topology, or raises a ``TopologyError`` whose message is
  ONE line naming one of the corrupted files: no other exception, ever;
* the work is bounded by counts, not clocks: every file is read at most once, the ids
  the parsers produce are at most (files read) x (the CPU id bound, one past the
  highest cpuN directory), bytes read are at most (files read) x the size cap, and the
  traced memory peak stays within a small multiple of the clean probe's.
"""

import functools
import json
import re
import tracemalloc

from conftest import fixture_names
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import TopologyError, probe, sysfs
from topology.render import render_tree

NAMES = fixture_names()

HUGE = ["0-999999999", "0-4294967295", "4294967295", "1-99999999999999999999", "0-16383,16384-999999",
        "ffffffff," * 600 + "ffffffff", "10 " * 5000, "Node 0 MemTotal: 99999999999999999999 kB"]
NEGATIVE = ["-1", "-1\n", "-5-3", "0--1", "-1 -1 -1", "-2147483648", "-0"]
OVERSIZE = [b"0," * (sysfs.MAX_FILE_BYTES // 2 + 1), b"ffffffff," * (sysfs.MAX_FILE_BYTES // 9 + 1)]

corruption = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("nul"), st.integers(0, 1 << 16), st.integers(1, 4)),
    st.tuples(st.just("text"), st.text(max_size=40)),
    st.tuples(st.just("huge"), st.sampled_from(HUGE)),
    st.tuples(st.just("negative"), st.sampled_from(NEGATIVE)),
    st.tuples(st.just("empty")),
    st.tuples(st.just("missing")),
    st.tuples(st.just("binary"), st.binary(max_size=64)),
    st.tuples(st.just("oversize"), st.sampled_from(OVERSIZE)),
)


def corrupt(data: bytes, how) -> bytes | None:
    kind = how[0]
    if kind == "truncate":
        return data[: int(len(data) * how[1])]
    if kind == "nul":
        at = how[1] % (len(data) + 1)
        return data[:at] + b"\0" * how[2] + data[at:]
    if kind in ("text", "huge", "negative"):
        return how[1].encode("utf-8", "surrogatepass")
    if kind == "empty":
        return b""
    if kind == "missing":
        return None
    return how[1]  # binary, oversize


# A list file is read only when the files before it are missing or malformed (hwloc
# reads the hex maps): an example may remove those so that the list is the source.
READ_BEFORE = {
    "shared_cpu_list": ["shared_cpu_map"],
    "cpulist": ["cpumap"],
    "thread_siblings_list": ["thread_siblings", "core_cpus"],
    "core_cpus_list": ["thread_siblings", "core_cpus", "thread_siblings_list"],
}
# The kinds that hold CPU or node sets or distances: drawn half of the time.
SETS = re.compile(r".*/(online|cpulist|cpumap|shared_cpu_\w+|thread_siblings\w*|core_cpus\w*|distance"
                  r"|cpus|mems|cpuset\.\w+|cpuset)$")


@functools.lru_cache(maxsize=None)
def kinds_of(root) -> dict:
    kinds: dict[str, list] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            rel = str(p.relative_to(root))
            kinds.setdefault(re.sub(r"\d+", "N", rel), []).append(rel)
    return kinds


def run_probe(root):
    """(topology or the TopologyError, peak traced bytes, the reader the probe used)."""
    readers = []
    real = sysfs.SysfsReader

    class Counting(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            readers.append(self)

    sysfs.SysfsReader = Counting  # the probe looks it up in the module at each call
    tracemalloc.start()
    try:
        try:
            out = probe(root)
        except TopologyError as e:
            out = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        sysfs.SysfsReader = real
    return out, peak, readers[0]


@functools.lru_cache(maxsize=None)
def clean_run(root):
    topo, peak, r = run_probe(root)
    assert not isinstance(topo, Exception)
    return peak, r.reads, r.ids


def check_coherent(topo):
    ids = [c.os_index for c in topo.cpus]
    assert ids and len(set(ids)) == len(ids)
    assert sorted(c for n in topo.nodes for c in n.cpus) == sorted(ids)  # each CPU in one node
    for c in topo.cpus:
        assert c.os_index in topo.node(c.node).cpus and c.os_index in c.siblings
    for n in topo.nodes:
        assert len(n.distances) == len(topo.nodes)
        assert n.distances[topo.node_ids.index(n.os_index)] == 10 or len(topo.nodes) > 1
    for k in topo.caches:
        assert k.cpus and set(k.cpus) <= set(ids)
    assert topo.packet_bytes > 0
    assert all("\n" not in n for n in topo.notes)
    render_tree(topo)
    json.dumps(topo.to_json())


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_random_corruptions_never_crash_and_stay_bounded(data, hwloc_trees):
    name = data.draw(st.sampled_from(NAMES), label="fixture")
    root = hwloc_trees[name]
    kinds = kinds_of(root)
    sets = sorted(k for k in kinds if SETS.match(k))
    kind = st.one_of(st.sampled_from(sets), st.sampled_from(sorted(kinds))) if sets else st.sampled_from(sorted(kinds))
    chosen = data.draw(st.lists(kind, min_size=1, max_size=3, unique=True), label="kinds")
    targets = [data.draw(st.sampled_from(kinds[k]), label="file") for k in chosen]
    hows = [data.draw(corruption, label="corruption") for _ in targets]
    removed = []  # files read before a target, removed so that the target is the source
    for rel in targets:
        head, _, base = rel.rpartition("/")
        before = [f"{head}/{b}" for b in READ_BEFORE.get(base, []) if (root / head / b).is_file()]
        if before and data.draw(st.booleans(), label=f"make {base} the source"):
            removed += [b for b in before if b not in targets and b not in removed]

    saved = {rel: (root / rel).read_bytes() for rel in targets + removed}
    try:
        for rel in removed:
            (root / rel).unlink()
        for rel, how in zip(targets, hows):
            new = corrupt(saved[rel], how)
            if new is None:
                (root / rel).unlink()
            else:
                (root / rel).write_bytes(new)
        out, peak, r = run_probe(root)
    finally:
        for rel, old in saved.items():
            (root / rel).write_bytes(old)

    if isinstance(out, TopologyError):
        msg = str(out)
        assert "\n" not in msg
        assert any(str(root / rel) in msg for rel in targets), msg
    else:
        check_coherent(out)
    check_bounded(root, r, peak, len(targets) + len(removed))


def id_bound(root) -> int:
    """Most ids one file can yield: one past the highest cpuN (or nodeN) directory."""
    def top(rel, prefix, cap):
        ids = [int(m.group(1)) for p in (root / rel).glob(f"{prefix}*") if (m := re.fullmatch(prefix + r"(\d+)", p.name))]
        return max(ids) + 1 if ids else cap
    return max(top("sys/devices/system/cpu", "cpu", sysfs.MAX_CPU_ID), top("sys/devices/system/node", "node",
                                                                           sysfs.MAX_NODE_ID))


def check_bounded(root, r, peak, edited):
    """The work of a probe of a corrupted tree, against the clean probe's."""
    clean_peak, clean_reads, clean_ids = clean_run(root)
    kinds = kinds_of(root)
    # no file is read twice
    assert r.reads <= sum(len(v) for v in kinds.values())
    # each edited file, and each file read in its stead, yields at most one CPU set of
    # the machine's size: a "0-999999999" costs what the real CPU count costs
    extra_files = edited + max(0, r.reads - clean_reads)
    assert r.ids <= clean_ids + extra_files * id_bound(root), (r.ids, clean_ids, extra_files)
    assert r.bytes_read <= r.reads * (sysfs.MAX_FILE_BYTES + 1) + sysfs.MAX_MOUNTS_BYTES
    # memory: coarse (interpreter noise aside), against the gigabytes of issue 9
    assert peak <= 3 * clean_peak + (8 << 20), (peak, clean_peak)


# -- the set files on their own: every list or map kind as the source, hostile values --

LIST_FILES = re.compile(r".*/(online|cpulist|shared_cpu_list|thread_siblings_list|core_cpus_list|cpus|mems"
                        r"|cpuset\.cpus|cpuset\.mems|cpuset\.cpus\.effective|cpuset\.mems\.effective)$")
MASK_FILES = re.compile(r".*/(cpumap|shared_cpu_map|thread_siblings|core_cpus)$")
ranges = st.builds(lambda lo, n: f"{lo}-{lo + n}", st.integers(0, 1 << 32), st.integers(0, 1 << 40))
hostile_list = st.one_of(st.sampled_from(HUGE + NEGATIVE), ranges,
                         st.lists(ranges, min_size=1, max_size=50).map(",".join))
hostile_mask = st.one_of(st.sampled_from(["ffffffff," * 2000 + "ffffffff", "-1", "f" * 64, "0,", ","]),
                         st.lists(st.integers(0, (1 << 32) - 1).map("{:08x}".format), min_size=1,
                                  max_size=300).map(",".join))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_hostile_cpu_sets_cost_the_real_cpu_count(data, hwloc_trees):
    name = data.draw(st.sampled_from(NAMES), label="fixture")
    root = hwloc_trees[name]
    kinds = kinds_of(root)
    sets = sorted(k for k in kinds if LIST_FILES.match(k) or MASK_FILES.match(k))
    rel = data.draw(st.sampled_from(kinds[data.draw(st.sampled_from(sets), label="kind")]), label="file")
    head, _, base = rel.rpartition("/")
    text = data.draw(hostile_mask if MASK_FILES.match(rel) else hostile_list, label="value")
    before = [f"{head}/{b}" for b in READ_BEFORE.get(base, []) if (root / head / b).is_file()]
    saved = {x: (root / x).read_bytes() for x in [rel, *before]}
    try:
        for x in before:
            (root / x).unlink()
        (root / rel).write_text(text + "\n")
        out, peak, r = run_probe(root)
    finally:
        for x, old in saved.items():
            (root / x).write_bytes(old)
    if isinstance(out, TopologyError):
        assert "\n" not in str(out) and str(root / rel) in str(out), str(out)
    else:
        check_coherent(out)
    check_bounded(root, r, peak, 1 + len(before))
