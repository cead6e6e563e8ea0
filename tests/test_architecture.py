"""The package's shape: small modules, no import cycles, backends and frameworks asked."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import tomllib
from pytest import MonkeyPatch

from jupyter_disttrain import frameworks
from jupyter_disttrain.backends.registry import names
from jupyter_disttrain.runtime.checkpoint import format as ckformat
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


def import_cycles(package: str) -> list[tuple[str, str]]:
    """Pairs (module, what it imports) that close a cycle, typing-only imports included: a
    cycle through ``if TYPE_CHECKING:`` is one runtime import away from a half-initialised
    module."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=False)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported == module or imported == package:
                continue
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append((module, imported))
    return cycles


def test_no_import_cycles() -> None:
    cycles = import_cycles("jupyter_disttrain")
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_check_sees_typing_imports(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    package = tmp_path / "ringpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from ringpkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ringpkg import a\n"
    )
    (package / "c.py").write_text("from ringpkg import b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("ringpkg") == [("ringpkg.a", "ringpkg.b"), ("ringpkg.b", "ringpkg.a")]


def test_the_kind_neutral_contract_lists_every_kind_neutral_module() -> None:
    """A new Kubernetes module is under the contract unless it is a kind or the re-exporter."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (neutral,) = [c for c in contracts if c["name"].startswith("Kind-neutral")]
    folder = PACKAGE / "backends" / "kubernetes"
    prefix = "jupyter_disttrain.backends.kubernetes."
    expected = {prefix + p.stem for p in folder.glob("*.py")} - {
        prefix + "__init__",
        prefix + "manifests",  # re-exports the kinds' builders
    }
    assert set(neutral["source_modules"]) == expected


SET_MAKERS = ("frozenset", "set")


def _holds(node: ast.AST, wanted: set[str]) -> bool:
    """Whether ``node`` holds one of the ``wanted`` text literals."""
    return any(isinstance(c, ast.Constant) and c.value in wanted for c in ast.walk(node))


def _is_collection(node: ast.AST) -> bool:
    """A literal collection: ``(..)``, ``[..]``, ``{..}``, ``{k: ..}`` or ``frozenset(..)``."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in (*SET_MAKERS, "tuple", "list")
    )


def _literal(node: ast.AST, wanted: set[str]) -> bool:
    """A ``wanted`` text literal, or a literal collection holding one (a call's text is not)."""
    if isinstance(node, ast.Constant):
        return node.value in wanted
    return _is_collection(node) and _holds(node, wanted)


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _compared_names(tree: ast.AST, wanted: set[str]) -> list[int]:
    """Lines where a ``wanted`` name is compared or tested for membership.

    The forms: a literal compared (``==``, ``!=``, ``is``, ``in``/``not in``
    a literal collection: ``x in ("a", "b")``, ``x in {"a"}``,
    ``x in frozenset({"a"})``); a set or frozenset literal holding a name,
    wherever it is (sets are made for membership tests); ``x in NAMES`` where
    ``NAMES`` (or ``obj.NAMES``) is bound in the module to a literal
    collection holding a name; and ``case "a":`` in a ``match``.
    """
    bound: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if targets and _is_collection(value) and _holds(value, wanted):
            bound |= {n for t in targets if (n := _last_name(t)) is not None}
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_literal(operand, wanted) for operand in operands):
                lines.add(node.lineno)
            membership = any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            if membership and any(_last_name(c) in bound for c in node.comparators):
                lines.add(node.lineno)
        elif isinstance(node, ast.Set) and _holds(node, wanted):
            lines.add(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in SET_MAKERS
            and _holds(node, wanted)
        ):
            lines.add(node.lineno)
        elif isinstance(node, ast.MatchValue) and _holds(node, wanted):
            lines.add(node.lineno)
    return sorted(lines)


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


def test_nothing_outside_frameworks_compares_framework_names() -> None:
    framework_names = set(frameworks.names())
    assert framework_names >= {"pytorch", "tensorflow"}
    found = {}
    for path in modules():
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "frameworks":
            continue
        lines = _compared_names(ast.parse(path.read_text()), framework_names)
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert not found, f"framework names compared outside frameworks/: {found}"


FORMS = """\
if spec.backend == 'kubernetes':
    pass
x = b in ('local',)
y = fw != "pytorch"
z = fw in {"tensorflow", "jax"}
w = fw not in frozenset({"pytorch"})
RUNS = frozenset({"tensorflow"})
v = fw in RUNS
ORDER = ("pytorch", "tensorflow")
u = fw in ORDER
t = fw in caps.ORDER
match fw:
    case "tensorflow":
        pass
KNOWN = set(["tensorflow"])
s = fw in frameworks.names()
for package in ("torch", "tensorflow"):
    pass
r = "tensorflow" is fw
q = sys.modules.get("tensorflow") is None
"""


def test_the_check_finds_each_form() -> None:
    tree = ast.parse(FORMS)
    assert _compared_names(tree, set(names())) == [1, 3]
    compared = [4, 5, 6, 7, 8, 10, 11, 13, 15, 19]
    assert _compared_names(tree, {"pytorch", "tensorflow"}) == compared


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


#: Modules outside a framework's home that still name it, each with the reason (see
#: :func:`framework_words`); an entry that no longer names anything fails the test.
FRAMEWORK_WORDS_ALLOWED = {
    "jupyter_disttrain/plugins.py": "names the default --framework once (DEFAULT_FRAMEWORK)",
    "jupyter_disttrain/runtime/checkpoint/format.py": "registers the built-in checkpoint formats",
    "jupyter_disttrain/runtime/checkpoint/api.py": "PyTorch's full and sharded saves and "
    "loads (a format without a loader of its own)",
    "jupyter_disttrain/runtime/forked.py": "what the launcher pre-imports (torch, for "
    "torchrun) and a forked worker's torch thread count",
    "jupyter_disttrain/checkpoints/store.py": "torch.load for a format without a reader of "
    "its own (full, sharded), and describe() of TensorFlow's",
    "jupyter_disttrain/backends/kubernetes/kinds/operator.py": "kinds list their frameworks",
    "jupyter_disttrain/backends/kubernetes/kinds/pytorchjob.py": "kinds list their frameworks",
    "jupyter_disttrain/backends/kubernetes/kinds/tfjob.py": "kinds list their frameworks",
    "jupyter_disttrain/backends/kubernetes/kinds/trainjob.py": "kinds list their frameworks "
    "and the training runtime each runs on",
}


def framework_words(fw: frameworks.Framework) -> tuple[set[str], set[str]]:
    """A framework's text words (name, package, distributions) and the names the checkpoint
    format module binds to its checkpoint layouts and formats (``TF``, ``TF_FORMAT``)."""
    texts = {fw.name, fw.package, *fw.distributions}
    layouts = set(fw.checkpoint_layouts)
    constants = {
        name
        for name, value in vars(ckformat).items()
        if name.isupper()
        and (
            (isinstance(value, str) and value in layouts)
            or (isinstance(value, ckformat.CheckpointFormat) and value.layout in layouts)
        )
    }
    return texts, constants


def framework_home(fw: frameworks.Framework) -> set[str]:
    """The modules besides ``frameworks/`` that are ``fw``'s own: its runtime module and
    the checkpoint module of the same name (``runtime/tf.py``, ``runtime/checkpoint/tf.py``)."""
    module = fw.runtime.partition(":")[0]
    path = Path(*module.split(".")).with_suffix(".py")
    return {str(path), str(path.parent / "checkpoint" / path.name)}


def _named_words(tree: ast.AST, texts: set[str], constants: set[str]) -> list[int]:
    """Lines holding one of ``texts`` as a string literal, or one of ``constants`` as an
    attribute (``fmt.TF``) or an imported name."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in texts:
                lines.add(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in constants:
            lines.add(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(a.name in constants for a in node.names):
            lines.add(node.lineno)
    return sorted(lines)


def test_no_framework_named_outside_its_home() -> None:
    found: dict[str, list[str]] = {}
    for name in frameworks.names():
        fw = frameworks.framework(name)
        texts, constants = framework_words(fw)
        home = framework_home(fw)
        for path in modules():
            relative = str(path.relative_to(REPO))
            parts = path.relative_to(PACKAGE).parts
            if parts[0] == "frameworks" or relative in home:
                continue
            lines = _named_words(ast.parse(path.read_text()), texts, constants)
            if lines:
                found.setdefault(relative, []).append(f"{name}: {lines}")
    unexpected = {p: v for p, v in found.items() if p not in FRAMEWORK_WORDS_ALLOWED}
    assert not unexpected, f"framework names outside frameworks/ and its runtime: {unexpected}"
    stale = sorted(set(FRAMEWORK_WORDS_ALLOWED) - set(found))
    assert not stale, f"allowed to name a framework but no longer does (remove): {stale}"


def test_the_framework_word_check_finds_each_form() -> None:
    texts, constants = framework_words(frameworks.framework("tensorflow"))
    assert texts == {"tensorflow", "tensorflow-cpu"} and {"TF", "TF_FORMAT"} <= constants
    tree = ast.parse(
        "import sys\n"
        "tf = sys.modules.get('tensorflow')\n"
        "kind = fmt.TF\n"
        "from .format import TF_FORMAT\n"
        "x = 'tensorflow is fine in a sentence'\n"
    )
    assert _named_words(tree, texts, constants) == [2, 3, 4]
    assert framework_home(frameworks.framework("jax")) == {
        "jupyter_disttrain/runtime/jax.py",
        "jupyter_disttrain/runtime/checkpoint/jax.py",
    }


def packed_lines(paths: list[Path], root: Path = REPO) -> list[str]:
    """``file:line`` of every line that keeps the formatter out (``fmt: skip``/``off``)."""
    marker = re.compile(r"#\s*fmt:\s*(skip|off)\b")
    return [
        f"{p.relative_to(root)}:{n}"
        for p in paths
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if marker.search(line)
    ]


def test_the_formatter_lays_out_every_line_of_the_package() -> None:
    """Modules stay under the line limit by their shape, not by packed lines."""
    assert packed_lines(modules()) == []


def test_the_formatter_lays_out_every_line_of_the_tests_benchmarks_and_scripts() -> None:
    """The same rule outside the package: tests, benchmarks and scripts keep no packed lines."""
    paths = [p for folder in ("tests", "bench", "scripts") for p in (REPO / folder).rglob("*.py")]
    assert len(paths) > 200  # where this test looks
    assert packed_lines(sorted(paths)) == []


def test_the_packing_check_finds_a_marker(tmp_path: Path) -> None:
    marker = "# fmt" + ":"  # written in two parts so that this file holds no marker itself
    (tmp_path / "a.py").write_text(f"x = [1,\n  2]  {marker} skip\n{marker} off\n")
    assert packed_lines([tmp_path / "a.py"], tmp_path) == ["a.py:2", "a.py:3"]
