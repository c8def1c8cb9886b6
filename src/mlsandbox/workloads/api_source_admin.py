"""The API data source's control listener, for a source that runs where the sandbox cannot write its files
(a pod of the kube backend): what the local backend does with files, over HTTP on a loopback address.

``python -m mlsandbox.workloads.api_source --admin-port N`` serves it on ``127.0.0.1:N`` beside the
public port. It is reachable only from inside the source's own network namespace: the kube backend reaches
it through a port-forward (the ``pods/portforward`` right, which the agent's role does not have), never
through the source's Service. It writes the same files the local backend writes:

- ``PUT /datasets/{id}/data.parquet`` and ``PUT /datasets/{id}/meta.json`` (the body is the file),
  ``DELETE /datasets/{id}``: the published datasets under ``ROOT/datasets/``;
- ``PUT``, ``DELETE`` and ``GET /fault``: the fault hook's control file
  (:mod:`mlsandbox.workloads.fault_control`, the routes every service with a control listener has);
- ``GET /health``.

Writes are atomic (a temporary file renamed), so the public listener never reads half a file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from mlsandbox.workloads.fault_control import add_fault_routes

DATASET_FILES = ("data.parquet", "meta.json")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_admin_app(root: Path, fault_file: Path) -> Any:
    """The control app writing datasets under ``root`` and the fault into ``fault_file``."""
    app = FastAPI(title="mlsandbox API source control", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.put("/datasets/{dataset_id}/{name}")
    async def put_file(dataset_id: str, name: str, request: Request) -> Response:
        if not _ID_RE.match(dataset_id) or name not in DATASET_FILES:
            return _error(400, f"invalid dataset file {dataset_id!r}/{name!r}")
        body = await request.body()
        if name == "meta.json":
            try:
                meta = json.loads(body)
            except ValueError:
                return _error(400, "meta.json is not JSON")
            if not isinstance(meta, dict):
                return _error(400, "meta.json is not a JSON object")
        folder = root / "datasets" / dataset_id
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.tmp"
        tmp.write_bytes(body)
        os.replace(tmp, folder / name)
        return Response(status_code=204)

    @app.delete("/datasets/{dataset_id}")
    def delete_dataset(dataset_id: str) -> Response:
        if not _ID_RE.match(dataset_id):
            return _error(400, f"invalid dataset id {dataset_id!r}")
        shutil.rmtree(root / "datasets" / dataset_id, ignore_errors=True)
        return Response(status_code=204)

    add_fault_routes(app, fault_file)
    return app


__all__ = ["DATASET_FILES", "create_admin_app"]
