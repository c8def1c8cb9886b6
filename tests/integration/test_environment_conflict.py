"""Named Python environments: real uv builds, real resolution errors, jobs in an environment, and a model
saved under one scikit-learn failing to load under another with the library's own error."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from tests.helpers import ok

from mlsandbox.backends.local import venvs
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Budget
from mlsandbox.workloads.contract import endpoint_env

pytestmark = pytest.mark.services

OLD_SKLEARN = "1.5.2"
LOAD = "import sys, mlflow.sklearn; mlflow.sklearn.load_model(sys.argv[1]); print('loaded')"


def _until_done(gw: Gateway, job: str) -> dict[str, Any]:
    deadline = time.monotonic() + 900
    while gw.state.jobs[job].state in ("queued", "running") and time.monotonic() < deadline:
        ok(gw, {"type": "wait", "seconds": 20})
    return ok(gw, {"type": "get_job", "job_id": job})


def _load(python: str, uri: str, runtime: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(endpoint_env(**runtime.endpoints.model_dump()))
    return subprocess.run([python, "-c", LOAD, uri], capture_output=True, text=True, env=env, timeout=300)


def test_environments_conflicting_versions_and_resolution_errors(runtime: Any, sandbox: Any) -> None:
    sc = load_builtin("tabular-quality-basic")
    # Generous limits: a job's first run in a fresh environment compiles its bytecode (slow on a busy host).
    sc = sc.model_copy(update={"max_steps": 100, "budget": Budget(credits=2000, max_job_seconds=900)})
    gw = Gateway(runtime, sc, seed=3, sandbox=sandbox.name)
    gw.start()
    try:
        created = ok(
            gw,
            {
                "type": "create_environment",
                "name": "sklearn-15",
                "requirements": [f"scikit-learn=={OLD_SKLEARN}"],
            },
        )
        assert created["packages"]["scikit-learn"] == OLD_SKLEARN
        listed = ok(gw, {"type": "list_environments"})["environments"]
        assert [e["name"] for e in listed] == ["default", "sklearn-15"]
        assert listed[0]["packages"]["scikit-learn"] != OLD_SKLEARN

        obs = gw.step(
            {"type": "create_environment", "name": "broken", "requirements": ["scikit-learn==0.0.999"]}
        ).observation
        assert obs["error"]["code"] == "environment_build_failed"
        assert (
            "scikit-learn==0.0.999" in obs["error"]["message"]
            and "No solution found" in obs["error"]["message"]
        )
        obs = gw.step(
            {
                "type": "create_environment",
                "name": "url",
                "requirements": ["scikit-learn @ https://example.com/x.whl"],
            }
        ).observation
        assert obs["error"]["code"] == "invalid_parameters"
        obs = gw.step(
            {
                "type": "train_model",
                "dataset": "raw/customers.csv",
                "algorithm": "gradient_boosting",
                "environment": "nope",
            }
        ).observation
        assert obs["error"]["code"] == "not_found" and "create_environment" in obs["error"]["message"]

        train = {"type": "train_model", "dataset": "raw/customers.parquet", "algorithm": "gradient_boosting"}
        ok(gw, {**train, "environment": "sklearn-15"})
        ok(gw, train)
        old, new = _until_done(gw, "job-1"), _until_done(gw, "job-2")
        assert old["state"] == "succeeded", old.get("log_tail")
        assert new["state"] == "succeeded", new.get("log_tail")
        ok(gw, {"type": "register_model", "run_id": old["run_id"], "name": "churn-old"})
        ok(gw, {"type": "register_model", "run_id": new["run_id"], "name": "churn-new"})
        env_python = str(venvs.interpreter(gw.state.environments["sklearn-15"].key))
        uri_old = f"models:/{gw.state.registry_name('churn-old')}/1"
        uri_new = f"models:/{gw.state.registry_name('churn-new')}/1"

        # Each model loads where it was made ...
        assert _load(env_python, uri_old, runtime).returncode == 0
        same = _load(sys.executable, uri_new, runtime)
        assert same.returncode == 0, same.stderr[-2000:]
        # ... but the current release's model does not load under the old release: the library's error.
        cross = _load(env_python, uri_new, runtime)
        assert cross.returncode != 0
        last = cross.stderr.strip().splitlines()[-1]
        assert last.startswith(
            ("skops.io.exceptions.", "AttributeError", "ModuleNotFoundError", "ValueError")
        ), last
    finally:
        gw.close()
