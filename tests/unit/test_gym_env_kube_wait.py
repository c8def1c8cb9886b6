"""A kube env whose sandbox has a service restarting (the last episode's fault scaled it back at its end)
waits for it, within a bound, instead of refusing the next episode at once."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.env import gym_env
from mlsandbox.errors import NotRunningError


class RestartingBackend:
    """A kube backend whose services come back after ``ready_after`` checks (never, when None)."""

    kind = "kube"

    def __init__(self, ready_after: int | None) -> None:
        self.ready_after = ready_after
        self.checks = 0

    def is_alive(self) -> bool:
        self.checks += 1
        return self.ready_after is not None and self.checks > self.ready_after

    def runtime(self) -> Any:
        return "the runtime"


def _env(backend: RestartingBackend) -> gym_env.MLSandboxEnv:
    env = gym_env.MLSandboxEnv.__new__(gym_env.MLSandboxEnv)
    env._backend = backend  # type: ignore[assignment]
    env._runtime = None
    env._start_sandbox = False
    env.sandbox_name = "demo"
    return env


def test_the_env_waits_for_a_restarting_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gym_env.time, "sleep", lambda s: None)
    backend = RestartingBackend(ready_after=3)
    assert _env(backend)._ensure_runtime() == "the runtime"
    assert backend.checks == 4


def test_the_env_says_so_when_the_services_do_not_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gym_env, "KUBE_READY_WAIT_S", 0.05)
    monkeypatch.setattr(gym_env.time, "sleep", lambda s: None)
    backend = RestartingBackend(ready_after=None)
    with pytest.raises(NotRunningError, match="mlsandbox cluster status"):
        _env(backend)._ensure_runtime()
    assert backend.checks > 1
