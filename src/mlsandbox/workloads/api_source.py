"""The HTTP API data source: a real HTTP service that serves datasets as JSON or CSV pages.

Run by the local backend as ``python -m mlsandbox.workloads.api_source --root DIR --port N`` (one per
sandbox, started the first time an episode needs it); on kube as a pod of the episode with
``--admin-port`` (:mod:`mlsandbox.workloads.api_source_admin`), through which the datasets and the fault
are written. It serves every dataset published under
``DIR/datasets/<id>/``: ``data.parquet`` (the rows) and ``meta.json``::

    {"token": "...", "rate_limit_per_s": 5.0, "burst": 10, "max_page_size": 1000}

Both files are re-read when they change, so a token rotated or a dataset replaced takes effect at the next
request. The API:

- ``GET /health`` -> ``{"status": "ok"}``
- ``GET /v1/datasets/{id}/records?page=1&page_size=500&format=json|csv`` with
  ``Authorization: Bearer <token>``: one page of rows. JSON: ``{"dataset", "page", "page_size",
  "total_rows", "total_pages", "next_page", "records": [...]}`` (``next_page`` null on the last page);
  CSV: a header row then the rows, with ``X-Total-Rows``, ``X-Total-Pages`` and ``X-Next-Page`` headers.

Errors are JSON ``{"error": code, "message": text}``: 401 (missing or wrong token, with
``WWW-Authenticate: Bearer``), 404 (unknown dataset), 400 (bad page or page size), 429 (rate limit: a
token bucket of ``burst`` requests refilled at ``rate_limit_per_s`` per token, with ``Retry-After`` in
whole seconds). The sandbox's fault hook (:class:`~mlsandbox.workloads.fault_hook.FaultHookMiddleware`)
is mounted: an injected fault answers 503 before any of this.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from mlsandbox.data.formats import to_bytes
from mlsandbox.workloads.fault_hook import FaultHookMiddleware

DEFAULT_PAGE_SIZE = 500


@dataclass
class _Dataset:
    table: pa.Table
    meta: dict[str, Any]
    stamp: tuple[float, float]


@dataclass
class _Bucket:
    tokens: float
    at: float


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def create_app(root: Path, fault_file: str | None = None) -> Any:
    """The ASGI app serving the datasets under ``root`` (wrapped in the fault hook)."""
    app = FastAPI(title="mlsandbox API data source", docs_url=None, redoc_url=None, openapi_url=None)
    cache: dict[str, _Dataset] = {}
    buckets: dict[tuple[str, str], _Bucket] = {}

    def load(dataset_id: str) -> _Dataset | None:
        folder = root / "datasets" / dataset_id
        try:
            stamp = ((folder / "data.parquet").stat().st_mtime, (folder / "meta.json").stat().st_mtime)
        except (FileNotFoundError, NotADirectoryError):
            return None
        known = cache.get(dataset_id)
        if known is not None and known.stamp == stamp:
            return known
        try:
            meta = json.loads((folder / "meta.json").read_text())
            table = pq.read_table(folder / "data.parquet")
        except (OSError, ValueError, pa.ArrowException):
            return None
        cache[dataset_id] = _Dataset(table, meta, stamp)
        return cache[dataset_id]

    def take(dataset_id: str, token: str, meta: dict[str, Any]) -> float | None:
        """Spend one request from the token's bucket; seconds to wait when it is empty."""
        rate = float(meta.get("rate_limit_per_s", 10.0))
        burst = float(meta.get("burst", 10))
        now = time.monotonic()
        bucket = buckets.setdefault((dataset_id, token), _Bucket(burst, now))
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / rate

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/datasets/{dataset_id}/records")
    def records(
        dataset_id: str,
        request: Request,
        page: int = 1,
        page_size: int = DEFAULT_PAGE_SIZE,
        format: str = "json",
    ) -> Response:
        data = load(dataset_id)
        if data is None:
            return _error(404, "not_found", f"no dataset {dataset_id!r}")
        auth = request.headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        expected = str(data.meta.get("token", ""))
        if scheme.lower() != "bearer" or not given or not hmac.compare_digest(given.strip(), expected):
            return _error(
                401,
                "unauthorized",
                "missing or invalid bearer token",
                {"WWW-Authenticate": 'Bearer realm="mlsandbox", error="invalid_token"'},
            )
        wait = take(dataset_id, given.strip(), data.meta)
        if wait is not None:
            retry = max(1, math.ceil(wait))
            return _error(
                429,
                "rate_limited",
                f"rate limit exceeded; retry after {retry} s",
                {"Retry-After": str(retry)},
            )
        max_page = int(data.meta.get("max_page_size", 1000))
        if not 1 <= page_size <= max_page:
            return _error(400, "invalid_page_size", f"page_size must be within 1..{max_page}")
        total = data.table.num_rows
        pages = max(1, math.ceil(total / page_size))
        if not 1 <= page <= pages:
            return _error(400, "invalid_page", f"page must be within 1..{pages}")
        chunk = data.table.slice((page - 1) * page_size, page_size)
        next_page = page + 1 if page < pages else None
        if format == "csv":
            headers = {"X-Total-Rows": str(total), "X-Total-Pages": str(pages)}
            if next_page is not None:
                headers["X-Next-Page"] = str(next_page)
            return Response(to_bytes(chunk, "csv"), media_type="text/csv", headers=headers)
        if format != "json":
            return _error(400, "invalid_format", "format must be json or csv")
        rows = [{k: _jsonable(v) for k, v in row.items()} for row in chunk.to_pylist()]
        body = {
            "dataset": dataset_id,
            "page": page,
            "page_size": page_size,
            "total_rows": total,
            "total_pages": pages,
            "next_page": next_page,
            "records": rows,
        }
        return JSONResponse(body)

    return FaultHookMiddleware(app, control_file=fault_file)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--admin-port",
        type=int,
        default=None,
        help="also serve the control listener (mlsandbox.workloads.api_source_admin) on 127.0.0.1:PORT",
    )
    parser.add_argument(
        "--fault-file",
        type=Path,
        default=None,
        help="the fault hook's control file (default: $MLSANDBOX_FAULT_HOOK_FILE)",
    )
    args = parser.parse_args(argv)
    import uvicorn

    args.root.mkdir(parents=True, exist_ok=True)
    fault_file = str(args.fault_file) if args.fault_file is not None else None
    app = create_app(args.root, fault_file)
    if args.admin_port is None:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
        return
    import asyncio

    from mlsandbox.workloads.api_source_admin import create_admin_app
    from mlsandbox.workloads.fault_control import serve_beside

    if fault_file is None:
        parser.error("--admin-port needs --fault-file (the file its PUT /fault writes)")
    admin = create_admin_app(args.root, args.fault_file)
    server = uvicorn.Server(
        uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    )
    asyncio.run(serve_beside(server, admin, args.admin_port))


if __name__ == "__main__":
    main()
