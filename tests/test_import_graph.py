"""The package's import graph, function-level imports included, has no cycles: dependencies point one way."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "esreason_lib"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """`esreason_lib/es/core/core.py` -> "esreason_lib.es.core.core"; a package's `__init__.py` names the package."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, from every import statement anywhere in its source."""
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in files else base)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_graph_parser_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "esreason_lib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from esreason_lib.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from ..a import f\nimport esreason_lib.c\n")
    (pkg / "c.py").write_text("import os\n")
    graph = import_graph(pkg)
    assert graph["esreason_lib.a"] == {"esreason_lib.sub.b"}
    assert graph["esreason_lib.sub.b"] == {"esreason_lib.a", "esreason_lib.c"}
    assert cycles(graph) == [["esreason_lib.a", "esreason_lib.sub.b"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others (function-level imports included)."""
    seen, todo = set(), [start]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def test_library_never_imports_the_paper_harness():
    graph = import_graph()
    library = [m for m in graph if not m.startswith("esreason_lib.paper")]
    offenders = {m: sorted(d for d in graph[m] if d.startswith("esreason_lib.paper")) for m in library}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_es_core_sits_at_the_bottom_of_es():
    deps = reachable(import_graph(), "esreason_lib.es.core")
    upward = sorted(d for d in deps if d.startswith(("esreason_lib.es.backends", "esreason_lib.models",
                                                      "esreason_lib.store", "esreason_lib.training")))
    assert upward == []


def test_store_imports_no_model_code():
    """The run store sits below the models: the zoo's versions reach a run's identity through a provider the
    package registers (`store.identity.register_zoo_versions`), not through an import."""
    graph = import_graph()
    store = [m for m in graph if m.startswith("esreason_lib.store")]
    upward = {m: sorted(d for d in reachable(graph, m) if d.startswith("esreason_lib.models")) for m in store}
    assert {m: d for m, d in upward.items() if d} == {}


def test_light_modules_load_no_transformers():
    """Each in a fresh interpreter: the metrics, ES's ask/tell, and the run configs (`ESConfig` and the settings
    every run shares) load no model code."""
    import subprocess
    import sys

    for module in ("esreason_lib.metrics", "esreason_lib.es.core", "esreason_lib.es.config",
                   "esreason_lib.training.settings"):
        code = f"import sys, {module}; print('transformers' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=PACKAGE.parent).stdout.strip()
        assert out == "False", module


def test_package_api_is_lazy_and_keeps_its_names():
    import subprocess
    import sys

    code = ("import sys, esreason_lib; assert 'esreason_lib.es.loop' not in sys.modules\n"
            "import esreason_lib.evaluation\n"
            "from esreason_lib import evaluate, ESConfig, train_es\n"
            "print(callable(evaluate) and not isinstance(evaluate, type(sys)), ESConfig.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "True esreason_lib.es.config"


GROUND = ("paths", "seeding", "validation", "progress", "guards", "metrics", "params", "version", "threads",
          "eval_samples", "cli_help", "learning_signal")
"""The ground floor's modules: they import nothing of the package (checked below), and anything may import them."""

FLOORS = (("tasks", "store", "cli_settings"), ("models",), ("training", "evaluation"), ("es", "grpo"), ("methods",),
          ("paper",), ("cli",), ("__main__",))
"""The rooms above the ground floor, bottom up (docs/modules.md): a module imports only rooms on lower floors, never
a room beside it on its own floor (es/ and grpo/ are siblings), never one above."""


def room(module: str) -> str:
    """"esreason_lib.es.backends.batched" -> "es"; the package itself (the lazy public API) -> ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor(module: str) -> int:
    """The floor of `module`'s room: 0 for the ground floor, len(FLOORS) + 1 for the package itself (the API,
    above everything); KeyError for a room on no floor."""
    name = room(module)
    if name == "":
        return len(FLOORS) + 1
    if name in GROUND:
        return 0
    return 1 + next(i for i, rooms in enumerate(FLOORS) if name in rooms)


def arrows_against_the_floors(graph: dict[str, set[str]]) -> list[str]:
    """Every import `a -> b` between two rooms where b's floor is above a's, or where both share a floor above the
    ground (siblings), as "a -> b"."""
    out = []
    for a, deps in sorted(graph.items()):
        for b in sorted(deps):
            if room(a) == room(b):
                continue
            if floor(b) > floor(a) or (floor(b) == floor(a) > 0):
                out.append(f"{a} -> {b}")
    return out


def test_floors_checker_flags_climbs_and_siblings():
    graph = {"esreason_lib.es.loop": {"esreason_lib.grpo.loss", "esreason_lib.models.zoo", "esreason_lib.es.core"},
             "esreason_lib.models.zoo": {"esreason_lib.training", "esreason_lib.seeding"},
             "esreason_lib.seeding": set(), "esreason_lib.grpo.loss": set(), "esreason_lib.es.core": set(),
             "esreason_lib.training": set()}
    assert arrows_against_the_floors(graph) == ["esreason_lib.es.loop -> esreason_lib.grpo.loss",
                                                "esreason_lib.models.zoo -> esreason_lib.training"]
    assert floor("esreason_lib") > floor("esreason_lib.cli") > floor("esreason_lib.paper.plots")
    assert floor("esreason_lib.paper.plots") > floor("esreason_lib.es.x") > floor("esreason_lib.seeding") == 0


def test_every_room_has_a_floor():
    rooms = {room(m) for m in import_graph()} - {""}
    assert sorted(rooms - set(GROUND) - {r for rooms_ in FLOORS for r in rooms_}) == []


def test_ground_floor_imports_nothing_of_the_package():
    graph = import_graph()
    assert {m: sorted(d) for m, d in graph.items() if room(m) in GROUND and d} == {}


def test_no_import_climbs_against_the_floors_and_es_grpo_are_siblings():
    """Function-level imports included: es/ never imports grpo/ nor grpo/ es/ (what both need, vLLM rollouts and
    GPU placement, lives in models/), and no module imports a room above its own."""
    assert arrows_against_the_floors(import_graph()) == []
