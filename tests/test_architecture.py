"""The house rules of docs/architecture.md, checked on the source: layers import only downwards, the
import graph has no cycle, a paper's package is named by nothing outside it (the import list of
itrlab.methods aside), only the allowed packages import MLflow and Ray, and only the command line prints."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "itrlab"
PAPERS = tuple(sorted(p.parent.name for p in (PACKAGE / "methods").glob("*/__init__.py")))  # one folder per paper
# lowest first: a module may import its own layer and the ones before it
LAYERS = [
    {
        "errors",
        "numbers",
        "files",
        "interrupts",
        "threads",
        "gpu_memory",
        "lazy",
        "process_id",
        "workdir",
        "ray_head",
        "console_log",
        "registry",
    },
    {"losses", "eval"},
    {"data"},
    {"models", "tracking"},
    {"config"},
    {"methods", "report"},
    {"assembly", "extract"},
    {"train", "trained", "acquire"},
    {"sweep"},
    {"cli"},
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
GRAPH = {
    name: {m for m in imports_of(path) if m in SOURCES or m.split(".")[0] != "itrlab"} for name, path in SOURCES.items()
}


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
                pytest.fail("import cycle: " + " -> ".join([*stack[stack.index(dep) :], dep]))
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
    foreign = [
        m
        for m in GRAPH[module]
        if m.startswith("itrlab.methods.") and m.split(".")[2] in PAPERS and m.split(".")[2] != own
    ]
    assert not foreign, f"{module} names another paper's package: {foreign}"


@pytest.mark.parametrize("library, allowed", [("mlflow", {"tracking"}), ("ray", {"sweep", "train", "extract"})])
def test_only_allowed_packages_import(library, allowed):
    offenders = sorted(
        m for m, deps in GRAPH.items() if any(d.split(".")[0] == library for d in deps) and top(m) not in allowed
    )
    assert not offenders, f"{library} imported outside {sorted(allowed)}: {offenders}"


def test_no_source_cites_a_file_outside_the_repository():
    repo = PACKAGE.parents[1]
    files = [*PACKAGE.rglob("*.py"), *(repo / "jobs").glob("*.py"), *(repo / "configs").rglob("*.yaml")]
    files += (repo / "benchmarks").glob("*.py")
    offenders = [
        str(f.relative_to(repo))
        for f in files
        if any(word in f.read_text(encoding="utf-8") for word in ("../shared", "DESIGN.md", "coder_ascl.md"))
    ]
    assert not offenders


# --------------------------------------------------------------------------- the platform names no paper

# Words of ordinary use that some paper also uses as a setting's key (a random Generator, a weight
# matrix, the K of R@K, the momentum of an EMA): the platform's own code may say them.
GENERAL_WORDS = {
    "K",
    "p",
    "beta",
    "sigma",
    "momentum",
    "weight",
    "generator",
    "heads",
    "positives",
    "concepts",
    "lambda",
    "ema",
    "branches",
}


def paper_words() -> tuple[set[str], set[str]]:
    """(names, settings): what names a paper outside its package. Names: its package's, and its registered
    name (``DBL``), except a name the platform registers itself (the shared ``vse`` loss). Settings: the
    keys of each scheme's section and of each method's settings that one paper's package declares (a key
    two papers declare, such as the token-level scorers' shard budget, is shared) and no shared section has."""
    from pydantic import BaseModel

    import itrlab.methods as methods
    from itrlab.config import schema
    from itrlab.losses import LOSSES

    platform_names = {name for name, cls in LOSSES.items() if not cls.__module__.startswith("itrlab.methods.")}
    names = {*PAPERS, *(paper.name for paper in methods.PAPERS.values())} - platform_names
    shared = {
        field.alias or name
        for cls in vars(schema).values()
        if isinstance(cls, type) and issubclass(cls, BaseModel)
        for name, field in cls.model_fields.items()
    }
    settings = {scheme.section for scheme in methods.SCHEMES.values()}
    settings |= {name for scheme in methods.SCHEMES.values() for name in scheme.settings.model_fields}
    declared: dict[str, set[str]] = {}  # a method setting: the paper packages that declare it
    for cls in methods.METHODS.values():
        for name, field in cls.settings.model_fields.items():
            declared.setdefault(field.alias or name, set()).add(cls.__module__.split(".")[2])
    settings |= {key for key, packages in declared.items() if len(packages) == 1}  # two papers': shared
    return names, settings - shared - GENERAL_WORDS


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def named_papers(path: Path, names: set[str], settings: set[str]) -> list[str]:
    """What ``path``'s code (not its docstrings and comments, which may credit a paper's equation) says
    of a paper: words of its strings, attributes, keyword arguments and names."""
    lowered = {name.lower() for name in names}
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = re.findall(r"[A-Za-z_][A-Za-z0-9_+]*", node.value)
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.keyword) and node.arg:
            words = [node.arg]
        elif isinstance(node, ast.Name):  # a shared part's own parameter may share a setting's name: only names
            found += [f"line {node.lineno}: {node.id}"] if node.id.lower() in lowered else []
            continue
        else:
            continue
        found += [f"line {node.lineno}: {word}" for word in words if word.lower() in lowered or word in settings]
    return found


def test_the_platform_names_no_paper_nor_a_papers_setting():
    """Outside ``methods/<paper>/`` no code names a paper or a setting of one (a scheme's section, a
    method's key): what a paper adds it declares in its package through the registries."""
    names, settings = paper_words()
    assert {"cooperative", "strategy", "queue_size"} <= settings and {"dbl", "DBL", "coder"} <= names
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "methods" and len(parts) > 2:  # a paper's own package
            continue
        found = named_papers(path, names, settings)
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert not offenders, offenders


def test_the_paper_name_check_catches_a_paper_in_code(tmp_path):
    source = tmp_path / "special.py"
    source.write_text(
        '"""Credits DBL eq. 7 (a docstring may)."""\n\ndef tags(config):\n'
        '    return {"scheme": config.cooperative.strategy, "paper": "dbl"}\n',
        encoding="utf-8",
    )
    found = named_papers(source, {"DBL", "dbl"}, {"cooperative", "strategy"})
    assert found == ["line 4: cooperative", "line 4: strategy", "line 4: dbl"] or sorted(found) == sorted(
        ["line 4: cooperative", "line 4: strategy", "line 4: dbl"]
    )


# --------------------------------------------------------------------------- file names say what they hold

# File names two modules may share because they hold the same concept in two places; each module's
# docstring names another module of its group, so that a reader of either learns of the other.
SAME_CONCEPT = {
    "base.py": ("the contract a layer's parts implement: a loss's, a method's", {"losses/base.py", "methods/base.py"}),
    "registry.py": (
        "a registry of named parts that a config or a flag names: the one class, and each layer's instances",
        {
            "registry.py",
            "losses/registry.py",
            "methods/registry.py",
            "data/kinds/registry.py",
            "extract/readers/registry.py",
        },
    ),
    "precomp.py": (
        "the precomp layout: read, and registered as a dataset kind",
        {"data/precomp.py", "data/kinds/precomp.py"},
    ),
    "synthetic.py": (
        "the synthetic data: generated, and registered as a dataset kind",
        {"data/synthetic.py", "data/kinds/synthetic.py"},
    ),
}
# A paper's package keeps its parts in the files docs/adding-a-method.md names (methods/<paper>/method.py,
# ...): the same concept in every paper's package.
PAPER_LAYOUT = ("method.py", "losses.py", "loss_settings.py")


def shared_file_names(paths: list[str]) -> dict[str, set[str]]:
    """File names (``__init__.py`` and a paper package's layout aside) that two or more of ``paths``
    (relative to the package, ``/``-separated) share, and the paths that share each."""
    by_name: dict[str, set[str]] = {}
    for path in paths:
        parts = path.split("/")
        if parts[-1] == "__init__.py" or (len(parts) == 3 and parts[0] == "methods" and parts[2] in PAPER_LAYOUT):
            continue
        by_name.setdefault(parts[-1], set()).add(path)
    return {name: found for name, found in by_name.items() if len(found) > 1}


def unexplained_names(paths: list[str]) -> dict[str, list[str]]:
    return {
        name: sorted(found)
        for name, found in shared_file_names(paths).items()
        if not found <= SAME_CONCEPT.get(name, ("", set()))[1]
    }


def package_paths() -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def test_no_two_modules_share_a_file_name():
    """Two modules of different concepts do not share a file name (``plan.py`` for a sweep's dry run and an
    extraction's options): rename one to say what it holds, or, for the same concept in two places, add the
    pair to SAME_CONCEPT with each docstring naming the other."""
    assert not unexplained_names(package_paths()), unexplained_names(package_paths())


@pytest.mark.parametrize("name", sorted(SAME_CONCEPT))
def test_modules_of_one_concept_say_so_in_their_docstrings(name):
    _, paths = SAME_CONCEPT[name]
    modules = {path: "itrlab." + path.removesuffix(".py").replace("/", ".") for path in paths}
    assert all((PACKAGE / path).is_file() for path in paths), f"SAME_CONCEPT names a module that is gone: {name}"
    silent = [
        path
        for path in sorted(paths)
        if not any(
            other in (ast.get_docstring(ast.parse((PACKAGE / path).read_text(encoding="utf-8"))) or "")
            for other in set(modules.values()) - {modules[path]}
        )
    ]
    assert not silent, f"these modules' docstrings name no other {name} of one concept with them: {silent}"


def test_the_paper_layout_is_the_method_guide():
    guide = (PACKAGE.parents[1] / "docs" / "adding-a-method.md").read_text(encoding="utf-8")
    assert all(f"methods/<name>/{name}" in guide for name in PAPER_LAYOUT)


def test_the_name_check_catches_a_repeated_name():
    paths = [
        "sweep/plan.py",
        "extract/plan.py",
        "methods/vse/method.py",
        "methods/clip/method.py",
        "data/precomp.py",
        "data/kinds/precomp.py",
        "train/__init__.py",
        "sweep/__init__.py",
        "methods/dbl/settings.py",
        "losses/settings.py",
        "methods/vse/parts/method.py",
        "bench/method.py",
    ]
    assert unexplained_names(paths) == {
        "plan.py": ["extract/plan.py", "sweep/plan.py"],
        "settings.py": ["losses/settings.py", "methods/dbl/settings.py"],
        "method.py": ["bench/method.py", "methods/vse/parts/method.py"],
    }
    assert unexplained_names([*paths[4:6], "eval/precomp.py"]) == {
        "precomp.py": ["data/kinds/precomp.py", "data/precomp.py", "eval/precomp.py"]
    }


COMMAND_LINE = ("itrlab.cli",)  # the layer that prints (docs/architecture.md)


def printing_modules(sources: dict[str, Path]) -> list[str]:
    """The modules of ``sources`` (name -> path) outside the command line that call ``print``."""
    return sorted(
        name
        for name, path in sources.items()
        if not name.startswith(COMMAND_LINE)
        and any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    )


def test_only_the_command_line_prints(tmp_path):
    """The library logs through ``logging.getLogger(__name__)`` (a program embedding it can quiet it); only the
    command line prints. The check finds a planted print."""
    assert printing_modules(SOURCES) == []
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    print('hello')\n")
    assert printing_modules({"itrlab.sweep.planted": planted, "itrlab.cli.planted": planted}) == [
        "itrlab.sweep.planted"
    ]
