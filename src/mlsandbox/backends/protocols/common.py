"""What every capability protocol shares: the base model of boundary types and the typed refusal."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from mlsandbox.errors import Unsupported


class Model(BaseModel):
    """Base of every model on the seam: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


CAPABILITIES: tuple[str, ...] = (
    "object_store",
    "tracking",
    "jobs",
    "serving",
    "sources",
    "flows",
    "config",
    "environments",
    "workspaces",
    "faults",
    "clock",
    "audit",
)
"""Every capability of the declared Runtime, in the order the README's table lists them."""


class Support(Model):
    """What a backend supports: a capability (``serving``), an operation of one (``serving.scale``) or a
    fault type (``fault:cpu_throttle``) maps to the reason it is refused; anything absent is supported."""

    backend: str
    unsupported: dict[str, str] = {}

    def reason(self, key: str) -> str | None:
        """Why ``key`` is refused here (its capability's reason when the capability as a whole is), or None."""
        if key in self.unsupported:
            return self.unsupported[key]
        capability = key.split(".", 1)[0]
        return self.unsupported.get(capability) if capability != key else None

    def check(self, key: str) -> None:
        """Raise :class:`Unsupported` when ``key`` is refused here."""
        why = self.reason(key)
        if why is not None:
            raise Unsupported(key, self.backend, why)


__all__ = ["CAPABILITIES", "Model", "Support", "Unsupported"]
