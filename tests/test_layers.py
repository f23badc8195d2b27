"""The tree's layers (README, "Map of the tree"): topology -> control -> core ->
policies | regions | txn -> operators -> experiments, checked by import-linter against
the contract in ``.importlinter`` (imports inside functions included), and no import
cycle between modules anywhere in the four packages."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("topology", "bobox_sched", "operators", "experiments")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_layer_contract_holds():
    r = _lint_imports(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 kept, 0 broken" in r.stdout


def test_the_contract_catches_a_lazy_import_of_a_higher_layer(tmp_path):
    """A copy of the tree in which the core imports the regions inside a function (the
    kind of import that once hid a cycle) breaks the contract."""
    for pkg in PACKAGES:
        subprocess.run(["cp", "-r", str(ROOT / pkg), str(tmp_path / pkg)], check=True)
    plan = tmp_path / "bobox_sched" / "core" / "plan.py"
    plan.write_text(plan.read_text() + textwrap.dedent("""

        def _sneaky():
            from bobox_sched.regions import analysis  # noqa: F401
        """))
    r = _lint_imports(tmp_path)
    assert r.returncode != 0
    assert "bobox_sched.core is not allowed to import bobox_sched.regions" in r.stdout


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in adj:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            if i < len(adj[v]):
                work.append((v, i + 1))
                w = adj[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            for w in adj[v]:
                if w in on:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES)


def test_no_import_cycle(graph):
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = grimp.build_graph(*PACKAGES)
    graph.add_import(importer="bobox_sched.core.packet", imported="bobox_sched.core.operator")
    found = _cycles(graph)
    assert len(found) == 1 and {"bobox_sched.core.operator", "bobox_sched.core.packet"} <= set(found[0]), found
