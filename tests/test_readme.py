"""The README's Python examples run as written (the data path swapped for test data)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks():
    """The Python examples, except the Spark one (SF 1 on a cluster; tests/test_spark.py
    covers that API)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return [b for b in blocks if "experiments.spark." not in b]


def test_readme_examples_run(tpch, capsys):
    blocks = python_blocks()
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code.replace('"data/tpch-sf0.1"', repr(str(tpch))), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert str(sum(i * i for i in range(1_000_000))) in out
    assert "400,000 rows in" in out and "latency p50" in out  # the Streams example ran, markers measured
    assert "identical to the sequential run: True" in out  # the ordered pipeline
    assert "money kept: True" in out and "program form gives the same: True" in out  # TStream, both forms
    assert f"domains: 2 {[sum(range(100_000))] * 4}" in out  # the domains example


def test_readme_quick_start_is_two_commands():
    text = README.read_text()
    block = re.search(r"## Quick start.*?```sh\n(.*?)```", text, flags=re.S).group(1)
    commands = [ln for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert [c.split("#")[0].strip() for c in commands] == ["make run", "make test"]
