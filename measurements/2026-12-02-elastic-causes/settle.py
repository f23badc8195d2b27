"""The load-change run (mixed graph, cost 1000 -> 1 half-way) of `bobox experiment streams --quick`,
but twice as long (10 periods after the change instead of 5): does the paper form settle?"""
import json, sys
from experiments import streams_exp as E
from experiments.streams_ops import burn, burn_held, burn_rows, burn_rows_held, row_ids
import numpy as np
burn(1.0, 10); burn_held(1.0, 10); one = np.zeros(1, np.int64); burn_rows(one, 10); burn_rows_held(one, 10); row_ids(0, 1)
E.collect_before_run()
cfg = E.settings_for(True, 2, None)
total = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
out = {"elastic_s": total, "period_s": cfg["period_s"]}
for form in ("oss", "paper"):
    kw = {"elastic": True, "max_level": cfg["max_level"], "period_s": cfg["period_s"], "min_level": cfg["min_level"],
          "cpu_limit": 1.0, "form": form}
    half = total / 2
    r = E.run_once("mixed", cfg["ops"], 1000, {"queue_capacity": E.queue_for("mixed", cfg["ops"], cfg["batch"]), **kw},
                   total, cfg["sample_s"], change_at=half, change_to=1, rows=1, batch=cfg["batch"])
    tr = [(round(t, 1), round(x), lvl, str(ev)) for t, x, lvl, ev in r["trace"]]
    out[form] = {"settle_periods": E.settle_periods(r["trace"], half), "trace": tr}
    print(form, "settle", out[form]["settle_periods"], flush=True)
    for row in tr:
        print("  ", row, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
