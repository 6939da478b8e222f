"""The tiers' source check (docs/tests.md#tiers), used by tests/test_tiers.py: which tests start a process
(Ray, a server, a training or CLI job in a subprocess, an external tool), and through what.

The scan follows, within the tests folder, every function, class and fixture a test reaches (called or
passed by name, imported from another test module, conftest.py or servers.py, requested as an argument,
by ``usefixtures`` or autouse) to the calls that start a process: ``subprocess.*``, ``os.system`` and
its kin, ``ray.init``, and itrlab's ``run_sweep`` and ``LocalCluster``. What itrlab starts when called
otherwise (``main(["sweep", ...])``) is caught at run time by conftest.py's guard."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TIERS = ("e2e", "cluster", "slow")  # pyproject.toml registers them; the fast tier is none of them
PROCESS_TIERS = {"e2e", "cluster"}
# test helper modules that start only a static tool (ruff: it reads the source and starts nothing), which the fast
# tier may run; conftest.py's run-time guard lets only that program through (its STATIC_TOOLS)
STATIC_TOOL_MODULES = {"lint_tools"}
STARTING_MODULE_CALLS = {
    "subprocess": None,
    "ray": {"init"},  # None: any function of the module
    "os": {
        "system",
        "popen",
        "fork",
        "forkpty",
        "posix_spawn",
        "posix_spawnp",
        "execv",
        "execve",
        "execvp",
        "execvpe",
        "execl",
        "execle",
        "execlp",
        "execlpe",
        "spawnv",
        "spawnve",
        "spawnvp",
        "spawnvpe",
        "spawnl",
        "spawnle",
        "spawnlp",
        "spawnlpe",
    },
}
STARTING_NAMES = {"run_sweep", "LocalCluster"}  # itrlab's entry points that start Ray or processes


@dataclass
class Module:
    """One test-folder module's definitions: functions, classes and fixtures by name; names imported from
    sibling modules; what ``subprocess``/``os``/``ray`` go by; the module's own marks."""

    name: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    fixtures: dict[str, ast.FunctionDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> "subprocess" / "os" / "ray" / "os.system"
    mark_names: dict[str, set[str]] = field(default_factory=dict)  # module-level `x = pytest.mark.y` -> {y}
    marks: set[str] = field(default_factory=set)  # pytestmark
    fixtures_used: set[str] = field(default_factory=set)  # pytestmark's usefixtures, autouse fixtures


def marks_of(node: ast.expr, names: dict[str, set[str]]) -> set[str]:
    """The marker names an expression (a decorator, ``pytestmark``'s value) applies."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(marks_of(e, names) for e in node.elts))
    if isinstance(node, ast.Call):
        return marks_of(node.func, names)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
        return {node.attr}
    if isinstance(node, ast.Name):
        return names.get(node.id, set())
    return set()


def usefixtures_of(node: ast.expr) -> set[str]:
    """Fixture names a ``pytest.mark.usefixtures(...)`` (or a list holding one) requests."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(usefixtures_of(e) for e in node.elts))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "usefixtures":
        return {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return set()


def fixture_decorator(node: ast.FunctionDef) -> ast.expr | None:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (
            isinstance(target, ast.Attribute)
            and target.attr == "fixture"
            or isinstance(target, ast.Name)
            and target.id == "fixture"
        ):
            return decorator
    return None


def parse(name: str, source: str) -> Module:
    module = Module(name, ast.parse(source))
    for node in module.tree.body:
        if isinstance(node, ast.FunctionDef):
            module.functions[node.name] = node
            decorator = fixture_decorator(node)
            if decorator is not None:
                module.fixtures[node.name] = node
                if isinstance(decorator, ast.Call) and any(
                    k.arg == "autouse" and getattr(k.value, "value", False) for k in decorator.keywords
                ):
                    module.fixtures_used.add(node.name)
        elif isinstance(node, ast.ClassDef):
            module.classes[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target == "pytestmark":
                module.marks |= marks_of(node.value, module.mark_names)
                module.fixtures_used |= usefixtures_of(node.value)
            elif found := marks_of(node.value, module.mark_names):
                module.mark_names[target] = found
    for node in ast.walk(module.tree):  # imports at any depth: a test may import ray inside itself
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module in STARTING_MODULE_CALLS:
                    module.aliases[local] = f"{node.module}.{alias.name}"
                else:
                    module.imported[local] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in STARTING_MODULE_CALLS:
                    module.aliases[alias.asname or alias.name] = alias.name
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "importorskip"
            and node.value.args
            and getattr(node.value.args[0], "value", None) in STARTING_MODULE_CALLS
        ):
            module.aliases[node.targets[0].id] = node.value.args[0].value  # ray = pytest.importorskip("ray")
    return module


def starting_call(call: ast.Call, module: Module) -> str | None:
    """The process-starting primitive ``call`` is (``subprocess.run``, ``ray.init``, ...), or None."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        full = f"{module.aliases[func.value.id]}.{func.attr}" if func.value.id in module.aliases else None
    else:
        full = module.aliases.get(func.id) if isinstance(func, ast.Name) else None
    if full is not None and full.count(".") == 1:
        owner, name = full.split(".")
        allowed = STARTING_MODULE_CALLS.get(owner, set())
        if allowed is None or name in allowed:
            return full
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name if name in STARTING_NAMES else None


class Scan:
    """Which functions of the tests folder start a process, and through what."""

    def __init__(self, sources: dict[str, str]):
        self.modules = {name: parse(name, source) for name, source in sources.items()}
        self.conftest = self.modules.get("conftest")
        self._memo: dict[tuple[str, str], str | None] = {}

    def resolve(self, module: Module, name: str) -> tuple[Module, ast.AST] | None:
        """The definition ``name`` refers to in ``module``: its own, or one imported from a sibling."""
        if name in module.functions or name in module.classes:
            return module, module.functions.get(name) or module.classes[name]
        if name in module.imported:
            owner, original = module.imported[name]
            if owner in self.modules:
                return self.resolve(self.modules[owner], original)
        return None

    def fixture(self, module: Module, name: str) -> tuple[Module, ast.FunctionDef] | None:
        """The fixture ``name`` a test of ``module`` gets: the module's own, one it imports, or conftest's."""
        if name in module.fixtures:
            return module, module.fixtures[name]
        if (
            name in module.imported
            and (target := self.resolve(module, name))
            and target[1] in target[0].fixtures.values()
        ):
            return target
        if self.conftest is not None and name in self.conftest.fixtures:
            return self.conftest, self.conftest.fixtures[name]
        return None

    def starts(self, module: Module, node: ast.AST, stack: tuple = ()) -> str | None:
        """How ``node`` (a function, class or fixture) starts a process: a chain ``a -> b -> subprocess.run``."""
        key = (module.name, getattr(node, "name", "?"))
        if module.name in STATIC_TOOL_MODULES:
            return None
        if key in self._memo:
            return self._memo[key]
        if key in stack:  # recursion: what the outer call finds
            return None
        stack = (*stack, key)
        found = None
        if isinstance(node, ast.FunctionDef) and (node.name.startswith("test_") or node in module.fixtures.values()):
            for argument in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                if (fixture := self.fixture(module, argument.arg)) and (how := self.starts(*fixture, stack)):
                    found = f"fixture {argument.arg} -> {how}"
                    break
        local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if isinstance(node, ast.FunctionDef):  # a parameter named like a module function is not that function
            local |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        for child in ast.walk(node) if found is None else ():
            if isinstance(child, ast.Call) and (primitive := starting_call(child, module)):
                found = primitive
            elif (
                isinstance(child, ast.Name)
                and isinstance(child.ctx, ast.Load)
                and child.id not in local
                and (target := self.resolve(module, child.id))
                and (how := self.starts(*target, stack))
            ):
                found = f"{child.id} -> {how}"
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "getfixturevalue"
                and child.args
                and isinstance(child.args[0], ast.Constant)
                and (fixture := self.fixture(module, child.args[0].value))
                and (how := self.starts(*fixture, stack))
            ):
                found = f"fixture {child.args[0].value} -> {how}"
            if found:
                break
        self._memo[key] = found
        return found

    def tests(self):
        """(module, test function, its marks, the fixtures its marks and module request) of every test."""
        for module in self.modules.values():
            if not module.name.startswith("test_"):
                continue
            classes = [
                (c, set().union(*(marks_of(d, module.mark_names) for d in c.decorator_list)))
                for c in module.classes.values()
                if c.name.startswith("Test")
            ]
            found = [(f, set()) for f in module.functions.values() if f.name.startswith("test_")]
            found += [
                (f, marks)
                for c, marks in classes
                for f in c.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
            ]
            for function, class_marks in found:
                marks = module.marks | class_marks
                used = set(module.fixtures_used) | (self.conftest.fixtures_used if self.conftest else set())
                for decorator in function.decorator_list:
                    marks |= marks_of(decorator, module.mark_names)
                    used |= usefixtures_of(decorator)
                yield module, function, marks, used

    def unmarked_starters(self) -> list[str]:
        """'module::test: how it starts a process' for each test without a process tier."""
        offenders = []
        for module, function, marks, used in self.tests():
            if marks & PROCESS_TIERS:
                continue
            how = self.starts(module, function)
            for name in sorted(used) if how is None else ():
                if (fixture := self.fixture(module, name)) and (how := self.starts(*fixture)):
                    how = f"fixture {name} -> {how}"
                    break
            if how:
                offenders.append(f"{module.name}::{function.name}: {how}")
        return offenders

    def tier_marks_on_helpers(self) -> list[str]:
        """'module::function' for each helper (neither a test nor a fixture) that a tier marker decorates."""
        return [
            f"{module.name}::{function.name}"
            for module in self.modules.values()
            for function in module.functions.values()
            if not function.name.startswith("test_")
            and function.name not in module.fixtures
            and any(marks_of(d, module.mark_names) & set(TIERS) for d in function.decorator_list)
        ]

    def starts_at_collection(self) -> list[str]:
        """'module: how' for each test module whose top-level statements (outside functions and classes)
        start a process: that happens on every worker, in every tier."""
        offenders = []
        for module in self.modules.values():
            if not module.name.startswith("test_"):
                continue
            for statement in module.tree.body:
                if isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                    continue
                for child in ast.walk(statement):
                    how = None
                    if isinstance(child, ast.Call) and (primitive := starting_call(child, module)):
                        how = primitive
                    elif (
                        isinstance(child, ast.Call)
                        and isinstance(child.func, ast.Name)
                        and (target := self.resolve(module, child.func.id))
                        and (via := self.starts(*target))
                    ):
                        how = f"{child.func.id} -> {via}"
                    if how:
                        offenders.append(f"{module.name}: {how}")
                        break
        return offenders


def the_tests_folder() -> Scan:
    return Scan({path.stem: path.read_text(encoding="utf-8") for path in sorted(TESTS.glob("*.py"))})
