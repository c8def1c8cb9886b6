"""A real training job: a scikit-learn pipeline on a table in S3, tracked in MLflow.

Run as ``python -m mlsandbox.workloads.trainer --bucket B --key K --target label --algorithm ALGO
--hyperparams '{"C": 0.5}' --experiment-id E --run-name N --seed S``. The environment gives the services:
``MLSANDBOX_S3_URL`` (else ``MLFLOW_S3_ENDPOINT_URL``), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` and
``MLFLOW_TRACKING_URI``. With ``--config-prefix P`` the endpoints and credentials come from the sandbox's
config store instead: Prefect variables ``P + s3_endpoint_url``, ``s3_access_key_id``,
``s3_secret_access_key`` and ``mlflow_tracking_uri`` read from ``PREFECT_API_URL`` (a wrong value there
fails the job with the client's real connection or authentication error).

``mlp`` (a multilayer perceptron trained by SGD with momentum) trains epoch by epoch and prints each
epoch's loss; when the loss stops being finite (a learning rate far too high) the job fails with a
``TrainingDiverged`` error naming the epoch and the learning rate.

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
from collections.abc import Callable
from typing import Any

RESULT_PREFIX = "MLSANDBOX_RESULT "  # the job contract (mlsandbox.workloads.contract); this module imports no mlsandbox code
ALGORITHMS = ("logistic_regression", "random_forest", "gradient_boosting", "mlp")
ESTIMATOR_PARAMETERS: dict[str, frozenset[str]] = {
    "logistic_regression": frozenset(
        [
            "C",
            "class_weight",
            "dual",
            "fit_intercept",
            "intercept_scaling",
            "l1_ratio",
            "max_iter",
            "n_jobs",
            "penalty",
            "random_state",
            "solver",
            "tol",
            "verbose",
            "warm_start",
        ]
    ),
    "random_forest": frozenset(
        [
            "bootstrap",
            "ccp_alpha",
            "class_weight",
            "criterion",
            "max_depth",
            "max_features",
            "max_leaf_nodes",
            "max_samples",
            "min_impurity_decrease",
            "min_samples_leaf",
            "min_samples_split",
            "min_weight_fraction_leaf",
            "monotonic_cst",
            "n_estimators",
            "n_jobs",
            "oob_score",
            "random_state",
            "verbose",
            "warm_start",
        ]
    ),
    "gradient_boosting": frozenset(
        [
            "categorical_features",
            "class_weight",
            "early_stopping",
            "interaction_cst",
            "l2_regularization",
            "learning_rate",
            "loss",
            "max_bins",
            "max_depth",
            "max_features",
            "max_iter",
            "max_leaf_nodes",
            "min_samples_leaf",
            "monotonic_cst",
            "n_iter_no_change",
            "random_state",
            "scoring",
            "tol",
            "validation_fraction",
            "verbose",
            "warm_start",
        ]
    ),
    "mlp": frozenset(
        [
            "activation",
            "alpha",
            "batch_size",
            "beta_1",
            "beta_2",
            "early_stopping",
            "epsilon",
            "hidden_layer_sizes",
            "learning_rate",
            "learning_rate_init",
            "max_fun",
            "max_iter",
            "momentum",
            "n_iter_no_change",
            "nesterovs_momentum",
            "power_t",
            "random_state",
            "shuffle",
            "solver",
            "tol",
            "validation_fraction",
            "verbose",
            "warm_start",
        ]
    ),
}
"""Each algorithm's estimator parameters, spelled as scikit-learn spells them (``get_params()`` of the
estimator :func:`make_estimator` builds, for the pinned scikit-learn; a unit test holds the two equal).
Kept here as data so that validating an action's hyperparameters imports no scikit-learn."""
TASKS = ("binary", "multiclass", "regression", "forecasting", "text", "images")
"""What ``--task`` may say: a 0/1 label (the default), one of several labels, a number, a daily series to
forecast (:mod:`mlsandbox.workloads.forecasting`), labelled documents
(:mod:`mlsandbox.workloads.text_classifier`) or labelled images (:mod:`mlsandbox.workloads.image_classifier`)."""
OWN_LEARNERS = {
    "forecasting": "mlsandbox.workloads.forecasting",
    "text": "mlsandbox.workloads.text_classifier",
    "images": "mlsandbox.workloads.image_classifier",
}
"""The tasks whose splitting, fitting and metrics live in a module of their own (``fit_job``), imported
by name when the task is asked for (each imports nothing from mlsandbox either)."""
OWN_ALGORITHMS = ("seasonal_naive", "linear_svc", "naive_bayes", "cnn")
"""Those modules' algorithms beside the ones above (a unit test holds the lists equal)."""
REGRESSION_PARAMETERS: dict[str, frozenset[str]] = {
    "ridge": frozenset(
        ["alpha", "copy_X", "fit_intercept", "max_iter", "positive", "random_state", "solver", "tol"]
    ),
    "random_forest": ESTIMATOR_PARAMETERS["random_forest"] - {"class_weight"},
    "gradient_boosting": (ESTIMATOR_PARAMETERS["gradient_boosting"] - {"class_weight"}) | {"quantile"},
    "mlp": ESTIMATOR_PARAMETERS["mlp"] | {"loss"},
}
"""The regression task's algorithms and their estimator parameters (Ridge, RandomForestRegressor,
HistGradientBoostingRegressor, MLPRegressor), as :data:`ESTIMATOR_PARAMETERS` for the classifiers."""
CONFIG_KEYS = ("s3_endpoint_url", "s3_access_key_id", "s3_secret_access_key", "mlflow_tracking_uri")


class TrainingDiverged(ArithmeticError):
    """The training loss is no longer a finite number."""


class ConfigStoreError(RuntimeError):
    """The config store cannot be read or lacks a key."""


VALIDATION_FRACTION = 0.2


# ------------------------------------------------------------------------------------ no PyTorch here
# The trainer and the model server train and serve scikit-learn models. When PyTorch is installed in the
# same environment (the ``rl`` extra brings it), saving or loading a model with skops imports it anyway:
# skops lists its trusted types through scikit-learn's ``all_estimators()``, which imports every
# scikit-learn module, the array-API shim that imports ``torch`` included. That costs about 500 MiB per
# process, more than a small machine type has. ``block_torch()`` (called first in each workload's ``main``)
# makes ``import torch`` fail in that process as if it were not installed; scikit-learn and SciPy treat
# that as "no PyTorch".

BLOCKED_IMPORTS = ("torch",)
TORCH_ALGORITHMS = ("cnn",)
"""The algorithms that train with PyTorch: their job is left free to import it (the image task's small
CNN; a unit test holds this equal to :data:`mlsandbox.workloads.image_classifier.TORCH_ALGORITHMS`)."""


def torch_algorithm(workload: str, args: list[str]) -> str | None:
    """The algorithm of a trainer job's command line when it trains with PyTorch (None otherwise): what a
    backend whose trainers have no PyTorch refuses."""
    if workload != "trainer" or "--algorithm" not in args:
        return None
    position = args.index("--algorithm") + 1
    algorithm = args[position] if position < len(args) else ""
    return algorithm if algorithm in TORCH_ALGORITHMS else None


class _ImportBlocker:
    """A meta-path finder that refuses :data:`BLOCKED_IMPORTS` (and leaves ``sys.modules`` untouched)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.split(".", 1)[0] in BLOCKED_IMPORTS:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (not used by this workload)", name=fullname
            )
        return None


def block_torch() -> bool:
    """Make ``import torch`` fail in this process; False (and nothing done) when it is already imported."""
    if any(name in sys.modules for name in BLOCKED_IMPORTS):
        return False
    if not any(isinstance(f, _ImportBlocker) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportBlocker())
    return True


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
    parser.add_argument(
        "--algorithm",
        required=True,
        choices=sorted({*ALGORITHMS, *REGRESSION_PARAMETERS, *OWN_ALGORITHMS}),
    )
    parser.add_argument(
        "--task", default="binary", choices=TASKS, help="what the target is (default: binary)"
    )
    parser.add_argument(
        "--column",
        default=None,
        help="forecasting: the date column; text: the document column; images: the image column",
    )
    parser.add_argument("--hyperparams", default="{}", help="JSON object of estimator parameters")
    parser.add_argument("--experiment-id", required=True)
    parser.add_argument("--run-name", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--config-prefix",
        default=None,
        help="read endpoints and credentials from the config store (Prefect variables with this prefix)",
    )
    args = parser.parse_args(argv)
    hyperparams = json.loads(args.hyperparams)
    if not isinstance(hyperparams, dict):
        parser.error(f"--hyperparams must be a JSON object, got {args.hyperparams!r}")
    args.hyperparams = hyperparams
    return args


# ------------------------------------------------------------------------------------------------ data


def read_config(prefix: str, api_url: str | None = None) -> dict[str, str]:
    """The job's endpoints and credentials from the config store (Prefect variables, over its REST API)."""
    import urllib.error
    import urllib.request

    api = (api_url or os.environ.get("PREFECT_API_URL") or "").rstrip("/")
    if not api:
        raise ConfigStoreError("PREFECT_API_URL is not set: the config store cannot be reached")
    out = {}
    for key in CONFIG_KEYS:
        name = prefix + key
        try:
            with urllib.request.urlopen(f"{api}/variables/name/{name}", timeout=10) as resp:
                value = json.loads(resp.read()).get("value")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise ConfigStoreError(f"config key {name!r} is missing from the config store") from None
            raise
        if value is None:
            raise ConfigStoreError(f"config key {name!r} has no value")
        out[key] = str(value)
    return out


def apply_config(config: dict[str, str]) -> None:
    """Point this process's clients (boto3, MLflow) at what the config store says."""
    os.environ["MLSANDBOX_S3_URL"] = config["s3_endpoint_url"]
    os.environ["AWS_ACCESS_KEY_ID"] = config["s3_access_key_id"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = config["s3_secret_access_key"]
    os.environ["MLFLOW_TRACKING_URI"] = config["mlflow_tracking_uri"]


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
    log(f"reading s3://{bucket}/{key}")
    return parse_table(read_object(bucket, key), key)


def parse_table(data: bytes, key: str) -> Any:
    """An object's bytes as the pandas frame this trainer fits on (the file type from the key's suffix)."""
    import pandas as pd

    name = key.lower()
    if name.endswith((".parquet", ".pq")):
        return pd.read_parquet(io.BytesIO(data))
    if name.endswith((".csv", ".csv.gz")):
        return pd.read_csv(io.BytesIO(data), compression="gzip" if name.endswith(".gz") else None)
    raise ValueError(f"cannot read {key!r}: unsupported file type (expected .csv, .csv.gz, .parquet or .pq)")


def split(table: Any, target: str, seed: int, task: str = "binary") -> tuple[Any, Any, Any, Any]:
    """``x_train, x_val, y_train, y_val``: :data:`VALIDATION_FRACTION` held out, stratified by the label
    (a regression's split is not stratified)."""
    from sklearn.model_selection import train_test_split

    y = table[target]
    x = table.drop(columns=[target])
    stratify = None if task == "regression" else y
    parts = train_test_split(x, y, test_size=VALIDATION_FRACTION, random_state=seed, stratify=stratify)
    return parts[0], parts[1], parts[2], parts[3]


# ----------------------------------------------------------------------------------------------- model


def make_estimator(algorithm: str, hyperparams: dict[str, Any], seed: int, task: str = "binary") -> Any:
    """The estimator with ``random_state=seed`` then the given parameters (sklearn validates the names);
    a regressor for ``task`` regression."""
    if task == "regression":
        return _make_regressor(algorithm, seed).set_params(**hyperparams)
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"algorithm {algorithm!r} does not fit task {task!r} (use one of {', '.join(ALGORITHMS)})"
        )
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    factories = {
        "logistic_regression": lambda: LogisticRegression(max_iter=1000, random_state=seed),
        "random_forest": lambda: RandomForestClassifier(random_state=seed),
        "gradient_boosting": lambda: HistGradientBoostingClassifier(random_state=seed),
        "mlp": lambda: MLPClassifier(
            hidden_layer_sizes=(32,),
            solver="sgd",
            momentum=0.9,
            learning_rate_init=0.01,
            max_iter=30,
            random_state=seed,
        ),
    }
    return factories[algorithm]().set_params(**hyperparams)


def _make_regressor(algorithm: str, seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
    from sklearn.linear_model import Ridge
    from sklearn.neural_network import MLPRegressor

    factories = {
        "ridge": lambda: Ridge(random_state=seed),
        "random_forest": lambda: RandomForestRegressor(random_state=seed),
        "gradient_boosting": lambda: HistGradientBoostingRegressor(random_state=seed),
        "mlp": lambda: MLPRegressor(
            hidden_layer_sizes=(32,),
            solver="sgd",
            momentum=0.9,
            learning_rate_init=0.01,
            max_iter=30,
            random_state=seed,
        ),
    }
    if algorithm not in factories:
        raise ValueError(
            f"algorithm {algorithm!r} does not fit task 'regression' (use one of {', '.join(factories)})"
        )
    return factories[algorithm]()


def make_pipeline(
    features: Any, algorithm: str, hyperparams: dict[str, Any], seed: int, task: str = "binary"
) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = list(features.select_dtypes(include=["number"]).columns)
    categorical = [c for c in features.columns if c not in numeric]
    scale = StandardScaler() if algorithm in ("logistic_regression", "ridge", "mlp") else "passthrough"
    preprocess = ColumnTransformer(
        [("numeric", scale, numeric), ("categorical", OneHotEncoder(handle_unknown="ignore"), categorical)],
        sparse_threshold=0.0,  # dense: HistGradientBoosting does not take sparse input
    )
    estimator = make_estimator(algorithm, hyperparams, seed, task)
    return Pipeline([("preprocess", preprocess), ("model", estimator)])


def fit(pipeline: Any, x_train: Any, y_train: Any, say: Callable[[str], None] = log) -> None:
    """Fit; an ``mlp`` is trained epoch by epoch, its loss printed (through ``say``), divergence stopped
    with an error."""
    import math

    model = pipeline.named_steps["model"]
    kind = type(model).__name__
    if kind not in ("MLPClassifier", "MLPRegressor"):
        pipeline.fit(x_train, y_train)
        return
    preprocess = pipeline.named_steps["preprocess"]
    features = preprocess.fit_transform(x_train)
    classes = {"classes": sorted(set(y_train))} if kind == "MLPClassifier" else {}
    epochs = int(model.max_iter)
    for epoch in range(1, epochs + 1):
        model.partial_fit(features, y_train, **classes)
        loss = float(model.loss_)
        say(f"epoch {epoch}/{epochs} loss={loss:.6g}")
        if not math.isfinite(loss):
            say(
                f"ERROR training diverged at epoch {epoch}: loss is {loss} "
                f"(learning_rate_init={model.learning_rate_init:g}); lower the learning rate"
            )
            raise TrainingDiverged(
                f"loss is {loss} at epoch {epoch} with learning_rate_init={model.learning_rate_init:g}"
            )


def evaluate(pipeline: Any, x_val: Any, y_val: Any, task: str = "binary") -> dict[str, float]:
    """The validation metrics: ``val_auc``, ``val_accuracy``, ``val_log_loss`` of a classifier (and
    ``val_macro_f1`` for ``multiclass``); ``val_rmse``, ``val_mae``, ``val_r2`` of a regressor."""
    from sklearn.metrics import accuracy_score, f1_score, log_loss, roc_auc_score

    if task == "regression":
        return evaluate_regression(pipeline, x_val, y_val)

    proba = pipeline.predict_proba(x_val)
    classes = pipeline.classes_
    predicted = classes[proba.argmax(axis=1)]
    if len(classes) == 2:
        auc = roc_auc_score(y_val, proba[:, 1])
    else:
        auc = roc_auc_score(y_val, proba, multi_class="ovr", labels=classes)
    out = {
        "val_auc": float(auc),
        "val_accuracy": float(accuracy_score(y_val, predicted)),
        "val_log_loss": float(log_loss(y_val, proba, labels=classes)),
    }
    if task == "multiclass":
        out["val_macro_f1"] = float(f1_score(y_val, predicted, average="macro"))
    return out


def evaluate_regression(pipeline: Any, x_val: Any, y_val: Any) -> dict[str, float]:
    import numpy as np

    predicted = np.asarray(pipeline.predict(x_val), dtype=float)
    y = np.asarray(y_val, dtype=float)
    residual = predicted - y
    total = float(np.sum((y - y.mean()) ** 2))
    return {
        "val_rmse": float(np.sqrt(np.mean(residual**2))),
        "val_mae": float(np.mean(np.abs(residual))),
        "val_r2": float(1.0 - np.sum(residual**2) / total) if total > 0 else 0.0,
    }


# ------------------------------------------------------------------------------------------------- run


def train(args: argparse.Namespace, run: Any) -> dict[str, Any]:
    """Load, split, fit, evaluate and log inside the active MLflow ``run``; return the job's result."""
    import mlflow
    import mlflow.sklearn

    if args.task in OWN_LEARNERS:
        return _train_own(args, run)
    mlflow.log_params(
        {"algorithm": args.algorithm, "seed": args.seed, "data": f"s3://{args.bucket}/{args.key}"}
    )
    if args.hyperparams:
        mlflow.log_params(args.hyperparams)

    table = load_table(args.bucket, args.key)
    log(f"loaded {len(table)} rows x {table.shape[1]} columns")
    x_train, x_val, y_train, y_val = split(table, args.target, args.seed, args.task)
    mlflow.log_params({"target": args.target, "features": x_train.shape[1]})
    if args.task != "binary":
        mlflow.log_params({"task": args.task})

    pipeline = make_pipeline(x_train, args.algorithm, args.hyperparams, args.seed, args.task)
    log(f"fitting {args.algorithm} on {len(x_train)} rows ({len(x_val)} held out for validation) ...")
    started = time.perf_counter()
    fit(pipeline, x_train, y_train)
    train_seconds = time.perf_counter() - started
    log(f"fitted in {train_seconds:.2f} s")

    metrics = evaluate(pipeline, x_val, y_val, args.task)
    for name, value in metrics.items():
        log(f"{name}={value:.4f}")
    metrics.update(train_rows=float(len(x_train)), train_seconds=round(train_seconds, 3))
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


def _train_own(args: argparse.Namespace, run: Any) -> dict[str, Any]:
    """A task whose module fits and validates (``fit_job(frame, algorithm, hyperparams, seed, target,
    column, say)`` returns the validation metrics and the model)."""
    import importlib

    import mlflow
    import mlflow.sklearn

    learner = importlib.import_module(OWN_LEARNERS[args.task])
    mlflow.log_params(
        {"algorithm": args.algorithm, "seed": args.seed, "data": f"s3://{args.bucket}/{args.key}"}
    )
    if args.hyperparams:
        mlflow.log_params(args.hyperparams)
    mlflow.log_params({"target": args.target, "task": args.task})
    table = load_table(args.bucket, args.key)
    log(f"loaded {len(table)} rows x {table.shape[1]} columns")
    started = time.perf_counter()
    metrics, model = learner.fit_job(
        table, args.algorithm, args.hyperparams, args.seed, args.target, args.column, log
    )
    train_seconds = time.perf_counter() - started
    log(f"fitted in {train_seconds:.2f} s")
    for name, value in metrics.items():
        log(f"{name}={value:.4f}")
    metrics.update(train_rows=float(len(table)), train_seconds=round(train_seconds, 3))
    mlflow.log_metrics(metrics)
    log("logging model to MLflow ...")
    column = args.column or {"forecasting": "date", "images": "image"}.get(args.task, "text")
    model_info = mlflow.sklearn.log_model(
        model,
        name="model",
        signature=mlflow.models.infer_signature(table[[column]].head(20)),  # rows of that one column
        pip_requirements=_pip_requirements(),
        skops_trusted_types=_own_types(model),
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
    if args.algorithm not in TORCH_ALGORITHMS:
        block_torch()  # saving a skops model would otherwise import PyTorch (see block_torch)
    try:
        if args.config_prefix:
            config = read_config(args.config_prefix)
            apply_config(config)
            log(
                f"config from the config store ({args.config_prefix}*): "
                f"s3={config['s3_endpoint_url']} mlflow={config['mlflow_tracking_uri']}"
            )
        from importlib.metadata import version

        import mlflow

        log(f"starting run {args.run_name or '(unnamed)'} in experiment {args.experiment_id}")
        log(f"scikit-learn {version('scikit-learn')}, Python {sys.version.split()[0]}")
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
