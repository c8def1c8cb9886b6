"""Named Python environments an episode builds from pinned requirements and runs jobs, flows and
replicas with (uv venvs on local; on kube the images' own interpreter; simulated on sim)."""

from __future__ import annotations

from typing import Protocol

from mlsandbox.backends.protocols.common import Model
from mlsandbox.errors import BackendError


class EnvironmentBuildError(BackendError):
    """The requirements cannot be installed (the resolver's or installer's own message)."""


class EnvironmentInfo(Model):
    key: str
    """Content address of the environment (its normalised requirements)."""
    requirements: list[str]
    packages: dict[str, str]
    """Installed distribution -> version."""


class Environments(Protocol):
    def default(self) -> EnvironmentInfo:
        """The environment workloads run with when none is named."""
        ...

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        """Build (or reuse) an environment; :class:`ValueError` for a malformed requirement,
        :class:`EnvironmentBuildError` when they cannot be installed."""
        ...

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        """``env`` plus what the model server needs (built once)."""
        ...
