"""Smoke checks of the workload images: ``python -m mlsandbox.workloads.smoke trainer|model-server``.

Each check runs the real workload code on a tiny generated dataset, with no service and no network, and
ends with a ``MLSANDBOX_RESULT {json}`` line (exit status 0) or a traceback (exit status 1):

- ``trainer``: :func:`mlsandbox.workloads.trainer.main` trains a logistic regression on 240 generated rows
  and logs the run and the model to a throwaway MLflow file store; the data source is the one thing
  replaced (the table is generated in memory instead of read from S3). The logged model is then loaded
  back and must predict.
  The trainer image's check also imports Prefect's engine and the sandbox's flows (that image runs the
  flow runs) and lists them under ``flows``.
- ``model-server``: the trainer check, then the model server
  (``python -m mlsandbox.workloads.model_server --model-path``) serves that model on a free loopback
  port; ``/health`` must answer 200, ``/predict`` one prediction per row, ``/metrics`` the request count.

Self-contained like the other workloads (stdlib plus what the workloads themselves need).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mlsandbox.workloads.contract import RESULT_PREFIX

TARGET = "churned"
ROWS = 240


class SmokeFailed(AssertionError):
    """A workload did not do what its smoke check expects."""


def tiny_table(seed: int = 0) -> Any:
    """A small, learnable binary classification table: two numbers and a category."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    tenure = rng.uniform(0, 60, ROWS)
    charges = rng.normal(70, 20, ROWS)
    plan = rng.choice(["basic", "plus", "pro"], ROWS)
    score = -0.08 * tenure + 0.03 * charges + np.where(plan == "basic", 0.8, 0.0) + rng.normal(0, 0.5, ROWS)
    label = (score > np.median(score)).astype(int)
    return pd.DataFrame({"tenure_months": tenure, "monthly_charges": charges, "plan": plan, TARGET: label})


def check_trainer(workdir: Path) -> dict[str, Any]:
    """Train with the trainer's own entry point; return its result plus the model's local directory."""
    os.environ["MLFLOW_TRACKING_URI"] = (workdir / "mlruns").as_uri()
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # a throwaway store: no database needed
    from mlsandbox.workloads import trainer

    table = tiny_table()
    trainer.load_table = lambda bucket, key: table  # the data source, in memory instead of S3
    argv = ["--bucket", "smoke", "--key", "tiny.csv", "--target", TARGET, "--algorithm"]
    argv += ["logistic_regression", "--experiment-id", "0", "--run-name", "smoke", "--seed", "1"]

    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        status = trainer.main(argv)
    sys.stdout.write(out.getvalue())
    if status != 0:
        raise SmokeFailed(f"the trainer exited with status {status} (traceback above)")
    lines = [line for line in out.getvalue().splitlines() if line.startswith(trainer.RESULT_PREFIX)]
    if not lines:
        raise SmokeFailed("the trainer printed no MLSANDBOX_RESULT line")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix(trainer.RESULT_PREFIX))

    import mlflow.artifacts
    import mlflow.sklearn

    local = mlflow.artifacts.download_artifacts(result["model_uri"], dst_path=str(workdir / "model"))
    model = mlflow.sklearn.load_model(local)
    predicted = model.predict(table.drop(columns=[TARGET]).head(5))
    if len(predicted) != 5:
        raise SmokeFailed(f"the logged model predicted {len(predicted)} values for 5 rows")
    auc = result["metrics"]["val_auc"]
    if not 0.7 <= auc <= 1.0:
        raise SmokeFailed(f"validation AUC {auc} on a learnable table: training did not work")
    return {"trainer": result, "model_dir": local}


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def check_model_server(workdir: Path, start_timeout_s: float = 120.0) -> dict[str, Any]:
    """Serve the trainer's model with the real server process; /health, /predict and /metrics must work."""
    trained = check_trainer(workdir)
    port_file = workdir / "port.json"
    cmd = [sys.executable, "-m", "mlsandbox.workloads.model_server", "--model-path", trained["model_dir"]]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)]
    started = time.monotonic()
    server = subprocess.Popen(cmd)
    try:
        while not port_file.exists() or not port_file.read_text().strip():
            if server.poll() is not None:
                raise SmokeFailed(f"the model server exited with status {server.returncode} before serving")
            if time.monotonic() - started > start_timeout_s:
                raise SmokeFailed(f"the model server wrote no port file within {start_timeout_s:.0f} s")
            time.sleep(0.1)
        ready_s = time.monotonic() - started
        base = f"http://127.0.0.1:{json.loads(port_file.read_text())['port']}"
        status, _ = _http(f"{base}/health")
        if status != 200:
            raise SmokeFailed(f"/health answered {status}")
        rows = tiny_table(seed=1).drop(columns=[TARGET]).head(3)
        status, body = _http(f"{base}/predict", {"instances": rows.to_dict(orient="records")})
        answer = json.loads(body)
        if status != 200 or len(answer.get("predictions", [])) != 3:
            raise SmokeFailed(f"/predict answered {status}: {body[:300]!r}")
        status, metrics = _http(f"{base}/metrics")
        if status != 200 or b"/predict" not in metrics:
            raise SmokeFailed(f"/metrics answered {status} without the /predict series")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return {
        "trainer": trained["trainer"],
        "server": {"ready_s": round(ready_s, 2), "predictions": answer["predictions"], "health": 200},
    }


def check_flows(workdir: Path) -> dict[str, Any]:
    """The sandbox's flows load as their runs load them (the trainer image runs them as flow-run Jobs:
    Prefect's engine imports ``mlsandbox.workloads.flows``)."""
    import importlib

    importlib.import_module("prefect.engine")
    from prefect import Flow

    from mlsandbox.workloads import flows

    found = {name: getattr(flows, name, None) for name in ("ingestion", "training", "batch_scoring")}
    missing = [name for name, value in found.items() if not isinstance(value, Flow)]
    if missing:
        raise SmokeFailed(f"no Prefect flow {', '.join(missing)} in mlsandbox.workloads.flows")
    import prefect

    return {"prefect": prefect.__version__, "flows": sorted(found)}


def check_trainer_image(workdir: Path) -> dict[str, Any]:
    """What the trainer image runs: the trainer check, then the flows check."""
    return {**check_trainer(workdir), "flows": check_flows(workdir)}


CHECKS = {"trainer": check_trainer_image, "model-server": check_model_server}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mlsandbox.workloads.smoke", description=__doc__.split("\n")[0]
    )
    parser.add_argument("check", choices=sorted(CHECKS))
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlsandbox-smoke-") as tmp:
        try:
            result = CHECKS[args.check](Path(tmp))
        except Exception:
            import traceback

            traceback.print_exc(file=sys.stderr)
            return 1
    result.pop("model_dir", None)
    result.update(check=args.check, seconds=round(time.monotonic() - started, 2))
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
