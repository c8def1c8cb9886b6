"""The one exception hierarchy of mlsandbox."""

from __future__ import annotations


class MLSandboxError(Exception):
    """Base class of every error mlsandbox raises on purpose."""


class ConfigError(MLSandboxError):
    """A configuration or scenario file is invalid."""


class ScenarioError(ConfigError):
    """A scenario file cannot be loaded; the message names the file and the field path."""


class MissingToolError(MLSandboxError):
    """An external binary or tool is not installed; the message says what to install."""


class BackendError(MLSandboxError):
    """A backend operation failed (a service did not start, a call to it failed)."""


class ServiceStartError(BackendError):
    """A service did not become healthy in time; the message carries the tail of its log."""


class NotRunningError(BackendError):
    """No sandbox is running where one was expected."""


class Unsupported(BackendError):
    """A capability (or one operation of it, or a fault type) that this backend does not provide.

    The gateway turns it into an ``unsupported`` error observation naming the capability; nothing is
    changed. ``capability`` is a capability of the declared Runtime (``serving``), an operation of one
    (``serving.scale``) or a fault type (``fault:cpu_throttle``).
    """

    def __init__(self, capability: str, backend: str, reason: str) -> None:
        super().__init__(f"{capability} is not supported on the {backend} backend: {reason}")
        self.capability = capability
        self.backend = backend
        self.reason = reason


class ActionError(MLSandboxError):
    """An agent's action is invalid: it becomes an error observation, never an exception out of step().

    ``code`` is a stable machine-readable identifier (``invalid_json``, ``unknown_action``,
    ``invalid_parameters``, ``not_found``, ``forbidden_name``, ``conflict``, ``episode_over``,
    ``backend_error``, ``unsupported``).
    """

    def __init__(self, code: str, message: str, *, details: object | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
