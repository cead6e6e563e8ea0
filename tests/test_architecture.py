"""The package's shape: small modules, no import cycles, backends told apart by capabilities."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import grimp

from jupyter_disttrain.backends.registry import names
from tests.conftest import REPO

PACKAGE = REPO / "jupyter_disttrain"
MAX_LINES = 600


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_over_600_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("jupyter_disttrain", exclude_type_checking_imports=True)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported == module or imported == "jupyter_disttrain":
                continue
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append((module, imported))
    assert not cycles, f"import cycles: {cycles}"


def _compared_names(tree: ast.AST, backend_names: set[str]) -> list[int]:
    """Lines where a backend name literal is compared (==, !=, in, not in)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            for const in ast.walk(operand):
                if isinstance(const, ast.Constant) and const.value in backend_names:
                    lines.append(node.lineno)
    return lines


def test_nothing_outside_backends_compares_backend_names() -> None:
    backend_names = set(names())
    found = {}
    for path in modules():
        parts = path.relative_to(PACKAGE).parts
        # runtime/ runs in the workers and knows no backends ("local" there is fsspec's)
        if "backends" in parts or parts[0] == "runtime":
            continue
        lines = _compared_names(ast.parse(path.read_text()), backend_names)
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert not found, f"backend names compared outside backends/: {found}"


def test_the_check_finds_a_comparison() -> None:
    tree = ast.parse("if spec.backend == 'kubernetes':\n    pass\nx = b in ('local',)\n")
    assert _compared_names(tree, set(names())) == [1, 3]


# The Kubernetes backend is being rebuilt as a package (backends/kubernetes/); until then its
# flat modules still share private names. ``*`` also matches ``/``.
UNDERSCORE_EXEMPT = ("backends/kubernetes*", "backends/k8s_*", "backends/manifests.py")


def _underscore_imports(tree: ast.AST) -> list[str]:
    """``line: name`` of each underscore name imported from a module of the package."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if not (node.level or (node.module or "").split(".")[0] == "jupyter_disttrain"):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{node.lineno}: {alias.name}")
    return found


def test_no_underscore_name_imported_from_another_module_of_the_package() -> None:
    found = {}
    for path in modules():
        relative = path.relative_to(PACKAGE).as_posix()
        if any(fnmatch.fnmatch(relative, pattern) for pattern in UNDERSCORE_EXEMPT):
            continue
        names = _underscore_imports(ast.parse(path.read_text()))
        if names:
            found[str(path.relative_to(REPO))] = names
    assert not found, f"underscore names imported across modules (make them public): {found}"


def test_the_check_finds_an_underscore_import() -> None:
    tree = ast.parse(
        "from .records import _int, as_str\n"
        "from jupyter_disttrain.nccl.patterns import _RULES\n"
        "from os import _exit\n"
        "from . import __version__\n"
    )
    assert _underscore_imports(tree) == ["1: _int", "2: _RULES"]
