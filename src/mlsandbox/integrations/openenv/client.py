"""The typed OpenEnv client of the mlsandbox server: ``openenv-core``'s ``EnvClient`` with mlsandbox's types.

.. code-block:: python

    from mlsandbox.integrations.openenv import MLSandboxAction, MLSandboxClient

    with MLSandboxClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=7)
        result = env.step(MLSandboxAction(type="list_datasets"))
        print(result.observation.text, result.reward, result.done)

One client is one WebSocket session, hence its own episodes. ``reset`` takes ``seed``, ``scenario`` (a
built-in id) and ``max_steps``.
"""

from __future__ import annotations

from typing import Any

from mlsandbox.integrations import require
from mlsandbox.integrations.openenv.models import MLSandboxAction, MLSandboxObservation, MLSandboxState

_core = require("openenv.core", "openenv")
StepResult = require("openenv.core.client_types", "openenv").StepResult


class MLSandboxClient(_core.EnvClient):  # type: ignore[name-defined]
    """``EnvClient[MLSandboxAction, MLSandboxObservation, MLSandboxState]``; actions may also be dicts."""

    def _step_payload(self, action: MLSandboxAction | dict[str, Any]) -> dict[str, Any]:
        if isinstance(action, MLSandboxAction):
            return action.model_dump(mode="json", exclude={"metadata"})
        return dict(action)

    def _parse_result(self, payload: dict[str, Any]) -> Any:
        obs = MLSandboxObservation.model_validate(
            {
                **payload.get("observation", {}),
                "reward": payload.get("reward"),
                "done": bool(payload.get("done", False)),
            }
        )
        return StepResult(
            observation=obs, reward=payload.get("reward"), done=bool(payload.get("done", False))
        )

    def _parse_state(self, payload: dict[str, Any]) -> MLSandboxState:
        return MLSandboxState(**payload)


__all__ = ["MLSandboxClient"]
