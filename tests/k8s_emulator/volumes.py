"""Pod volumes as local directories.

* ``configMap`` / ``secret``: the keys (or ``items: [{key, path, mode}]``) as
  files, ``data`` as text and ``binaryData`` / Secret ``data`` decoded from
  base64, with ``defaultMode`` / ``mode``.
* ``emptyDir`` (any medium) and ``hostPath``: a directory of the pod
  (``hostPath`` is sandboxed under the pod, never the real host path).
* ``persistentVolumeClaim``: one directory per claim under the emulator root,
  shared by every pod that mounts the claim (no PVC object is needed).
* ``downwardAPI``: ``items`` with a ``fieldRef`` to ``metadata.annotations`` or
  ``metadata.labels`` (``key="value"`` lines, sorted, Go-quoted values),
  ``metadata.name``, ``metadata.namespace`` or ``metadata.uid``; written
  atomically, and again when the pod's metadata changes (:func:`refresh_downward`).
* ``projected``: its ``configMap`` and ``secret`` sources as above, and each
  ``serviceAccountToken`` (``audience``, ``expirationSeconds``, ``path``) as a
  token file from the API server's issuer (:mod:`.tokens`), in one directory.
* Other volume types: an empty directory.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .meta import Obj

Lookup = Callable[[str, str], Obj | None]  # (kind "configmaps"|"secrets", name) -> object
Tokens = Callable[[str, int], str]  # (audience, expirationSeconds) -> a token of the pod


class MountError(Exception):
    """A volume's source is missing (the kubelet retries, with a FailedMount event)."""


def _write_files(target: Path, source: Obj, spec: dict[str, Any], secret: bool) -> None:
    files: dict[str, bytes] = {}
    for key, value in (source.get("data") or {}).items():
        files[key] = base64.b64decode(value) if secret else str(value).encode()
    for key, value in (source.get("binaryData") or {}).items():
        files[key] = base64.b64decode(value)
    default_mode = int(spec.get("defaultMode", 0o644))
    items = spec.get("items")
    wanted = items if items else [{"key": key, "path": key} for key in sorted(files)]
    for item in wanted:
        key = item["key"]
        if key not in files:
            if spec.get("optional"):
                continue
            kind = "secret" if secret else "configmap"
            raise MountError(f'{kind} "{source["metadata"]["name"]}" has no key "{key}"')
        path = target / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[key])
        os.chmod(path, int(item.get("mode", default_mode)))


def _field(pod: Obj, path: str) -> str:
    meta = pod["metadata"]
    if path in ("metadata.annotations", "metadata.labels"):
        values = meta.get(path.split(".")[1]) or {}
        return "".join(f"{key}={json.dumps(str(values[key]))}\n" for key in sorted(values))
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(meta.get(path.split(".")[1], ""))
    return ""


def refresh_downward(pod: Obj, volumes: dict[str, Path]) -> None:
    """(Re)write every downward-API file of ``pod`` from its current metadata."""
    for volume in pod["spec"].get("volumes", []):
        target = volumes.get(volume["name"])
        if "downwardAPI" not in volume or target is None:
            continue
        for item in volume["downwardAPI"].get("items", []):
            ref = item.get("fieldRef") or {}
            path = target / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(_field(pod, str(ref.get("fieldPath", ""))), encoding="utf-8")
            os.replace(tmp, path)  # a reader sees the old or the new file, as with the kubelet


def _source(name: str, spec: Obj, secret: bool, target: Path, lookup: Lookup) -> None:
    """Write a ConfigMap's or Secret's files into ``target`` (MountError when it is missing)."""
    source_name = spec.get("secretName" if secret else "name", "")
    source = lookup("secrets" if secret else "configmaps", source_name)
    target.mkdir(parents=True, exist_ok=True)
    if source is None:
        if not spec.get("optional"):
            kind = "secret" if secret else "configmap"
            raise MountError(
                f'MountVolume.SetUp failed for volume "{name}" : {kind} "{source_name}" not found'
            )
    else:
        _write_files(target, source, spec, secret)


def _projected(name: str, spec: Obj, target: Path, lookup: Lookup, tokens: Tokens | None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for source in spec.get("sources") or []:
        if "configMap" in source or "secret" in source:
            secret = "secret" in source
            _source(name, source["secret" if secret else "configMap"], secret, target, lookup)
        elif "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            if tokens is None:
                raise MountError(f'MountVolume.SetUp failed for volume "{name}" : no token issuer')
            text = tokens(str(token.get("audience", "")), int(token.get("expirationSeconds", 3600)))
            path = target / str(token.get("path", "token"))
            path.write_text(text, encoding="utf-8")
            os.chmod(path, 0o600)


def materialise(
    pod: Obj, pod_dir: Path, claims_dir: Path, lookup: Lookup, tokens: Tokens | None = None
) -> dict[str, Path]:
    """A local directory per volume of ``pod`` (``tokens`` issues projected tokens).

    Raises :class:`MountError` when a ConfigMap or Secret it needs is missing.
    """
    out: dict[str, Path] = {}
    namespace = pod["metadata"].get("namespace", "default")
    for volume in pod["spec"].get("volumes", []):
        name = volume["name"]
        target = pod_dir / "volumes" / name
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            target = claims_dir / namespace / claim
            target.mkdir(parents=True, exist_ok=True)
        elif "configMap" in volume or "secret" in volume:
            secret = "secret" in volume
            _source(name, volume["secret" if secret else "configMap"], secret, target, lookup)
        elif "projected" in volume:
            _projected(name, volume["projected"], target, lookup, tokens)
        else:
            target.mkdir(parents=True, exist_ok=True)
        out[name] = target
    refresh_downward(pod, out)
    return out


def mounts(container: Obj, volumes: dict[str, Path], pod_dir: Path) -> list[tuple[str, str]]:
    """(mountPath, local directory) for each of the container's volume mounts."""
    out = []
    for mount in container.get("volumeMounts", []):
        base = volumes.get(mount["name"], pod_dir / "volumes" / mount["name"])
        local = base / mount["subPath"] if mount.get("subPath") else base
        if mount.get("subPath"):
            local.parent.mkdir(parents=True, exist_ok=True)
            if not local.exists():
                local.mkdir()
        out.append((mount["mountPath"], str(local)))
    return out
