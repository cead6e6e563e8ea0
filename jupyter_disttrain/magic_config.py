"""``%distrain_config KEY=VALUE ...`` read against the magics' traits (pure but for traits),
and the configured default backend warmed before the magics load.

Every mistake raises :class:`~IPython.core.error.UsageError` naming the key, what is
wrong and what to give instead; nothing is changed unless every item is valid.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import Any

from IPython.core.error import UsageError
from traitlets import HasTraits

from .backends.base import BackendError
from .backends.registry import get_backend, names
from .spec import autolog_value

#: The magics' section of an IPython configuration (``c.DistrainMagics.prewarm = False``).
SECTION = "DistrainMagics"


def config_changes(owner: HasTraits, keys: Sequence[str], line: str) -> dict[str, Any]:
    """The trait values ``line`` (``KEY=VALUE`` items, shell-quoted) sets on ``owner``,
    converted and checked; ``keys`` are the ones a user may set."""
    try:
        items = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%distrain_config: cannot read {line!r} ({exc})") from None
    changes: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in keys:
            raise UsageError(
                f"%distrain_config expects KEY=VALUE with KEY one of "
                f"{', '.join(keys)}; got {item!r}"
            )
        changes[key] = config_value(owner, key, value)
    return changes


def config_value(owner: HasTraits, key: str, value: str) -> Any:
    """``value`` converted and checked for trait ``key``; UsageError naming the range."""
    trait: Any = owner.traits()[key]
    try:
        converted = trait.from_string(value)
    except Exception as exc:
        raise UsageError(f"%distrain_config {key}: {value!r} is not valid ({exc})") from None
    low, high = getattr(trait, "min", None), getattr(trait, "max", None)
    if isinstance(converted, float) and not math.isfinite(converted):
        raise UsageError(
            f"%distrain_config {key}={value}: give a finite number between {low:g} and {high:g}"
        )
    if isinstance(converted, int | float) and not isinstance(converted, bool):
        if (low is not None and converted < low) or (high is not None and converted > high):
            raise UsageError(
                f"%distrain_config {key}={value} is out of range; give {low:g} to {high:g}, "
                f"e.g. {key}={trait.default_value!r}"
            )
    try:
        trait.validate(owner, converted)
        if key == "autolog":
            converted = autolog_value(converted)
    except Exception as exc:
        raise UsageError(f"%distrain_config {key}: {value!r} is not valid ({exc})") from None
    return converted


def section_of(config: Any) -> Any:
    """The magics' :data:`SECTION` of an IPython or Jupyter configuration (anything with
    ``get``); an empty dict for a missing or malformed one."""
    section = config.get(SECTION, {}) if hasattr(config, "get") else {}
    return section if hasattr(section, "get") else {}


def prewarm_configured(config: Any) -> bool:
    """Ask the configured default backend to :meth:`~.backends.base.Backend.prewarm`, from
    ``config``'s :data:`SECTION` (``prewarm``, ``backend``, ``launch_mode``, ``linger``;
    the magics' own defaults where unset), before the magics are imported: the local
    launcher starts importing torch while the kernel imports the extension. Whether the
    backend was asked; False when ``prewarm`` is off or a value is not one the magics
    accept (they say so when they load)."""
    section = section_of(config)
    if not section.get("prewarm", True):
        return False
    name = section.get("backend", None) or names()[0]
    linger = section.get("linger", None)
    try:
        backend = get_backend(
            str(name),
            launch_mode=str(section.get("launch_mode", "fork")),
            linger=None if linger is None else float(linger),
        )
    except (BackendError, TypeError, ValueError):
        return False
    backend.prewarm()
    return True
