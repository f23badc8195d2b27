"""``bobox experiment regions`` (quick, one repeat): the CSV in the experiments' long
format, a valid PNG, its report section, and a JSON summary holding ordered_identical,
speedup {kind: {N: {w: x}}} and overhead_vs_rr {strategy: {w: fraction}}. No timing
assertions: the figures are whatever this machine measured."""

import csv
import json

import clirun
import pytest

from experiments import regions
from experiments.framework import CSV_COLUMNS

pytestmark = pytest.mark.slow

# Work per point, log2 (the quick run's is regions.QUICK_WORK_LOG2 = 27): these tests check
# the outputs' shape and the ordering, not the figures, and 2^27 per point cost the module
# 83 CPU-s (measurements/2026-11-27-test-time/cpu-per-module-8250309.txt).
TEST_WORK_LOG2 = 22


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("regions")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(regions, "QUICK_WORK_LOG2", TEST_WORK_LOG2)
        r = clirun.in_process("experiment", "regions", "--quick", "--repeat", "1", "--out", out, "--json",
                              "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads(r.stdout.strip().splitlines()[-1])


def test_outputs(quick):
    out, s = quick
    with open(out / "regions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == CSV_COLUMNS and all(r["experiment"] == "regions" for r in rows)
    assert {r["metric"] for r in rows} >= {"seconds", "speedup", "overhead_vs_rr"}
    assert (out / "regions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert report.count("<!-- bobox:regions -->") == 1 and "(regions.png)" in report
    assert "Command: `bobox experiment regions --quick" in report


def test_summary(quick):
    _, s = quick
    assert s["ordered_identical"] is True and not s["mismatches"]
    ws = [str(w) for w in s["ws"]]
    assert ws[0] == "1" and ws[-1] == str(1 << 16)
    for kind in ("stateless", "stateful", "shuffle"):
        assert set(s["speedup"][kind]) == {"1", "2", "4"}
        for n in ("1", "2", "4"):
            assert set(s["speedup"][kind][n]) == set(ws)
            assert all(v > 0 for v in s["speedup"][kind][n].values())
    assert set(s["overhead_vs_rr"]) == {"seqno", "strict", "relaxed"}
    assert all(set(v) == set(ws) for v in s["overhead_vs_rr"].values())
    assert set(s["apps"]) == {"cep", "finance"} and set(s["epoch"]) == {"1", "2", "4", "8", "16", "32"}
    assert 0 < s["ceiling"]
    assert "combine: R2" in s["regions"]["finance"]


def test_bad_input_is_one_line_exit_2(tmp_path):
    r = clirun.bobox("experiment", "regions", "--repeat", "0", "--out", tmp_path, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
