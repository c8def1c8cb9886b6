"""A model server: one registered MLflow model version behind ``/predict``, ``/health`` and ``/metrics``.

Run as ``python -m mlsandbox.workloads.model_server --model-uri models:/NAME/VERSION --port 0
--port-file FILE [--feature-url URL]`` (``MLFLOW_TRACKING_URI`` and the S3 variables from the environment),
or ``--model-path DIR`` for a model directory on disk. It is a FastAPI app on uvicorn (uvloop, httptools,
one worker).

Startup. The model is downloaded from the registry (artifacts in MinIO) and loaded before the socket
accepts requests; the port goes to ``--port-file`` once the model is loaded. A version that does not
exist, an unreachable registry or artifacts that do not load end the process with exit status 3 and the
reason in its log, as any server whose application start fails.

``POST /predict`` takes one of

- ``{"dataframe_split": {"columns": [...], "data": [[...], ...]}}`` (what ``mlflow models serve`` takes),
- ``{"instances": [{"col": value, ...}, ...]}``,
- ``{"entity_ids": ["id", ...]}``: the features are fetched from the feature service (``--feature-url``);
  its latency adds to ours, its errors become ``502``, its time-outs ``504``.

and answers ``{"predictions": [...], "probabilities": [...], "model": ..., "version": ...}`` in the shape
``--response`` names (the dataset kind's serving declaration): ``binary``, a label and the positive class's
probability per row; ``multiclass``, a class label and that class's probability; ``number``, a number per
row and no ``probabilities`` (a regressor). Without ``--response`` the model decides: a classifier's label
(with the positive class's probability when it has two classes), else its plain prediction. A body that is not JSON, a missing
or unknown column or a value of the wrong type is ``422`` with ``detail: [{"loc", "msg", "type"}]``
(``loc`` as FastAPI gives it, e.g. ``["body", "instances", 3, "tenure_months"]``); an unknown entity is
``404`` with its position.

Throughput. Requests are batched opportunistically: while the model computes one batch (in a worker
thread), the event loop parses the next requests; when the model is free it takes every request waiting,
up to ``--max-batch-rows`` rows, as one frame. Nothing waits for a batch to fill, so a lone request is
not delayed.

Metrics (``/metrics``, Prometheus text): the HTTP metrics of :mod:`mlsandbox.workloads.http_metrics` for
``/predict`` and ``/health``, plus ``model_rows_total``, ``model_batch_rows`` (histogram),
``model_inference_seconds`` (histogram), ``model_feature_fetch_seconds`` (histogram) and
``model_info{model,version}``. The fault hook (:mod:`mlsandbox.workloads.fault_hook`) sits inside the
metrics, so injected delays and 5xx answers are measured as real ones; ``/metrics`` is exempt from it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import Counter, Gauge, Histogram

from mlsandbox.workloads.fault_hook import FaultHookMiddleware, write_fault_from
from mlsandbox.workloads.http_metrics import HttpMetrics, MetricsMiddleware, metrics_response
from mlsandbox.workloads.trainer import block_torch

log = logging.getLogger("mlsandbox.model_server")

LOAD_FAILED_EXIT = 3
RESPONSES = ("binary", "multiclass", "number")
"""The response shapes ``--response`` takes (the task kinds' ``Serving.shape``)."""
_NUMERIC = frozenset({"double", "float", "long", "integer"})
_JSON = "application/json"


class LoadError(Exception):
    """The model cannot be served (bad version, unreachable registry, unreadable artifacts)."""


class RequestError(Exception):
    """A request the server refuses, with its status and FastAPI-style ``detail``."""

    def __init__(self, status: int, detail: list[dict[str, Any]] | str) -> None:
        super().__init__(str(detail))
        self.status = status
        self.detail = detail


@dataclass
class LoadedModel:
    model: Any
    name: str
    version: str
    columns: list[tuple[str, str]]
    """(column, kind) in the signature's order; kind is ``number``, ``string`` or ``boolean``."""
    classes: list[Any] | None = None
    response: str | None = None
    """The response shape (one of :data:`RESPONSES`; None: what the model is decides)."""
    _names: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        self._names = frozenset(c for c, _ in self.columns)
        if self.response is not None and self.response not in RESPONSES:
            raise LoadError(f"unknown response shape {self.response!r} (one of {', '.join(RESPONSES)})")
        if self.response in ("binary", "multiclass") and (
            self.classes is None or not hasattr(self.model, "predict_proba")
        ):
            raise LoadError(f"a {self.response} response needs a classifier; this model has no classes")

    def predict(self, frame: Any) -> tuple[list[Any], list[float] | None]:
        """The predictions of the rows of ``frame`` and, for a classifier, their probabilities."""
        import numpy as np

        if self.response == "number" or self.classes is None or not hasattr(self.model, "predict_proba"):
            out = np.asarray(self.model.predict(frame))
            if self.response == "number":
                return out.astype(float).tolist(), None
            return out.tolist(), None
        proba = np.asarray(self.model.predict_proba(frame))
        best = proba.argmax(axis=1)
        labels = np.asarray(self.classes)[best].tolist()
        if self.response == "multiclass":
            return labels, proba[np.arange(len(best)), best].tolist()
        return labels, proba[:, 1].tolist() if proba.shape[1] == 2 else None


# ------------------------------------------------------------------------------------------------ load


def _signature_columns(local: str) -> list[tuple[str, str]]:
    from mlflow.models import Model

    sig = Model.load(local).signature
    if sig is None or sig.inputs is None:
        raise LoadError("the model has no input signature: the server cannot validate requests")
    columns = []
    for spec in sig.inputs.inputs:
        name = getattr(spec, "name", None)
        if name is None:
            raise LoadError("the model's input signature is not a table of named columns")
        t = str(getattr(spec.type, "name", spec.type)).lower()
        columns.append((name, "number" if t in _NUMERIC else "boolean" if t == "boolean" else "string"))
    return columns


def load_model(
    model_uri: str | None, model_path: str | None, tracking_uri: str | None, response: str | None = None
) -> LoadedModel:
    """Download (when ``models:/NAME/VERSION``) and load the model to answer in the ``response`` shape;
    :class:`LoadError` when impossible."""
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model

    name, version = "local", "0"
    tmp: tempfile.TemporaryDirectory[str] | None = None
    try:
        if model_uri is not None:
            parts = model_uri.removeprefix("models:/").split("/")
            if not model_uri.startswith("models:/") or len(parts) != 2 or not all(parts):
                raise LoadError(f"model URI {model_uri!r} is not models:/NAME/VERSION")
            name, version = parts
            from mlflow import MlflowClient

            client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
            try:
                uri = client.get_model_version_download_uri(name, version)
                tmp = tempfile.TemporaryDirectory(prefix="mlsandbox-serve-")
                local = mlflow.artifacts.download_artifacts(
                    artifact_uri=uri, dst_path=tmp.name, tracking_uri=tracking_uri, registry_uri=tracking_uri
                )
            except MlflowException as e:
                raise LoadError(f"cannot fetch {model_uri} from the registry: {e.message}") from e
        else:
            if model_path is None:
                raise LoadError("give --model-uri or --model-path")
            local = model_path
        columns = _signature_columns(local)
        flavors = Model.load(local).flavors
        if "sklearn" in flavors:
            import mlflow.sklearn

            model = mlflow.sklearn.load_model(local)
        else:
            import mlflow.pyfunc

            model = mlflow.pyfunc.load_model(local)
    except LoadError:
        raise
    except Exception as e:  # unreachable registry, unreadable artifacts, incompatible pickles
        raise LoadError(f"cannot load the model: {type(e).__name__}: {e}") from e
    finally:
        if tmp is not None:
            tmp.cleanup()
    classes = getattr(model, "classes_", None)
    return LoadedModel(model, name, version, columns, None if classes is None else list(classes), response)


# ---------------------------------------------------------------------------------------- validation


def _check_value(kind: str, value: Any) -> tuple[Any, str | None]:
    """The value as the frame stores it, or an error message."""
    if kind == "number":
        if value is None:
            return math.nan, None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None, "Input should be a valid number"
        return float(value), None
    if kind == "boolean":
        if not isinstance(value, bool):
            return None, "Input should be a valid boolean"
        return value, None
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, "Input should be a valid string"
    return value, None


def columns_from_body(model: LoadedModel, body: Any) -> dict[str, list[Any]]:
    """Validated column lists from a ``dataframe_split`` or ``instances`` body."""
    errors: list[dict[str, Any]] = []
    cols: dict[str, list[Any]] = {c: [] for c, _ in model.columns}
    if "dataframe_split" in body:
        split = body["dataframe_split"]
        if not isinstance(split, dict) or not isinstance(split.get("columns"), list):
            raise RequestError(
                422, [_err(["body", "dataframe_split", "columns"], "Field required", "missing")]
            )
        data = split.get("data")
        if not isinstance(data, list):
            raise RequestError(422, [_err(["body", "dataframe_split", "data"], "Field required", "missing")])
        given = split["columns"]
        for c in given:
            if c not in model._names:
                errors.append(_err(["body", "dataframe_split", "columns"], f"unknown column {c!r}", "extra"))
        for c, _ in model.columns:
            if c not in given:
                errors.append(
                    _err(["body", "dataframe_split", "columns"], f"missing column {c!r}", "missing")
                )
        if errors:
            raise RequestError(422, errors)
        index = {c: i for i, c in enumerate(given)}
        order = [(c, kind, index[c]) for c, kind in model.columns]
        for r, row in enumerate(data):
            if not isinstance(row, list) or len(row) != len(given):
                errors.append(
                    _err(
                        ["body", "dataframe_split", "data", r],
                        "row length differs from columns",
                        "value_error",
                    )
                )
                continue
            for c, kind, i in order:
                value, msg = _check_value(kind, row[i])
                if msg:
                    errors.append(_err(["body", "dataframe_split", "data", r, i], msg, f"{kind}_type"))
                else:
                    cols[c].append(value)
    elif "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list):
            raise RequestError(
                422, [_err(["body", "instances"], "Input should be a valid list", "list_type")]
            )
        for r, row in enumerate(rows):
            if not isinstance(row, dict):
                errors.append(_err(["body", "instances", r], "Input should be a valid object", "dict_type"))
                continue
            for extra in row.keys() - model._names:
                errors.append(_err(["body", "instances", r, extra], "unknown column", "extra_forbidden"))
            for c, kind in model.columns:
                if c not in row:
                    errors.append(_err(["body", "instances", r, c], "Field required", "missing"))
                    continue
                value, msg = _check_value(kind, row[c])
                if msg:
                    errors.append(_err(["body", "instances", r, c], msg, f"{kind}_type"))
                else:
                    cols[c].append(value)
    else:
        raise RequestError(
            422,
            [_err(["body"], "give one of 'dataframe_split', 'instances' or 'entity_ids'", "missing")],
        )
    if errors:
        raise RequestError(422, errors[:50])
    return cols


def _err(loc: list[Any], msg: str, kind: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": kind}


# ----------------------------------------------------------------------------------------------- app


class _Batcher:
    """Opportunistic batching: one inference at a time in a worker thread, everything waiting next."""

    def __init__(self, model: LoadedModel, max_rows: int, metrics: dict[str, Any]) -> None:
        self.model = model
        self.max_rows = max_rows
        self.metrics = metrics
        self.queue: asyncio.Queue[tuple[dict[str, list[Any]], int, asyncio.Future[Any]]] = asyncio.Queue()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def predict(self, cols: dict[str, list[Any]], n: int) -> tuple[list[Any], list[float] | None]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((cols, n, fut))
        return await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            rows = items[0][1]
            while rows < self.max_rows and not self.queue.empty():
                item = self.queue.get_nowait()
                items.append(item)
                rows += item[1]
            try:
                labels, proba = await loop.run_in_executor(self.pool, self._infer, items, rows)
            except Exception as e:
                for _, _, fut in items:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            start = 0
            for _, n, fut in items:
                if not fut.done():
                    fut.set_result(
                        (labels[start : start + n], None if proba is None else proba[start : start + n])
                    )
                start += n

    def _infer(self, items: list[Any], rows: int) -> tuple[list[Any], list[float] | None]:
        import pandas as pd

        t0 = time.perf_counter()
        if len(items) == 1:
            data = items[0][0]
        else:
            data = {c: [v for it in items for v in it[0][c]] for c, _ in self.model.columns}
        frame = pd.DataFrame(data, columns=[c for c, _ in self.model.columns])
        for c, kind in self.model.columns:
            if kind == "number":
                frame[c] = frame[c].astype("float64")
        out = self.model.predict(frame)
        self.metrics["inference"].observe(time.perf_counter() - t0)
        self.metrics["batch"].observe(rows)
        self.metrics["rows"].inc(rows)
        return out


def _json(status: int, payload: Any) -> Response:
    return Response(
        orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status, media_type=_JSON
    )


def create_app(
    *,
    model_uri: str | None = None,
    model_path: str | None = None,
    tracking_uri: str | None = None,
    feature_url: str | None = None,
    feature_timeout_s: float = 2.0,
    max_batch_rows: int = 256,
    port_file: str | None = None,
    port: int | None = None,
    fault_file: str | None = None,
    response: str | None = None,
) -> Any:
    """The ASGI app (metrics outside, fault hook inside, FastAPI app innermost)."""
    http_metrics = HttpMetrics("model")
    reg = http_metrics.registry
    extra: dict[str, Any] = {
        "rows": Counter("model_rows", "Rows predicted", registry=reg),
        "batch": Histogram(
            "model_batch_rows",
            "Rows per inference batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=reg,
        ),
        "inference": Histogram(
            "model_inference_seconds",
            "Model compute time per batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=reg,
        ),
        "fetch": Histogram(
            "model_feature_fetch_seconds",
            "Time to fetch online features",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=reg,
        ),
        "info": Gauge("model_info", "The model being served", ["model", "version"], registry=reg),
    }
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            loaded = await asyncio.to_thread(load_model, model_uri, model_path, tracking_uri, response)
        except LoadError as e:
            log.error("cannot serve: %s", e)
            raise
        extra["info"].labels(loaded.name, loaded.version).set(1)
        batcher = _Batcher(loaded, max_batch_rows, extra)
        batcher.start()
        state.update(model=loaded, batcher=batcher, started=time.time())
        if feature_url:
            import httpx

            state["features"] = httpx.AsyncClient(base_url=feature_url, timeout=feature_timeout_s)
        if port_file:
            tmp = Path(port_file + ".tmp")
            tmp.write_text(json.dumps({"port": port, "pid": os.getpid(), "version": loaded.version}))
            os.replace(tmp, port_file)
        log.info("serving %s version %s (%d input columns)", loaded.name, loaded.version, len(loaded.columns))
        try:
            yield
        finally:
            await batcher.stop()
            if "features" in state:
                await state["features"].aclose()

    app = FastAPI(title="mlsandbox model server", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health() -> Response:
        m: LoadedModel = state["model"]
        return _json(
            200,
            {
                "status": "ok",
                "model": m.name,
                "version": m.version,
                "uptime_s": round(time.time() - state["started"], 3),
            },
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        body, ctype = metrics_response(reg)
        return Response(body, media_type=ctype)

    @app.post("/predict")
    async def predict(request: Request) -> Response:
        m: LoadedModel = state["model"]
        try:
            raw = await request.body()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise RequestError(422, [_err(["body"], f"JSON decode error: {e}", "json_invalid")]) from None
            if not isinstance(body, dict):
                raise RequestError(422, [_err(["body"], "Input should be a valid object", "dict_type")])
            if "entity_ids" in body:
                cols = await _fetch_features(m, body["entity_ids"])
            else:
                cols = columns_from_body(m, body)
            n = len(cols[m.columns[0][0]]) if m.columns else 0
            if n == 0:
                raise RequestError(422, [_err(["body"], "no rows to predict", "too_short")])
            try:
                labels, proba = await state["batcher"].predict(cols, n)
            except (ValueError, TypeError) as e:
                raise RequestError(400, f"the model cannot score this input: {e}") from None
        except RequestError as e:
            return _json(e.status, {"detail": e.detail})
        out: dict[str, Any] = {"predictions": labels, "model": m.name, "version": m.version}
        if proba is not None:
            out["probabilities"] = proba
        return _json(200, out)

    async def _fetch_features(m: LoadedModel, ids: Any) -> dict[str, list[Any]]:
        client = state.get("features")
        if client is None:
            raise RequestError(400, "this server has no feature service: send features, not entity_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str | int) for i in ids):
            raise RequestError(
                422, [_err(["body", "entity_ids"], "Input should be a non-empty list of ids", "list_type")]
            )
        import httpx

        t0 = time.perf_counter()
        try:
            resp = await client.post(
                "/features", content=orjson.dumps({"ids": ids}), headers={"content-type": _JSON}
            )
        except httpx.TimeoutException:
            raise RequestError(504, "feature service timed out") from None
        except httpx.HTTPError as e:
            raise RequestError(502, f"feature service unreachable: {type(e).__name__}") from None
        finally:
            extra["fetch"].observe(time.perf_counter() - t0)
        if resp.status_code != 200:
            raise RequestError(502, f"feature service answered {resp.status_code}")
        data = orjson.loads(resp.content)
        if data.get("missing"):
            pos = {str(i): k for k, i in enumerate(ids)}
            raise RequestError(
                404,
                [
                    _err(["body", "entity_ids", pos.get(str(i), 0)], f"unknown entity {i!r}", "not_found")
                    for i in data["missing"][:20]
                ],
            )
        feats = data["columns"]
        cols: dict[str, list[Any]] = {c: [] for c, _ in m.columns}
        index = {c: i for i, c in enumerate(feats)}
        missing = [c for c, _ in m.columns if c not in index]
        if missing:
            raise RequestError(502, f"feature service has no column(s) {missing} the model needs")
        for row in data["rows"]:
            for c, _ in m.columns:
                cols[c].append(row[index[c]])
        return cols

    inner = FaultHookMiddleware(app, control_file=fault_file, exempt=("/metrics",))
    return MetricsMiddleware(inner, http_metrics, ("/predict", "/health"))


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m mlsandbox.workloads.model_server", description=__doc__.split("\n")[0]
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-uri", help="models:/NAME/VERSION in the registry at $MLFLOW_TRACKING_URI")
    src.add_argument("--model-path", help="a local MLflow model directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port (see --port-file)")
    p.add_argument("--port-file", help="where to write {port, pid, version} once the model is loaded")
    p.add_argument("--feature-url", help="the feature service, for requests by entity_ids")
    p.add_argument("--feature-timeout", type=float, default=2.0)
    p.add_argument("--max-batch-rows", type=int, default=256)
    p.add_argument(
        "--response", choices=RESPONSES, help="the response shape (default: what the model is decides)"
    )
    from mlsandbox.workloads.fault_control import add_fault_arguments

    add_fault_arguments(p)
    p.add_argument(
        "--fault-from",
        default=None,
        help="a fault to start with: this file's content, when it holds one, is copied to --fault-file at start "
        "(the kube backend mounts its deployment's fault here, so a replica started during the fault has it)",
    )
    args = p.parse_args(argv)
    if (args.admin_port is not None or args.fault_from is not None) and args.fault_file is None:
        p.error("--admin-port and --fault-from need --fault-file")
    return args


def start_fault(fault_from: Path, fault_file: Path) -> bool:
    """Copy the fault ``fault_from`` holds (JSON with an ``error_rate`` or a ``delay_ms``) to ``fault_file``;
    False, and nothing written, when it holds none (missing, empty or not a fault)."""
    try:
        fault = json.loads(fault_from.read_text() or "{}")
    except (OSError, ValueError):
        return False
    if not isinstance(fault, dict) or not (fault.get("error_rate") or fault.get("delay_ms")):
        return False
    try:
        write_fault_from(fault_file, fault)
    except (TypeError, ValueError) as e:
        logging.getLogger(__name__).warning("not started with the fault in %s: %s", fault_from, e)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    block_torch()  # loading a skops model would otherwise import PyTorch (see the trainer's block_torch)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import prometheus_client
    import uvicorn

    prometheus_client.disable_created_metrics()  # half the scrape size, nothing lost

    if args.fault_from is not None and start_fault(Path(args.fault_from), Path(args.fault_file)):
        logging.getLogger(__name__).info("started with the deployment's fault from %s", args.fault_from)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    app = create_app(
        model_uri=args.model_uri,
        model_path=args.model_path,
        tracking_uri=os.environ.get("MLFLOW_TRACKING_URI"),
        feature_url=args.feature_url,
        feature_timeout_s=args.feature_timeout,
        max_batch_rows=args.max_batch_rows,
        port_file=args.port_file,
        port=port,
        response=args.response,
        fault_file=args.fault_file,
    )
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="info",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    from mlsandbox.workloads.fault_control import run_with_control

    run_with_control(server, Path(args.fault_file or "-"), args.admin_port, sockets=[sock])
    if not server.started:
        print(
            f"model server: application start failed (exit {LOAD_FAILED_EXIT})", file=sys.stderr, flush=True
        )
        return LOAD_FAILED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
