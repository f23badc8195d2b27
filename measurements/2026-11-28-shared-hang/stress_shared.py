import gc, os, sys, time
sys.path.insert(0, "tests")
import numpy as np
import test_ordered_policy as T
from ordered_ops import make_items

N = int(sys.argv[1]); thr = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if thr:
    gc.set_threshold(thr)
rng = np.random.default_rng(7)
items = make_items(60, 40, 40, rng, zipf=1.4, empty_every=7, window_every=5)
ref = T.sequential(T.RICH_CHAIN, items)
t0 = time.time()
for i in range(N):
    for reorder in T.REORDERS:
        for workers in (1, 2, 4):
            T.check_run(T.RICH_CHAIN, items, next(T._ids), ref, workers=workers, scheme="shared", reorder=reorder,
                        capacity=1, worklist=1)
    T.GUARDS.clear()
    if i % 20 == 0:
        print(i, round(time.time() - t0, 1), flush=True)
print("done", N, round(time.time() - t0, 1))
