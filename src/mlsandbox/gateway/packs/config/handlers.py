"""Handlers and hooks of the ``config`` pack (see :mod:`mlsandbox.gateway.packs.config.actions`).

``on_start`` writes the episode's config (the sandbox's client endpoints and credentials) under the
episode's prefix; ``on_close`` deletes it. The backend journals the scope, so ``mlsandbox gc`` deletes
the variables of an episode whose process died.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsandbox.errors import ActionError
from mlsandbox.scenario.perturbations import CONFIG_KEYS, SECRET_CONFIG_KEYS, config_prefix

if TYPE_CHECKING:
    from mlsandbox.gateway.dispatcher import Gateway
    from mlsandbox.gateway.packs.config.actions import GetConfig, SetConfig

SERVICE_REFS = {"@service:minio": "s3_endpoint_url", "@service:mlflow": "mlflow_tracking_uri"}
SECRET_REFS = {
    "@secret:minio-access-key": "s3_access_key_id",
    "@secret:minio-secret-key": "s3_secret_access_key",
}


def mask(key: str, value: str | None) -> str | None:
    """A secret shows as ``****`` and its last 4 characters (enough to tell two values apart)."""
    if value is None or key not in SECRET_CONFIG_KEYS:
        return value
    return "****" + value[-4:] if len(value) > 8 else "****"


def _control(gw: Gateway) -> Any:
    control = gw._fault_control()
    store = getattr(control, "config", None) if control is not None else None
    return control, store


def on_start(gw: Gateway) -> None:
    control, store = _control(gw)
    if store is None:
        return  # no config store on this backend: jobs take their endpoints from the environment
    prefix = config_prefix(gw.state.episode_id)
    store.open_scope(prefix, control.credentials())
    gw.ext["config"]["prefix"] = prefix


def on_close(gw: Gateway) -> None:
    prefix = gw.ext["config"].pop("prefix", None)
    _, store = _control(gw)
    if prefix and store is not None:
        store.close_scope(prefix)


def _store(gw: Gateway) -> tuple[Any, Any, str]:
    control, store = _control(gw)
    prefix = gw.ext["config"].get("prefix")
    if store is None or not prefix:
        raise ActionError("unsupported", "this backend has no config store")
    return control, store, prefix


def _get_config(gw: Gateway, a: GetConfig) -> dict[str, Any]:
    _, store, prefix = _store(gw)
    keys = [a.key] if a.key else list(CONFIG_KEYS)
    values = {k: mask(k, gw.backend_call(lambda k=k: store.get(prefix + k))) for k in keys}
    out: dict[str, Any] = {"config": values}
    if a.key is None:
        out["references"] = sorted([*SERVICE_REFS, *SECRET_REFS])
        out["secret_keys"] = sorted(SECRET_CONFIG_KEYS)
    return out


def _set_config(gw: Gateway, a: SetConfig) -> dict[str, Any]:
    control, store, prefix = _store(gw)
    value = a.value.strip()
    if value.startswith("@"):
        source = SERVICE_REFS.get(value) or SECRET_REFS.get(value)
        if source is None:
            known = ", ".join(sorted([*SERVICE_REFS, *SECRET_REFS]))
            raise ActionError("invalid_parameters", f"unknown reference {value!r}; references: {known}")
        value = control.credentials()[source]
    elif a.key.endswith(("_url", "_uri")) and not value.startswith(("http://", "https://")):
        raise ActionError("invalid_parameters", f"{a.key} must be an http(s) URL, got {a.value!r}")
    gw.backend_call(lambda: store.set(prefix + a.key, value))
    return {"key": a.key, "value": mask(a.key, value)}


HANDLERS = {"get_config": _get_config, "set_config": _set_config}
