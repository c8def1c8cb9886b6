"""A scenario's team: the roles several agents play in one episode (``mlsandbox.integrations.pettingzoo``).

.. code-block:: yaml

    team:
      order: [data, training, oncall]     # how one round's simultaneous actions are carried out
      roles:
        data:
          description: Brings the data in and makes it fit for training.
          packs: [sources]                # every action of these packs
          actions: [list_datasets, check_data_quality, clean_dataset, wait]   # and these

Each agent may use its role's actions only; any other action is refused (a ``forbidden`` error observation
for that agent, nothing done). Pack and action names are checked against the action catalog when a team
episode starts (the catalog depends on the installed plug-ins). A scenario without ``team`` is played by a
single agent, or by the default team of the integration.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_ROLE_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_NAME_RE = r"^[a-z][a-z0-9_]{0,63}$"


class TeamRole(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    """What the role is for (shown to the agent with its actions)."""
    packs: list[str] = Field(default_factory=list)
    """Action packs whose every action the role may use."""
    actions: list[str] = Field(default_factory=list)
    """Single actions the role may use besides its packs'."""

    @field_validator("packs", "actions")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.match(_NAME_RE, name):
                raise ValueError(f"{name!r} is not an action or pack name")
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate names: {v}")
        return v

    @model_validator(mode="after")
    def _something(self) -> TeamRole:
        if not self.packs and not self.actions:
            raise ValueError("a role needs at least one pack or action")
        return self


class Team(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    roles: dict[str, TeamRole] = Field(min_length=1, max_length=16)
    order: list[str] | None = None
    """The order in which one round's actions are carried out (default: the roles' order)."""

    @field_validator("roles")
    @classmethod
    def _role_names(cls, v: dict[str, TeamRole]) -> dict[str, TeamRole]:
        for name in v:
            if not _ROLE_RE.match(name):
                raise ValueError(
                    f"role name {name!r}: use 1-32 lowercase letters, digits and '_', a letter first"
                )
        return v

    @model_validator(mode="after")
    def _order(self) -> Team:
        if self.order is not None and sorted(self.order) != sorted(self.roles):
            raise ValueError(f"order {self.order} must list each role once: {sorted(self.roles)}")
        return self

    @property
    def agents(self) -> list[str]:
        """The roles in the order their actions are carried out."""
        return list(self.order or self.roles)


__all__ = ["Team", "TeamRole"]
