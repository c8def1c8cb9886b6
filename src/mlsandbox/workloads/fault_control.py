"""The fault hook's control routes, for an HTTP service that runs where the sandbox cannot write its files
(a pod of the kube backend): what the local backend does with the hook's control file, over HTTP on a
loopback address.

A service started with ``--admin-port N --fault-file FILE`` serves these routes on ``127.0.0.1:N`` beside
its public port. They are reachable only from inside the service's own network namespace: the kube
backend reaches them through a port-forward (the ``pods/portforward`` right, which the agent's role does
not have), never through the service's Service.

- ``PUT /fault`` (``{"error_rate", "status", "delay_ms", "seed"}``): write the control file
  (:func:`mlsandbox.workloads.fault_hook.write_fault`);
- ``DELETE /fault``: remove it;
- ``GET /fault``: ``{"active": bool, "fault": {...}}``, what the file holds now;
- ``GET /health``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from mlsandbox.workloads.fault_hook import clear_fault, write_fault_from


def add_fault_routes(app: Any, fault_file: Path) -> None:
    """``PUT``, ``DELETE`` and ``GET /fault`` on ``app``, writing and reading ``fault_file``."""

    @app.put("/fault")
    async def put_fault(request: Request) -> Response:
        try:
            write_fault_from(fault_file, json.loads(await request.body()))
        except (ValueError, TypeError, AttributeError) as e:
            return JSONResponse({"error": f"invalid fault: {e}"}, status_code=400)
        return Response(status_code=204)

    @app.delete("/fault")
    def delete_fault() -> Response:
        clear_fault(fault_file)
        return Response(status_code=204)

    @app.get("/fault")
    def get_fault() -> dict[str, Any]:
        try:
            fault = json.loads(fault_file.read_text() or "{}")
        except FileNotFoundError:
            return {"active": False, "fault": {}}
        except (OSError, ValueError):
            fault = {}
        return {"active": bool(fault), "fault": fault if isinstance(fault, dict) else {}}


def create_fault_control_app(fault_file: Path) -> Any:
    """A control app with the fault routes and ``GET /health`` only."""
    app = FastAPI(title="mlsandbox fault control", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    add_fault_routes(app, fault_file)
    return app


async def serve_beside(server: Any, control_app: Any, admin_port: int, **serve_kwargs: Any) -> None:
    """Run the uvicorn ``server`` (``serve_kwargs`` go to its ``serve``, e.g. ``sockets``) and the
    control app on ``127.0.0.1:admin_port`` until the server stops; the control listener stops with it
    (a service that fails to start exits, whatever its control listener does)."""
    import uvicorn

    admin = uvicorn.Server(
        uvicorn.Config(control_app, host="127.0.0.1", port=admin_port, log_level="warning", access_log=False)
    )
    admin_task = asyncio.create_task(admin.serve())
    try:
        await server.serve(**serve_kwargs)
    finally:
        admin.should_exit = True
        await admin_task


def add_fault_arguments(parser: Any) -> None:
    """A service's ``--admin-port`` and ``--fault-file`` options (an ``argparse`` parser)."""
    parser.add_argument(
        "--admin-port",
        type=int,
        default=None,
        help="also serve the fault hook's control routes (mlsandbox.workloads.fault_control) on 127.0.0.1:PORT",
    )
    parser.add_argument(
        "--fault-file",
        default=None,
        help="the fault hook's control file (default: $MLSANDBOX_FAULT_HOOK_FILE)",
    )


def run_with_control(server: Any, fault_file: Path, admin_port: int | None, **serve_kwargs: Any) -> None:
    """Run the uvicorn ``server`` until it stops: alone without ``admin_port``, else with the fault hook's
    control routes over ``fault_file`` on ``127.0.0.1:admin_port`` beside it (:func:`serve_beside`)."""
    if admin_port is None:
        server.run(**serve_kwargs)
        return
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve_beside(server, create_fault_control_app(fault_file), admin_port, **serve_kwargs))


__all__ = [
    "add_fault_arguments",
    "add_fault_routes",
    "create_fault_control_app",
    "run_with_control",
    "serve_beside",
]
