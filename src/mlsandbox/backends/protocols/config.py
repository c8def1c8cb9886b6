"""The config store: each episode's endpoints and credentials, which its training jobs read and the agent
fixes with ``get_config`` / ``set_config`` (Prefect variables on local and kube, memory on sim).

An episode's entries live under a name prefix (a *scope*): :meth:`ConfigStore.open_scope` writes them and
remembers the scope where a crash of the writer must not leave it behind (the local journal, a tag on
kube); :meth:`ConfigStore.close_scope` deletes them. Values are strings.
"""

from __future__ import annotations

from typing import Protocol

JOB_CONFIG_KEYS: tuple[str, ...] = (
    "s3_endpoint_url",
    "s3_access_key_id",
    "s3_secret_access_key",
    "mlflow_tracking_uri",
)
"""What a job reads from the config store (``--config-prefix``; see :mod:`mlsandbox.workloads.trainer`)."""
REFERENCES: dict[str, str] = {
    "@service:minio": "s3_endpoint_url",
    "@service:mlflow": "mlflow_tracking_uri",
    "@secret:minio-access-key": "s3_access_key_id",
    "@secret:minio-secret-key": "s3_secret_access_key",
}
"""A reference the agent may write instead of a value -> the job config key whose right value it means."""


class ConfigStore(Protocol):
    def get(self, name: str) -> str | None:
        """The value of ``name`` (None when there is none)."""
        ...

    def set(self, name: str, value: str) -> None: ...

    def delete(self, name: str) -> None:
        """Delete ``name`` (no error when it does not exist)."""
        ...

    def names(self, prefix: str) -> list[str]:
        """Every name starting with ``prefix``, sorted."""
        ...

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        """Write an episode's values under ``prefix`` (remembered, so a crash leaves none behind)."""
        ...

    def close_scope(self, prefix: str) -> None:
        """Delete every name under ``prefix`` (idempotent)."""
        ...

    def job_config(self) -> dict[str, str]:
        """The right values of :data:`JOB_CONFIG_KEYS` for this sandbox's jobs: the object store and the
        tracker as jobs reach them on this backend, with the credentials (what an episode's config
        starts with)."""
        ...

    def references(self) -> dict[str, str]:
        """What each reference of :data:`REFERENCES` resolves to for this sandbox's jobs
        (``@service:minio`` -> the object store's address as jobs reach it, ...)."""
        ...


__all__ = ["JOB_CONFIG_KEYS", "REFERENCES", "ConfigStore"]
