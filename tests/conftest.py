import sys
import tarfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "hwloc-linux"
sys.path.insert(0, str(HERE))


def fixture_names():
    """Captures with hwloc's expected output: `NAME.console` (lstopo's text) or
    `NAME.xml` (for captures whose hwloc test compares XML), next to `NAME.tar.bz2`."""
    return sorted(p.name.rsplit(".", 1)[0] for p in FIXTURES.iterdir()
                  if p.suffix in (".console", ".xml") and (FIXTURES / f"{p.name.rsplit('.', 1)[0]}.tar.bz2").exists())


@pytest.fixture(scope="session")
def hwloc_trees(tmp_path_factory):
    """Unpack every captured tree once; returns {fixture name: root folder}."""
    out = tmp_path_factory.mktemp("hwloc")
    roots = {}
    for name in fixture_names():
        with tarfile.open(FIXTURES / f"{name}.tar.bz2") as tf:
            tops = {m.name.split("/")[0] for m in tf.getmembers()}
            # tarfile's extraction filters came in 3.11.4; Debian 12's python3 is 3.11.2
            tf.extractall(out, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        (top,) = tops  # one folder per archive (its name may differ from the file's)
        roots[name] = out / top
    return roots


@pytest.fixture(scope="session")
def tpch(tmp_path_factory):
    """TPC-H SF 0.01 as Parquet, generated once per session."""
    from experiments.datagen import datagen

    return datagen(0.01, tmp_path_factory.mktemp("tpch") / "sf0.01", progress=False)
