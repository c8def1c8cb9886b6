"""Backends as plug-ins: discovery, typed configs, a broken plug-in reported (not fatal), the CLI's
``--backend`` from the registry, and tools marked with what a backend refuses."""

from __future__ import annotations

import json
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlsandbox.backends import registry as R
from mlsandbox.backends.protocols import Backend, BackendType, Support
from mlsandbox.cli.main import app
from mlsandbox.errors import ConfigError
from mlsandbox.gateway.registry import ActionPack, PackError, get_catalog
from mlsandbox.gateway.tools import action_json_schema, tool_specs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    """Entry points of the group as a test installs them (a module written to a temporary path)."""
    (tmp_path / "fake_backend_plugin.py").write_text(
        textwrap.dedent(
            """
            from typing import Literal
            from mlsandbox.backends.protocols import BackendConfig, BackendType

            class FakeConfig(BackendConfig):
                type: Literal["fake"] = "fake"
                size: int = 1

            class FakeBackend:
                def __init__(self, config):
                    self.config = config
                    self.kind = "fake"
                    self.name = config.name

            FAKE = BackendType("fake", "a backend of this test", FakeConfig, FakeBackend)
            NOT_A_TYPE = object()
            MISNAMED = BackendType("other", "named otherwise", FakeConfig, FakeBackend)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    eps: list[EntryPoint] = []
    monkeypatch.setattr(R, "_plugin_entry_points", lambda: list(eps))
    R.reset()
    yield eps
    R.reset()
    sys.modules.pop("fake_backend_plugin", None)


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=R.ENTRY_POINT_GROUP)


def test_builtin_backends_are_registered_and_configured_by_their_typed_model() -> None:
    assert R.backend_names()[:2] == ("local", "kube")
    local = R.get_backend("local", "reg-test")
    assert isinstance(local, Backend)
    assert (local.kind, local.name) == ("local", "reg-test")
    kube = R.get_backend("kube", "reg-test", control_namespace="cn", image="img:1")
    assert (kube.kind, kube.name) == ("kube", "reg-test")
    assert kube.namespace == "sbx-cn-reg-test"  # type: ignore[attr-defined]
    assert kube.image == "img:1"  # type: ignore[attr-defined]
    for bt in R.backend_types().values():
        assert bt.origin == "builtin" and bt.description
        assert bt.config.model_fields["type"].default == bt.name


def test_the_package_declares_its_backends_as_entry_points() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"][R.ENTRY_POINT_GROUP]
    assert declared == R.BUILTIN_BACKENDS


def test_unknown_backend_and_bad_config_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown backend 'nomad'; backends: local, kube"):
        R.get_backend("nomad", "x")
    with pytest.raises(ConfigError, match=r"invalid config for the kube backend: bogus: Extra inputs"):
        R.get_backend("kube", "x", bogus=1)


def test_a_plugin_backend_is_found_and_a_broken_one_is_reported_not_fatal(
    plugins: list[EntryPoint],
) -> None:
    plugins += [
        _ep("fake", "fake_backend_plugin:FAKE"),
        _ep("missing", "no_such_module_anywhere:X"),
        _ep("wrong", "fake_backend_plugin:NOT_A_TYPE"),
        _ep("misnamed", "fake_backend_plugin:MISNAMED"),
        _ep("local", "fake_backend_plugin:FAKE"),
        _ep("Bad Name", "fake_backend_plugin:FAKE"),
    ]
    assert R.backend_names() == ("local", "kube", "sim", "fake", "missing", "wrong", "misnamed")
    fake = R.get_backend("fake", "sbx", size=3)
    assert fake.config.size == 3 and fake.name == "sbx"  # type: ignore[attr-defined]
    types = R.backend_types()  # loads every plug-in: the broken ones are left out
    assert sorted(types) == ["fake", "kube", "local", "sim"]
    assert types["fake"].origin == "plugin:fake"
    broken = {b.name: b.error for b in R.broken_backends()}
    assert set(broken) == {"missing", "wrong", "misnamed", "local", "Bad Name"}
    assert "cannot be loaded: ModuleNotFoundError" in broken["missing"]
    assert "expected a BackendType, got object" in broken["wrong"]
    assert "named 'misnamed' but its backend 'other'" in broken["misnamed"]
    assert "already registered" in broken["local"]
    with pytest.raises(ValueError, match=r"backend 'missing' is not available: .*ModuleNotFoundError"):
        R.get_backend("missing", "x")
    assert R.backend_names() == ("local", "kube", "sim", "fake")  # what failed to load is no longer offered
    assert isinstance(R.backend_type("fake"), BackendType)


def test_cli_commands_take_the_backend_from_the_registry() -> None:
    runner = CliRunner()
    for command in ("up", "down", "status", "run"):
        out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert out.exit_code == 0, out.output
        assert "local | kube" in out.output, command
    bad = runner.invoke(app, ["status", "--backend", "nomad"], env={"COLUMNS": "200"})
    assert bad.exit_code == 2
    assert "unknown backend 'nomad'; backends: local, kube" in bad.output
    # A sandbox that does not exist: exit 1 naming it (nothing started, no LocalBackend in the CLI).
    out = runner.invoke(app, ["status", "--backend", "local", "--name", "reg-never-up", "--json"])
    assert out.exit_code == 1, out.output
    assert "no sandbox named 'reg-never-up'" in out.output


def test_tools_mark_or_omit_what_a_backend_refuses() -> None:
    support = Support(backend="tiny", unsupported={"environments.build": "no venvs here", "tracking": "none"})
    specs = {s["name"]: s for s in tool_specs(support)}
    assert specs["create_environment"]["description"].startswith(
        "[unsupported on the tiny backend (environments.build): no venvs here] "
    )
    assert specs["search_runs"]["description"].startswith("[unsupported on the tiny backend (tracking)")
    assert not specs["list_environments"]["description"].startswith("[")
    assert not specs["submit"]["description"].startswith("[")
    kept = {s["name"] for s in tool_specs(support, omit_unsupported=True)}
    assert "create_environment" not in kept and "list_runs" not in kept and "submit" in kept
    assert len(kept) == len(specs) - sum(s["description"].startswith("[") for s in specs.values())
    schema = action_json_schema(support, omit_unsupported=True)
    assert len(schema["oneOf"]) == len(kept)
    marked = action_json_schema(support)
    assert marked["$defs"]["CreateEnvironment"]["description"].startswith("[unsupported on the tiny")
    assert tool_specs(Support(backend="all")) == tool_specs()


def test_cli_tools_backend_marks_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlsandbox.backends.local import backend as local_backend

    monkeypatch.setattr(
        local_backend.LocalBackend,
        "support",
        lambda self: Support(backend="local", unsupported={"environments.build": "no uv here"}),
    )
    runner = CliRunner()
    out = runner.invoke(app, ["tools", "-f", "anthropic", "--backend", "local"])
    assert out.exit_code == 0, out.output
    tools = {t["name"]: t for t in json.loads(out.output)}
    assert tools["create_environment"]["description"].startswith("[unsupported on the local backend")
    out = runner.invoke(app, ["tools", "--backend", "local", "--omit-unsupported"])
    assert out.exit_code == 0, out.output
    assert "create_environment" not in {t["function"]["name"] for t in json.loads(out.output)}
    bad = runner.invoke(app, ["tools", "--omit-unsupported"])
    assert bad.exit_code == 2 and "needs --backend" in bad.output


def test_each_action_declares_its_capability_with_its_model() -> None:
    from mlsandbox.gateway.packs.core.actions import ListDatasets
    from mlsandbox.gateway.registry import PackAction, _check_pack

    bare = ActionPack("x", (ListDatasets,), __name__)  # type: ignore[arg-type]
    with pytest.raises(PackError, match="expected PackAction declarations"):
        _check_pack(bare, "test")
    pack = _check_pack(ActionPack("x", (PackAction(ListDatasets, capability="object_store"),), __name__), "t")
    assert pack.capabilities == {"list_datasets": "object_store"}
    assert get_catalog().capability("create_environment") == "environments.build"
    assert get_catalog().capability("submit") is None
