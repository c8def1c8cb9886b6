"""The OpenEnv pieces that need no sandbox: the manifest, the types, the app's routes, the extra check."""

from __future__ import annotations

import importlib

import pytest
import yaml
from fastapi.testclient import TestClient
from integration_helpers import ROOT

from mlsandbox.errors import ScenarioError
from mlsandbox.gateway.packs.core.actions import CheckDataQuality
from mlsandbox.integrations import MissingExtra, require
from mlsandbox.integrations.openenv import MLSandboxAction, MLSandboxEnvironment, create_openenv_app
from mlsandbox.integrations.openenv.smoke import main as smoke

pytestmark = pytest.mark.integrations


def test_manifest_names_the_app_and_the_app_answers_without_a_sandbox() -> None:
    manifest = yaml.safe_load((ROOT / "openenv.yaml").read_text())
    assert manifest["runtime"] == "fastapi" and manifest["port"] == 8000
    module, _, attr = manifest["app"].partition(":")
    app = getattr(importlib.import_module(module), attr)
    paths = {r.path for r in app.routes}
    assert {"/reset", "/step", "/state", "/schema", "/metadata", "/health", "/ws", "/mcp"} <= paths
    assert smoke() == 0


def test_action_type_is_the_only_transport_requirement() -> None:
    a = MLSandboxAction.from_model(CheckDataQuality(dataset="raw/customers.csv"))
    assert a.as_action() == {"type": "check_data_quality", "dataset": "raw/customers.csv"}
    loose = MLSandboxAction(type="no_such_action", anything=[1, 2])  # judged by the gateway, not here
    assert loose.as_action() == {"type": "no_such_action", "anything": [1, 2]}
    with pytest.raises(ValueError, match="type"):
        MLSandboxAction(dataset="raw/customers.csv")


def test_no_episode_and_bad_reset_parameters_need_no_sandbox() -> None:
    env = MLSandboxEnvironment()
    obs = env.step({"type": "list_datasets"})
    assert obs.done and obs.error is not None and obs.error.code == "no_episode" and obs.reward == 0.0
    with pytest.raises(ValueError, match=r"unknown reset parameters \['colour'\]"):
        env.reset(colour="red")
    with pytest.raises(ValueError, match="seed must be an integer"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="max_steps"):
        env.reset(max_steps=0)
    client = TestClient(create_openenv_app(sandbox="nothing-runs-here"), raise_server_exceptions=False)
    r = client.post("/reset", json={"seed": 1})
    assert r.status_code == 500  # OpenEnv's route: the sandbox is not running
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'"):
        create_openenv_app(scenario="nope")


def test_a_missing_extra_names_the_pip_install() -> None:
    with pytest.raises(MissingExtra, match=r"pip install 'mlsandbox\[ray\]'"):
        require("no_such_module_for_this_test", "ray")
