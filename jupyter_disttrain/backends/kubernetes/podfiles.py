"""The files a job's pods need beside their stock image (pure: reads the installed package)."""

from __future__ import annotations

from pathlib import Path

from ...payload import Payload
from ...runtime import jobkey
from .template import PAYLOAD_FILE


def payload_files(payload: Payload) -> dict[str, bytes]:
    """What the pods need beside the image: payload, job key, worker runtime, cloudpickle."""
    import cloudpickle

    from ... import runtime

    files = {PAYLOAD_FILE: payload.data, jobkey.KEY_FILE: payload.key}
    package = Path(runtime.__file__).parent.parent
    files["jupyter_disttrain/__init__.py"] = (package / "__init__.py").read_bytes()
    for path in sorted((package / "runtime").rglob("*.py")):
        files[path.relative_to(package.parent).as_posix()] = path.read_bytes()
    for path in sorted(Path(cloudpickle.__file__).parent.glob("*.py")):
        files[f"cloudpickle/{path.name}"] = path.read_bytes()
    return files
