"""The jupyter_server extension: a jobs API for the lab extension's sidebar.

Enabled by ``etc/jupyter/jupyter_server_config.d/jupyter_disttrain.json``
(installed with the package). :mod:`.manager` does the work without any web
code; :mod:`.handlers` exposes it under ``/disttrain/api/``; :mod:`.views`
defines the JSON; :mod:`.mcp_handler` serves the MCP tools at ``/disttrain/mcp``;
:mod:`.warm` starts the warm launcher the server's kernels share.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyter_disttrain.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Create the job manager and register the API handlers."""
    from .handlers import setup_handlers
    from .manager import JobManager

    manager = JobManager(root_dir=str(server_app.root_dir))
    setup_handlers(server_app.web_app, manager)
    server_app.log.info("jupyter_disttrain: jobs API at /disttrain/api/jobs")
    try:
        from .mcp_handler import setup_mcp
    except ImportError:  # the optional `mcp` extra is not installed
        server_app.log.info(
            "jupyter_disttrain: no MCP endpoint (pip install jupyter-disttrain[mcp])"
        )
    else:
        setup_mcp(server_app.web_app, server_app.config)
        server_app.log.info("jupyter_disttrain: MCP tools at /disttrain/mcp")
    from . import warm

    if warm.wanted(server_app.config):
        import atexit

        launcher = warm.start()
        atexit.register(warm.stop)
        server_app.log.info("jupyter_disttrain: warm launcher (pid %d) for kernels", launcher.pid)
