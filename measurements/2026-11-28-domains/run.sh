#!/bin/bash
# Issue 32's figures that exist so far, at one commit, on this machine, nothing else
# running: `bobox bench domains --json` (gil_bound_speedup, the ring's hop) and
# `bobox bench ring --json`, with the machine's description. Outputs next to this file,
# or in the folder given as the first argument.
set -u
D=$(cd "${1:-$(dirname "$0")}" && pwd)
TOP=$(git -C "$D" rev-parse --show-toplevel)
git -C "$TOP" rev-parse HEAD > "$D/commit.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "python: $("$TOP/.venv/bin/python" -c 'import sys; print(sys.version.split()[0])')"
  echo "kernel: $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)'
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$D/machine.txt"
"$TOP/.venv/bin/bobox" bench domains --json > "$D/bench-domains.txt" 2> "$D/bench-domains.err"
tail -n 1 "$D/bench-domains.txt" > "$D/bench-domains.json"
"$TOP/.venv/bin/bobox" bench ring --json > "$D/bench-ring.txt" 2> "$D/bench-ring.err"
tail -n 1 "$D/bench-ring.txt" > "$D/bench-ring.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$D/machine.txt"
