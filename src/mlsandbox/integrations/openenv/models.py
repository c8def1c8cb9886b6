"""The OpenEnv wire types of mlsandbox: pydantic models derived from ``openenv-core``'s own base classes.

- :class:`MLSandboxAction` is one action of the catalog, flat as the gateway takes it:
  ``MLSandboxAction(type="check_data_quality", dataset="raw/customers.csv")``. Its JSON Schema (``GET
  /schema``) lists every action of the catalog, plug-in packs included, with its parameters. The transport
  only requires a string ``type``; the parameters are checked by the gateway against the catalog, so an
  unknown action or a wrong parameter is an error observation with a penalty, as in the in-process env.
- :class:`MLSandboxObservation` is the gateway's :class:`~mlsandbox.gateway.observations.Observation` (its
  fields ``step``, ``ok``, ``action``, ``result``, ``error``, ``budget`` come from that one model: it is a
  subclass of both it and OpenEnv's ``Observation``), its rendering as text for a language model, the
  per-step ``info`` (reward components and vector; the grade and metrics at the last step), and OpenEnv's
  ``reward`` and ``done``.
- :class:`MLSandboxState` is the episode's state as ``GET /state`` and the WebSocket ``state`` message give it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.gateway.observations import Observation, ObservationError
from mlsandbox.integrations import require

_types = require("openenv.core.env_server.types", "openenv")
Action = _types.Action
OpenEnvObservation = _types.Observation
State = _types.State


def _catalog_schema(schema: dict[str, Any]) -> None:
    """Put the action catalog into the action's JSON Schema: ``type``'s enum and one branch per action."""
    from mlsandbox.gateway.tools import tool_specs

    specs = tool_specs()
    props = schema.setdefault("properties", {})
    props.setdefault("type", {})["enum"] = [s["name"] for s in specs]
    branches = []
    for s in specs:
        params = s["parameters"]
        branches.append(
            {
                "title": s["name"],
                "description": s["description"],
                "type": "object",
                "properties": {"type": {"const": s["name"]}, **params.get("properties", {})},
                "required": ["type", *params.get("required", [])],
            }
        )
    schema["oneOf"] = branches


class MLSandboxAction(Action):  # type: ignore[misc,valid-type]
    """One action of the mlsandbox catalog: ``type`` names it, its parameters sit beside it."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_catalog_schema)

    type: str = Field(
        min_length=1,
        description="The action, one of the catalog's (`oneOf` lists each with its parameters).",
    )

    def as_action(self) -> dict[str, Any]:
        """The action as the gateway takes it: ``type`` and the parameters (OpenEnv's ``metadata`` left out)."""
        return {"type": self.type, **(self.model_extra or {})}

    @classmethod
    def from_model(cls, action: BaseModel) -> MLSandboxAction:
        """From one of the catalog's action models (``mlsandbox.gateway.actions.CheckDataQuality(...)``)."""
        return cls(**action.model_dump(mode="json", exclude_none=True))


class MLSandboxObservation(OpenEnvObservation, Observation):  # type: ignore[misc,valid-type]
    """What the agent sees after a reset or a step: the gateway's :class:`~mlsandbox.gateway.observations.
    Observation` (its fields, flat), OpenEnv's ``done``, ``reward`` and ``metadata``, the observation as
    text and the step's ``info``."""

    text: str = Field(
        default="", description="The observation rendered as concise text for a language model."
    )
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="episode_id, reward_components, reward_vector, terminated, truncated; grade and "
        "metrics at the last step.",
    )


class MLSandboxState(State):  # type: ignore[misc,valid-type]
    """The episode as a whole (``episode_id`` and ``step_count`` come from OpenEnv's ``State``)."""

    scenario: str | None = None
    seed: int | None = None
    sandbox: str | None = None
    backend: str | None = None
    done: bool = False
    credits_used: float = 0.0
    invalid_actions: int = 0
    total_reward: float = 0.0
    grade: dict[str, Any] | None = Field(default=None, description="The grade, once the episode is over.")


__all__ = ["MLSandboxAction", "MLSandboxObservation", "MLSandboxState", "ObservationError"]
