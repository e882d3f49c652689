"""Dotted references in the library's docstrings and docs/ name modules and names that exist: a move (the harness
into paper/, ESConfig into es/config.py, LowRankBackend into es/backends/) leaves no path behind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "esreason_lib"
REFERENCE = re.compile(r"`((?:esreason_lib\.)?[a-z_]+(?:\.[A-Za-z_][A-Za-z_0-9]*)+)")
"""A backticked dotted name, e.g. `es.backends.lowrank.LowRankBackend` or `esreason_lib.tasks.get_task`."""


def _modules() -> dict[str, Path]:
    """{dotted name below esreason_lib (a package by its folder): source file}."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _top_level_names(path: Path) -> set[str]:
    """Names a module binds: its functions, classes, assignments and imports (anywhere in its source)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def unresolved(text: str, modules: dict[str, Path]) -> list[str]:
    """The references in `text` that start at a module of the package and then name nothing it binds. Only
    references of three parts or more, or whose second part is capitalised, count (`es.sigma` is prose for a
    config field, `es.core.ES` a path)."""
    packages = {m.split(".")[0] for m in modules if m}
    bad = []
    for ref in REFERENCE.findall(text):
        parts = ref.removeprefix("esreason_lib.").split(".")
        if parts[0] not in packages or len(parts) < 2 or not (len(parts) >= 3 or parts[1][:1].isupper()):
            continue
        k = max(k for k in range(1, len(parts) + 1) if ".".join(parts[:k]) in modules or k == 1)
        module = ".".join(parts[:k])
        if module not in modules or (k < len(parts) and parts[k] not in _top_level_names(modules[module])):
            bad.append(ref)
    return bad


def test_unresolved_finds_moved_names():
    modules = _modules()
    assert unresolved("`es.lowrank.LowRankBackend` `es.core.ESConfig` `es.backends.BACKENDS`", modules) == [
        "es.lowrank.LowRankBackend", "es.core.ESConfig", "es.backends.BACKENDS"]
    assert unresolved("`es.backends.lowrank.LowRankBackend` `es.config.ESConfig` `es.sigma` `es.core.ES.tell` "
                      "`esreason_lib.tasks.get_task` `numpy.random`", modules) == []


def test_library_and_docs_references_resolve():
    modules = _modules()
    files = [p for p in PACKAGE.rglob("*.py") if "paper" not in p.relative_to(PACKAGE).parts]
    files += sorted((ROOT / "docs").glob("*.md"))
    found = {str(p.relative_to(ROOT)): unresolved(p.read_text(), modules) for p in files}
    assert {f: refs for f, refs in found.items() if refs} == {}
