"""Named Python environments an episode builds from pinned requirements and runs jobs, flows and
replicas in (uv venvs on local; simulated on sim; refused on kube, where workloads run in their images).

An environment is known by its *key*, a content address of its requirements: building the same
requirements twice gives the same environment (a cache shared by the sandbox's episodes). The names the
agent gives environments are the episode's business; jobs (:class:`~mlsandbox.backends.protocols.jobs.
JobSpec`), flow runs and deployments name an environment by its key.

Support keys: ``environments.build`` (building named environments; scoring a registered model in one,
:meth:`Environments.score`, needs it too).
"""

from __future__ import annotations

from typing import Any, Protocol

from mlsandbox.backends.protocols.common import Model
from mlsandbox.errors import BackendError

DEFAULT_KEY = "default"
"""The key of :meth:`Environments.default`."""


class EnvironmentBuildError(BackendError):
    """The requirements cannot be installed (the resolver's or installer's own message)."""


class ModelScoreError(BackendError):
    """A registered model that cannot be loaded or cannot predict in an environment (the library's own
    error, as the environment's interpreter printed it)."""


class EnvironmentInfo(Model):
    key: str
    """Content address of the environment (its normalised requirements); ``default`` for the default."""
    requirements: list[str]
    """The requirements it was built from, normalised (none for the default)."""
    packages: dict[str, str]
    """Installed distribution -> version (for the default: the workloads' main libraries, as far as the
    backend knows them)."""


class Environments(Protocol):
    def default(self) -> EnvironmentInfo:
        """The environment workloads run in when none is named."""
        ...

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        """Build (or reuse) the environment of ``requirements`` (PEP 508 names with version specifiers;
        what every workload needs is added); :class:`ValueError` for a malformed requirement,
        :class:`EnvironmentBuildError` when they cannot be installed."""
        ...

    def get(self, key: str) -> EnvironmentInfo:
        """The environment ``key`` (built before); :class:`KeyError` for an unknown key."""
        ...

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        """``env`` plus what the model server needs (built once); the default stays the default."""
        ...

    def score(self, key: str, model_name: str, version: str, rows: Any) -> list[float]:
        """The positive class's probability of each row of ``rows`` (a DataFrame of features) by version
        ``version`` of registered model ``model_name``, loaded in environment ``key`` (what a production
        scorer pinned to that environment would answer); :class:`ModelScoreError` with the library's
        error when the model cannot be loaded or cannot predict there."""
        ...


__all__ = ["DEFAULT_KEY", "EnvironmentBuildError", "EnvironmentInfo", "Environments", "ModelScoreError"]
