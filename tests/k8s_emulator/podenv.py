"""A container's environment as the kubelet builds it (``env``, ``envFrom``, ``valueFrom``)."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .container import ConfigError
from .meta import Obj
from .rewrite import expand

if TYPE_CHECKING:
    from .kubelet import Kubelet

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class PodEnv:
    """The environment part of a pod worker (mixed into :class:`kubelet.PodWorker`)."""

    kubelet: Kubelet
    pod: Obj
    namespace: str
    name: str
    uid: str
    address: str
    volumes: dict[str, Path]
    dir: Path  # the pod's folder
    tmp: Path  # its TMPDIR

    def _lookup(self, plural: str, name: str) -> Obj | None:
        raise NotImplementedError

    def _full_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the kubelet's base variables, HOME, TMPDIR, HOSTNAME and the shims."""
        full = {
            **self.kubelet.base_env,
            "HOME": str(self.dir / "rootfs"),
            "TMPDIR": str(self.tmp),
            "HOSTNAME": self.pod["spec"].get("hostname") or self.name,
            **env,
        }
        if str(self.kubelet.shim_dir) not in full["PATH"].split(os.pathsep):
            full["PATH"] = f"{self.kubelet.shim_dir}{os.pathsep}{full['PATH']}"
        return full

    def _env(self, spec: Obj) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in spec.get("envFrom", []):
            prefix = source.get("prefix", "")
            for kind in ("configMapRef", "secretRef"):
                if kind in source:
                    obj = self._source(kind, source[kind])
                    for key, value in (obj or {}).get("data", {}).items():
                        if _ENV_NAME.match(prefix + key):
                            env[prefix + key] = _decode(value) if kind == "secretRef" else value
        for item in spec.get("env", []):
            if "valueFrom" in item:
                value = self._value_from(item["valueFrom"], spec)
                if value is None:
                    continue
            else:
                value = expand(str(item.get("value", "")), env)
            env[item["name"]] = value
        return env

    def _source(self, kind: str, ref: Obj) -> Obj | None:
        plural = "secrets" if kind.startswith("secret") else "configmaps"
        obj = self._lookup(plural, ref.get("name", ""))
        if obj is None and not ref.get("optional"):
            raise ConfigError(f'{plural[:-1]} "{ref.get("name", "")}" not found')
        return obj

    def _value_from(self, source: Obj, spec: Obj) -> str | None:
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            match = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", path)
            if match:
                return str(self.pod["metadata"].get(match[1], {}).get(match[2], ""))
            values = {
                "metadata.name": self.name,
                "metadata.namespace": self.namespace,
                "metadata.uid": self.uid,
                "spec.nodeName": self.kubelet.node_name,
                "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", ""),
                "status.podIP": self.address,
                "status.hostIP": "127.0.0.1",
            }
            return str(values.get(path, ""))
        for kind in ("configMapKeyRef", "secretKeyRef"):
            if kind in source:
                ref = source[kind]
                obj = self._source(kind, ref)
                if obj is None:
                    return None
                data = obj.get("data") or {}
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise ConfigError(
                        f"couldn't find key {ref['key']} in "
                        f"{kind[:-6]} {self.namespace}/{ref['name']}"
                    )
                value = data[ref["key"]]
                return _decode(value) if kind == "secretKeyRef" else str(value)
        if "resourceFieldRef" in source:
            resource = source["resourceFieldRef"].get("resource", "")
            limits = spec.get("resources", {}).get("limits", {})
            return str(limits.get(resource.split(".", 1)[-1], "0"))
        return None


def _decode(value: str) -> str:
    return base64.b64decode(value).decode(errors="replace")
