"""The docs cite names that exist, and their prose stays at a readable width.

A *reference* is a dotted Python name inside a backticked span of ``docs/*.md``, ``README.md`` or the
Markdown under ``examples/``, whose first part is one of the project's packages (``fedlns_core.FedLNS``),
a name one of them exports (``FedLNS.paper``), or one of their private modules (``_types.read_count``;
public modules such as ``fedlns_sim.run`` are cited by their full name, since ``run`` or ``client`` alone is
as likely a variable). It resolves when importing the longest module prefix and reading the rest as attributes
succeeds; an attribute of a class may also be one its instances carry (a dataclass field, an annotation,
or ``self.name = ...`` in its body). ``fedlns_fedml`` needs FedML, which is installed only in its own
environment, so its references are resolved from its source with ``ast`` instead, as are those of any module
whose import needs a dependency that is not installed.

Spans that are not names are left alone: paths (``docs/rules.md``), file names (``config.json``), and
dotted names starting with anything else (``np.float64``, ``torch.nn``). ``docs/results/`` holds archived
generated reports and is not read.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import textwrap
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "fedlns_core": ROOT / "fedlns_core",
    "fedlns_torch": ROOT / "adapters" / "fedlns_torch",
    "fedlns_flower": ROOT / "adapters" / "fedlns_flower",
    "fedlns_fedml": ROOT / "adapters" / "fedlns_fedml",
    "fedlns_sim": ROOT / "reference_sim" / "fedlns_sim",
}
NOT_IMPORTED = {"fedlns_fedml"}          # needs FedML: resolved from source
#: Last parts that make a dotted token a file name, not a Python name.
FILE_SUFFIXES = {"json", "jsonl", "md", "py", "toml", "yaml", "yml", "txt", "csv", "npz", "npy", "pt", "bin",
                 "gz", "tar", "zip", "tex", "png", "pdf", "svg", "sh", "log", "cfg", "ini", "html", "lock",
                 "safetensors", "whl"}
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("examples/**/*.md")])
#: The results folders' READMEs, written by hand (their tables.md and matrix.md are generated): held to the width too.
RESULTS_READMES = sorted(ROOT.glob("docs/results/**/README.md"))
#: Prose lines longer than this (tables, code blocks and URLs aside) fail the width test.
PROSE_WIDTH = 120
#: Docs being rewritten elsewhere, left out of the width test until they are reflowed.
WIDTH_PENDING: dict[str, str] = {}

FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
DOTTED = re.compile(r"(?<![\w./\\-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w/\\-])")


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _blocks(text: str):
    """(first line number, text) of each paragraph outside fenced code blocks."""
    paragraph, start, fenced = [], 0, False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            line = ""
        if fenced or not line.strip():
            if paragraph:
                yield start, "\n".join(paragraph)
            paragraph = []
            continue
        if not paragraph:
            start = number
        paragraph.append(line)
    if paragraph:
        yield start, "\n".join(paragraph)


# ------------------------------------------------------------------------------------------ what is cited
def _module_files(package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``package``."""
    root = PACKAGES[package]
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join((package, *parts))] = path
    return files


@lru_cache(maxsize=None)
def _all_modules() -> dict[str, Path]:
    return {name: path for package in PACKAGES for name, path in _module_files(package).items()}


@lru_cache(maxsize=None)
def _exported() -> dict[str, list[str]]:
    """First part of a reference -> the dotted prefixes it may stand for."""
    starts: dict[str, list[str]] = {package: [package] for package in PACKAGES}
    for package, root in PACKAGES.items():
        tree = ast.parse((root / "__init__.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                for name in ast.literal_eval(node.value):
                    starts.setdefault(name, []).append(f"{package}.{name}")
    for module in _all_modules():
        package, _, rest = module.partition(".")
        if rest.startswith("_") and "." not in rest:   # fedlns_core._types as _types; public modules by full name
            starts.setdefault(rest, []).append(module)
    return starts


def references(path: Path):
    """(line number, dotted name as written, the full names it may stand for) of every reference in ``path``."""
    for start, block in _blocks(path.read_text()):
        for span in SPAN.finditer(block):
            line = start + block.count("\n", 0, span.start())
            for match in DOTTED.finditer(" ".join(span.group(2).split())):
                name = match.group(1)
                first, _, rest = name.partition(".")
                if name.rsplit(".", 1)[1] in FILE_SUFFIXES or first not in _exported():
                    continue
                yield line, name, [f"{prefix}.{rest}" for prefix in _exported()[first]]


# ------------------------------------------------------------------------------------------ resolving by import
def _instance_attribute(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` carry ``name`` without the class having it: a field or ``self.name = ...``."""
    for klass in cls.__mro__:
        if klass is object:
            continue
        if dataclasses.is_dataclass(klass) and name in {f.name for f in dataclasses.fields(klass)}:
            return True
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "__slots__", ()):
            return True
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        if name in _self_assignments(ast.parse(source).body[0]):
            return True
    return False


def _targets(node: ast.AST) -> list[ast.AST]:
    """What an assignment statement assigns to (nothing for other statements)."""
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []


def _self_assignments(class_node: ast.ClassDef) -> set[str]:
    """Names assigned as ``self.name = ...`` or ``cls.name = ...`` anywhere in a class."""
    names = set()
    for node in ast.walk(class_node):
        for target in _targets(node):
            for element in ast.walk(target):
                if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) \
                        and element.value.id in ("self", "cls"):
                    names.add(element.attr)
    return names


def _resolve_imported(dotted: str) -> str | None:
    """None when ``dotted`` exists, else what is missing."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module_name = ".".join(parts[:end])
        if module_name not in _all_modules() and end > 1:
            continue
        obj = importlib.import_module(module_name)     # a missing dependency raises ModuleNotFoundError
        break
    for index in range(end, len(parts)):
        attribute = parts[index]
        if hasattr(obj, attribute):
            obj = getattr(obj, attribute)
        elif inspect.isclass(obj) and index == len(parts) - 1 and _instance_attribute(obj, attribute):
            return None
        else:
            return f"{'.'.join(parts[:index])} has no attribute {attribute!r}"
    return None


# ------------------------------------------------------------------------------------------ resolving from source
@lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    return ast.parse(_all_modules()[module].read_text())


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if _all_modules()[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _lookup(module: str, name: str):
    """What ``name`` is at the top level of ``module``, as (kind, module it is defined in, its ast node):
    kind "node" for a class or function, "value" for anything else, "module" for a submodule; None if absent."""
    candidate = f"{module}.{name}"
    for node in _tree(module).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ("node", module, node)
        if any(getattr(target, "id", None) == name for target in _targets(node)):
            return ("value", module, node)
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(module, node)
                    if f"{source}.{alias.name}" in _all_modules():
                        return ("module", f"{source}.{alias.name}", None)
                    if source in _all_modules():
                        return _lookup(source, alias.name)
                    return ("value", source, node)      # from outside the project: exists if importable there
    if candidate in _all_modules():
        return ("module", candidate, None)
    return None


def _class_has(module: str, node: ast.ClassDef, name: str) -> bool:
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and item.name == name:
            return True
        if any(getattr(target, "id", None) == name for target in _targets(item)):
            return True
    if name in _self_assignments(node):
        return True
    for base in node.bases:
        if isinstance(base, ast.Name):
            found = _lookup(module, base.id)
            if found and found[0] == "node" and isinstance(found[2], ast.ClassDef) \
                    and _class_has(found[1], found[2], name):
                return True
    return False


def _resolve_from_source(dotted: str) -> str | None:
    parts = dotted.split(".")
    end = max(n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in _all_modules())
    found = ("module", ".".join(parts[:end]), None)
    for index in range(end, len(parts)):
        kind, where, node = found
        attribute = parts[index]
        if kind == "module":
            found = _lookup(where, attribute)
        elif kind == "node" and isinstance(node, ast.ClassDef) and _class_has(where, node, attribute):
            found = ("value", where, None)
        else:
            found = None
        if found is None:
            return f"{'.'.join(parts[:index])} has no attribute {attribute!r} (read from source)"
    return None


def resolve(dotted: str) -> str | None:
    """None when the name exists, else why not. From source where importing needs a missing dependency."""
    if dotted.split(".")[0] in NOT_IMPORTED:
        return _resolve_from_source(dotted)
    try:
        return _resolve_imported(dotted)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] in PACKAGES:
            raise
        return _resolve_from_source(dotted)


# ------------------------------------------------------------------------------------------ the tests
@pytest.fixture(scope="module", autouse=True)
def _project_first():
    """Resolve against this checkout's packages, whatever else is installed."""
    added = [str(path) for path in (ROOT, ROOT / "adapters", ROOT / "reference_sim") if str(path) not in sys.path]
    sys.path[:0] = added
    yield
    for path in added:
        sys.path.remove(path)


@pytest.mark.parametrize("path", DOCS, ids=_relative)
def test_cited_names_exist(path):
    missing = []
    for line, name, candidates in references(path):
        reasons = [resolve(candidate) for candidate in candidates]
        if all(reasons):
            missing.append(f"{_relative(path)}:{line}: `{name}`: {reasons[0]}")
    assert not missing, "names cited in the docs that do not exist:\n" + "\n".join(missing)


def test_references_are_found():
    """The scanner sees the kinds of reference it is meant to check (so a silent regex cannot pass everything)."""
    cited = {name for path in DOCS for _, name, _ in references(path)}
    assert {"fedlns_core.PARAMETER_CONSTRAINTS", "FedLNS.paper"} <= cited
    assert any(name.startswith("fedlns_fedml.") for name in cited)
    assert resolve("fedlns_core.FedLNS.for_federation") is None
    assert resolve("fedlns_core.ScreeningResult.retained") is None          # a dataclass field
    assert resolve("fedlns_core.FedLNS.round_") is None                     # set in __init__
    assert resolve("fedlns_core.HistoryBank.no_such_method")
    assert resolve("fedlns_fedml.FedLNSServerAggregator.on_before_aggregation") is None
    assert resolve("fedlns_fedml.no_such_name")


def _prose_lines(path: Path):
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith("|"):
            continue
        yield number, re.sub(r"<?https?://\S+", "", line)


@pytest.mark.parametrize("path", DOCS + RESULTS_READMES, ids=_relative)
def test_prose_is_readable_width(path):
    if _relative(path) in WIDTH_PENDING:
        pytest.skip(WIDTH_PENDING[_relative(path)])
    long = [f"{_relative(path)}:{number}: {len(line)} characters" for number, line in _prose_lines(path)
            if len(line) > PROSE_WIDTH]
    assert not long, f"prose lines over {PROSE_WIDTH} characters:\n" + "\n".join(long)


def test_the_api_page_shows_fedlns_as_it_is():
    """``docs/api.md`` opens with ``FedLNS``'s signature: the same parameters, in order, with the same defaults."""
    from fedlns_core import FedLNS

    page = (ROOT / "docs" / "api.md").read_text()
    shown = re.search(r"### `FedLNS`\s*```\s*FedLNS\((.*?)\)\s*```", page, re.DOTALL)
    assert shown, "docs/api.md has no FedLNS(...) block under its FedLNS heading"
    call = ast.parse(f"f({shown.group(1).replace('*,', '')})", mode="eval").body
    documented = [(keyword.arg, ast.literal_eval(keyword.value)) for keyword in call.keywords]
    actual = [(name, parameter.default) for name, parameter in inspect.signature(FedLNS).parameters.items()]
    assert documented == actual
