"""Values and exceptions that come back from workers, re-created in the notebook."""

from __future__ import annotations

import base64
import builtins
import importlib
import re
from collections.abc import Callable
from typing import Any, Final

import cloudpickle


class RemoteError(Exception):
    """A worker's exception whose own type cannot be re-created in the notebook."""


class JobFailed(RuntimeError):
    """The job failed without an exception from user code (killed, timed out...)."""


class JobStopped(RuntimeError):
    """The job was stopped before it produced a result."""


def decode_result(fields: dict[str, Any]) -> Any:
    """The value a ``result`` event carries (inline base64 or a file)."""
    encoding = fields.get("encoding")
    if encoding == "cloudpickle+base64":
        return cloudpickle.loads(base64.b64decode(fields["data"]))
    if encoding == "cloudpickle" and fields.get("uri"):
        with open(fields["uri"], "rb") as fh:
            return cloudpickle.loads(fh.read())
    raise ValueError(f"unknown result encoding {encoding!r}")


def _exception_type(fields: dict[str, Any]) -> type[BaseException] | None:
    found: Any = None
    if fields.get("type_pickle"):
        try:
            found = cloudpickle.loads(base64.b64decode(fields["type_pickle"]))
        except Exception:
            found = None
    if found is None:
        module, name = str(fields.get("module", "builtins")), str(fields.get("type", ""))
        try:
            owner = builtins if module == "builtins" else importlib.import_module(module)
            found = owner
            for part in name.split("."):
                found = getattr(found, part)
        except Exception:
            found = None
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return None


def recreate_exception(fields: dict[str, Any], rank: int | None) -> BaseException:
    """The worker's exception, same type where possible, naming the rank and traceback.

    The message reads ``[rank R] original message`` followed by the remote
    traceback. The exception also carries ``remote_rank``,
    ``remote_type`` and ``remote_traceback`` attributes.
    """
    etype = str(fields.get("type", "Exception"))
    original = str(fields.get("message", ""))
    trace = str(fields.get("traceback", "")).rstrip()
    message = f"[rank {rank}] {original}\n\nRemote traceback (rank {rank}):\n{trace}"
    cls = _exception_type(fields)
    exc: BaseException
    try:
        if cls is None or cls in (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise TypeError
        exc = cls(message)
    except Exception:
        exc = RemoteError(f"[rank {rank}] {etype}: {original}\n\nRemote traceback:\n{trace}")
    exc.remote_rank = rank  # type: ignore[attr-defined]
    exc.remote_type = etype  # type: ignore[attr-defined]
    exc.remote_traceback = trace  # type: ignore[attr-defined]
    exc._render_traceback_ = _shown(exc, rank, etype, original, trace)  # type: ignore[attr-defined]
    return exc


def _shown(
    exc: BaseException, rank: int | None, etype: str, original: str, trace: str
) -> Callable[[], list[str]]:
    """What IPython shows of ``exc`` (its ``_render_traceback_``): the rank's own traceback
    from the cell on, not the notebook's frames that re-raised it; then its notes."""

    def render() -> list[str]:
        own = user_traceback(trace).splitlines() if trace else [f"{etype}: {original}"]
        notes = [str(n) for n in getattr(exc, "__notes__", ())]
        return [f"rank {rank} raised {etype}:", *own, *notes]

    return render


def user_traceback(traceback: str) -> str:
    """``traceback`` starting at the cell: the runtime's frames that ran it are dropped.

    A traceback with no cell frame (the error came from elsewhere) is returned whole.
    """
    lines = traceback.splitlines()
    for i, line in enumerate(lines):
        if _CELL_FILE.search(line):
            head = lines[:1] if lines and lines[0].startswith("Traceback") else []
            return "\n".join(head + lines[i:])
    return traceback


_CELL_FILE: Final = re.compile(r'^\s*File "<(?:distrain-)?cell[^>]*>", line \d+')
