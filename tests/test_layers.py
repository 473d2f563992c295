"""The project's module graph, read from the source with ``ast``: no import cycles, and the layers point one way.

Every ``import`` counts, at the top of a module or inside a function: an import moved into a function to dodge a
cycle still makes one. The layers: ``fedlns_core`` imports no learning framework and nothing of the adapters or
the simulator; the adapters import nothing of the simulator.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"fedlns_core": ROOT / "fedlns_core", "fedlns_torch": ROOT / "adapters" / "fedlns_torch",
            "fedlns_flower": ROOT / "adapters" / "fedlns_flower", "fedlns_fedml": ROOT / "adapters" / "fedlns_fedml",
            "fedlns_sim": ROOT / "reference_sim" / "fedlns_sim"}
ADAPTERS = ("fedlns_torch", "fedlns_flower", "fedlns_fedml")
FRAMEWORKS = ("torch", "flwr", "fedml", "transformers", "peft")


def module_files() -> dict[str, Path]:
    """Every module of the project by its dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_names(module: str, path: Path, modules=frozenset()) -> set[str]:
    """The dotted names ``module`` imports anywhere in its source, relative imports resolved.

    ``from X import Y`` gives ``X.Y`` where that is one of ``modules``, and ``X`` unless every ``Y`` is a submodule
    of a package ``module`` belongs to (that package is loaded before its modules, so nothing new is imported).
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            names |= submodules
            if len(submodules) < len(node.names) or not f"{module}.".startswith(f"{base}."):
                names.add(base)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name that is an attribute, not a module, is left out), with the
    packages above each that importing it loads (those ``module`` belongs to are loaded already)."""
    modules = module_files()
    graph = {}
    for module, path in modules.items():
        names = imported_names(module, path, set(modules))
        loaded = {".".join(name.split(".")[:i]) for name in names for i in range(1, name.count(".") + 2)}
        graph[module] = {name for name in loaded if name in modules and not f"{module}.".startswith(f"{name}.")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_graph_reads_every_package():
    graph = import_graph()
    assert {"fedlns_core", "fedlns_torch._peft", "fedlns_sim.cli", "fedlns_flower._strategy"} <= set(graph)
    assert "fedlns_sim.config" in graph["fedlns_sim.run"]    # a relative import, resolved
    assert "fedlns_core" in graph["fedlns_torch._norms"]      # an import inside a function
    assert "fedlns_sim" not in graph["fedlns_sim.run"]        # from . import finetune: the package is loaded already
    assert "fedlns_sim.report" in graph["fedlns_sim.replay"]  # importing report.stats runs report/__init__.py


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "modules that import each other: " + "; ".join(" <-> ".join(cycle) for cycle in found)


def test_layers_point_one_way():
    modules = module_files()
    wrong = []
    for module, path in modules.items():
        top = {name.split(".")[0] for name in imported_names(module, path)}
        if module.split(".")[0] == "fedlns_core":
            wrong += [(module, name) for name in sorted(top & {*FRAMEWORKS, *ADAPTERS, "fedlns_sim"})]
        elif module.split(".")[0] in ADAPTERS:
            wrong += [(module, name) for name in sorted(top & {"fedlns_sim"})]
    assert not wrong, "imports against the layers: " + ", ".join(f"{module} imports {name}" for module, name in wrong)
