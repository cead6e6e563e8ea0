"""Training libraries imported once, ahead of a job's workers.

A Lightning or Hugging Face job's every worker would import its library
(about 4 s of CPU each for ``lightning.pytorch``). A job that imports one
says so in its environment (:data:`ENV_WARM`, set by the notebook side from
the packages the payload imports, :func:`chosen`); the modules are imported
once, before the job's processes are forked, and those find them imported:
by a launcher dedicated to the job (a pod's), and otherwise by a warm child
of the shared launcher kept for jobs that ask for the same modules
(:mod:`.warmchild`), so that no other job finds them imported. Only the
modules an integration declares (``Integration.warm``: they start no thread
on import, so the process can still fork) are imported, and only where the
job's ``sys.path`` finds them at the file this process's does
(:class:`Warmed`). A process that has imported a library forks no process of
a job whose ``sys.path`` would import another copy of it, or of a package it
imported in turn: that job's processes start afresh (:meth:`Warmed.refusal`).
Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import time
from collections.abc import Iterable, Mapping

from . import collector, integrations
from .launcher_identity import differing_modules, imported_from, requested_sys_path

#: The modules a job asks its launcher to import ahead (comma-separated).
ENV_WARM = "DISTRAIN_WARM"


def declared() -> list[str]:
    """Every module a built-in integration lets a launcher import ahead (``Integration.warm``;
    another distribution's integration is not loaded into a launcher)."""
    found: list[str] = []
    for target in integrations.BUILTIN.values():
        try:
            found.extend(integrations.load(target).warm)
        except Exception:  # an integration that cannot load warms nothing
            continue
    return found


def chosen(packages: Iterable[str]) -> list[str]:
    """The declared modules of the top-level ``packages`` a job imports, in order."""
    tops = set(packages)
    return [module for module in declared() if module.split(".")[0] in tops]


def job_path(env: Mapping[str, str]) -> list[str]:
    """The ``sys.path`` a job's processes get (the one its requester sent, else this
    process's)."""
    paths = requested_sys_path(env)
    return list(sys.path) if paths is None else paths


class Warmed:
    """The modules a launcher imported ahead: imports them on request, names conflicts."""

    def __init__(self, allowed: Iterable[str] | None = None) -> None:
        self._allowed = set(declared() if allowed is None else allowed)
        self._tried: set[str] = set()
        #: Top-level package -> the file it was imported from.
        self.origins: dict[str, str] = {}

    def wanted(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The allowed modules ``env`` asks for (:data:`ENV_WARM`), in order, once each."""
        asked = (env.get(ENV_WARM) or "").split(",")
        return tuple(dict.fromkeys(module for module in asked if module in self._allowed))

    def request(self, env: Mapping[str, str]) -> None:
        """Import the allowed modules ``env`` asks for (:data:`ENV_WARM`), each tried once,
        when the job's ``sys.path`` finds its package where this process's does."""
        for module in (env.get(ENV_WARM) or "").split(","):
            if module not in self._allowed or module in self._tried:
                continue
            top = module.split(".")[0]
            here = importlib.machinery.PathFinder.find_spec(top, sys.path)
            if here is None or not here.origin:
                continue
            origin = os.path.realpath(here.origin)
            if differing_modules({top: origin}, job_path(env)):
                continue  # the job imports another copy: it must not get this one
            self._tried.add(module)
            before = imported_from()
            started = time.monotonic()
            try:
                with collector.frozen():  # as the launcher's own imports
                    importlib.import_module(module)
            except Exception as exc:  # the job's workers import it (and report) themselves
                print(f"distrain launcher: {module} not imported ahead: {exc!r}", file=sys.stderr)
            else:
                took = time.monotonic() - started
                print(
                    f"distrain launcher: imported {module} ahead in {took:.1f} s", file=sys.stderr
                )
            if top in sys.modules:  # imported, even in part: no job may get another copy
                self.origins[top] = origin
            # and no other copy of what it imported in turn (accelerate, for transformers)
            added = imported_from().items() - before.items()
            self.origins.update((name, file) for name, file in added if name not in self.origins)

    def refusal(self, env: Mapping[str, str]) -> str:
        """Why a process of the job of ``env`` must not be forked from this one: a package
        imported ahead that the job's ``sys.path`` imports from another file ("" when none)."""
        differing = differing_modules(self.origins, job_path(env)) if self.origins else {}
        for name, found in differing.items():
            return f"the job imports {name} from {found}, not {self.origins[name]}; not forking"
        return ""
