"""Python environments on the kube backend: workloads run in their images' interpreter.

Named environments (uv venvs built from pinned requirements on local) would need an image per set of
requirements, which this backend does not build: :meth:`KubeEnvironments.build` refuses with
:class:`~mlsandbox.errors.Unsupported` (``environments.build``). The default environment is the trainer
image's own; its package versions are fixed when the image is built and are not inspected here.
"""

from __future__ import annotations

from typing import Any

from mlsandbox.backends.protocols.environments import DEFAULT_KEY, EnvironmentInfo
from mlsandbox.errors import Unsupported

BACKEND = "kube"
REASON = "workloads run in their images' interpreter: named environments exist on the local backend only"
UNSUPPORTED: dict[str, str] = {"environments.build": REASON}


class KubeEnvironments:
    """The :class:`~mlsandbox.backends.protocols.Environments` of the kube backend: the default only."""

    def default(self) -> EnvironmentInfo:
        return EnvironmentInfo(key=DEFAULT_KEY, requirements=[], packages={})

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        raise Unsupported("environments.build", BACKEND, REASON)

    def get(self, key: str) -> EnvironmentInfo:
        if key == DEFAULT_KEY:
            return self.default()
        raise KeyError(f"environment {key!r} does not exist on the kube backend")

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        if env.key == DEFAULT_KEY:
            return env
        raise Unsupported("environments.build", BACKEND, REASON)

    def score(self, key: str, model_name: str, version: str, rows: Any) -> list[float]:
        raise Unsupported("environments.build", BACKEND, REASON)


__all__ = ["REASON", "UNSUPPORTED", "KubeEnvironments"]
