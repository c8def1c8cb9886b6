"""A code-writing baseline: it profiles the data, writes a pandas + scikit-learn training script into the
episode's workspace, runs it (``run_python``), reads its log, registers the run's model and submits.

The script it writes is what an engineer would write after reading the data's profile
(:func:`training_script`): read the dataset from the data lake with boto3, drop duplicates and rows
without a label, clip the numeric columns to robust bounds (outliers), impute them (with missing-value
indicators where the profile shows gaps), one-hot encode the categorical ones, weigh the classes when the
minority class is rare, fit gradient boosting, log the validation AUC and the model (skops) to the
episode's experiment with mlflow, and print the run id; for a ``predictions_file`` goal it also predicts
the holdout's features file and writes the predictions file the goal grades. A job that fails (a deadline, a flaky service) is
retried after reading its log, at most :data:`MAX_ATTEMPTS` times.
"""

from __future__ import annotations

import json
from typing import Any

MAX_ATTEMPTS = 3
RARE_MINORITY = 0.25
"""A minority share under which the script weighs the classes (``class_weight="balanced"``)."""
OUTLIER_RATE = 0.01
"""A share of values beyond the IQR fences over which the script clips a column's extremes."""

_TEMPLATE = """\
import io, json, os
import boto3, mlflow, mlflow.sklearn, numpy as np, pandas as pd
import skops.io
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.impute import SimpleImputer
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder

DATASET, TARGET = {dataset!r}, {target!r}
NUMERIC, CATEGORICAL = {numeric!r}, {categorical!r}
IMPUTE_INDICATORS, CLIP_OUTLIERS, BALANCED = {indicators!r}, {clip!r}, {balanced!r}
raw = boto3.client("s3").get_object(Bucket=os.environ["MLSANDBOX_BUCKET"], Key=DATASET)["Body"].read()
df = pd.read_parquet(io.BytesIO(raw)) if DATASET.endswith(".parquet") else pd.read_csv(io.BytesIO(raw))
df = df.drop_duplicates().dropna(subset=[TARGET])
labels = sorted(df[TARGET].unique(), key=str)
positive = 1 if set(labels) <= {{0, 1, True, False}} else labels[-1]
y = (df[TARGET] == positive).astype(int)
x = df[NUMERIC + CATEGORICAL].copy()
x[NUMERIC] = x[NUMERIC].apply(pd.to_numeric, errors="coerce").astype(float)
x[CATEGORICAL] = x[CATEGORICAL].astype("object")
if CLIP_OUTLIERS:  # robust bounds from the training rows: extreme values are clipped, not dropped
    q1, q3 = x[NUMERIC].quantile(0.25), x[NUMERIC].quantile(0.75)
    low, high = (q1 - 3 * (q3 - q1)).to_dict(), (q3 + 3 * (q3 - q1)).to_dict()
    clip = FunctionTransformer(np.clip, kw_args={{"a_min": [low[c] for c in NUMERIC],
                                                  "a_max": [high[c] for c in NUMERIC]}})
else:
    clip = "passthrough"
numeric = Pipeline([("clip", clip),
                    ("imp", SimpleImputer(strategy="median", add_indicator=IMPUTE_INDICATORS))])
categorical = Pipeline([("imp", SimpleImputer(strategy="most_frequent")),
                        ("oh", OneHotEncoder(handle_unknown="ignore", sparse_output=False))])
prep = ColumnTransformer([("num", numeric, NUMERIC), ("cat", categorical, CATEGORICAL)])
clf = HistGradientBoostingClassifier(max_iter=150, learning_rate=0.05, max_leaf_nodes=15,
                                     class_weight="balanced" if BALANCED else None, random_state=0)
model = Pipeline([("prep", prep), ("clf", clf)])
xt, xv, yt, yv = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
model.fit(xt, yt)
auc = roc_auc_score(yv, model.predict_proba(xv)[:, 1])
print(f"validation AUC {{auc:.4f}} on {{len(yv)}} rows ({{int(yv.sum())}} positive)")
model.fit(x, y)
mlflow.set_experiment(experiment_id=os.environ["MLSANDBOX_EXPERIMENT_ID"])
with mlflow.start_run(run_name=os.environ.get("MLSANDBOX_RUN_NAME")) as run:
    mlflow.log_params({{"rows": len(x), "numeric": len(NUMERIC), "categorical": len(CATEGORICAL),
                       "balanced": BALANCED, "clip_outliers": CLIP_OUTLIERS}})
    mlflow.log_metric("val_auc", auc)
    trusted = skops.io.get_untrusted_types(data=skops.io.dumps(model))
    mlflow.sklearn.log_model(model, name="model", serialization_format="skops", skops_trusted_types=trusted)
PREDICT_FOR, PREDICTIONS_PATH = {predict_for!r}, {predictions_path!r}
if PREDICT_FOR:  # the goal grades a predictions file: predict the holdout's features, one row per id
    raw = boto3.client("s3").get_object(Bucket=os.environ["MLSANDBOX_BUCKET"], Key=PREDICT_FOR)["Body"].read()
    test = pd.read_csv(io.BytesIO(raw))
    xt = test[NUMERIC + CATEGORICAL].copy()
    xt[NUMERIC] = xt[NUMERIC].apply(pd.to_numeric, errors="coerce").astype(float)
    xt[CATEGORICAL] = xt[CATEGORICAL].astype("object")
    proba = model.predict_proba(xt)[:, 1]
    out = pd.DataFrame({{"id": test["id"], "prediction": (proba >= 0.5).astype(int), "probability": proba}})
    os.makedirs(os.path.dirname(PREDICTIONS_PATH) or ".", exist_ok=True)
    out.to_csv(PREDICTIONS_PATH, index=False)
    print(f"wrote {{len(out)}} predictions to {{PREDICTIONS_PATH}}")
print(json.dumps({{"run_id": run.info.run_id, "val_auc": round(auc, 4)}}))
"""


def training_script(
    dataset: str, profile: dict[str, Any], predictions: dict[str, Any] | None = None
) -> str | None:
    """The training script for ``dataset`` given its profile (``check_data_quality``'s); None without a
    target to learn. ``predictions``: the deliverable's ``predictions_file`` (the script then also
    predicts the features file and writes the predictions where the goal reads them)."""
    target = (profile.get("target") or {}).get("name")
    if not target:
        return None
    columns: dict[str, dict[str, Any]] = profile.get("column_profiles") or {}
    numeric, categorical = [], []
    for name, col in columns.items():
        if name == target:
            continue
        dtype = col.get("dtype")
        if dtype in ("int", "float", "bool"):
            numeric.append(name)
        elif dtype == "datetime":
            continue  # a timestamp is not a feature of the model as is
        elif (col.get("distinct") or 0) <= 50:
            categorical.append(name)  # free text and identifiers (many distinct values) are left out
    indicators = any((columns[c].get("missing") or 0) > 0 for c in numeric)
    clip = any(_has_outliers(columns[c]) for c in numeric)
    minority = (profile.get("target") or {}).get("minority_share")
    balanced = minority is not None and minority < RARE_MINORITY
    return _TEMPLATE.format(
        dataset=dataset,
        target=target,
        numeric=numeric,
        categorical=categorical,
        indicators=indicators,
        clip=clip,
        balanced=balanced,
        predict_for=(predictions or {}).get("predict_for"),
        predictions_path=(predictions or {}).get("write_to"),
    )


def _has_outliers(col: dict[str, Any]) -> bool:
    """Whether a numeric column's profile shows more values beyond its IQR fences than a clean spread."""
    rate = col.get("outlier_rate")
    return isinstance(rate, (int, float)) and rate > OUTLIER_RATE


class CodeAgent:
    """See the module docstring."""

    name = "code"

    def __init__(self, seed: int | None = None) -> None:
        self._phase = "inspect"
        self._dataset: str | None = None
        self._model_name = "model"
        self._job: str | None = None
        self._waits = 0
        self._attempts = 0
        self._predictions: dict[str, Any] | None = None

    def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
        result = observation.get("result") or {}
        deliverable = result.get("deliverable") or {}
        self._model_name = deliverable.get("register_model_as", "model")
        self._predictions = deliverable.get("predictions_file")
        names = [d["name"] for d in result.get("datasets", [])]
        names.sort(key=lambda n: (not n.endswith(".parquet"), not n.startswith("raw/"), n))
        self._dataset = names[0] if names else None
        self._phase, self._job, self._waits, self._attempts = "inspect", None, 0, 0

    def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        result = observation.get("result") or {}
        action = observation.get("action")
        if self._dataset is None:
            return {"type": "submit"}
        if self._phase == "inspect":
            self._phase = "write"
            return {"type": "check_data_quality", "dataset": self._dataset}
        if self._phase == "write":
            script = training_script(self._dataset, result.get("profile") or {}, self._predictions)
            if script is None:
                return {"type": "submit"}
            self._phase = "run"
            return {"type": "write_file", "path": "train.py", "content": script}
        if self._phase == "run":
            self._phase, self._job, self._waits = "wait", None, 0
            self._attempts += 1
            return {"type": "run_python", "path": "train.py", "resources": {"cpus": 1, "memory_mb": 2048}}
        if self._phase == "wait":
            if action == "run_python" and observation.get("ok"):
                self._job = result["job_id"]
            if self._job is None:
                return {"type": "submit"}
            state = result.get("state")
            if action == "get_job" and state == "succeeded" and self._predictions is not None:
                return {"type": "submit"}  # the predictions file is the deliverable
            if action == "get_job" and state == "succeeded":
                self._phase = "register"
                return {"type": "get_logs", "target": self._job, "tail": 20}
            if action == "get_job" and state in ("failed", "cancelled"):
                if self._attempts >= MAX_ATTEMPTS:
                    return {"type": "submit"}
                self._phase = "retry"  # read why, then run it again
                return {"type": "get_logs", "target": self._job, "tail": 20}
            if action == "wait" or self._waits > 20:
                return {"type": "get_job", "job_id": self._job}
            self._waits += 1
            return {"type": "wait", "seconds": 30}
        if self._phase == "retry":
            self._phase = "run"
            return {"type": "wait", "seconds": 5}
        if self._phase == "register":
            self._phase = "submit"
            for line in reversed(result.get("lines") or []):
                if line.startswith("{") and "run_id" in line:
                    run_id = json.loads(line)["run_id"]
                    return {"type": "register_model", "run_id": run_id, "name": self._model_name}
        return {"type": "submit"}
