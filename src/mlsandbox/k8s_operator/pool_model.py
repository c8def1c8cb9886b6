"""The warm pool's custom resources as typed models: ``SandboxPool`` and ``SandboxClaim`` (group
``mlsandbox.dev``; the CRDs in charts/mlsandbox/crds/ are the wire contract).

A ``SandboxPool`` keeps ``size`` Sandboxes of one template reconciled and Ready before anyone asks
(its *members*: Sandboxes in the pool's namespace, labelled :data:`POOL_LABEL`). A ``SandboxClaim`` names
a pool; the operator binds it at once to one Ready, unclaimed member (``status.sandbox``,
``status.namespace``) and the pool creates a replacement behind it. Deleting the claim releases the
Sandbox: with ``onRelease: Reset`` (the default) it goes back to the pool after a warm reset (its
``spec.episode`` bumped: the previous episode's objects go, the namespace stays), unless the pool is
already full or gone, in which case it is deleted; with ``onRelease: Delete`` it is always deleted.

Who holds a member is in its labels (the only source of truth; a claim's status is derived from them):
``mlsandbox.dev/pool-state`` is ``available`` or ``claimed``, and a claimed member carries the claim's
name and uid. Its controller owner is the pool while available and the claim while claimed, so deleting a
pool removes its unclaimed members and leaves the bound ones to their claims.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import Field

from .model import GROUP, VERSION, AgentAccess, Budget, _Model

POOL_KIND = "SandboxPool"
POOL_PLURAL = "sandboxpools"
CLAIM_KIND = "SandboxClaim"
CLAIM_PLURAL = "sandboxclaims"
SANDBOX_PLURAL = "sandboxes"

POOL_LABEL = f"{GROUP}/pool"
"""On a member Sandbox: the name of its pool (in the same namespace)."""
STATE_LABEL = f"{GROUP}/pool-state"
AVAILABLE, CLAIMED = "available", "claimed"
CLAIM_NAME_LABEL = f"{GROUP}/claim"
CLAIM_UID_LABEL = f"{GROUP}/claim-uid"
TEMPLATE_HASH_LABEL = f"{GROUP}/pool-template"
"""A digest of the template a member was made from: an unclaimed member of an older template is replaced."""

MAX_POOL_NAME = 40
"""A member is ``<pool>-<5 random characters>`` and its namespace ``sbx-<namespace>-<member>``."""
MAX_POOL_SIZE = 100

PoolConditionType = Literal["Ready", "Degraded"]
ClaimPhase = Literal["Pending", "Bound", "Lost", "Failed"]


class SandboxTemplate(_Model):
    """What every member of a pool is: a Sandbox spec without ``episode`` (the pool's to manage)."""

    scenario: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    seed: int = Field(default=0, ge=0)
    budget: Budget = Budget()
    agent_access: AgentAccess = Field(default=AgentAccess(), alias="agentAccess")

    def sandbox_spec(self, episode: int = 0) -> dict[str, object]:
        """The member Sandbox's ``spec`` (CRD field names)."""
        return {**self.model_dump(by_alias=True, mode="json"), "episode": episode}

    def digest(self) -> str:
        """12 hex characters naming this template (a label value)."""
        body = json.dumps(self.model_dump(by_alias=True, mode="json"), sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:12]


class SandboxPoolSpec(_Model):
    size: int = Field(default=1, ge=0, le=MAX_POOL_SIZE)
    """How many unclaimed Sandboxes the pool keeps (Ready, or on their way to it)."""
    template: SandboxTemplate
    on_release: Literal["Reset", "Delete"] = Field(default="Reset", alias="onRelease")
    """What a released Sandbox becomes: ``Reset`` returns it to the pool after a warm reset when the pool
    has room (else it is deleted); ``Delete`` always deletes it (the pool makes a fresh one)."""


class PoolRef(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")


class SandboxClaimSpec(_Model):
    pool_ref: PoolRef = Field(alias="poolRef")
    """The pool (in the claim's namespace) to take a Ready Sandbox from. Immutable."""


POOL_API_VERSION = f"{GROUP}/{VERSION}"
