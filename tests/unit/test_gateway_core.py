"""The gateway core without services: Unsupported as an ``unsupported`` observation, audit and clock
through the runtime."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.protocols.runtime import random_episode_id
from mlsandbox.errors import ActionError, Unsupported
from mlsandbox.gateway import Gateway
from mlsandbox.scenario import load_builtin


class MemoryAudit:
    def __init__(self) -> None:
        self.records: dict[str, list[dict[str, Any]]] = {}

    def append(self, episode_id: str, record: dict[str, Any]) -> None:
        self.records.setdefault(episode_id, []).append(record)

    def read(self, episode_id: str) -> list[dict[str, Any]]:
        return list(self.records.get(episode_id, []))

    def location(self, episode_id: str) -> str | None:
        return None

    def episodes(self) -> list[str]:
        return list(self.records)


class NoJobs:
    """No job is ever submitted in these tests: the pool only asks for what runs (nothing)."""

    def list(self, label: Any = None) -> list[Any]:
        return []

    def cleanup(self, label: Any) -> None:
        pass


class RefusingRuntime:
    """A runtime whose fault control (service health, logs, restarts) this backend refuses."""

    backend = "fake"
    sandbox = "fake-sandbox"

    def __init__(self) -> None:
        self.clock = RealClock()
        self.audit = MemoryAudit()
        self.jobs = NoJobs()

    @property
    def faults(self) -> Any:
        raise Unsupported("faults", "fake", "this fake has no services to control")

    def new_episode_id(self, seed: int) -> str:
        return random_episode_id(seed)


def test_backend_call_maps_unsupported_to_an_unsupported_error() -> None:
    gw = Gateway(RefusingRuntime(), load_builtin("tabular-quality-basic"), seed=1)  # type: ignore[arg-type]

    def refuse() -> None:
        raise Unsupported("serving.scale", "fake", "replicas are fixed here")

    with pytest.raises(ActionError) as info:
        gw.episode.backend_call(refuse)
    assert info.value.code == "unsupported"
    assert "serving.scale" in info.value.message
    assert info.value.details == {
        "capability": "serving.scale",
        "backend": "fake",
        "reason": "replicas are fixed here",
    }


def test_an_unsupported_capability_is_an_error_observation_and_is_audited() -> None:
    rt = RefusingRuntime()
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=1)  # type: ignore[arg-type]
    assert gw.state.sandbox == "fake-sandbox"  # from the runtime when not given
    res = gw.step({"type": "get_service_health", "service": "minio"})
    obs = res.observation
    assert obs["ok"] is False
    assert obs["error"]["code"] == "unsupported"
    assert obs["error"]["details"]["capability"] == "faults"
    assert "faults is not supported on the fake backend" in obs["error"]["message"]
    assert res.info["error"] == "unsupported"
    records = rt.audit.read(gw.state.episode_id)
    assert [r["event"] for r in records] == ["step"]
    assert records[0]["observation"]["error"]["code"] == "unsupported"
    assert records[0]["t"] > 1e9
    assert gw.audit_location is None


def test_unsupported_raised_by_a_handler_outside_backend_call_is_an_observation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gw = Gateway(RefusingRuntime(), load_builtin("tabular-quality-basic"), seed=1)  # type: ignore[arg-type]

    def handler(_gw: Any, _a: Any) -> dict[str, Any]:
        raise Unsupported("sources", "fake", "no source servers")

    monkeypatch.setitem(gw._packs.handlers, "list_datasets", handler)
    obs = gw.step({"type": "list_datasets"}).observation
    assert obs["error"]["code"] == "unsupported"
    assert obs["error"]["details"]["capability"] == "sources"


def test_an_unexpected_backend_exception_is_a_backend_error_observation_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler failing with an exception nobody turned into an agent's error (a backend's own
    exception, a plug-in's bug) gives a ``backend_error`` observation; step() never raises it."""
    gw = Gateway(RefusingRuntime(), load_builtin("tabular-quality-basic"), seed=1)  # type: ignore[arg-type]

    def handler(_gw: Any, _a: Any) -> dict[str, Any]:
        raise NotImplementedError("the plug-in forgot this")

    monkeypatch.setitem(gw._packs.handlers, "list_datasets", handler)
    res = gw.step({"type": "list_datasets"})
    assert res.observation["ok"] is False
    assert res.observation["error"]["code"] == "backend_error"
    assert (
        "list_datasets failed: NotImplementedError: the plug-in forgot this"
        in res.observation["error"]["message"]
    )
    assert res.info["error"] == "backend_error"
    assert not res.terminated
