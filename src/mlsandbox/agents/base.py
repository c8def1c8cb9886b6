"""The agent interface: observe a structured observation, return an action (a dict with ``type``)."""

from __future__ import annotations

from typing import Any, Protocol


class Agent(Protocol):
    name: str

    def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
        """Start a new episode from its first (decoded) observation."""
        ...

    def act(self, observation: dict[str, Any]) -> dict[str, Any] | str:
        """The next action, given the latest (decoded) observation."""
        ...
