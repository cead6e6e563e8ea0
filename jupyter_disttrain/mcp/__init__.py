"""The job service as an MCP server: tools an agent calls, safe by default.

:mod:`.tools` defines the tools over :class:`~jupyter_disttrain.service.JobService`
(no job logic of their own); :mod:`.tokens` binds a run to the plan an agent was
shown; :mod:`.bounds` cuts every result to a size and says so; :mod:`.http` serves
the streamable HTTP transport inside a Jupyter server. Read-only unless made with
``allow_run`` / ``allow_stop``.
"""

from __future__ import annotations

from .tools import MUTATING, READ_ONLY, Permissions, build_server

__all__ = ["MUTATING", "READ_ONLY", "Permissions", "build_server"]
