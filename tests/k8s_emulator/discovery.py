"""The API server's discovery documents (legacy, non-aggregated: ``kubectl`` falls back to it)."""

from __future__ import annotations

from .meta import Obj
from .portforward import DISCOVERY as PORTFORWARD_DISCOVERY
from .resources import PODS, Registry
from .server import not_served


def discovery_document(registry: Registry, root: str, group: str, version: str, host: str) -> Obj:
    """The discovery document at ``/api[/v1]`` or ``/apis[/group[/version]]``."""
    missing = not_served()
    versions = registry.group_versions()
    if root == "api":
        if not version:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
            }
        if version != "v1":
            raise missing
        return _resource_list(registry, "", "v1")
    if not group:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in sorted(versions.items())],
        }
    if group not in versions:
        raise missing
    if not version:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions[group])}
    if version not in versions[group]:
        raise missing
    return _resource_list(registry, group, version)


def _group(group: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def _resource_list(registry: Registry, group: str, version: str) -> Obj:
    resources = []
    for r in registry.served():
        if (r.group, r.version) != (group, version):
            continue
        entry: Obj = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        for sub in r.subresources:
            verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
            resources.append(
                {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": verbs,
                }
            )
        if r is PODS:
            resources.append(dict(PORTFORWARD_DISCOVERY))
    out: Obj = {
        "kind": "APIResourceList",
        "groupVersion": f"{group}/{version}".lstrip("/"),
        "resources": resources,
    }
    if group:
        out["apiVersion"] = "v1"
    return out
