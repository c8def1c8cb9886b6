"""The config store of a ``sim`` sandbox: names and string values in memory (:class:`MemoryConfigStore`).

It means what the Prefect variables of the other backends mean (:mod:`mlsandbox.backends.common.
config_store`): an episode's scope under a name prefix, the right values of the job config (the
simulated services' addresses and credentials), references the agent may write. It is served by the
orchestrator: when ``prefect-server`` is killed or frozen, reads and writes fail as the client's do.
"""

from __future__ import annotations

from mlsandbox.backends.protocols import REFERENCES
from mlsandbox.backends.sim.world import SimWorld

SERVICE = "prefect-server"


class MemoryConfigStore:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.ConfigStore`)."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        self.values: dict[str, str] = {}
        self.scopes: set[str] = set()

    def __repr__(self) -> str:
        return f"MemoryConfigStore(values={len(self.values)})"

    def _call(self, operation: str, what: str) -> None:
        self.world.call(SERVICE, f"config.{operation}", what=what)

    def get(self, name: str) -> str | None:
        self._call("get", f"read variable {name!r}")
        return self.values.get(name)

    def set(self, name: str, value: str) -> None:
        self._call("set", f"write variable {name!r}")
        self.values[name] = str(value)

    def delete(self, name: str) -> None:
        self._call("delete", f"delete variable {name!r}")
        self.values.pop(name, None)

    def names(self, prefix: str) -> list[str]:
        self._call("names", f"list variables {prefix!r}*")
        return sorted(n for n in self.values if n.startswith(prefix))

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        self._call("open_scope", f"write the scope {prefix!r}")
        self.scopes.add(prefix)
        for key, value in values.items():
            self.values[prefix + key] = str(value)

    def close_scope(self, prefix: str) -> None:
        self._call("close_scope", f"delete the scope {prefix!r}")
        for name in [n for n in self.values if n.startswith(prefix)]:
            del self.values[name]
        self.scopes.discard(prefix)

    def job_config(self) -> dict[str, str]:
        return {
            "s3_endpoint_url": self.world.address.urls["minio"],
            "s3_access_key_id": self.world.address.access_key,
            "s3_secret_access_key": self.world.address.secret_key,
            "mlflow_tracking_uri": self.world.address.urls["mlflow"],
        }

    def references(self) -> dict[str, str]:
        right = self.job_config()
        return {ref: right[key] for ref, key in REFERENCES.items()}


__all__ = ["MemoryConfigStore"]
