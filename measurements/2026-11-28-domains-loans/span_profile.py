"""py-spy's raw output (``--threads --format raw``) counted per thread and per innermost
frame: samples, most first."""

import collections
import sys

threads, frames = collections.Counter(), collections.Counter()
with open(sys.argv[1]) as f:
    for line in f:
        stack, n = line.rsplit(" ", 1)
        parts = stack.split(";")
        threads[parts[0]] += int(n)
        frames[(parts[0], parts[-1][:90])] += int(n)
for k, v in threads.most_common(8):
    print(v, k)
print()
for (t, fr), v in frames.most_common(15):
    print(v, t, fr)
