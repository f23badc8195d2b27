"""The kernel fragments of bobox_sched.txn (``bobox_sched/txn/kernels/``) and the module
``funs.kernels()`` generates from them: the generated module is the header, the dispatch
and every fragment's body in ``FRAGMENTS`` order; each fragment imports on its own and
binds every name it uses, importing only from the fragments before it; the generated
module binds every name its kernels use, and the names it generates ahead of the
fragments are the ones ``kernels/generated.py`` declares."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import symtable
import typing
from pathlib import Path

import pytest

from bobox_sched.txn import kernels as fragments
from bobox_sched.txn.funs import kernels

PKG = "bobox_sched.txn.kernels"


def _fragment_path(name: str) -> Path:
    return Path(fragments.__file__).with_name(f"{name}.py")


def _global_uses(source: str, filename: str) -> set[str]:
    """Every name `source` reads as a global: in module-level code and in every function
    (symtable's view: a name not bound in the function, nor in one around it)."""
    out: set[str] = set()
    stack = [symtable.symtable(source, filename, "exec")]
    while stack:
        t = stack.pop()
        for s in t.get_symbols():
            if s.is_referenced() and (s.is_global() or t.get_type() == "module"):
                out.add(s.get_name())
        stack.extend(t.get_children())
    return out


def _module_bindings(source: str) -> set[str]:
    """Names bound at module level (including under ``if``: TYPE_CHECKING imports)."""
    t = symtable.symtable(source, "m", "exec")
    return {s.get_name() for s in t.get_symbols() if s.is_assigned() or s.is_imported()}


def _top_level_defs(source: str) -> set[str]:
    out = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def test_the_generated_module_is_the_header_the_dispatch_and_every_fragment_body_in_order():
    K = kernels()
    text = Path(K.__file__).read_text()
    assert text.startswith(fragments.HEADER)
    assert text.endswith("\n" + fragments.body())
    pos = len(fragments.HEADER)
    for name in fragments.FRAGMENTS:
        body = fragments.fragment_body(name)
        assert body.strip(), name
        at = text.find(body, pos)
        assert at >= pos, f"fragment {name} is not in the generated module after the ones before it"
        pos = at + len(body)
        # the fragment's own import header stays out (one namespace, one header)
        header = _fragment_path(name).read_text().partition(fragments.MARKER)[0]
        assert ast.get_docstring(ast.parse(header)) not in text
    # the dispatch sits between the header and the first fragment
    dispatch = text[len(fragments.HEADER):len(text) - len(fragments.body())]
    assert "def apply_fun(" in dispatch and "def eval_cfun(" in dispatch and "cpu_relax = cpu_" in dispatch


@pytest.mark.parametrize("name", fragments.FRAGMENTS)
def test_a_fragment_imports_on_its_own_and_binds_every_name_it_uses(name):
    """What ruff's F821 checks, as a test: a fragment is a module in its own right."""
    src = _fragment_path(name).read_text()
    assert src.count(fragments.MARKER) == 1
    assert ast.get_docstring(ast.parse(src)), f"{name}.py says what it holds"
    mod = importlib.import_module(f"{PKG}.{name}")
    unbound = _global_uses(src, f"{name}.py") - _module_bindings(src) - set(dir(builtins))
    assert not unbound, f"{name}.py uses names it does not bind: {sorted(unbound)}"
    assert _top_level_defs(fragments.fragment_body(name)) <= set(vars(mod))


@pytest.mark.parametrize("name", fragments.FRAGMENTS)
def test_a_fragment_imports_only_what_the_fragments_before_it_define(name):
    """Its sibling imports name the fragments its body needs; those come earlier in
    ``FRAGMENTS`` (so module-level code finds them in the generated module) and define
    the names in their bodies (not merely import them); ``generated`` only under
    TYPE_CHECKING."""
    header = _fragment_path(name).read_text().partition(fragments.MARKER)[0]
    before = fragments.FRAGMENTS[:fragments.FRAGMENTS.index(name)]
    tree = ast.parse(header)
    checking = {id(n) for s in tree.body if isinstance(s, ast.If) for n in ast.walk(s)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PKG):
            sibling = node.module[len(PKG) + 1:]
            if sibling == "generated":
                assert id(node) in checking, f"{name}.py imports the generated names at run time"
                continue
            assert sibling in before, f"{name}.py imports {sibling}, which is not before it in FRAGMENTS"
            defined = _top_level_defs(fragments.fragment_body(sibling))
            missing = {a.name for a in node.names} - defined
            assert not missing, f"{name}.py imports {sorted(missing)} that {sibling}.py does not define"


def test_the_generated_module_binds_every_name_its_kernels_use():
    K = kernels()
    src = Path(K.__file__).read_text()
    unbound = _global_uses(src, K.__file__) - set(vars(K)) - set(dir(builtins))
    assert not unbound, sorted(unbound)


def test_the_declared_generated_names_are_what_the_module_generates():
    """``kernels/generated.py`` declares ``apply_fun`` and ``eval_cfun`` for linters;
    the generated module defines them as kernels with the declared arity, and the
    fragments' bodies define neither."""
    from bobox_sched.txn.kernels import generated

    K = kernels()
    hints = typing.get_type_hints(generated)
    assert set(hints) == {"apply_fun", "eval_cfun"}
    for n, hint in hints.items():
        nargs = len(typing.get_args(hint)[0])
        assert len(inspect.signature(getattr(K, n).py_func).parameters) == nargs, n
        assert not hasattr(generated, n)  # a declaration: no value at run time
        assert all(n not in _top_level_defs(fragments.fragment_body(f)) for f in fragments.FRAGMENTS)
