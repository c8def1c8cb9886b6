"""Runtime operations on the real local services: S3, tracking and registry, trainer jobs end to end."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from mlsandbox.backends.protocols import JobSpec, JobStatus

pytestmark = pytest.mark.services

ROWS = 4000
SEED = 7
TRAINER_TIMEOUT_S = 600.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_table(rows: int = ROWS, seed: int = 0, nan_rate: float = 0.0) -> pd.DataFrame:
    """Six features (two categorical) and a binary label with a learnable signal."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({f"x{i}": rng.normal(size=rows) for i in range(4)})
    frame["color"] = rng.choice(["red", "green", "blue"], size=rows)
    frame["size"] = rng.choice(["s", "m", "l"], size=rows)
    logit = 1.5 * frame["x0"] - frame["x1"] + 0.8 * (frame["color"] == "red")
    frame["label"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    if nan_rate:
        frame.loc[rng.random(rows) < nan_rate, "x0"] = np.nan
    return frame


def wait_done(runtime: Any, job_id: str, timeout_s: float = TRAINER_TIMEOUT_S) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status: JobStatus = runtime.jobs.get(job_id)
        if status.state not in ("queued", "running"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not done after {timeout_s} s:\n{runtime.jobs.logs(job_id)}")


# ---------------------------------------------------------------------------------------------- S3


def test_object_store_round_trip(runtime: Any) -> None:
    store = runtime.object_store
    bucket = unique("ops")
    assert not store.bucket_exists(bucket)
    store.create_bucket(bucket)
    store.create_bucket(bucket)  # idempotent for its owner
    try:
        assert store.bucket_exists(bucket)
        assert bucket in store.list_buckets()
        store.put_object(bucket, "raw/a.csv", b"a,b\n1,2\n")
        store.put_object(bucket, "raw/b.csv", b"x")
        store.put_object(bucket, "other.txt", b"y")
        assert store.get_object(bucket, "raw/a.csv") == b"a,b\n1,2\n"
        assert store.object_exists(bucket, "raw/b.csv")
        assert not store.object_exists(bucket, "raw/missing.csv")
        listed = store.list_objects(bucket, prefix="raw/")
        assert [(o.key, o.size) for o in listed] == [("raw/a.csv", 8), ("raw/b.csv", 1)]
        assert abs(listed[0].last_modified - time.time()) < 300
        with pytest.raises(KeyError):
            store.get_object(bucket, "raw/missing.csv")
        with pytest.raises(KeyError):
            store.get_object(unique("no-such-bucket"), "k")
        with pytest.raises(KeyError):
            store.list_objects(unique("no-such-bucket"))
        with pytest.raises(ValueError):
            store.create_bucket("Not_A_Valid_Bucket")
    finally:
        store.delete_bucket(bucket)  # with its objects
    assert not store.bucket_exists(bucket)
    store.delete_bucket(bucket)  # absent: no error


# -------------------------------------------------------------------------------------- trainer jobs


@pytest.fixture(scope="module")
def trained(runtime: Any) -> Iterator[dict[str, Any]]:
    """One good and one NaN-poisoned trainer job, run concurrently on uploaded CSVs."""
    store, tracking = runtime.object_store, runtime.tracking
    bucket = unique("train")
    store.create_bucket(bucket)
    clean_csv = make_table().to_csv(index=False).encode()
    store.put_object(bucket, "clean.csv", clean_csv)
    store.put_object(bucket, "nans.csv", make_table(nan_rate=0.05).to_csv(index=False).encode())
    experiment_id = tracking.create_experiment(unique("ops-exp"))
    label = ("test", unique("ops"))
    jobs = {"good": "clean.csv", "nans": "nans.csv"}
    ids = {name: unique(f"train-{name}") for name in jobs}
    for name, key in jobs.items():
        args = ["--bucket", bucket, "--key", key, "--target", "label", "--algorithm", "logistic_regression"]
        args += ["--hyperparams", '{"C": 0.5}', "--experiment-id", experiment_id]
        args += ["--run-name", name, "--seed", str(SEED)]
        spec = JobSpec(
            job_id=ids[name],
            workload="trainer",
            args=args,
            cpus=1,
            memory_mb=2048,
            labels=dict([label]),
            timeout_s=TRAINER_TIMEOUT_S,
        )
        runtime.jobs.submit(spec)
    statuses = {name: wait_done(runtime, job_id) for name, job_id in ids.items()}
    yield {
        "clean": pd.read_csv(io.BytesIO(clean_csv)),  # what the job read
        "experiment_id": experiment_id,
        "ids": ids,
        "statuses": statuses,
        "logs": {name: runtime.jobs.logs(job_id, tail=0) for name, job_id in ids.items()},
    }
    runtime.jobs.cleanup(label)
    store.delete_bucket(bucket)
    tracking.delete_experiment(experiment_id)


def test_trainer_job_succeeds_and_reports(runtime: Any, trained: dict[str, Any]) -> None:
    status, log = trained["statuses"]["good"], trained["logs"]["good"]
    assert status.state == "succeeded", log
    assert status.exit_code == 0
    assert status.cpu_seconds > 0
    assert f"loaded {ROWS} rows x 7 columns" in log
    assert "val_auc=" in log
    result = status.result
    assert result["experiment_id"] == trained["experiment_id"]
    run = runtime.tracking.get_run(result["run_id"])
    assert run.status == "FINISHED"
    assert run.metrics["val_auc"] == pytest.approx(result["metrics"]["val_auc"])
    assert run.metrics["val_auc"] > 0.7
    assert run.metrics["train_rows"] == ROWS * 0.8
    assert run.params["algorithm"] == "logistic_regression"
    assert run.params["C"] == "0.5"
    assert result["run_id"] in [r.run_id for r in runtime.tracking.list_runs(trained["experiment_id"])]


def test_register_and_load_the_trained_model(runtime: Any, trained: dict[str, Any]) -> None:
    run_id = trained["statuses"]["good"].result["run_id"]
    name = unique("ops-model")
    tracking = runtime.tracking
    try:
        version = tracking.register_model(run_id, name)
        assert (version.name, version.version, version.status, version.run_id) == (name, "1", "READY", run_id)
        assert [v.version for v in tracking.list_model_versions(name)] == ["1"]

        model = tracking.load_model(name, version.version)
        clean: pd.DataFrame = trained["clean"]
        features, target = clean.drop(columns=["label"]), clean["label"]
        _, x_val, _, y_val = train_test_split(
            features, target, test_size=0.2, random_state=SEED, stratify=target
        )
        proba = model.predict_proba(x_val)
        assert proba.shape == (len(x_val), 2)
        # The loaded model is the one the job evaluated: same validation AUC.
        logged_auc = tracking.get_run(run_id).metrics["val_auc"]
        assert roc_auc_score(y_val, proba[:, 1]) == pytest.approx(logged_auc, abs=1e-9)
    finally:
        tracking.delete_registered_model(name)
    with pytest.raises(KeyError):
        tracking.load_model(name, "1")


def test_trainer_fails_for_real_on_nans(runtime: Any, trained: dict[str, Any]) -> None:
    status, log = trained["statuses"]["nans"], trained["logs"]["nans"]
    assert status.state == "failed"
    assert status.exit_code == 1
    assert status.result == {}
    assert "Traceback (most recent call last)" in log
    assert "ValueError: Input X contains NaN" in log
    assert "LogisticRegression does not accept missing values encoded as NaN natively" in log
    runs = {r.tags.get("mlflow.runName"): r for r in runtime.tracking.list_runs(trained["experiment_id"])}
    assert runs["nans"].status == "FAILED"
    with pytest.raises(KeyError, match="no model"):
        runtime.tracking.register_model(runs["nans"].run_id, unique("never"))


def test_tracking_lookups_of_missing_things_raise_key_error(runtime: Any) -> None:
    with pytest.raises(KeyError):
        runtime.tracking.get_run("0" * 32)
    with pytest.raises(KeyError):
        runtime.tracking.register_model("0" * 32, unique("never"))
    with pytest.raises(KeyError):
        runtime.tracking.delete_registered_model(unique("never"))
