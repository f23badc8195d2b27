"""Does throughput at a fixed level decay within a run? dynamic-1 over 15 s, the elastic run's length."""
import json, sys
from experiments import streams_exp as E
from experiments.streams_ops import burn, burn_held, burn_rows, burn_rows_held, row_ids
import numpy as np
burn(1.0, 10); burn_held(1.0, 10); one = np.zeros(1, np.int64); burn_rows(one, 10); burn_rows_held(one, 10); row_ids(0, 1)
E.collect_before_run()
out = {}
for shape, c in (("pipeline", 1000), ("dp", 10000), ("pipeline", 100)):
    r = E.run_once(shape, 100, c, {"queue_capacity": E.queue_for(shape, 100, 64), "threads": 1}, 15.0, 1.0, batch=64)
    s = [round(v) for _, v in r["samples"]]
    out[f"{shape}@{c}"] = {"samples": s, "static_window_median_2_4": E.static_value(r["samples"][:4]),
                           "elastic_window_mean_last5": E.elastic_value(r["samples"])}
    print(shape, c, s, out[f"{shape}@{c}"]["static_window_median_2_4"], round(out[f"{shape}@{c}"]["elastic_window_mean_last5"]), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
