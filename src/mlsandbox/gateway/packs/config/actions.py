"""The ``config`` pack: read and fix the episode's config store (endpoints and credentials of its jobs).

The store is Prefect variables on the sandbox's Prefect server, one per key, under a name prefix of the
episode; training jobs read their object-store endpoint and credentials and their tracking URI from it.
Secret values are masked whenever shown.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.registry import ActionPack, PackAction

ConfigKey = Literal["s3_endpoint_url", "s3_access_key_id", "s3_secret_access_key", "mlflow_tracking_uri"]


class GetConfig(ActionModel):
    """Read the config store that training jobs take their endpoints and credentials from: one key, or
    every key when ``key`` is omitted. Secret values are masked (``****`` plus the last 4 characters);
    also lists the references ``set_config`` accepts (the service directory and the credentials vault)."""

    type: Literal["get_config"] = "get_config"
    key: ConfigKey | None = Field(default=None, description="A config key; omit it to list every key")


class SetConfig(ActionModel):
    """Write a config key (jobs started afterwards read the new value). ``value`` is a literal, or a
    reference resolved by the platform: ``@service:minio`` / ``@service:mlflow`` (the service's current
    client endpoint) or ``@secret:minio-access-key`` / ``@secret:minio-secret-key`` (the current
    credentials from the vault, never shown)."""

    type: Literal["set_config"] = "set_config"
    key: ConfigKey = Field(description="The config key to write")
    value: str = Field(
        min_length=1, max_length=500, description="A literal value or a @service:/@secret: reference"
    )


_CONFIG_FAULTS = ("wrong_endpoint", "rotated_credentials")
"""The fault kinds the config actions address."""

PACK = ActionPack(
    name="config",
    actions=(
        PackAction(GetConfig, capability="config", read_only=True, addresses=_CONFIG_FAULTS),
        PackAction(SetConfig, capability="config", destructive=True, addresses=_CONFIG_FAULTS),
    ),
    implementation="mlsandbox.gateway.packs.config.handlers",
    description="The episode's config store (Prefect variables): inspect and fix endpoints and credentials.",
)
