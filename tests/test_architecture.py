"""The package's shape: small modules, no import cycles, backends told apart by capabilities."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

from jupyter_disttrain.backends.registry import names
from tests.conftest import REPO

PACKAGE = REPO / "jupyter_disttrain"
EMULATOR = REPO / "tests" / "k8s_emulator"
MAX_LINES = 600


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def over_limit(paths: list[Path], root: Path = REPO) -> dict[str, int]:
    """The files among ``paths`` longer than :data:`MAX_LINES`, with their line counts."""
    return {
        str(p.relative_to(root)): n
        for p in paths
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }


def test_no_module_over_600_lines() -> None:
    long = over_limit(modules())
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_emulator_module_over_600_lines() -> None:
    emulator = sorted(EMULATOR.rglob("*.py"))
    assert len(emulator) > 20  # the emulator is where this test looks for it
    long = over_limit(emulator)
    assert not long, f"Kubernetes emulator modules over {MAX_LINES} lines: {long}"


def test_the_line_limit_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    paths = sorted(tmp_path.glob("*.py"))
    assert over_limit(paths, tmp_path) == {"long.py": MAX_LINES + 1}


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
