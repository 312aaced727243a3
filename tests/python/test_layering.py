"""The package's import structure: layers one way (import-linter's contracts), no import
cycle, no private name used outside its module."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


# import-linter run on the assembled tree: an editable install's import hook (which maps
# lazymlir.lowering to lowering/ of its own checkout) is taken out, so the copy is read.
LINT_IMPORTS = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
from importlinter.cli import lint_imports_command
sys.exit(lint_imports_command())
"""


def test_import_layers_are_one_way(tmp_path):
    """tracing -> execution -> targets -> lowering -> session/support (import-linter).

    The checked tree is the package as installed (lowering/ inside lazymlir/),
    assembled from this checkout so the check reads the sources under test.
    """
    # import-linter is one of the test extras: without it the contracts go unchecked.
    assert importlib.util.find_spec("importlinter"), \
        "import-linter is not installed (pip install '.[test]')"
    root = HERE.parent.parent
    ignore = shutil.ignore_patterns("__pycache__", "_lib")
    shutil.copytree(root / "lazymlir", tmp_path / "lazymlir", ignore=ignore)
    shutil.copytree(root / "lowering", tmp_path / "lazymlir" / "lowering", ignore=ignore)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--config",
                           str(root / ".importlinter")], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-3000:]


# ------------------------------------------------------------ the import graph, from the sources
#
# Read from the sources rather than with grimp: under an editable install the package's
# search path also holds the repository root (for lowering/ and dialects/), and grimp then
# walks tests/ and benchmarks/ as if they were part of lazymlir.

# Each folder of the checkout and the package it installs as.
PACKAGES = {"lazymlir": "lazymlir", "lazymlir.lowering": "lowering",
            "lazymlir.dialects": "dialects"}


def _project_modules() -> dict[str, Path]:
    """Module name (as installed) -> source file, for every module of the package."""
    root = HERE.parent.parent
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Import statements inside `if TYPE_CHECKING:` blocks (never run, so never a cycle)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(ast.walk(child))
    return skipped


class _Module:
    """One module's imports of project modules and of names from them (every import
    statement, function-local ones included)."""

    def __init__(self, name: str, path: Path, modules: dict[str, Path]):
        self.name, self.path = name, path
        self.is_package = path.name == "__init__.py"
        self.tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_only(self.tree)
        self.imports: dict[str, int] = {}  # imported project module -> first line
        self.names: list[tuple[str, str, int]] = []  # (module, name, line) of `from m import n`
        self.aliases: dict[str, str] = {}  # local name -> project module it is bound to
        for node in ast.walk(self.tree):
            if node in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _longest_module(alias.name, modules)
                    if target:
                        self.imports.setdefault(target, node.lineno)
                        if alias.asname:
                            self.aliases[alias.asname] = target
                        elif alias.name.split(".")[0] in modules:
                            self.aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = self._resolve(node)
                if base not in modules:
                    continue
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule in modules:
                        self.imports.setdefault(submodule, node.lineno)
                        self.aliases[alias.asname or alias.name] = submodule
                    else:
                        self.imports.setdefault(base, node.lineno)
                        self.names.append((base, alias.name, node.lineno))
        self.imports.pop(name, None)

    def _resolve(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = self.name.split(".") if self.is_package else self.name.split(".")[:-1]
        base = package[:len(package) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def rebound_names(self) -> set[str]:
        """Names this module binds other than by importing (a local `stages` variable
        shadows the module of that name: its attributes are not the module's)."""
        bound = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
        return bound


def _longest_module(dotted: str, modules) -> str | None:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _parsed() -> dict[str, _Module]:
    modules = _project_modules()
    return {name: _Module(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """(one shortest cycle, all members) per strongly connected component of `graph`
    (Tarjan's algorithm)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    cycles = []
    for component in components:
        first = min(component)
        paths, queue = {first: [first]}, [first]
        for node in queue:  # breadth first, inside the component: the shortest way back
            for child in sorted(graph[node] & component):
                if child == first:
                    cycles.append((paths[node] + [first], sorted(component)))
                    break
                if child not in paths:
                    paths[child] = paths[node] + [child]
                    queue.append(child)
            else:
                continue
            break
    return sorted(cycles)


def test_no_import_cycles():
    """No module imports one that imports it back, directly or through others, counting
    imports inside functions too: a function-local import hides a cycle rather than
    removing it (the modules still need each other, and the import order decides which
    one sees the other half-initialized)."""
    parsed = _parsed()
    graph = {name: set(module.imports) for name, module in parsed.items()}
    cycles = _cycles(graph)

    def where(a: str, b: str) -> str:
        return f"{a} (line {parsed[a].imports[b]})"

    report = [f"  {' -> '.join([*(where(a, b) for a, b in zip(c, c[1:])), c[-1]])}\n"
              f"    (the group: {', '.join(group)})" for c, group in cycles]
    assert not cycles, "import cycles, one per group of modules:\n" + "\n".join(report)


def test_no_private_name_is_imported_from_another_module():
    """A `_name` is its module's own: another module that needs it gets a public helper
    (one, shared) instead of reaching in. Checked: `from m import _name` (relative forms
    too) and `m._name` on a project module `m` bound by an import."""
    parsed = _parsed()
    found = []
    for name, module in sorted(parsed.items()):
        rel = module.path.relative_to(HERE.parent.parent)
        for base, imported, line in module.names:
            if _is_private(imported) and base != name:
                found.append(f"  {rel}:{line}: from {base} import {imported}")
        aliases = {k: v for k, v in module.aliases.items() if k not in module.rebound_names()}
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in aliases:
                continue
            target = ".".join([aliases[value.id], *reversed(chain)])
            if target in parsed and target != name:
                found.append(f"  {rel}:{node.lineno}: {ast.unparse(node)} ({target})")
    assert not found, "private names used outside their module:\n" + "\n".join(found)
