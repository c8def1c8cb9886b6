"""Handlers and hooks of the ``config`` pack (see :mod:`mlsandbox.gateway.packs.config.actions`).

``on_start`` writes the episode's config (the right endpoints and credentials for the sandbox's jobs, as
the runtime's config store says) under the episode's prefix; ``on_close`` deletes it. The backend makes
sure a crash leaves no scope behind (the local journal, a tag on kube). The training jobs of the episode
read their endpoints from there (the core's ``train_model`` passes :func:`episode_prefix`).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlsandbox.backends.protocols import REFERENCES, ConfigStore
from mlsandbox.errors import ActionError, Unsupported
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.scenario.perturbations import CONFIG_KEYS, SECRET_CONFIG_KEYS, config_prefix

if TYPE_CHECKING:
    from mlsandbox.gateway.packs.config.actions import GetConfig, SetConfig

log = logging.getLogger(__name__)


@dataclass
class ConfigState:
    """The episode's config scope (``ctx.pack_state(ConfigState)``)."""

    prefix: str | None = None
    """The scope's name prefix once it is written (None before, after close, or without a store)."""
    refused: Unsupported | None = None
    """Why the backend has no config store (then jobs take their endpoints from their environment)."""


def episode_prefix(ctx: EpisodeContext) -> str | None:
    """The prefix of the episode's config in the store (for ``--config-prefix``), None without one."""
    return ctx.pack_state(ConfigState).prefix


def mask(key: str, value: str | None) -> str | None:
    """A secret shows as ``****`` and its last 4 characters (enough to tell two values apart)."""
    if value is None or key not in SECRET_CONFIG_KEYS:
        return value
    return "****" + value[-4:] if len(value) > 8 else "****"


def on_start(ctx: EpisodeContext) -> None:
    state = ctx.pack_state(ConfigState)
    try:
        store = ctx.runtime.config
        values = store.job_config()
    except Unsupported as e:  # no config store here: jobs take their endpoints from their environment
        state.refused = e
        return
    prefix = config_prefix(ctx.state.episode_id)
    store.open_scope(prefix, values)
    state.prefix = prefix


def on_close(ctx: EpisodeContext) -> None:
    state = ctx.pack_state(ConfigState)
    prefix, state.prefix = state.prefix, None
    if prefix:
        ctx.runtime.config.close_scope(prefix)


def _store(ctx: EpisodeContext) -> tuple[ConfigStore, str]:
    state = ctx.pack_state(ConfigState)
    if state.refused is not None:
        raise state.refused
    if state.prefix is None:
        raise ActionError("conflict", "the episode's config has been closed")
    return ctx.runtime.config, state.prefix


def handle_get_config(ctx: EpisodeContext, a: GetConfig) -> dict[str, Any]:
    store, prefix = _store(ctx)
    keys = [a.key] if a.key else list(CONFIG_KEYS)
    values = {k: mask(k, ctx.backend_call(functools.partial(store.get, prefix + k))) for k in keys}
    out: dict[str, Any] = {"config": values}
    if a.key is None:
        out["references"] = sorted(REFERENCES)
        out["secret_keys"] = sorted(SECRET_CONFIG_KEYS)
    return out


def handle_set_config(ctx: EpisodeContext, a: SetConfig) -> dict[str, Any]:
    store, prefix = _store(ctx)
    value = a.value.strip()
    if value.startswith("@"):
        if value not in REFERENCES:
            known = ", ".join(sorted(REFERENCES))
            raise ActionError("invalid_parameters", f"unknown reference {value!r}; references: {known}")
        value = ctx.backend_call(store.references)[value]
    elif a.key.endswith(("_url", "_uri")) and not value.startswith(("http://", "https://")):
        raise ActionError("invalid_parameters", f"{a.key} must be an http(s) URL, got {a.value!r}")
    ctx.backend_call(lambda: store.set(prefix + a.key, value))
    return {"key": a.key, "value": mask(a.key, value)}
