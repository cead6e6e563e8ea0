"""A script payload in a rank: argv, ``__file__``, ``sys.path[0]``, the working folder, exits.

These run :func:`run_script` in this process (its ``sys`` state restored after
each test); the real launches are in ``tests/test_cli_scripts.py`` and
``tests/backends/kubernetes/test_scripts.py``.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.payload import Script, build_script_payload
from jupyter_disttrain.runtime import cell
from jupyter_disttrain.runtime.cell import (
    CELL_FILENAME,
    SCRIPT_DIR_ENV,
    code_filename,
    main_module,
    run_payload,
    user_traceback,
    write_folder,
)


@pytest.fixture
def rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as a rank would be: its argv, path, folder and ``__main__`` given back."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setitem(cell._running, "file", CELL_FILENAME)
    monkeypatch.chdir(os.getcwd())
    yield
    for name in [n for n in sys.modules if n.split(".")[0] in ("mpkg", "sib")]:
        del sys.modules[name]


def envelope(script: Script) -> dict[str, Any]:
    found = pickle.loads(build_script_payload(script, job="j").data)
    assert isinstance(found, dict)
    return found


def test_a_module_runs_from_its_shipped_copy_in_a_pod(
    tmp_path: Path, rank: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-m mpkg.main`` in a pod: the package is written to the pod's folder and runs there."""
    src = tmp_path / "src"
    (src / "mpkg").mkdir(parents=True)
    (src / "mpkg" / "__init__.py").write_text("")
    (src / "mpkg" / "conf.py").write_text("import sib\nVALUE = sib.X * 2\n")
    (src / "sib.py").write_text("X = 21\n")
    (src / "mpkg" / "main.py").write_text(
        "import os, sys\nfrom .conf import VALUE\n"
        "RESULT.update(argv=list(sys.argv), file=__file__, name=__name__, package=__package__,"
        " path0=sys.path[0], cwd=os.getcwd(), value=VALUE, given=GIVEN)\n"
        "sys.exit(0)\n"
    )
    payload = envelope(Script("mpkg.main", ("--lr", "1"), module=True, cwd=str(src)))
    assert sorted(payload["script"]["files"]) == [
        "mpkg/__init__.py",
        "mpkg/conf.py",
        "mpkg/main.py",
        "sib.py",
    ]
    pod = tmp_path / "pod-folder"
    monkeypatch.setenv(SCRIPT_DIR_ENV, str(pod))
    result: dict[str, Any] = {}
    namespace = main_module({"RESULT": result, "GIVEN": "kept"}).__dict__
    assert run_payload(payload, namespace) is None  # sys.exit(0): success, no value
    shipped = str(pod / "mpkg" / "main.py")
    assert result == {
        "argv": [shipped, "--lr", "1"],
        "file": shipped,
        "name": "__main__",
        "package": "mpkg",
        "path0": str(pod),
        "cwd": str(pod),
        "value": 42,
        "given": "kept",
    }
    assert code_filename() == shipped


def test_a_script_runs_where_it_is_on_the_submitting_machine(tmp_path: Path, rank: None) -> None:
    (tmp_path / "sib.py").write_text("X = 5\n")
    (tmp_path / "t.py").write_text(
        "import os, sys, sib\nRESULT.update(argv=sys.argv, file=__file__, path0=sys.path[0], "
        "cwd=os.getcwd(), x=sib.X, name=__name__)\n"
    )
    payload = envelope(Script("t.py", ("a",), cwd=str(tmp_path)))
    result: dict[str, Any] = {}
    run_payload(payload, main_module({"RESULT": result}).__dict__)
    assert result == {
        "argv": ["t.py", "a"],
        "file": str(tmp_path / "t.py"),
        "path0": str(tmp_path),
        "cwd": os.getcwd(),
        "x": 5,
        "name": "__main__",
    }
    assert sys.modules["__main__"].__file__ == str(tmp_path / "t.py")  # multiprocessing's spawn


@pytest.mark.parametrize(
    ("code", "fails"), [("0", False), ("None", False), ("3", True), ("'bad config'", True)]
)
def test_sys_exit_zero_is_success(tmp_path: Path, rank: None, code: str, fails: bool) -> None:
    (tmp_path / "t.py").write_text(f"import sys\nsys.exit({code})\n")
    payload = envelope(Script("t.py", cwd=str(tmp_path)))
    if not fails:
        assert run_payload(payload, main_module({}).__dict__) is None
        return
    with pytest.raises(SystemExit):
        run_payload(payload, main_module({}).__dict__)


def test_a_payload_file_outside_its_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside its folder"):
        write_folder(str(tmp_path / "f"), {"../escape.py": b"x"})
    assert not (tmp_path / "escape.py").exists()
    write_folder(str(tmp_path / "f"), {"a/b.py": b"1", "c.py": b"2"})
    write_folder(str(tmp_path / "f"), {"c.py": b"3"})  # a restart writes the same files again
    assert (tmp_path / "f" / "c.py").read_bytes() == b"3"
    assert sorted(p.name for p in (tmp_path / "f").rglob("*")) == ["a", "b.py", "c.py"]


def test_tracebacks_start_at_the_users_code(tmp_path: Path, rank: None) -> None:
    (tmp_path / "t.py").write_text("def f():\n    return 1 / 0\n\nf()\n")
    payload = envelope(Script("t.py", cwd=str(tmp_path)))
    with pytest.raises(ZeroDivisionError) as info:
        run_payload(payload, main_module({}).__dict__)
    tb = user_traceback(info.value.__traceback__.tb_next)  # from the runtime's frames, as a rank
    text = "".join(traceback.format_exception(info.type, info.value, tb))
    files = [line.split(",")[0].strip() for line in text.splitlines() if "File " in line]
    assert files == [f'File "{tmp_path / "t.py"}"'] * 2, text
    assert "return 1 / 0" in text
    # The runtime's own failure (nothing of the user's) keeps every frame.
    with pytest.raises(KeyError) as own:
        run_payload({}, {})
    assert user_traceback(own.value.__traceback__) is own.value.__traceback__


def test_a_ranks_stacks_name_the_line_of_the_script_it_is_at(tmp_path: Path, rank: None) -> None:
    """What hang detection and ``disttrain where`` read: the script's line, not a cell's."""
    import threading
    import time

    from jupyter_disttrain.runtime import stacks

    (tmp_path / "t.py").write_text("import time\nREADY.set()\ntime.sleep(GO)\n")
    payload = envelope(Script("t.py", cwd=str(tmp_path)))
    ready = threading.Event()
    namespace = main_module({"READY": ready, "GO": 3}).__dict__
    runner = threading.Thread(target=run_payload, args=(payload, namespace), name="script")
    runner.start()
    assert ready.wait(5)
    deadline = time.monotonic() + 30  # until it reached the sleep (a loaded machine is slow)
    found = {s["name"]: s for s in stacks.all_stacks(code_filename())}["script"]
    while found["call"] != "time.sleep" and time.monotonic() < deadline:
        time.sleep(0.05)
        found = {s["name"]: s for s in stacks.all_stacks(code_filename())}["script"]
    runner.join()
    assert code_filename() == str(tmp_path / "t.py")
    assert (found["call"], found["cell_line"]) == ("time.sleep", 3), found
