"""The package's shape: small modules, no import cycles, backends told apart by capabilities."""

from __future__ import annotations

import ast
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


def _kind_branches(tree: ast.AST, constants: set[str], literals: set[str]) -> list[int]:
    """Lines that branch on a Kubeflow kind: a comparison (``is``, ``==``, ``in``, ...) with
    a kind constant (``TRAINJOB``, ``kinds.TFJOB``) or a kind-name literal (``"TrainJob"``)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            for part in ast.walk(operand):
                named = isinstance(part, ast.Name) and part.id in constants
                attr = isinstance(part, ast.Attribute) and part.attr in constants
                literal = isinstance(part, ast.Constant) and part.value in literals
                if named or attr or literal:
                    lines.append(node.lineno)
    return sorted(set(lines))


def _kind_vocabulary() -> tuple[set[str], set[str], set[Path]]:
    """The kinds' constant names, their name literals, and the modules that define them."""
    import importlib

    from jupyter_disttrain.backends.kubernetes import kinds

    homes = {importlib.import_module(type(k).__module__) for k in kinds.KINDS}
    constants = {
        name for home in homes for name, value in vars(home).items() if value in kinds.KINDS
    }
    literals = {word for k in kinds.KINDS for word in (k.kind, k.plural, k.api) if word}
    return constants, literals, {Path(str(home.__file__)) for home in homes}


def test_only_a_kinds_own_module_branches_on_it() -> None:
    constants, literals, homes = _kind_vocabulary()
    assert {"PYTORCHJOB", "TFJOB", "TRAINJOB"} <= constants
    assert {"PyTorchJob", "TFJob", "TrainJob", "trainjob"} <= literals
    found = {}
    for path in modules():
        if path in homes:
            continue
        lines = _kind_branches(ast.parse(path.read_text()), constants, literals)
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert not found, f"kind branches outside the kind's own module: {found}"


def test_the_kind_check_finds_a_branch() -> None:
    constants, literals, _ = _kind_vocabulary()
    source = (
        "if kind is TRAINJOB:\n    pass\n"
        "ok = kind.api == 'pytorchjob'\n"
        "x = obj['kind'] in ('TFJob', 'MPIJob')\n"
        "y = kind is not kinds.PYTORCHJOB\n"
        "z = kind.container in names\n"
    )
    assert _kind_branches(ast.parse(source), constants, literals) == [1, 3, 4, 5]
