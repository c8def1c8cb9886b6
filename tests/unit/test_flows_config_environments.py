"""The flows, config and environment actions through the real Gateway on in-memory capabilities
(:mod:`source_fakes`), and the backends' pieces that need no service: the kube flow placement, the
refusals of named environments on kube, the local environments' keys."""

from __future__ import annotations

from typing import Any

import pytest
from source_fakes import MemoryConfig, MemoryFlows, MemoryRuntime  # tests/unit is on sys.path
from tests.helpers import ENDPOINTS, err, ok

from mlsandbox.backends.common.config_store import job_config_of
from mlsandbox.backends.common.prefect import no_environments
from mlsandbox.backends.kube.environments import KubeEnvironments
from mlsandbox.backends.kube.flows import FLOW_COMPONENT, FLOW_SANDBOX_LABEL, KubeFlows
from mlsandbox.backends.local.venvs import LocalEnvironments, interpreter
from mlsandbox.backends.protocols import DEFAULT_KEY, JOB_CONFIG_KEYS, REFERENCES
from mlsandbox.errors import Unsupported
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.packs.config.handlers import ConfigState, episode_prefix
from mlsandbox.gateway.packs.flows.handlers import USAGE_PREFIX, FlowsState
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Scenario

PIPELINES = "pipeline-failure-upstream"


def _pipelines(rt: MemoryRuntime) -> Gateway:
    data = load_builtin(PIPELINES).model_dump(mode="json")
    data["pipelines"]["start_runs"] = []
    gw = Gateway(rt, Scenario.model_validate(data), seed=2)  # type: ignore[arg-type]
    gw.start()
    return gw


INGEST = {"type": "run_flow", "name": "ingestion", "parameters": {"dataset": "customers", "batch": "x"}}
TRAIN = {
    "type": "run_flow",
    "name": "training",
    "parameters": {"dataset": "customers", "model_name": "churn"},
}


# ---------------------------------------------------------------------------------------------- flows


def test_flows_open_with_the_episode_label_and_close_with_it() -> None:
    rt = MemoryRuntime()
    gw = _pipelines(rt)
    assert isinstance(rt.flows, MemoryFlows)
    assert len(rt.flows.opened) == 1 and rt.flows.runs == {}  # opened at start: the scenario has pipelines
    started = ok(gw, INGEST)
    assert started["flow_run_id"] == "fr-1" and started["state"] == "Scheduled"
    (opened,) = rt.flows.opened
    assert opened.labels == dict([gw.state.job_label])
    run = rt.flows.runs["run-1"]
    assert run.view.parameters["bucket"] == gw.state.bucket and run.view.name.startswith("fr-1-")
    assert err(gw, {"type": "retry_flow_run", "flow_run_id": "fr-1"})["code"] == "conflict"
    gw.close()
    assert opened.closed and run.view.state_type == "CANCELLED" and run.deleted


def test_a_completed_run_is_accounted_and_its_usage_charged_once_per_execution() -> None:
    rt = MemoryRuntime()
    gw = _pipelines(rt)
    assert isinstance(rt.flows, MemoryFlows)
    ok(gw, INGEST)
    key = "lake/customers/x.parquet"
    rt.object_store.put_object(gw.state.bucket, key, b"12345")  # what the flow wrote
    rt.flows.finish("run-1", "COMPLETED", logs=[f"{USAGE_PREFIX}2.5", "done"])
    view = ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})
    price = gw.scenario.budget.credits_per_cpu_second
    assert view["state"] == "Completed" and view["cpu_seconds"] == 2.5
    assert view["credits"] == pytest.approx(2.5 * price)
    assert gw.state.datasets[key].size == 5 and gw.state.datasets[key].origin == "flow:ingestion"
    assert gw.state.charges.flow_cpu_seconds == 2.5
    ok(gw, {"type": "list_flows"})  # refreshed again: nothing charged twice
    assert gw.state.charges.flow_cpu_seconds == 2.5
    assert err(gw, {"type": "retry_flow_run", "flow_run_id": "fr-1"})["code"] == "conflict"
    gw.close()


def test_a_retried_run_is_charged_again_for_its_new_execution() -> None:
    rt = MemoryRuntime()
    gw = _pipelines(rt)
    assert isinstance(rt.flows, MemoryFlows)
    ok(gw, INGEST)
    rt.flows.finish("run-1", "FAILED", logs=[f"{USAGE_PREFIX}1.0"])
    assert ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})["state"] == "Failed"
    retried = ok(gw, {"type": "retry_flow_run", "flow_run_id": "fr-1"})
    assert retried["previous_state"] == "Failed" and retried["state"] == "AwaitingRetry"
    rt.flows.finish("run-1", "COMPLETED", logs=[f"{USAGE_PREFIX}3.0"], run_count=2)
    rt.object_store.put_object(gw.state.bucket, "lake/customers/x.parquet", b"1")
    view = ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})
    assert view["cpu_seconds"] == 4.0 and gw.episode.pack_state(FlowsState).runs["fr-1"].usage_lines == 2
    gw.close()


def test_a_run_without_its_usage_line_is_not_charged_after_the_wait() -> None:
    rt = MemoryRuntime()
    gw = _pipelines(rt)
    assert isinstance(rt.flows, MemoryFlows)
    ok(gw, INGEST)
    rt.flows.finish("run-1", "CRASHED")
    ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})
    rt.clock.sleep(31.0)  # longer than a usage line may take to arrive
    ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})
    assert gw.state.charges.flow_cpu_seconds == 0.0
    gw.close()


def test_flows_in_a_named_environment_and_the_refusals() -> None:
    rt = MemoryRuntime()
    gw = _pipelines(rt)
    assert isinstance(rt.flows, MemoryFlows)
    e = err(gw, {**TRAIN, "environment": "nope"})
    assert e["code"] == "not_found" and "create_environment" in e["message"]
    ok(gw, {"type": "create_environment", "name": "old", "requirements": ["scikit-learn==1.5.2"]})
    e = err(gw, {**INGEST, "environment": "old"})
    assert e["code"] == "invalid_parameters" and "training" in e["message"]
    assert ok(gw, {**TRAIN, "environment": "old"})["environment"] == "old"
    key = gw.state.environments["old"].key
    assert rt.flows.runs["run-1"].environment == key  # the runtime is given the key, not a path
    gw.close()

    refusing = MemoryRuntime()
    refusing.flows = MemoryFlows(no_environments("kube", "runs are Jobs of the trainer image"))
    gw = _pipelines(refusing)
    ok(gw, {"type": "create_environment", "name": "old", "requirements": ["scikit-learn==1.5.2"]})
    e = err(gw, {**TRAIN, "environment": "old"})
    assert e["code"] == "unsupported" and e["details"]["capability"] == "flows.environment"
    assert ok(gw, TRAIN)["flow_run_id"] == "fr-1"  # the default environment is fine
    gw.close()


def test_kube_flow_placement_is_a_job_of_the_work_pool_with_the_episode_labels() -> None:
    flows = KubeFlows(
        None,  # type: ignore[arg-type]  # placement needs no cluster
        api_url="http://127.0.0.1:4200/api",
        sandbox="sb1",
        namespace="sbx-mlsandbox-sb1",
        work_pool="kube-pool",
        image="mlsandbox/trainer:0.1.0",
        workload_endpoints=ENDPOINTS,
    )
    placement = flows.placement({"mlsandbox.world.episode": "ep-1"})
    assert placement.work_pool == "kube-pool"
    assert placement.env["MLFLOW_TRACKING_URI"] == ENDPOINTS.mlflow_url
    variables = placement.job_variables
    assert variables["namespace"] == "sbx-mlsandbox-sb1" and variables["image"] == "mlsandbox/trainer:0.1.0"
    assert variables["labels"] == {
        "mlsandbox.world.episode": "ep-1",
        "app.kubernetes.io/component": FLOW_COMPONENT,
        FLOW_SANDBOX_LABEL: "sb1",
    }
    handle = flows.open("ep-1", {"mlsandbox.world.episode": "ep-1"})
    with pytest.raises(Unsupported) as info:
        handle.run("training", {}, name="fr-1", environment="0123456789abcdef")
    assert info.value.capability == "flows.environment"


# --------------------------------------------------------------------------------------------- config


def test_config_scope_lives_with_the_episode_and_references_resolve_through_the_store() -> None:
    rt = MemoryRuntime()
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3)  # type: ignore[arg-type]
    gw.start()
    prefix = episode_prefix(gw.episode)
    assert prefix is not None and rt.config.scopes == {prefix}
    assert {n.removeprefix(prefix) for n in rt.config.names(prefix)} == set(JOB_CONFIG_KEYS)
    shown = ok(gw, {"type": "get_config"})
    secret = MemoryConfig.JOB_CONFIG["s3_secret_access_key"]
    assert shown["config"]["s3_secret_access_key"] == "****" + secret[-4:]
    assert shown["config"]["s3_endpoint_url"] == "memory://s3"
    assert shown["references"] == sorted(REFERENCES)

    rt.config.set(prefix + "s3_endpoint_url", "http://127.0.0.1:1")  # a wrong endpoint
    fixed = ok(gw, {"type": "set_config", "key": "s3_endpoint_url", "value": "@service:minio"})
    assert fixed["value"] == "memory://s3" and rt.config.get(prefix + "s3_endpoint_url") == "memory://s3"
    e = err(gw, {"type": "set_config", "key": "s3_endpoint_url", "value": "@service:redis"})
    assert e["code"] == "invalid_parameters" and "@service:mlflow" in e["message"]
    e = err(gw, {"type": "set_config", "key": "mlflow_tracking_uri", "value": "mlflow:5000"})
    assert (
        e["code"] == "invalid_parameters"
        and rt.config.get(prefix + "mlflow_tracking_uri") == "memory://mlflow"
    )
    gw.close()
    assert rt.config.values == {} and rt.config.scopes == set()
    assert gw.episode.pack_state(ConfigState).prefix is None


class _NoConfig(MemoryRuntime):
    @property  # type: ignore[override]
    def config(self) -> Any:
        raise Unsupported("config", "memory", "no config store in this fake")

    @config.setter
    def config(self, value: Any) -> None:
        pass


def test_without_a_config_store_the_config_actions_are_unsupported() -> None:
    rt = _NoConfig()
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3)  # type: ignore[arg-type]
    gw.start()
    assert episode_prefix(gw.episode) is None  # jobs take their endpoints from their environment
    e = err(gw, {"type": "get_config"})
    assert e["code"] == "unsupported" and e["details"]["capability"] == "config"
    gw.close()


def test_the_job_config_of_endpoints() -> None:
    config = job_config_of(ENDPOINTS)
    assert tuple(config) == JOB_CONFIG_KEYS
    assert config["s3_endpoint_url"] == ENDPOINTS.s3_url
    assert config["s3_secret_access_key"] == ENDPOINTS.s3_secret_key


# --------------------------------------------------------------------------------------- environments


def test_environment_actions_go_through_the_runtime() -> None:
    rt = MemoryRuntime()
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3)  # type: ignore[arg-type]
    gw.start()
    made = ok(gw, {"type": "create_environment", "name": "old", "requirements": ["scikit-learn==1.5.2"]})
    assert made["packages"] == {"scikit-learn": "1.5.2"}
    listed = ok(gw, {"type": "list_environments"})["environments"]
    assert [e["name"] for e in listed] == ["default", "old"]
    assert listed[0]["packages"] == {"scikit-learn": "9.9.9"}  # the runtime's default, not this process
    assert (
        err(gw, {"type": "create_environment", "name": "old", "requirements": ["numpy"]})["code"]
        == "conflict"
    )
    e = err(gw, {"type": "create_environment", "name": "bad", "requirements": ["nothing-such==1"]})
    assert e["code"] == "environment_build_failed" and "No solution found" in e["message"]
    assert ok(gw, {"type": "list_flows"})["runs"] == []
    assert isinstance(rt.flows, MemoryFlows) and rt.flows.opened == []  # no pipelines: flows never opened
    gw.close()


def test_kube_named_environments_need_the_sandboxs_object_store() -> None:
    rt = MemoryRuntime(environments=KubeEnvironments())
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3)  # type: ignore[arg-type]
    gw.start()
    e = err(gw, {"type": "create_environment", "name": "old", "requirements": ["scikit-learn==1.5.2"]})
    assert e["code"] == "unsupported" and e["details"]["capability"] == "environments.build"
    assert "old" not in gw.state.environments
    listed = ok(gw, {"type": "list_environments"})["environments"]
    assert [e["name"] for e in listed] == ["default"]
    gw.close()
    kube = KubeEnvironments()
    assert kube.get(DEFAULT_KEY) == kube.default()
    with pytest.raises(KeyError):
        kube.get("0123456789abcdef")
    with pytest.raises(Unsupported):
        kube.for_serving(kube.default().model_copy(update={"key": "0123456789abcdef"}))


def test_local_environments_resolve_keys_only() -> None:
    envs = LocalEnvironments()
    default = envs.default()
    assert default.key == DEFAULT_KEY and "scikit-learn" in default.packages
    assert envs.get(DEFAULT_KEY) == default and envs.for_serving(default) == default
    for key in ("0123456789abcdef", "../../etc", "", "default2"):
        with pytest.raises(KeyError):
            envs.get(key)
        with pytest.raises(KeyError):
            interpreter(key)
