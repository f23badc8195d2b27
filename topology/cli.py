"""Command line of the topology probe: ``python -m topology`` and ``bobox topology``."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import TopologyError


def parse_bytes(text: str) -> int:
    """``131072``, ``128K``, ``128KiB``, ``2M`` -> bytes (argparse type)."""
    t = text.strip().upper().replace("IB", "").replace("B", "")
    mult = 1
    if t and t[-1] in "KMG":
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}[t[-1]]
        t = t[:-1]
    try:
        v = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"byte size must be positive: {text!r}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR",
                   help="read a captured tree (a folder holding sys/ and proc/) instead of this machine")
    p.add_argument("--json", action="store_true", help="print JSON instead of the tree")
    p.add_argument("--packet-bytes", type=parse_bytes, metavar="B",
                   help="override the packet size (default: half the L2 cache)")
    p.add_argument("--numa-factor", action="store_true",
                   help="measure the NUMA-factor matrix (array reversal per CPU node x memory node)")
    p.add_argument("--bytes", type=parse_bytes, metavar="B",
                   help="array size for --numa-factor (default: max(64MiB, 4 x L3))")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per pair, best kept (default 3)")


def run(args) -> int:
    from .probe import probe
    from .render import render_tree

    topo = probe(args.root, packet_bytes=args.packet_bytes)
    if args.numa_factor:
        if not topo.live:
            raise TopologyError("--numa-factor measures this machine; it cannot be used with --root")
        from .numa_factor import measure

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
