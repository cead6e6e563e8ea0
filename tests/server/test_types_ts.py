"""``labextension/src/types.ts`` checked against the server's JSON shapes (server/views.py).

Each interface named in :data:`~jupyter_disttrain.server.views.TYPESCRIPT`
must have exactly the fields of its TypedDict, each of the TypeScript type
the Python type renders to. The TypeScript side may accept more than the
server sends, never less: a field may be optional (``?``) or also ``null``
there (the sidebar then copes without it).
"""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from jupyter_disttrain.server.views import TYPESCRIPT
from tests.conftest import REPO

TYPES_TS = REPO / "labextension" / "src" / "types.ts"
#: Interfaces of types.ts that are not JSON the server sends.
NOT_JSON = {"IJobsAPI"}

_INTERFACE = re.compile(r"^export interface (\w+) \{\n(.*?)^\}", re.M | re.S)
_FIELD = re.compile(r"^  (\w+)(\??): (.+);$")


def ts_type(hint: Any) -> str:
    """The TypeScript type of a Python annotation of a JSON shape."""
    names = {typed: name for name, typed in TYPESCRIPT.items()}
    if hint is bool:
        return "boolean"
    if hint in (int, float):
        return "number"
    if hint is str:
        return "string"
    if hint is type(None):
        return "null"
    if is_typeddict(hint):
        return names[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        members = list(args)
        if float in members and str in members:  # JSONFloat: a number or "NaN"/"Infinity"
            members = ["JSONFloat" if m is float else m for m in members if m is not str]
        return " | ".join(m if isinstance(m, str) else ts_type(m) for m in members)
    if origin is list:
        return f"{ts_type(args[0])}[]"
    if origin is dict and args[0] is str:
        return f"Record<string, {ts_type(args[1])}>"
    raise TypeError(f"no TypeScript type for {hint!r}")


def interfaces(text: str) -> dict[str, dict[str, str]]:
    """Each exported interface of ``text``: field name -> type (``?`` dropped)."""
    found = {}
    for name, body in _INTERFACE.findall(text):
        fields = {}
        for line in body.splitlines():
            if (m := _FIELD.match(line)) is not None:
                fields[m.group(1)] = m.group(3)
        found[name] = fields
    return found


def mismatches(text: str) -> list[str]:
    """Every way ``text`` differs from the Python shapes (empty: in step)."""
    ts = interfaces(text)
    problems = [
        f"{name}: in types.ts, not in views.TYPESCRIPT"
        for name in sorted(set(ts) - set(TYPESCRIPT) - NOT_JSON)
    ]
    for name, typed in TYPESCRIPT.items():
        if name not in ts:
            problems.append(f"{name}: missing from types.ts ({typed.__name__})")
            continue
        want = {field: ts_type(hint) for field, hint in get_type_hints(typed).items()}
        have = ts[name]
        for field in sorted(set(want) | set(have)):
            if field not in have:
                problems.append(f"{name}.{field}: missing (Python: {want[field]})")
            elif field not in want:
                problems.append(f"{name}.{field}: not in {typed.__name__}")
            elif have[field] not in (want[field], f"{want[field]} | null"):
                problems.append(f"{name}.{field}: {have[field]} (Python: {want[field]})")
    return problems


def test_types_ts_has_the_servers_json_shapes() -> None:
    assert mismatches(TYPES_TS.read_text()) == []


def test_the_check_finds_a_field_out_of_step() -> None:
    text = TYPES_TS.read_text()
    rank = interfaces(text)["IRank"]
    assert rank["exit_code"] == "number | null" and "pod" not in rank  # the sidebar's fields only
    drifted = (
        text.replace("  exit_code: number | null;\n", "  exit_code: number;\n", 1)
        .replace("  restarts: number;\n", "", 1)
        .replace("  uri: string;\n", "  uri: string | number;\n", 1)
        .replace("  ranks: IRank[];\n", "  ranks: IRank[];\n  extra: string;\n", 1)
    )
    assert mismatches(drifted) == [
        "IRank.exit_code: number (Python: number | null)",
        "IRank.restarts: missing (Python: number)",
        "ICheckpoint.uri: string | number (Python: string)",
        "IJobDetail.extra: not in JobDetail",
    ]
    assert mismatches(text + "export interface INew {\n  a: string;\n}\n") == [
        "INew: in types.ts, not in views.TYPESCRIPT"
    ]
