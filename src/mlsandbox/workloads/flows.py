"""The sandbox's pipelines as real Prefect flows, run by the sandbox's Prefect worker.

- ``ingestion``: pull an upstream batch (``upstream/<dataset>/<batch>.csv``) -> validate its schema ->
  write it to the lake (``lake/<dataset>/<batch>.parquet``).
- ``training``: read every lake batch of a dataset (a completeness check: every batch of the upstream
  schedule must be there) -> train (a scikit-learn pipeline, tracked in MLflow)
  -> evaluate (a validation-AUC gate) -> register the model.
- ``batch-scoring``: score a lake batch with a registered model version (or alias) -> write the scores.

They fail where real code fails: a missing upstream object is botocore's ``NoSuchKey``, an unreachable
service is the client's connection error (after the task's retries), a schema change is a validation
error naming the columns; Prefect records the failed state and the logs. Services come from the
environment (``MLSANDBOX_S3_URL``, ``AWS_*``, ``MLFLOW_TRACKING_URI``), set by the deployment.

Environments. ``training`` and ``batch-scoring`` take ``python``: a named environment's interpreter. The
flow then does its work there: the training step runs the (self-contained) trainer workload with it on
the lake batches (staged under ``tmp/flows/``), scoring loads the model and scores in it; what fails
there (a model made under another scikit-learn) fails the task with the library's own error.

Usage. Every flow ends (also when it fails) by logging ``resource usage: cpu_seconds=<s>``: the CPU time
its work used in the flow-run process and in the processes it waited for (getrusage, from the start of
the flow's body: the orchestrator's start of the process is not counted), which the sandbox charges.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from mlsandbox.workloads.contract import RESULT_PREFIX

NO_TORCH_ENV = "MLSANDBOX_NO_TORCH"
"""Set (to 1) in the environment of the sandbox's flow runs: their process keeps PyTorch out, as the
trainer's does (:func:`mlsandbox.workloads.trainer.block_torch`); importing this module elsewhere changes
nothing."""

if os.environ.get(NO_TORCH_ENV) == "1":
    from mlsandbox.workloads.trainer import block_torch

    block_torch()

_NUMERIC_KINDS = "biuf"
USAGE_PREFIX = "resource usage: cpu_seconds="
ENV_STEP_TIMEOUT_S = 1800.0


def _cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def _usage() -> Iterator[None]:
    """Log the CPU seconds the flow's work used (from here to its end, success or failure) for the
    sandbox to charge; the orchestrator's own start of the flow-run process is not counted."""
    start = _cpu_seconds()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            get_run_logger().info("%s%.3f", USAGE_PREFIX, max(0.0, _cpu_seconds() - start))


def _run_in_environment(python: str, argv: list[str], what: str) -> str:
    """Run ``python *argv`` (a named environment's interpreter) with the flow's services; its output goes
    to the run's log. :class:`RuntimeError` with the program's last error line when it fails."""
    logger = get_run_logger()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PYTHONUNBUFFERED"] = "1"
    logger.info("%s with %s", what, python)
    proc = subprocess.run(
        [python, *argv], capture_output=True, text=True, env=env, timeout=ENV_STEP_TIMEOUT_S
    )
    for line in proc.stdout.splitlines()[-20:]:
        if not line.startswith(RESULT_PREFIX):
            logger.info("| %s", line)
    if proc.returncode != 0:
        err = [line for line in proc.stderr.splitlines() if line.strip()]
        for line in err[-15:]:
            logger.error("| %s", line)
        last = err[-1] if err else f"exit status {proc.returncode}"
        raise RuntimeError(f"{what} failed in the environment ({python}): {last}")
    return proc.stdout


def _s3() -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        region_name="us-east-1",
        s3={"addressing_style": "path"},
        connect_timeout=3,
        read_timeout=30,
        retries={"max_attempts": 2, "mode": "standard"},
    )
    return boto3.client("s3", endpoint_url=os.environ.get("MLSANDBOX_S3_URL"), config=config)


# --------------------------------------------------------------------------------------------- ingestion


@task(name="pull", retries=1, retry_delay_seconds=2)
def pull(bucket: str, key: str) -> bytes:
    logger = get_run_logger()
    s3 = _s3()
    logger.info("pulling s3://%s/%s", bucket, key)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        prefix = key.rsplit("/", 1)[0] + "/"
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
        logger.error(
            "upstream object %s is missing; objects under %s: %s",
            key,
            prefix,
            ", ".join(o["Key"] for o in listed) or "none",
        )
        raise
    logger.info("pulled %d bytes", len(body))
    return bytes(body)


@task(name="validate")
def validate(
    raw: bytes, required_columns: list[str], numeric_columns: list[str], rename: dict[str, str]
) -> Any:
    import pandas as pd

    logger = get_run_logger()
    df = pd.read_csv(io.BytesIO(raw))
    if rename:
        unknown = sorted(set(rename) - set(df.columns))
        if unknown:
            raise ValueError(
                f"rename: column(s) {unknown} are not in the batch (columns: {list(df.columns)})"
            )
        df = df.rename(columns=rename)
        logger.info("renamed columns %s", rename)
    missing = [c for c in required_columns if c not in df.columns]
    extra = [c for c in df.columns if c not in required_columns]
    if missing:
        raise ValueError(
            f"schema check failed: missing required column(s) {missing}; unexpected column(s) {extra}"
        )
    if len(df) == 0:
        raise ValueError("schema check failed: the batch has no rows")
    wrong = [c for c in numeric_columns if df[c].dtype.kind not in _NUMERIC_KINDS]
    if wrong:
        kinds = {c: str(df[c].dtype) for c in wrong}
        raise ValueError(f"schema check failed: column(s) {kinds} should be numeric")
    logger.info("validated %d rows x %d columns", len(df), df.shape[1])
    return df[required_columns]


@task(name="write")
def write(bucket: str, key: str, df: Any) -> str:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    _s3().put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    get_run_logger().info("wrote s3://%s/%s (%d rows)", bucket, key, len(df))
    return key


@flow(name="ingestion", log_prints=True)
def ingestion(
    bucket: str,
    dataset: str,
    batch: str,
    required_columns: list[str],
    numeric_columns: list[str] | None = None,
    rename: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Pull an upstream batch, validate its schema, write it to the lake."""
    with _usage():
        raw = pull(bucket, f"upstream/{dataset}/{batch}.csv")
        df: Any = validate(raw, required_columns, numeric_columns or [], rename or {})  # a DataFrame
        key = write(bucket, f"lake/{dataset}/{batch}.parquet", df)
        return {"dataset": f"lake/{dataset}/{batch}.parquet", "key": key, "rows": len(df)}


# ---------------------------------------------------------------------------------------------- training


@task(name="load-lake", retries=1, retry_delay_seconds=2)
def load_lake(bucket: str, dataset: str, expected_batches: list[str]) -> Any:
    import pandas as pd

    s3 = _s3()
    prefix = f"lake/{dataset}/"
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))
    keys = [k for k in keys if k.endswith(".parquet")]
    if not keys:
        raise FileNotFoundError(f"no lake batches under s3://{bucket}/{prefix}: run the ingestion first")
    missing = [b for b in expected_batches if f"{prefix}{b}.parquet" not in keys]
    if missing:
        raise FileNotFoundError(
            f"completeness check failed: the lake has no batch(es) {missing} of {dataset} "
            f"(present: {', '.join(keys)}): ingest them first"
        )
    frames = [pd.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=k)["Body"].read())) for k in keys]
    get_run_logger().info("loaded %d batch(es): %s", len(keys), ", ".join(keys))
    return pd.concat(frames, ignore_index=True)


def _train_in_environment(
    python: str,
    bucket: str,
    df: Any,
    target: str,
    algorithm: str,
    hyperparams: dict[str, Any],
    experiment_id: str,
    seed: int,
) -> dict[str, Any]:
    """The training step under another interpreter: the trainer workload on the staged lake batches."""
    s3 = _s3()
    key = f"tmp/flows/{uuid.uuid4().hex}/training.parquet"
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    s3.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    try:
        out = _run_in_environment(
            python,
            [
                str(Path(__file__).with_name("trainer.py")),
                *("--bucket", bucket, "--key", key, "--target", target, "--algorithm", algorithm),
                *("--hyperparams", json.dumps(hyperparams), "--experiment-id", experiment_id),
                *("--run-name", "training-flow", "--seed", str(seed)),
            ],
            "training",
        )
    finally:
        with contextlib.suppress(Exception):
            s3.delete_object(Bucket=bucket, Key=key)
    line = next(x for x in reversed(out.splitlines()) if x.startswith(RESULT_PREFIX))
    result = json.loads(line[len(RESULT_PREFIX) :])
    return {"run_id": result["run_id"], "model_uri": result["model_uri"], "metrics": result["metrics"]}


@task(name="train")
def train_model(
    df: Any,
    target: str,
    algorithm: str,
    hyperparams: dict[str, Any],
    experiment_id: str,
    seed: int,
    bucket: str = "",
    python: str | None = None,
) -> dict[str, Any]:
    if python is not None:
        result = _train_in_environment(
            python, bucket, df, target, algorithm, hyperparams, experiment_id, seed
        )
        get_run_logger().info(
            "run %s: %s", result["run_id"], {k: round(v, 4) for k, v in result["metrics"].items()}
        )
        return result
    import mlflow
    import mlflow.sklearn
    from sklearn.model_selection import train_test_split

    from mlsandbox.workloads.trainer import _own_types, _pip_requirements, evaluate, make_pipeline

    logger = get_run_logger()
    y = df[target]
    x = df.drop(columns=[target])
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    with mlflow.start_run(experiment_id=experiment_id, run_name="training-flow") as run:
        mlflow.log_params({"algorithm": algorithm, "seed": seed, "pipeline": "training", **hyperparams})
        pipeline = make_pipeline(x, algorithm, hyperparams, seed)
        pipeline.fit(x_train, y_train)
        metrics = evaluate(pipeline, x_val, y_val)
        mlflow.log_metrics(metrics)
        info = mlflow.sklearn.log_model(
            pipeline,
            name="model",
            signature=mlflow.models.infer_signature(x_val.head(20), pipeline.predict(x_val.head(20))),
            pip_requirements=_pip_requirements(),
            skops_trusted_types=_own_types(pipeline),
        )
    logger.info("run %s: %s", run.info.run_id, {k: round(v, 4) for k, v in metrics.items()})
    return {"run_id": run.info.run_id, "model_uri": info.model_uri, "metrics": metrics}


@task(name="evaluate")
def evaluate_gate(result: dict[str, Any], min_auc: float) -> dict[str, Any]:
    auc = result["metrics"]["val_auc"]
    if auc < min_auc:
        raise ValueError(f"evaluation gate failed: val_auc {auc:.4f} < min_auc {min_auc}")
    get_run_logger().info("evaluation gate passed: val_auc %.4f >= %s", auc, min_auc)
    return result


@task(name="register")
def register(result: dict[str, Any], model_name: str) -> str:
    import mlflow

    mv = mlflow.register_model(result["model_uri"], model_name)
    get_run_logger().info("registered %s version %s", model_name, mv.version)
    return str(mv.version)


@flow(name="training", log_prints=True)
def training(
    bucket: str,
    dataset: str,
    target: str,
    experiment_id: str,
    model_name: str,
    algorithm: str = "gradient_boosting",
    hyperparams: dict[str, Any] | None = None,
    min_auc: float = 0.7,
    seed: int = 0,
    expected_batches: list[str] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Train on every lake batch of a dataset (all of ``expected_batches`` must be there), gate on
    validation AUC, register the model. With ``python``, the training step runs under that interpreter."""
    with _usage():
        df = load_lake(bucket, dataset, expected_batches or [])
        result = train_model(df, target, algorithm, hyperparams or {}, experiment_id, seed, bucket, python)
        evaluate_gate(result, min_auc)
        version = register(result, model_name)
        return {
            "run_id": result["run_id"],
            "model_name": model_name,
            "version": version,
            **result["metrics"],
        }


# ----------------------------------------------------------------------------------------- batch scoring


# Scores a parquet file ($2) with a model ($1) into $3, under a named environment's interpreter.
_SCORE_SCRIPT = """
import sys
import mlflow.sklearn
import pandas as pd
model = mlflow.sklearn.load_model(sys.argv[1])
df = pd.read_parquet(sys.argv[2])
features = df[[c for c in df.columns if c in getattr(model, "feature_names_in_", df.columns)]]
pd.DataFrame({"row": range(len(df)), "score": model.predict_proba(features)[:, 1]}).to_parquet(
    sys.argv[3], index=False
)
"""


def _score(model_uri: str, df: Any, python: str | None) -> Any:
    import pandas as pd

    if python is None:
        import mlflow.sklearn

        model = mlflow.sklearn.load_model(model_uri)
        features = df[[c for c in df.columns if c in getattr(model, "feature_names_in_", df.columns)]]
        return pd.DataFrame({"row": range(len(df)), "score": model.predict_proba(features)[:, 1]})
    with tempfile.TemporaryDirectory(prefix="mlsandbox-scoring-") as tmp:
        src, dst = Path(tmp) / "batch.parquet", Path(tmp) / "scores.parquet"
        df.to_parquet(src, index=False)
        _run_in_environment(python, ["-c", _SCORE_SCRIPT, model_uri, str(src), str(dst)], "scoring")
        return pd.read_parquet(dst)


@flow(name="batch-scoring", log_prints=True)
def batch_scoring(
    bucket: str, dataset: str, batch: str, model_name: str, model_ref: str, python: str | None = None
) -> dict[str, Any]:
    """Score a lake batch with ``models:/<model_name>/<version>`` or ``models:/<model_name>@<alias>``
    (under ``python`` when given)."""
    with _usage():
        return _batch_scoring(bucket, dataset, batch, model_name, model_ref, python)


def _batch_scoring(
    bucket: str, dataset: str, batch: str, model_name: str, model_ref: str, python: str | None
) -> dict[str, Any]:
    import pandas as pd

    logger = get_run_logger()
    sep = "@" if not model_ref.isdigit() else "/"
    s3 = _s3()
    key = f"lake/{dataset}/{batch}.parquet"
    df = pd.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
    out = _score(f"models:/{model_name}{sep}{model_ref}", df, python)
    scores = out["score"]
    buf = io.BytesIO()
    out.to_parquet(buf, index=False)
    out_key = f"scores/{dataset}/{batch}.parquet"
    s3.put_object(Bucket=bucket, Key=out_key, Body=buf.getvalue())
    logger.info("scored %d rows of %s with %s %s -> %s", len(df), key, model_name, model_ref, out_key)
    return {"dataset": out_key, "rows": len(df), "mean_score": float(scores.mean())}


FLOWS = {"ingestion": ingestion, "training": training, "batch-scoring": batch_scoring}
