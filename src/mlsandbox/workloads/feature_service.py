"""An online feature service: features by entity id, from a table in the data lake held in memory.

Run as ``python -m mlsandbox.workloads.feature_service --bucket B --key K --id-column entity_id --port 0
--port-file FILE`` (S3 endpoint and keys from the environment, as for every workload). At start it reads
the object (Parquet or CSV; ``--path`` for a local file) and indexes its rows by the id column; the port goes to ``--port-file`` once
the table is loaded. A missing object or id column ends the process with exit status 3.

``POST /features`` ``{"ids": ["e1", ...]}`` answers ``{"columns": [...], "rows": [[...], ...],
"missing": [...]}`` (rows in the order of the ids found; ids are compared as strings). ``GET /health``,
``GET /metrics`` (the HTTP metrics of :mod:`mlsandbox.workloads.http_metrics`). The fault hook
(:mod:`mlsandbox.workloads.fault_hook`) makes it slow or failing on demand, which the model servers that
call it feel as their own latency and errors. ``--admin-port N --fault-file FILE`` (in a pod of the kube
backend) also serves the hook's control routes on ``127.0.0.1:N`` (:mod:`mlsandbox.workloads.fault_control`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from mlsandbox.workloads.fault_hook import FaultHookMiddleware
from mlsandbox.workloads.http_metrics import HttpMetrics, MetricsMiddleware, metrics_response

log = logging.getLogger("mlsandbox.feature_service")
LOAD_FAILED_EXIT = 3


def read_table(bucket: str, key: str) -> Any:
    import boto3
    import pandas as pd
    from botocore.config import Config

    endpoint = os.environ.get("MLSANDBOX_S3_URL") or os.environ.get("MLFLOW_S3_ENDPOINT_URL")
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        config=Config(
            region_name="us-east-1", s3={"addressing_style": "path"}, connect_timeout=5, read_timeout=30
        ),
    )
    data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if key.endswith((".parquet", ".pq")):
        return pd.read_parquet(io.BytesIO(data))
    return pd.read_csv(io.BytesIO(data))


class FeatureStore:
    """Rows by id, as JSON-ready lists (NaN as null)."""

    def __init__(self, frame: Any, id_column: str) -> None:
        if id_column not in frame.columns:
            raise ValueError(f"the table has no id column {id_column!r} (columns: {list(frame.columns)})")
        self.columns = [c for c in frame.columns if c != id_column]
        ids = frame[id_column].astype(str).tolist()
        values = frame[self.columns].astype(object).to_numpy().tolist()
        self.rows = {
            i: [None if isinstance(v, float) and math.isnan(v) else v for v in row]
            for i, row in zip(ids, values, strict=True)
        }

    def lookup(self, ids: list[Any]) -> dict[str, Any]:
        rows, missing = [], []
        for i in ids:
            row = self.rows.get(str(i))
            if row is None:
                missing.append(i)
            else:
                rows.append(row)
        return {"columns": self.columns, "rows": rows, "missing": missing}


def create_app(
    store_loader: Any, *, port_file: str | None = None, port: int | None = None, fault_file: str | None = None
) -> Any:
    metrics = HttpMetrics("features")
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            state["store"] = store_loader()
        except Exception as e:
            log.error("cannot load the feature table: %s: %s", type(e).__name__, e)
            raise
        state["started"] = time.time()
        if port_file:
            tmp = Path(port_file + ".tmp")
            tmp.write_text(json.dumps({"port": port, "pid": os.getpid(), "rows": len(state["store"].rows)}))
            os.replace(tmp, port_file)
        log.info("serving %d entities", len(state["store"].rows))
        yield

    app = FastAPI(title="mlsandbox feature service", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health() -> Response:
        body = {
            "status": "ok",
            "entities": len(state["store"].rows),
            "uptime_s": round(time.time() - state["started"], 3),
        }
        return Response(orjson.dumps(body), media_type="application/json")

    @app.get("/metrics")
    async def prom() -> Response:
        body, ctype = metrics_response(metrics.registry)
        return Response(body, media_type=ctype)

    @app.post("/features")
    async def features(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as e:
            detail = [{"loc": ["body"], "msg": f"JSON decode error: {e}", "type": "json_invalid"}]
            return Response(orjson.dumps({"detail": detail}), status_code=422, media_type="application/json")
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list):
            detail = [{"loc": ["body", "ids"], "msg": "Input should be a valid list", "type": "list_type"}]
            return Response(orjson.dumps({"detail": detail}), status_code=422, media_type="application/json")
        return Response(orjson.dumps(state["store"].lookup(ids)), media_type="application/json")

    inner = FaultHookMiddleware(app, control_file=fault_file, exempt=("/metrics",))
    return MetricsMiddleware(inner, metrics, ("/features", "/health"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlsandbox.workloads.feature_service")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--key", help="object key in --bucket (Parquet or CSV)")
    src.add_argument("--path", help="a local Parquet or CSV file instead")
    p.add_argument("--bucket")
    p.add_argument("--id-column", default="entity_id")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    from mlsandbox.workloads.fault_control import add_fault_arguments

    add_fault_arguments(p)
    args = p.parse_args(argv)
    if args.admin_port is not None and args.fault_file is None:
        p.error("--admin-port needs --fault-file (the file its PUT /fault writes)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import prometheus_client
    import uvicorn

    prometheus_client.disable_created_metrics()  # half the scrape size, nothing lost

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    if args.key is not None and not args.bucket:
        p.error("--key needs --bucket")

    def load() -> FeatureStore:
        if args.path is not None:
            import pandas as pd

            path = str(args.path)
            frame = pd.read_parquet(path) if path.endswith((".parquet", ".pq")) else pd.read_csv(path)
        else:
            frame = read_table(args.bucket, args.key)
        return FeatureStore(frame, args.id_column)

    app = create_app(load, port_file=args.port_file, port=port, fault_file=args.fault_file)
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", lifespan="on", access_log=False, log_level="info"
    )
    server = uvicorn.Server(config)
    from mlsandbox.workloads.fault_control import run_with_control

    run_with_control(server, Path(args.fault_file or "-"), args.admin_port, sockets=[sock])
    return 0 if server.started else LOAD_FAILED_EXIT


if __name__ == "__main__":
    sys.exit(main())
