"""The ``Sandbox`` custom resource as typed models (the CRD's schema is the wire contract)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GROUP = "mlsandbox.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Sandbox"
PLURAL = "sandboxes"
FINALIZER = "mlsandbox.dev/finalizer"

ConditionType = Literal["Ready", "Degraded", "Terminating"]
Phase = Literal["Pending", "Ready", "Degraded", "Terminating", "Failed"]

_CPU_PATTERN = r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$"
_MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Budget(_Model):
    cpu: str = Field(default="4", pattern=_CPU_PATTERN)
    """CPU of all the sandbox's pods together (a Kubernetes quantity)."""
    memory: str = Field(default="6Gi", pattern=_MEMORY_PATTERN)
    credits: float = Field(default=100.0, ge=0)
    max_pods: int = Field(default=30, ge=1, le=500, alias="maxPods")

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _quantity(cls, value: object) -> object:
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class AgentAccess(_Model):
    mode: Literal["none", "read", "operate"] = "operate"
    service_account_name: str = Field(
        default="agent", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", alias="serviceAccountName"
    )


class SandboxSpec(_Model):
    scenario: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    seed: int = Field(default=0, ge=0)
    budget: Budget = Budget()
    agent_access: AgentAccess = Field(default=AgentAccess(), alias="agentAccess")
    episode: int = Field(default=0, ge=0)
    """Bump to start the next episode: a warm reset (the previous episode's objects go, the namespace,
    quota, RBAC and services stay); ``status.episode`` says when it is done."""
