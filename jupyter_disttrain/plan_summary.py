"""A cell's ``--dry-run`` of a cluster job, read at a glance: :class:`ManifestSummary`.

A plan that renders Kubernetes objects (``plan.objects``) is summed up: the
objects and their kinds, nodes x processes, the image and resources of each
replica, what the cell takes from the notebook, and what the cluster will be
asked; the full manifest stays behind a fold (HTML) or ``--export FILE``.
The command line's ``render`` keeps printing the full YAML.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .backends.base import Plan
from .units import format_bytes

__all__ = ["ManifestSummary", "manifest_summary"]


def _pod_specs(obj: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(replica name, pod spec)`` of every pod template in ``obj``."""
    if isinstance(obj, Mapping):
        if isinstance(obj.get("containers"), list):
            replica = next((p for p in reversed(path) if p[:1].isupper()), path[-1] if path else "")
            yield replica, obj
            return
        for key, value in obj.items():
            yield from _pod_specs(value, (*path, str(key)))
    elif isinstance(obj, list):
        for value in obj:
            yield from _pod_specs(value, path)


def _resources(container: Mapping[str, Any]) -> str:
    res = container.get("resources") or {}
    parts = []
    for bound in ("requests", "limits"):
        values = res.get(bound) or {}
        if values:
            parts.append(f"{bound} " + ", ".join(f"{k} {v}" for k, v in sorted(values.items())))
    return "; ".join(parts) or "no requests or limits (the cluster's defaults)"


class ManifestSummary:
    """The summary of a cluster plan; ``repr`` is its text, ``_repr_html_`` adds the fold."""

    def __init__(self, plan: Plan, objects: Sequence[Mapping[str, Any]], namespace: str) -> None:
        self.plan = plan
        self.objects = list(objects)
        self.namespace = namespace

    def lines(self) -> list[str]:
        """The summary, one fact a line."""
        spec, payload = self.plan.spec, self.plan.payload
        kinds = ", ".join(
            f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in self.objects
        )
        out = [
            f"{spec.name}: dry run on {spec.backend} (namespace {self.namespace}): "
            f"{spec.nodes} node(s) x {spec.nproc} process(es) = {spec.world_size} rank(s)",
            f"objects: {kinds}",
        ]
        for obj in self.objects:
            for replica, pod in _pod_specs(obj.get("spec", {})):
                for c in pod["containers"]:
                    out.append(
                        f"{replica or obj.get('kind')}: image {c.get('image')}; {_resources(c)}"
                    )
        out.append(f"the cell ({format_bytes(len(payload.source.encode()))}) takes:")
        if not payload.captures:
            out.append("  nothing from the notebook")
        for cap in payload.captures:
            if cap.captured_as == "local module":
                out.append(
                    f"  {cap.name}: local module, its source travels ({format_bytes(cap.size)})"
                )
            elif cap.captured_as == "module":
                out.append(f"  {cap.name}: import {cap.module} (must be installed in the image)")
            else:
                out.append(f"  {cap.name}: {cap.type_name} ({format_bytes(cap.size)})")
        out.append(f"payload {format_bytes(len(payload.data))}")
        asks = "; ".join(
            f"create {o.get('kind')} {o.get('metadata', {}).get('name')}" for o in self.objects
        )
        out.append(f"the cluster will be asked to: {asks} in namespace {self.namespace}")
        out.append("full manifest: --export FILE writes it (disttrain render prints it)")
        return out

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        text = html.escape("\n".join(self.lines()))
        manifest = html.escape(str(self.plan))
        return (
            f'<div class="distrain-dry-run"><pre>{text}</pre><details><summary>full manifest '
            f"({format_bytes(len(manifest))})</summary><pre>{manifest}</pre></details></div>"
        )


def manifest_summary(plan: Plan) -> ManifestSummary | None:
    """The summary of a plan that renders cluster objects; None for other plans."""
    objects = getattr(plan, "objects", None)
    if not isinstance(objects, tuple | list) or not objects:
        return None
    return ManifestSummary(plan, objects, str(getattr(plan, "namespace", "")))
