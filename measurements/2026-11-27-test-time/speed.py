"""This machine's speed for the test suite's kind of work, printed as one line: the CPU
seconds (best of 5) of a fixed pure-Python workload (dict, list and string work, as the
runtime's and the tests' Python does). Printed before and after a measured run by
busy.sh, so that runs on different days can be compared: the suite's CPU per test went
up 2.3-fold between sessions on "the same" 2-core machine (median over 190 tests,
timeline-7dfb9d6.jsonl against timeline-29b3fe4.jsonl)."""
import time

def work():
    d = {}
    for i in range(3_000_000):
        k = str(i % 5000)
        d[k] = d.get(k, 0) + i
    xs = sorted(d.values(), reverse=True)
    return sum(len(repr(x)) for x in xs)

best = min((lambda t0: (work(), time.process_time() - t0)[1])(time.process_time()) for _ in range(5))
print(f"speed {best:.3f} CPU-s (fixed pure-Python work, best of 5; lower is faster)")
