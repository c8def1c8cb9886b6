"""The trainer's pieces without services: arguments, pipelines, real library errors, self-containment."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlsandbox.workloads import trainer

TRAINER_SOURCE = Path(trainer.__file__)


def table(rows: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x0": rng.normal(size=rows), "x1": rng.normal(size=rows)})
    frame["color"] = rng.choice(["red", "green", "blue"], size=rows)
    logit = 2.0 * frame["x0"] + (frame["color"] == "red") * 1.5
    frame["label"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    return frame


def test_parse_args_reads_hyperparameters() -> None:
    argv = "--bucket b --key k.csv --target label --algorithm random_forest --experiment-id 1 --seed 7"
    args = trainer.parse_args([*argv.split(), "--hyperparams", '{"n_estimators": 5}'])
    assert (args.algorithm, args.hyperparams, args.seed, args.run_name) == (
        "random_forest",
        {"n_estimators": 5},
        7,
        None,
    )


def test_parse_args_rejects_unknown_algorithm_and_non_object_hyperparams() -> None:
    base = ["--bucket", "b", "--key", "k", "--target", "t", "--experiment-id", "1"]
    with pytest.raises(SystemExit):
        trainer.parse_args([*base, "--algorithm", "xgboost"])
    with pytest.raises(SystemExit):
        trainer.parse_args([*base, "--algorithm", "random_forest", "--hyperparams", "[1]"])


SMALL = {
    "logistic_regression": {},
    "random_forest": {"n_estimators": 20},
    "gradient_boosting": {"max_iter": 20},
    "mlp": {"max_iter": 20},
}


@pytest.mark.parametrize("algorithm", trainer.ALGORITHMS)
def test_each_algorithm_fits_and_is_evaluated(algorithm: str) -> None:
    frame = table()
    features, target = frame.drop(columns=["label"]), frame["label"]
    pipeline = trainer.make_pipeline(features, algorithm, SMALL[algorithm], seed=0)
    trainer.fit(pipeline, features[:300], target[:300])
    metrics = trainer.evaluate(pipeline, features[300:], target[300:])
    assert set(metrics) == {"val_auc", "val_accuracy", "val_log_loss"}
    assert metrics["val_auc"] > 0.7


def test_seed_and_hyperparameters_reach_the_estimator() -> None:
    pipeline = trainer.make_pipeline(table(), "random_forest", {"n_estimators": 7}, seed=3)
    model = pipeline.named_steps["model"]
    assert (model.n_estimators, model.random_state) == (7, 3)


def test_unknown_hyperparameter_is_sklearns_own_error() -> None:
    with pytest.raises(
        ValueError, match="Invalid parameter 'n_estimator' for estimator RandomForestClassifier"
    ):
        trainer.make_estimator("random_forest", {"n_estimator": 5}, seed=0)


def test_nans_reach_logistic_regression_unchanged() -> None:
    frame = table()
    frame.loc[::10, "x0"] = np.nan
    features, target = frame.drop(columns=["label"]), frame["label"]
    with pytest.raises(ValueError, match="Input X contains NaN"):
        trainer.make_pipeline(features, "logistic_regression", {}, seed=0).fit(features, target)
    # Gradient boosting takes missing values natively: the fix an engineer would reach for.
    trainer.make_pipeline(features, "gradient_boosting", SMALL["gradient_boosting"], seed=0).fit(
        features, target
    )


def test_unsupported_file_type_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainer, "read_object", lambda bucket, key: b"{}")
    with pytest.raises(ValueError, match="unsupported file type"):
        trainer.load_table("bucket", "data.json")


def test_csv_and_parquet_are_read_by_suffix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    frame = table(rows=50)
    parquet = tmp_path / "t.parquet"
    frame.to_parquet(parquet)
    payloads = {"t.csv": frame.to_csv(index=False).encode(), "t.parquet": parquet.read_bytes()}
    monkeypatch.setattr(trainer, "read_object", lambda bucket, key: payloads[key])
    for key in payloads:
        pd.testing.assert_frame_equal(trainer.load_table("bucket", key), frame, check_dtype=False)


def test_result_line_is_the_documented_prefix() -> None:
    from mlsandbox.workloads import contract

    line = trainer.RESULT_PREFIX + json.dumps({"run_id": "r"})
    assert line.startswith("MLSANDBOX_RESULT ")
    assert trainer.RESULT_PREFIX == contract.RESULT_PREFIX
    assert contract.parse_result(f"x\n{line}\n") == {"run_id": "r"}


def test_self_contained_and_lazy() -> None:
    """No mlsandbox imports (it runs in any image); importing it loads none of the heavy libraries."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(TRAINER_SOURCE.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not {m for m in imported if m.startswith("mlsandbox")}
    probe = (
        "import sys, mlsandbox.workloads.trainer as t; "
        "print(sorted(m for m in ('mlflow', 'sklearn', 'pandas', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    help_text = subprocess.run(
        [sys.executable, "-m", "mlsandbox.workloads.trainer", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--hyperparams" in help_text.stdout


def test_mlp_trains_epoch_by_epoch_and_logs_each_loss(capsys: pytest.CaptureFixture[str]) -> None:
    frame = table()
    x, y = frame.drop(columns=["label"]), frame["label"]
    pipeline = trainer.make_pipeline(x, "mlp", {"max_iter": 5}, seed=0)
    trainer.fit(pipeline, x, y)
    losses = [
        float(line.rsplit("=", 1)[1]) for line in capsys.readouterr().out.splitlines() if "loss=" in line
    ]
    assert len(losses) == 5 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert trainer.evaluate(pipeline, x, y)["val_auc"] > 0.7


def test_mlp_with_a_huge_learning_rate_diverges_with_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    frame = table()
    x, y = frame.drop(columns=["label"]), frame["label"]
    pipeline = trainer.make_pipeline(x, "mlp", {"learning_rate_init": 1e6}, seed=0)
    with pytest.raises(trainer.TrainingDiverged, match="learning_rate_init=1e\\+06"):
        trainer.fit(pipeline, x, y)
    out = capsys.readouterr().out
    assert "ERROR training diverged at epoch" in out and "lower the learning rate" in out
    assert "loss=1" in out  # the growing losses were printed before it stopped


def test_config_store_is_read_over_prefects_rest_api() -> None:
    """A stand-in for Prefect's ``GET /variables/name/{name}`` (the trainer uses the stdlib only)."""
    import http.server
    import threading

    values = {f"p-{k}": f"value-{k}" for k in trainer.CONFIG_KEYS}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.rsplit("/", 1)[-1]
            if name not in values:
                self.send_response(404)
                self.end_headers()
                return
            body = json.dumps({"name": name, "value": values[name]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{server.server_address[1]}/api"
    try:
        config = trainer.read_config("p-", api)
        assert config == {k: f"value-{k}" for k in trainer.CONFIG_KEYS}
        del values["p-s3_secret_access_key"]
        with pytest.raises(trainer.ConfigStoreError, match="'p-s3_secret_access_key' is missing"):
            trainer.read_config("p-", api)
    finally:
        server.shutdown()


def test_estimator_parameters_are_scikit_learns() -> None:
    """The table the action schema validates hyperparameter names against is the estimators' own."""
    from mlsandbox.workloads.trainer import ALGORITHMS, ESTIMATOR_PARAMETERS, make_estimator

    assert set(ESTIMATOR_PARAMETERS) == set(ALGORITHMS)
    for algorithm in ALGORITHMS:
        assert ESTIMATOR_PARAMETERS[algorithm] == set(
            make_estimator(algorithm, {}, 0).get_params(deep=False)
        ), algorithm


def test_train_model_takes_scikit_learn_names_and_refuses_others() -> None:
    import pytest
    from pydantic import ValidationError

    from mlsandbox.gateway.packs.core.actions import RetryJob, TrainModel

    ok = TrainModel(
        dataset="raw/a.csv", algorithm="logistic_regression", hyperparams={"C": 0.1, "max_iter": 50}
    )
    assert ok.hyperparams == {"C": 0.1, "max_iter": 50}
    with pytest.raises(ValidationError, match=r"unknown hyperparameter.*learning_rat"):
        TrainModel(dataset="raw/a.csv", algorithm="gradient_boosting", hyperparams={"learning_rat": 0.1})
    with pytest.raises(ValidationError, match="n_estimators"):
        RetryJob(job_id="job-1", changes={"algorithm": "mlp", "hyperparams": {"n_estimators": 3}})
