"""The package's import graph (every import: top-level, function-level and
TYPE_CHECKING ones, read with ``ast``): no cycles, and each module imports
only its own layer or the ones below it (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO

PACKAGE = REPO / "mnn_engine"
#: lowest first; a module may import its own layer and the ones before it
LAYERS = [
    ("base", ["mnn_engine.errors", "mnn_engine.version", "mnn_engine.jsonutil", "mnn_engine.config",
              "mnn_engine.workers", "mnn_engine.scratch", "mnn_engine.net", "mnn_engine._missing_core",
              "mnn_engine.options", "mnn_engine.checks"]),
    ("runtime", ["mnn_engine.runtime"]),
    ("hub", ["mnn_engine.hub"]),
    ("store", ["mnn_engine.store"]),
    ("engine", ["mnn_engine.engine"]),
    ("api", ["mnn_engine.api"]),
    ("server", ["mnn_engine.server"]),
    ("front ends", ["mnn_engine.cli", "mnn_engine.notebook", "mnn_engine.__main__", "mnn_engine"]),
]
#: beyond the order: what a layer must never import although it is below
FORBIDDEN = {
    "mnn_engine.api": ["mnn_engine.engine", "tornado"],  # translation only: no Engine, no HTTP server
    # typed against engine.protocol, never Engine, the pool, the model's files or Llm itself
    "mnn_engine.server": ["mnn_engine.engine.engine", "mnn_engine.engine.pool", "mnn_engine.runtime.model_files",
                          "mnn_engine.runtime.llm"],
    "mnn_engine.hub": ["mnn_engine.runtime"],  # network only
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join(base[: len(base) - node.level + 1] + ([module] if module else []))
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "tornado":
                found.add("tornado")
                continue
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _layer(name: str) -> int:
    best = (-1, -1)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                best = max(best, (len(prefix), index))
    assert best[1] >= 0, f"{name} is in no layer: add it to LAYERS (and docs/architecture.md)"
    return best[1]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def test_no_module_imports_a_layer_above_its_own():
    wrong = []
    for name, targets in _graph().items():
        for target in targets - {"tornado"}:
            if target != "mnn_engine" and _layer(target) > _layer(name):
                wrong.append(f"{name} ({LAYERS[_layer(name)][0]}) imports {target} ({LAYERS[_layer(target)][0]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_forbidden_imports():
    wrong = [f"{name} imports {target}" for name, targets in _graph().items()
             for prefix, banned in FORBIDDEN.items() if name == prefix or name.startswith(prefix + ".")
             for target in targets for ban in banned if target == ban or target.startswith(ban + ".")]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    graph = {name: {t for t in targets if t in _modules() and t != "mnn_engine"} for name, targets in _graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components (iterative enough for ~60 modules)
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_server_reaches_a_model_only_through_the_served_model_seam():
    """No server module takes an engine's whole ``Llm`` (``.llm``): it uses ``loaded_model``,
    typed ``engine.protocol.ServedModel``, whose every member ``Llm`` has."""
    from mnn_engine.engine.protocol import ServedModel
    from mnn_engine.runtime.llm import Llm

    for path in (PACKAGE / "server").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.Attribute) and node.attr == "llm"), f"{path.name}:{node.lineno}"
    members = set(ServedModel.__annotations__) | {name for name in vars(ServedModel) if not name.startswith("_")}
    assert {"tokenize", "context_length", "capabilities"} <= members
    for name in members:
        assert hasattr(Llm, name) or name in Llm.__init__.__code__.co_names, name


def test_the_top_level_holds_about_ten_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    # options.py (settings that describe themselves) made it twelve, checks.py (one way to refuse) thirteen
    assert len(top) <= 13, top
