"""The locality experiments, each in a tiny configuration (SF 0.01, --quick, one repeat):
each produces a CSV in the documented long format, a PNG that is a valid image and its
section of report.md; the figures in the JSON are consistent. No timing assertions."""

import csv
import json

import clirun
import pytest

from topology.virtual import virtual_topology

from experiments.framework import CSV_COLUMNS

pytestmark = pytest.mark.slow
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(*args):
    # forked from a process that imported the command once (tests/clirun.py)
    return clirun.bobox(*args, timeout=900)


@pytest.fixture(scope="module")
def all_quick(tpch, tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    r = run_cli("experiment", "all", "--quick", "--repeat", "1", "--data", str(tpch), "--out", str(out), "--json",
                "--no-progress", "--bytes", "1M")
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads(r.stdout.strip().splitlines()[-1])


def read_csv(path):
    """(header, rows) of a CSV file."""
    with open(path, newline="") as f:
        header = next(csv.reader(f))
        f.seek(0)
        return header, list(csv.DictReader(f))


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.shape[0] > 100 and img.shape[1] > 100


@pytest.mark.parametrize("name", ["numa-factor", "packet-size", "schedulers", "balancer"])
def test_outputs_exist_and_are_well_formed(all_quick, name):
    out, _ = all_quick
    header, rows = read_csv(out / f"{name}.csv")
    assert header == CSV_COLUMNS
    assert rows and all(r["experiment"] == name for r in rows)
    for r in rows:
        float(r["value"])
    check_png(out / f"{name}.png")
    report = (out / "report.md").read_text()
    assert f"<!-- bobox:{name} -->" in report and f"<!-- /bobox:{name} -->" in report
    assert "![" in report and f"({name}.png)" in report


def test_report_has_machine_and_every_section_once(all_quick):
    out, _ = all_quick
    report = (out / "report.md").read_text()
    assert report.startswith("# bobox-sched locality experiments")
    assert "## Machine" in report and "CPU:" in report
    for name in ["numa-factor", "packet-size", "numa-placement", "schedulers", "balancer"]:
        assert report.count(f"<!-- bobox:{name} -->") == 1
    assert "Command: `bobox experiment all --quick" in report


def test_numa_factor_consistent(all_quick):
    _, s = all_quick
    nf = s["numa-factor"]
    assert nf["bytes"] == 1 << 20  # --bytes 1M (the default is 4x the L3, at least 64 MiB)
    for i, c in enumerate(nf["cpu_nodes"]):
        assert nf["factors"][i][nf["mem_nodes"].index(c)] == 1.0
    assert all(x > 0 for row in nf["factors"] for x in row)


def test_packet_size_consistent(all_quick):
    _, s = all_quick
    ps = s["packet-size"]
    sizes = [p["packet_bytes"] for p in ps["points"]]
    assert sizes == sorted(sizes) and ps["default_packet_bytes"] in sizes
    assert ps["peak_packet_bytes"] in sizes and 0 < ps["default_vs_peak"] <= 1.0
    assert all(p["throughput"] > 0 for p in ps["points"])


def test_schedulers_consistent(all_quick):
    out, s = all_quick
    sc = s["schedulers"]
    assert set(sc["mixes"]) == {"1x1", "2x2", "4x4", "4x16"}
    ratios = [m["simple_s"] / m["bobox_s"] for m in sc["mixes"].values()]
    import math

    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    assert abs(geo - sc["geomean_ratio"]) < 0.05 * geo
    for pol in ("bobox", "simple"):
        shares = sc["steps_largest_mix"][pol]
        assert abs(sum(v or 0 for v in shares.values()) - 1.0) < 1e-6
    assert sc["steps_largest_mix"]["simple"]["2"] == 0 and sc["steps_largest_mix"]["simple"]["3"] == 0


def test_numa_placement_skipped_or_measured(all_quick):
    out, s = all_quick
    np_ = s["numa-placement"]
    report = (out / "report.md").read_text()
    import topology

    if len(topology.probe().cpu_nodes) == 1:
        assert np_["skipped"] and "one NUMA node" in np_["reason"]
        assert "Skipped: this machine has one NUMA node" in report
    else:
        assert np_["local_s"] > 0 and np_["remote_s"] > 0


def test_balancer_reports_both_workloads(all_quick):
    _, s = all_quick
    b = s["balancer"]
    for wl in ("tpch", "kernel"):
        assert b[wl]["throughput_on"] > 0 and b[wl]["throughput_off"] > 0


def test_rerun_replaces_its_section(tpch, tmp_path):
    for _ in range(2):
        r = run_cli("experiment", "numa-factor", "--quick", "--repeat", "1", "--out", str(tmp_path), "--no-progress")
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "report.md").read_text().count("<!-- bobox:numa-factor -->") == 1


def test_virtual_topology_splits_cpus():
    from test_policy_bobox import make_topology

    t = virtual_topology(make_topology(1, 4), 2)
    assert [n.cpus for n in t.nodes] == [(0, 1), (2, 3)]
    assert [c.node for c in t.cpus] == [0, 0, 1, 1]


def test_bad_input(tmp_path):
    r = run_cli("experiment", "numa-factor", "--repeat", "0", "--out", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --repeat must be positive")
    r = run_cli("experiment", "nope")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    (tmp_path / "file").write_text("x")
    r = run_cli("experiment", "numa-factor", "--out", str(tmp_path / "file" / "sub"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "cannot create output folder" in r.stderr
    r = run_cli("experiment", "packet-size", "--quick", "--data", str(tmp_path / "missing"), "--out", str(tmp_path))
    assert r.returncode == 2 and "data folder not found" in r.stderr


def test_an_experiment_marks_its_complete_set_with_a_manifest(tmp_path, monkeypatch):
    """The manifest lists the files the run wrote (sizes included) and is written last; a
    run that fails leaves no manifest, also none from an earlier run of the same name."""
    from experiments.cli.main import build_parser
    from experiments.cli.outputs import complete
    from experiments.cli import experiment as experiment_cli

    out = tmp_path / "out"
    manifest = "_bobox_experiment_numa-factor.json"
    args = build_parser().parse_args(["experiment", "numa-factor", "--out", str(out)])

    def fine(a):
        (out / "numa-factor.csv").write_text("experiment,host\n")
        (out / "report.md").write_text("# report\n")
        return {"ok": True}

    monkeypatch.setattr(experiment_cli, "_dispatch", fine)
    assert experiment_cli.run(args) == 0
    assert complete(out, manifest)
    body = json.loads((out / manifest).read_text())
    assert body["files"] == {"numa-factor.csv": {"bytes": 16}}  # report.md is shared: not listed
    assert body["command"][0] == "bobox" and body["complete"] is True

    def broken(a):
        (out / "numa-factor.csv").write_text("half")
        raise RuntimeError("disk gone")

    monkeypatch.setattr(experiment_cli, "_dispatch", broken)
    with pytest.raises(RuntimeError):
        experiment_cli.run(args)
    assert not (out / manifest).exists() and not complete(out, manifest)


def test_schedulers_in_domains(tpch, tmp_path):
    """``--domains 2``: the experiment's schedulers run their runtime in two domain
    processes (said on stderr) and the figures come out as in-process; an experiment
    whose scheduler is not made on the real machine refuses the option in one line."""
    r = run_cli("experiment", "schedulers", "--quick", "--repeat", "1", "--data", str(tpch), "--threads-per-node", "1",
                "--domains", "2", "--out", str(tmp_path), "--json", "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("[experiment] the runtime in 2 domain processes (2 workers)") == 3  # one per series
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(s["mixes"]) and all(m["bobox_s"] > 0 for m in s["mixes"].values())
    header, rows = read_csv(tmp_path / "schedulers.csv")
    assert header == CSV_COLUMNS and rows
    r = run_cli("experiment", "streams", "--domains", "2", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == \
        "error: --domains applies to 'bobox experiment packet-size / numa-placement / schedulers / all / regions' only"
