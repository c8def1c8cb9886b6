"""Tracking and registry actions over the real MLflow server, isolated per episode."""

from __future__ import annotations

from typing import Any

import pytest
from mlflow import MlflowClient
from tests.helpers import err, ok

from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services


def _run(client: MlflowClient, gw: Gateway, name: str, algorithm: str, auc: float, loss: float) -> str:
    run = client.create_run(gw.state.experiment_id, run_name=name)
    client.log_param(run.info.run_id, "algorithm", algorithm)
    client.log_metric(run.info.run_id, "val_auc", auc)
    client.log_metric(run.info.run_id, "val_log_loss", loss)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def _version(client: MlflowClient, gw: Gateway, name: str, run_id: str) -> str:
    full = gw.state.registry_name(name)
    if not client.search_registered_models(f"name = '{full}'"):
        client.create_registered_model(full)
    run = client.get_run(run_id)
    mv = client.create_model_version(full, f"{run.info.artifact_uri}/model", run_id=run_id)
    gw.state.registered.append((name, str(mv.version)))  # the episode cleans it up on close
    return str(mv.version)


@pytest.fixture()
def episodes(runtime: Any, sandbox: Any) -> Any:
    scenario = load_builtin("tabular-quality-basic")
    a = Gateway(runtime, scenario, seed=1, sandbox=sandbox.name)
    b = Gateway(runtime, scenario, seed=1, sandbox=sandbox.name)
    a.start()
    b.start()
    yield a, b
    a.close()
    b.close()


def test_tracking_actions_are_real_and_isolated_per_episode(episodes: Any, sandbox: Any) -> None:
    a, b = episodes
    url = sandbox.endpoints().mlflow_url
    client = MlflowClient(tracking_uri=url, registry_uri=url)
    a1 = _run(client, a, "job-1", "random_forest", 0.81, 0.45)
    a2 = _run(client, a, "job-2", "logistic_regression", 0.86, 0.40)
    a3 = _run(client, a, "job-3", "random_forest", 0.78, 0.50)
    b1 = _run(client, b, "job-1", "random_forest", 0.99, 0.10)

    found = ok(
        a,
        {
            "type": "search_runs",
            "filter": "params.algorithm = 'random_forest'",
            "order_by": ["metrics.val_auc DESC"],
        },
    )
    assert [r["run_id"] for r in found["runs"]] == [a1, a3]  # b's better run is not visible
    best = ok(a, {"type": "search_runs", "order_by": ["metrics.val_auc DESC"], "max_results": 1})
    assert [r["run_id"] for r in best["runs"]] == [a2]
    bad = err(a, {"type": "search_runs", "filter": "metrics.val_auc >>> 1"})
    assert bad["code"] == "invalid_parameters"

    run = ok(a, {"type": "get_run", "run_id": a2})
    assert run["metrics"]["val_auc"] == 0.86 and run["params"] == {"algorithm": "logistic_regression"}
    assert err(a, {"type": "get_run", "run_id": b1})["code"] == "not_found"

    cmp = ok(a, {"type": "compare_runs", "run_ids": [a1, a2, a3]})
    assert cmp["differing_params"] == ["algorithm"]
    assert cmp["best_run_by_metric"] == {"val_auc": a2, "val_log_loss": a2}
    assert cmp["metrics"]["val_auc"][a3] == 0.78
    assert err(a, {"type": "compare_runs", "run_ids": [a1, b1]})["code"] == "not_found"

    assert _version(client, a, "churn", a1) == "1"
    assert _version(client, a, "churn", a2) == "2"
    _version(client, b, "churn", b1)
    moved = ok(a, {"type": "set_model_alias", "name": "churn", "version": 1, "alias": "production"})
    assert moved["aliases"] == ["production"] and moved["previous_version"] is None
    moved = ok(a, {"type": "set_model_alias", "name": "churn", "version": 2, "alias": "production"})
    assert moved["previous_version"] == 1
    ok(a, {"type": "set_model_alias", "name": "churn", "version": 1, "alias": "staging"})
    versions = ok(a, {"type": "get_model_versions", "name": "churn"})["versions"]
    assert [(v["version"], v["aliases"], v["run_id"]) for v in versions] == [
        (1, ["staging"], a1),
        (2, ["production"], a2),
    ]
    # The real registry agrees; the other episode's model of the same name is untouched.
    mv = client.get_model_version_by_alias(a.state.registry_name("churn"), "production")
    assert mv.version == "2"
    (b_version,) = ok(b, {"type": "get_model_versions", "name": "churn"})["versions"]
    assert b_version["aliases"] == [] and b_version["run_id"] == b1
    assert (
        err(a, {"type": "set_model_alias", "name": "churn", "version": 9, "alias": "staging"})["code"]
        == "not_found"
    )
    assert err(a, {"type": "get_model_versions", "name": "fraud"})["code"] == "not_found"
    ok(a, {"type": "delete_model_alias", "name": "churn", "alias": "staging"})
    assert err(a, {"type": "delete_model_alias", "name": "churn", "alias": "staging"})["code"] == "not_found"
    assert client.get_model_version(a.state.registry_name("churn"), "1").aliases == []
