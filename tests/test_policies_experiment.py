"""``bobox experiment policies --quick``: every policy on the one workload, the files, the
report section (replaced, not duplicated, on a rerun), the JSON, every output equal to
the reference run's; options it does not read refused. No timing assertions."""

import csv
import json
import subprocess
import sys

import pytest

from experiments.locality import CSV_COLUMNS
from experiments.policies import CONFIGS

pytestmark = pytest.mark.slow
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "bobox_sched", "experiment", "policies", *args], capture_output=True,
                          text=True, timeout=900)


def test_every_policy_side_by_side(tmp_path):
    for _ in range(2):  # the second run replaces its report section
        r = run_cli("--quick", "--repeat", "1", "--out", str(tmp_path), "--json", "--no-progress")
        assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["configs"] == list(CONFIGS) and not s["failed"]
    assert all(s["equal_to_reference"].values())
    for key in ("throughput", "latency_p50_ms", "latency_p99_ms", "ratio_to_bobox", "rows_per_cpu_s"):
        assert set(s[key]) == set(CONFIGS), key
    assert s["ratio_to_bobox"]["bobox"] == 1.0 and all(v > 0 for v in s["throughput"].values())
    with open(tmp_path / "policies.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == CSV_COLUMNS and {r["series"] for r in rows} == set(CONFIGS)
    assert (tmp_path / "policies.png").read_bytes()[:8] == PNG_MAGIC
    report = (tmp_path / "report.md").read_text()
    assert report.count("<!-- bobox:policies -->") == 1 and "ordered-lp" in report


@pytest.mark.parametrize("option", [["--sf", "1"], ["--ops", "100"], ["--threads-per-node", "2"]])
def test_options_it_does_not_read_are_refused(tmp_path, option):
    r = run_cli(*option, "--out", str(tmp_path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
    assert not (tmp_path / "policies.csv").exists()
