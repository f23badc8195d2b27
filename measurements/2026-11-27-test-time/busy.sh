#!/bin/bash
# system-wide busy CPU seconds (user+nice+system+irq+softirq+steal) during CMD
here=$(dirname "$0")
python3 "$here/speed.py" >&2
b() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
s=$(b); t=$(date +%s.%N); "$@"; rc=$?; e=$(b); t2=$(date +%s.%N)
echo "busy $(( (e-s)/$(getconf CLK_TCK) )) CPU-s in $(echo "$t2 - $t" | bc) s wall rc=$rc" >&2
python3 "$here/speed.py" >&2
exit $rc
