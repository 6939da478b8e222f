"""The house rules of docs/architecture.md, checked on the source: layers import only downwards, the
import graph has no cycle, a paper's package is named by nothing outside it (the import list of
itrlab.methods aside), and only the allowed packages import MLflow and Ray."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "itrlab"
PAPERS = tuple(sorted(p.parent.name for p in (PACKAGE / "methods").glob("*/__init__.py")))  # one folder per paper
# lowest first: a module may import its own layer and the ones before it
LAYERS = [
    {"errors", "numbers", "files", "interrupts", "threads", "gpu_memory"},
    {"losses", "eval"},
    {"data"},
    {"models", "tracking"},
    {"config"},
    {"methods", "report"},
    {"assembly", "extract"},
    {"train"},
    {"sweep"},
    {"bench", "cli", "local_cluster"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """itrlab modules ``path`` imports, at any depth of the file (lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("itrlab", "mlflow", "ray")}


SOURCES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {m for m in imports_of(path) if m in SOURCES or m.split(".")[0] != "itrlab"}
         for name, path in SOURCES.items()}


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_paper_has_its_package():
    assert {"vse", "convse", "dbl", "xattn", "coder", "ascl", "clip"} <= set(PAPERS)


def test_every_top_level_module_has_a_layer():
    assert not {top(m) for m in SOURCES if m != "itrlab"} - set(RANK), "give each new top-level module a layer"


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_go_down_the_layers(module):
    if module == "itrlab":
        return
    upward = [m for m in GRAPH[module] if m.startswith("itrlab.") and RANK[top(m)] > RANK[top(module)]]
    assert not upward, f"{module} imports a higher layer: {upward}"


def test_the_import_graph_has_no_cycle():
    edges = {m: {d for d in deps if d in SOURCES and d != m} for m, deps in GRAPH.items()}
    for module in edges:  # a package's __init__ re-exporting its children is not a cycle of the code
        edges[module] = {d for d in edges[module] if not d.startswith(module + ".")}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in edges[node]:
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join([*stack[stack.index(dep):], dep]))
            if dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for module in edges:
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_module_names_a_papers_package_but_its_own(module):
    if module == "itrlab.methods":  # the one import list
        return
    own = module.split(".")[2] if module.startswith("itrlab.methods.") and module.count(".") >= 2 else None
    foreign = [m for m in GRAPH[module] if m.startswith("itrlab.methods.") and m.split(".")[2] in PAPERS
               and m.split(".")[2] != own]
    assert not foreign, f"{module} names another paper's package: {foreign}"


@pytest.mark.parametrize("library, allowed", [("mlflow", {"tracking"}),
                                               ("ray", {"sweep", "train", "bench", "extract", "local_cluster"})])
def test_only_allowed_packages_import(library, allowed):
    offenders = sorted(m for m, deps in GRAPH.items() if any(d.split(".")[0] == library for d in deps)
                       and top(m) not in allowed)
    assert not offenders, f"{library} imported outside {sorted(allowed)}: {offenders}"


def test_no_source_cites_a_file_outside_the_repository():
    repo = PACKAGE.parents[1]
    files = [*PACKAGE.rglob("*.py"), *(repo / "jobs").glob("*.py"), *(repo / "configs").rglob("*.yaml")]
    offenders = [str(f.relative_to(repo)) for f in files
                 if any(word in f.read_text(encoding="utf-8") for word in ("../shared", "DESIGN.md", "coder_ascl.md"))]
    assert not offenders
