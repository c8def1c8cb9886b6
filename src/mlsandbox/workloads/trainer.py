"""A real training job: a scikit-learn pipeline on a table in S3, tracked in MLflow.

Run as ``python -m mlsandbox.workloads.trainer --bucket B --key K --target label --algorithm ALGO
--hyperparams '{"C": 0.5}' --experiment-id E --run-name N --seed S``. The environment gives the services:
``MLSANDBOX_S3_URL`` (else ``MLFLOW_S3_ENDPOINT_URL``), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` and
``MLFLOW_TRACKING_URI``.

It fails where real code fails: missing values into logistic regression, an unknown target column, an
unknown hyperparameter, an unreadable file all raise the libraries' own errors; the traceback goes to
stderr, the MLflow run (if one was started) is marked FAILED and the exit status is non-zero. On success
the last stdout line is ``MLSANDBOX_RESULT {json}`` (run_id, experiment_id, model_id, metrics): how a job
reports its result on every backend.

Self-contained on purpose (stdlib, boto3, pandas, scikit-learn, mlflow; nothing from mlsandbox), so it
runs in any image; heavy imports are deferred so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import traceback
from typing import Any

RESULT_PREFIX = "MLSANDBOX_RESULT "
ALGORITHMS = ("logistic_regression", "random_forest", "gradient_boosting")
VALIDATION_FRACTION = 0.2


def log(message: str) -> None:
    print(message, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mlsandbox.workloads.trainer",
        description="Train a scikit-learn classifier on a CSV/Parquet object in S3 and log it to MLflow.",
    )
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--key", required=True, help="object key; .csv[.gz] or .parquet/.pq")
    parser.add_argument("--target", required=True, help="name of the label column")
    parser.add_argument("--algorithm", required=True, choices=ALGORITHMS)
    parser.add_argument("--hyperparams", default="{}", help="JSON object of estimator parameters")
    parser.add_argument("--experiment-id", required=True)
    parser.add_argument("--run-name", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    hyperparams = json.loads(args.hyperparams)
    if not isinstance(hyperparams, dict):
        parser.error(f"--hyperparams must be a JSON object, got {args.hyperparams!r}")
    args.hyperparams = hyperparams
    return args


# ------------------------------------------------------------------------------------------------ data


def read_object(bucket: str, key: str) -> bytes:
    import boto3
    from botocore.config import Config

    endpoint = os.environ.get("MLSANDBOX_S3_URL") or os.environ.get("MLFLOW_S3_ENDPOINT_URL")
    config = Config(
        region_name="us-east-1",
        s3={"addressing_style": "path"},
        connect_timeout=5,
        read_timeout=60,
        retries={"max_attempts": 3, "mode": "standard"},
    )
    s3 = boto3.client("s3", endpoint_url=endpoint, config=config)
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def load_table(bucket: str, key: str) -> Any:
    import pandas as pd

    log(f"reading s3://{bucket}/{key}")
    data = read_object(bucket, key)
    name = key.lower()
    if name.endswith((".parquet", ".pq")):
        return pd.read_parquet(io.BytesIO(data))
    if name.endswith((".csv", ".csv.gz")):
        return pd.read_csv(io.BytesIO(data), compression="gzip" if name.endswith(".gz") else None)
    raise ValueError(f"cannot read {key!r}: unsupported file type (expected .csv, .csv.gz, .parquet or .pq)")


# ----------------------------------------------------------------------------------------------- model


def make_estimator(algorithm: str, hyperparams: dict[str, Any], seed: int) -> Any:
    """The estimator with ``random_state=seed`` then the given parameters (sklearn validates the names)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    factories = {
        "logistic_regression": lambda: LogisticRegression(max_iter=1000, random_state=seed),
        "random_forest": lambda: RandomForestClassifier(random_state=seed),
        "gradient_boosting": lambda: HistGradientBoostingClassifier(random_state=seed),
    }
    return factories[algorithm]().set_params(**hyperparams)


def make_pipeline(features: Any, algorithm: str, hyperparams: dict[str, Any], seed: int) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = list(features.select_dtypes(include=["number"]).columns)
    categorical = [c for c in features.columns if c not in numeric]
    scale = StandardScaler() if algorithm == "logistic_regression" else "passthrough"
    preprocess = ColumnTransformer(
        [("numeric", scale, numeric), ("categorical", OneHotEncoder(handle_unknown="ignore"), categorical)],
        sparse_threshold=0.0,  # dense: HistGradientBoosting does not take sparse input
    )
    estimator = make_estimator(algorithm, hyperparams, seed)
    return Pipeline([("preprocess", preprocess), ("model", estimator)])


def evaluate(pipeline: Any, x_val: Any, y_val: Any) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

    proba = pipeline.predict_proba(x_val)
    classes = pipeline.classes_
    predicted = classes[proba.argmax(axis=1)]
    if len(classes) == 2:
        auc = roc_auc_score(y_val, proba[:, 1])
    else:
        auc = roc_auc_score(y_val, proba, multi_class="ovr", labels=classes)
    return {
        "val_auc": float(auc),
        "val_accuracy": float(accuracy_score(y_val, predicted)),
        "val_log_loss": float(log_loss(y_val, proba, labels=classes)),
    }


# ------------------------------------------------------------------------------------------------- run


def train(args: argparse.Namespace, run: Any) -> dict[str, Any]:
    """Load, split, fit, evaluate and log inside the active MLflow ``run``; return the job's result."""
    import mlflow
    import mlflow.sklearn
    from sklearn.model_selection import train_test_split

    mlflow.log_params(
        {"algorithm": args.algorithm, "seed": args.seed, "data": f"s3://{args.bucket}/{args.key}"}
    )
    if args.hyperparams:
        mlflow.log_params(args.hyperparams)

    table = load_table(args.bucket, args.key)
    log(f"loaded {len(table)} rows x {table.shape[1]} columns")
    y = table[args.target]
    x = table.drop(columns=[args.target])
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=VALIDATION_FRACTION, random_state=args.seed, stratify=y
    )
    mlflow.log_params({"target": args.target, "features": x.shape[1]})

    pipeline = make_pipeline(x, args.algorithm, args.hyperparams, args.seed)
    log(f"fitting {args.algorithm} on {len(x_train)} rows ({len(x_val)} held out for validation) ...")
    started = time.perf_counter()
    pipeline.fit(x_train, y_train)
    train_seconds = time.perf_counter() - started
    log(f"fitted in {train_seconds:.2f} s")

    metrics = evaluate(pipeline, x_val, y_val)
    metrics.update(train_rows=float(len(x_train)), train_seconds=round(train_seconds, 3))
    for name in ("val_auc", "val_accuracy", "val_log_loss"):
        log(f"{name}={metrics[name]:.4f}")
    mlflow.log_metrics(metrics)

    log("logging model to MLflow ...")
    model_info = mlflow.sklearn.log_model(
        pipeline,
        name="model",
        signature=mlflow.models.infer_signature(x_val.head(20), pipeline.predict(x_val.head(20))),
        pip_requirements=_pip_requirements(),
        skops_trusted_types=_own_types(pipeline),
    )
    return {
        "run_id": run.info.run_id,
        "experiment_id": str(run.info.experiment_id),
        "model_id": model_info.model_id,
        "model_uri": model_info.model_uri,
        "metrics": metrics,
    }


def _own_types(model: Any) -> list[str]:
    """The types skops will not load by default in the model this job has just built (so it trusts them)."""
    import skops.io

    return sorted(skops.io.get_untrusted_types(data=skops.io.dumps(model)))


def _pip_requirements() -> list[str]:
    """Pinned from the running environment (mlflow's own inference spawns a process and costs seconds)."""
    from importlib.metadata import version

    return [f"{dist}=={version(dist)}" for dist in ("mlflow", "scikit-learn", "pandas", "numpy")]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import mlflow

        log(f"starting run {args.run_name or '(unnamed)'} in experiment {args.experiment_id}")
        # A failure inside the block ends the run as FAILED before the exception propagates.
        with mlflow.start_run(experiment_id=args.experiment_id, run_name=args.run_name) as run:
            result = train(args, run)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        return 1
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
