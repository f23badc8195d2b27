"""``scripts/tstream-knobs``: TStream's tuned constants side by side (every combination of
the knob values, in one process per worker count), its input checks, and that every
knob is back to its value after the runs."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "tstream-knobs"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def _module():
    loader = importlib.machinery.SourceFileLoader("tstream_knobs", str(SCRIPT))
    spec = importlib.util.spec_from_loader("tstream_knobs", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_every_combination_for_every_worker_count():
    r = _run("--apps", "gs", "--workers", "1,2", "--events", "3000", "--repeat", "1",
             "--knob", "gate_on_posts=true,false", "--knob", "hold_scale=1,3", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    res = s["results"]
    combos = [{"gate_on_posts": g, "hold_scale": h} for g in (True, False) for h in (1.0, 3.0)]
    assert [(x["workers"], x["knobs"]) for x in res] == [(w, c) for w in (1, 2) for c in combos]
    for x in res:
        assert x["app"] == "gs" and x["runs"] == 1 and x["events_per_s"] > 0
        assert 0 < x["p50_ms"] <= x["p99_ms"]
    assert [x["vs_first"] for x in res if x["knobs"] == combos[0]] == [1.0, 1.0]
    # one progress line per measured run, on stderr; the table on stdout
    assert r.stderr.count("[tstream-knobs] gs workers=") == 8
    assert "gate_on_posts=False hold_scale=3.0" in r.stdout


@pytest.mark.parametrize("args, msg", [
    (["--knob", "foo=1"], "NAME one of gate_on_posts"),
    (["--knob", "lookahead=0"], "lookahead: expected an integer >= 1"),
    (["--knob", "gate_on_posts=maybe"], "expected true or false"),
    (["--knob", "hold_scale=-1"], "expected a number > 0"),
    (["--knob", "few_workers="], "no values given"),
    (["--knob", "few_workers=1", "--knob", "few_workers=2"], "given twice"),
    (["--apps", "gs,xx"], "--apps"),
    (["--workers", "2,0"], "--workers"),
    (["--events", "10"], "--events"),
    (["--interval", "0"], "--interval"),
    (["--repeat", "0"], "--repeat"),
])
def test_bad_input_is_one_line_and_exit_2(args, msg):
    r = _run(*args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tstream-knobs: ") and msg in lines[0]


def test_knobs_are_restored_after_the_runs():
    from bobox_sched.txn import coordinator, funs

    before = (coordinator.Group.gate_on_posts, coordinator.LOOKAHEAD, funs.FEW_WORKERS, dict(funs.HOLD_BELOW),
              dict(funs.HOLD_BELOW_FEW), coordinator.Group.single_task_ops)
    seen = []
    mod = _module()
    orig = mod.__dict__["_knobs"]

    def spying():
        k = orig()
        parse, get, set_ = k["few_workers"]
        k["few_workers"] = (parse, get, lambda v: (seen.append(v), set_(v)))
        return k

    mod._knobs = spying
    assert mod.main(["--apps", "tp", "--workers", "1", "--events", "2000", "--repeat", "1",
                     "--knob", "few_workers=0,7", "--knob", "hold_scale=0.5", "--knob", "lookahead=2",
                     "--knob", "single_task_ops=0", "--knob", "gate_on_posts=false"]) == 0
    assert 0 in seen and 7 in seen  # the knob was really set for the runs ...
    after = (coordinator.Group.gate_on_posts, coordinator.LOOKAHEAD, funs.FEW_WORKERS, dict(funs.HOLD_BELOW),
             dict(funs.HOLD_BELOW_FEW), coordinator.Group.single_task_ops)
    assert after == before  # ... and every knob is back
