"""Command line of the topology probe: ``python -m topology`` and ``bobox topology``."""

from __future__ import annotations

import argparse
import decimal
import json
import re
import sys

from topology.errors import TopologyError


_BYTES = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT])(?:I?B)?|B)?\s*", re.I)
_UNIT = {None: 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_bytes(text: str) -> int:
    """``131072``, ``128K``, ``128KiB``, ``2M``, ``1.5G`` -> bytes (argparse type).

    Only plain decimal numbers with an optional binary unit: ``inf``, ``nan``, ``1e9``
    and negative sizes are refused (``int(float("inf"))`` used to end in a traceback)."""
    m = _BYTES.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r} (examples: 4096, 64K, 2MiB, 1.5G)")
    v = int(decimal.Decimal(m.group(1)) * _UNIT[m.group(2) and m.group(2).upper()])
    if v <= 0:
        raise argparse.ArgumentTypeError(f"byte size must be positive: {text!r}")
    return v


def _packet_bytes(text: str) -> int:
    from topology.limits import MAX_PACKET_BYTES, MIN_PACKET_BYTES

    return bounded_bytes(text, MIN_PACKET_BYTES, MAX_PACKET_BYTES)


def bounded_bytes(text: str, minimum: int, cap: int) -> int:
    """A byte size in [minimum, cap] (argparse type)."""
    v = parse_bytes(text)
    if v < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is below the minimum of {minimum} bytes")
    if v > cap:
        raise argparse.ArgumentTypeError(f"{text!r} is above the cap of {_human(cap)} ({cap} bytes)")
    return v


def _human(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def array_bytes(text: str) -> int:
    """--bytes of --numa-factor: one array of that size is allocated on each node in turn,
    so it must fit in half of the memory available now (a 100G array on a 23 GiB machine
    ended in a MemoryError traceback)."""
    import psutil

    avail = psutil.virtual_memory().available
    v = parse_bytes(text)
    if v < 4096:
        raise argparse.ArgumentTypeError(f"{text!r} is below the minimum of 4096 bytes")
    if v > avail // 2:
        raise argparse.ArgumentTypeError(
            f"{text!r} ({_human(v)}) is more than half of the {_human(avail)} of memory available now")
    return v


def _root(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (it would read the working directory)")
    return text


def _repeat(text: str) -> int:
    from topology.limits import MAX_REPEAT, count_problem

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    problem = count_problem(v, MAX_REPEAT)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=_root, default="/", metavar="DIR",
                   help="read a captured tree (a folder holding sys/ and proc/) instead of this machine")
    p.add_argument("--json", action="store_true", help="print JSON instead of the tree")
    p.add_argument("--packet-bytes", type=_packet_bytes, metavar="B",
                   help="override the packet size (default: half the L2 cache)")
    p.add_argument("--numa-factor", action="store_true",
                   help="measure the NUMA-factor matrix (array reversal per CPU node x memory node)")
    p.add_argument("--bytes", type=array_bytes, metavar="B",
                   help="array size for --numa-factor (default: max(64MiB, 4 x L3); at most half the available "
                   "memory)")
    p.add_argument("--repeat", type=_repeat, default=3, help="timed runs per pair, best kept (default 3)")


def run(args) -> int:
    from topology.probe import probe
    from topology.render import render_tree

    topo = probe(args.root, packet_bytes=args.packet_bytes)
    if args.numa_factor:
        if not topo.live:
            raise TopologyError("--numa-factor measures this machine; it cannot be used with --root")
        from topology.numa_factor import measure

        def progress(done, total, c, m):
            print(f"\r[numa-factor] {done}/{total} cpu node {c} x memory node {m}",
                  end="" if done < total else "\n", file=sys.stderr, flush=True)

        nf = measure(topo, args.bytes, args.repeat, progress=progress)
        if args.json:
            print(json.dumps(nf.to_json()))
        else:
            print(f"NUMA factor (array reversal, {nf.nbytes // 2**20} MiB, best of {nf.repeat}; "
                  "rows: CPU node, columns: memory node, relative to local)")
            print(nf.table())
        return 0
    if args.json:
        print(json.dumps(topo.to_json(), indent=None))
    else:
        print(render_tree(topo))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m topology",
        description="Show this machine's NUMA nodes, CPUs and caches (like lstopo), "
        "or a captured sysfs/procfs tree with --root.",
    )
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except TopologyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # piped into `head`: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
