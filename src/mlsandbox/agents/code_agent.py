"""A code-writing baseline: it profiles the data, writes a pandas + scikit-learn training script into the
episode's workspace, runs it (``run_python``), reads its log, registers the run's model and submits.

The script it writes is what an engineer would: read the dataset from the data lake with boto3, drop
duplicates, impute and scale numeric columns, one-hot encode the others, fit gradient boosting, log the
validation AUC and the model (skops) to the episode's experiment with mlflow, and print the run id.
"""

from __future__ import annotations

import json
from typing import Any

SCRIPT = """\
import io, json, os
import boto3, mlflow, mlflow.sklearn, pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.impute import SimpleImputer
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder

DATASET, TARGET = {dataset!r}, {target!r}
raw = boto3.client("s3").get_object(Bucket=os.environ["MLSANDBOX_BUCKET"], Key=DATASET)["Body"].read()
df = pd.read_parquet(io.BytesIO(raw)) if DATASET.endswith(".parquet") else pd.read_csv(io.BytesIO(raw))
df = df.drop_duplicates().dropna(subset=[TARGET])
y, x = df[TARGET].astype(int), df.drop(columns=[TARGET])
numeric = [c for c in x.columns if pd.api.types.is_numeric_dtype(x[c])]
other = [c for c in x.columns if c not in numeric]
x[other] = x[other].astype("object")
prep = ColumnTransformer([
    ("num", SimpleImputer(strategy="median"), numeric),
    ("cat", Pipeline([("imp", SimpleImputer(strategy="most_frequent")),
                      ("oh", OneHotEncoder(handle_unknown="ignore", sparse_output=False))]), other),
])
model = Pipeline([("prep", prep), ("clf", HistGradientBoostingClassifier(max_iter=200, random_state=0))])
xt, xv, yt, yv = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
model.fit(xt, yt)
auc = roc_auc_score(yv, model.predict_proba(xv)[:, 1])
model.fit(x, y)
mlflow.set_experiment(experiment_id=os.environ["MLSANDBOX_EXPERIMENT_ID"])
with mlflow.start_run(run_name=os.environ.get("MLSANDBOX_RUN_NAME")) as run:
    mlflow.log_metric("val_auc", auc)
    mlflow.sklearn.log_model(model, name="model", serialization_format="skops",
                             skops_trusted_types=__import__("skops.io").io.get_untrusted_types(
                                 data=__import__("skops.io").io.dumps(model)))
print(json.dumps({{"run_id": run.info.run_id, "val_auc": round(auc, 4)}}))
"""


class CodeAgent:
    """See the module docstring."""

    name = "code"

    def __init__(self, seed: int | None = None) -> None:
        self._phase = "inspect"
        self._dataset: str | None = None
        self._model_name = "model"
        self._job: str | None = None
        self._waits = 0

    def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
        result = observation.get("result") or {}
        self._model_name = (result.get("deliverable") or {}).get("register_model_as", "model")
        names = [d["name"] for d in result.get("datasets", [])]
        names.sort(key=lambda n: (not n.endswith(".parquet"), not n.startswith("raw/"), n))
        self._dataset = names[0] if names else None
        self._phase, self._job, self._waits = "inspect", None, 0

    def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        result = observation.get("result") or {}
        action = observation.get("action")
        if self._dataset is None:
            return {"type": "submit"}
        if self._phase == "inspect":
            self._phase = "write"
            return {"type": "check_data_quality", "dataset": self._dataset}
        if self._phase == "write":
            target = ((result.get("profile") or {}).get("target") or {}).get("name")
            if not target:
                return {"type": "submit"}
            self._phase = "run"
            script = SCRIPT.format(dataset=self._dataset, target=target)
            return {"type": "write_file", "path": "train.py", "content": script}
        if self._phase == "run":
            self._phase = "wait"
            return {"type": "run_python", "path": "train.py", "resources": {"cpus": 1, "memory_mb": 2048}}
        if self._phase == "wait":
            if action == "run_python" and observation.get("ok"):
                self._job = result["job_id"]
            if self._job is None:
                return {"type": "submit"}
            state = result.get("state")
            if action == "get_job" and state == "succeeded":
                self._phase = "register"
                return {"type": "get_logs", "target": self._job, "tail": 20}
            if action == "get_job" and state in ("failed", "cancelled"):
                return {"type": "submit"}
            if action == "wait" or self._waits > 20:
                return {"type": "get_job", "job_id": self._job}
            self._waits += 1
            return {"type": "wait", "seconds": 30}
        if self._phase == "register":
            self._phase = "submit"
            for line in reversed(result.get("lines") or []):
                if line.startswith("{") and "run_id" in line:
                    run_id = json.loads(line)["run_id"]
                    return {"type": "register_model", "run_id": run_id, "name": self._model_name}
        return {"type": "submit"}
