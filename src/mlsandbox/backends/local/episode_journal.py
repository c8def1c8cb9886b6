"""What an episode makes on a local sandbox's shared services, journaled so that a crash leaves nothing.

The local runtime hands out clients that write an undo record to the process's journal
(:mod:`mlsandbox.backends.local.faults.journal`) *before* they make something on the shared services and
remove it once they deleted it: a bucket, an MLflow experiment, a registered model, an episode's Prefect
deployments and flow runs (and, in :mod:`mlsandbox.backends.local.sources`, an API-source dataset and a
PostgreSQL database with its role). A process that dies leaves its journal; the garbage collector deletes
what it names (:func:`undo`), on a sandbox that lives on. What a process made and deleted itself leaves no
record.

The undo side talks to the services over their HTTP APIs (MLflow's and Prefect's REST, S3 through boto3,
PostgreSQL with psycopg), so ``mlsandbox gc`` stays quick: no MLflow or Prefect client is imported.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from mlsandbox.backends.common.config_store import PrefectConfigStore
from mlsandbox.backends.common.mlflow_tracking import MLflowTracking
from mlsandbox.backends.common.prefect import FlowPlacement, PrefectEpisodeFlows, PrefectFlows
from mlsandbox.backends.common.s3 import S3ObjectStore
from mlsandbox.backends.local.faults.journal import (
    Journal,
    UndoApiDataset,
    UndoBucket,
    UndoConfigScope,
    UndoDatabase,
    UndoExperiment,
    UndoFlows,
    UndoRegisteredModel,
)
from mlsandbox.backends.protocols import Endpoints, ModelVersionInfo
from mlsandbox.errors import BackendError

HTTP_TIMEOUT_S = 10.0
RETRY_S = 20.0

# ------------------------------------------------------------------------------------- the clients


class JournaledObjectStore(S3ObjectStore):
    """The S3 object store; every bucket made through it is journaled until it is deleted through it."""

    def __init__(self, url: str, access_key: str, secret_key: str, journal: Journal) -> None:
        super().__init__(url, access_key, secret_key)
        self.journal = journal

    def create_bucket(self, bucket: str) -> None:
        self.journal.retry_deferred()  # an episode starts: what earlier ones failed to remove goes first
        self.journal.add(f"bucket:{bucket}", UndoBucket(bucket=bucket))
        super().create_bucket(bucket)

    def delete_bucket(self, bucket: str) -> None:
        key = f"bucket:{bucket}"
        try:
            super().delete_bucket(bucket)
        except Exception:
            self.journal.defer(key, lambda: self.delete_bucket(bucket))
            raise
        self.journal.remove(key)


class JournaledTracking(MLflowTracking):
    """The MLflow client; experiments and registered models made through it are journaled until they are
    deleted through it."""

    def __init__(self, tracking_uri: str, journal: Journal) -> None:
        super().__init__(tracking_uri)
        self.journal = journal
        self._names: dict[str, str] = {}
        """experiment id -> name, for the experiments made here."""
        self._lock = threading.Lock()

    def create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str:
        self.journal.add(f"experiment:{name}", UndoExperiment(name=name))
        try:
            experiment_id = super().create_experiment(name, tags)
        except Exception:
            self.journal.remove(f"experiment:{name}")
            raise
        with self._lock:
            self._names[experiment_id] = name
        return experiment_id

    def delete_experiment(self, experiment_id: str) -> None:
        try:
            super().delete_experiment(experiment_id)
        except Exception:
            with self._lock:
                name = self._names.get(experiment_id)
            if name is not None:
                self.journal.defer(f"experiment:{name}", lambda: self.delete_experiment(experiment_id))
            raise
        with self._lock:
            name = self._names.pop(experiment_id, None)
        if name is None:
            with contextlib.suppress(Exception):
                name = str(self.client.get_experiment(experiment_id).name)
        if name is not None:
            self.journal.remove(f"experiment:{name}")

    def register_model(self, run_id: str, name: str, artifact_path: str = "model") -> ModelVersionInfo:
        self.journal.add(f"model:{name}", UndoRegisteredModel(name=name))
        return super().register_model(run_id, name, artifact_path)

    def delete_registered_model(self, name: str) -> None:
        key = f"model:{name}"
        try:
            super().delete_registered_model(name)
        except KeyError:
            self.journal.remove(key)  # nothing to delete
            raise
        except Exception:
            self.journal.defer(key, lambda: self.delete_registered_model(name))
            raise
        self.journal.remove(key)


class JournaledConfigStore(PrefectConfigStore):
    """Prefect variables; each episode's scope is journaled from ``open_scope`` to ``close_scope`` (a close
    that fails is retried when the next scope opens)."""

    def __init__(self, api_url: str, journal: Journal, **kwargs: Any) -> None:
        super().__init__(
            api_url,
            on_open=lambda prefix: journal.add(f"config:{prefix}", UndoConfigScope(prefix=prefix)),
            on_close=lambda prefix: journal.remove(f"config:{prefix}"),
            **kwargs,
        )
        self.journal = journal

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        self.journal.retry_deferred()
        super().open_scope(prefix, values)

    def close_scope(self, prefix: str) -> None:
        try:
            super().close_scope(prefix)
        except Exception:
            self.journal.defer(f"config:{prefix}", lambda: self.close_scope(prefix))
            raise


class JournaledFlows(PrefectFlows):
    """The Prefect flows of a local sandbox; an episode's flows are journaled from ``open`` to ``close``
    (its deployments carry the tag ``episode:<id>``). ``close`` also stops the episode's flow-run processes
    that still run on the sandbox's worker (a cancelled run's process would otherwise go on to its end)."""

    def __init__(
        self,
        api_url: str,
        journal: Journal,
        placement: Callable[[Mapping[str, str]], FlowPlacement],
        *,
        sandbox: str,
        home: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(api_url, placement, **kwargs)
        self.journal = journal
        self.sandbox = sandbox
        self.home = home

    def open(self, episode_id: str, labels: dict[str, str]) -> PrefectEpisodeFlows:
        key = f"flows:{episode_id}"
        self.journal.add(key, UndoFlows(episode_id=episode_id))
        cleanup = self._cleanup

        def forget() -> None:  # close() calls it once the runs and deployments are deleted
            if cleanup is not None:
                cleanup(dict(labels))
            _stop_flow_processes(episode_id, self.sandbox, self.home)
            self.journal.remove(key)

        return PrefectEpisodeFlows(
            self.api_url,
            episode_id,
            self._placement(dict(labels)),
            interpreter=self._interpreter,
            cleanup=forget,
        )


# ------------------------------------------------------------------------------------------- undo


def undo_bucket(entry: UndoBucket, endpoints: Endpoints) -> str:
    S3ObjectStore(endpoints.s3_url, endpoints.s3_access_key, endpoints.s3_secret_key).delete_bucket(
        entry.bucket
    )
    return "deleted with its objects"


def _request(client: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One request, retried while the server is busy or restarting (5xx, connection refused: a service
    the gone process killed is coming back, Prefect's SQLite is locked), for up to :data:`RETRY_S`."""
    deadline = time.monotonic() + RETRY_S
    delay = 0.2
    while True:
        try:
            resp = client.request(method, url, **kwargs)
            if resp.status_code < 500 or time.monotonic() > deadline:
                return resp
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def _mlflow(endpoints: Endpoints, method: str, path: str, **kwargs: Any) -> httpx.Response:
    with httpx.Client(timeout=HTTP_TIMEOUT_S, trust_env=False) as client:
        return _request(client, method, f"{endpoints.mlflow_url}/api/2.0/mlflow/{path}", **kwargs)


def undo_experiment(entry: UndoExperiment, endpoints: Endpoints) -> str:
    resp = _mlflow(endpoints, "GET", "experiments/get-by-name", params={"experiment_name": entry.name})
    if resp.status_code == 404:
        return "already gone"
    _check(resp, f"MLflow: experiment {entry.name!r}")
    experiment = resp.json()["experiment"]
    if experiment.get("lifecycle_stage") == "deleted":
        return "already deleted"
    resp = _mlflow(
        endpoints, "POST", "experiments/delete", json={"experiment_id": experiment["experiment_id"]}
    )
    _check(resp, f"MLflow: deleting experiment {entry.name!r}")
    return f"deleted (id {experiment['experiment_id']})"


def undo_registered_model(entry: UndoRegisteredModel, endpoints: Endpoints) -> str:
    resp = _mlflow(endpoints, "DELETE", "registered-models/delete", json={"name": entry.name})
    if resp.status_code == 404:
        return "already gone"
    _check(resp, f"MLflow: deleting registered model {entry.name!r}")
    return "deleted with its versions"


def undo_flows(entry: UndoFlows, endpoints: Endpoints, sandbox: str, home: str) -> str:
    """Cancel and delete the runs of the episode's deployments, then the deployments; stop the flow-run
    processes of the episode still running on the sandbox's worker (they carry the episode's id)."""
    api = endpoints.prefect_api_url
    final = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}
    with httpx.Client(timeout=HTTP_TIMEOUT_S, trust_env=False) as client:
        resp = _request(
            client,
            "POST",
            f"{api}/deployments/filter",
            json={"deployments": {"tags": {"all_": [f"episode:{entry.episode_id}"]}}},
        )
        _check(resp, "Prefect: listing deployments")
        deployments = [d["id"] for d in resp.json()]
        runs: list[dict[str, Any]] = []
        if deployments:
            resp = _request(
                client,
                "POST",
                f"{api}/flow_runs/filter",
                json={"flow_runs": {"deployment_id": {"any_": deployments}}},
            )
            _check(resp, "Prefect: listing flow runs")
            runs = resp.json()
        for run in runs:
            state = (run.get("state") or {}).get("type")
            if state not in final:
                _request(
                    client,
                    "POST",
                    f"{api}/flow_runs/{run['id']}/set_state",
                    json={"state": {"type": "CANCELLED", "name": "Cancelled"}, "force": True},
                )
            _request(client, "DELETE", f"{api}/flow_runs/{run['id']}")
        for deployment in deployments:
            resp = _request(client, "DELETE", f"{api}/deployments/{deployment}")
            if resp.status_code not in (200, 204, 404):
                _check(resp, "Prefect: deleting a deployment")
    stopped = _stop_flow_processes(entry.episode_id, sandbox, home)
    return f"{len(deployments)} deployment(s) and {len(runs)} flow run(s) deleted" + (
        f", {stopped} flow-run process(es) stopped" if stopped else ""
    )


def _stop_flow_processes(episode_id: str, sandbox: str, home: str) -> int:
    from mlsandbox.backends.common.prefect import EPISODE_ENV
    from mlsandbox.backends.local import supervisor

    procs = []
    for proc in supervisor.find_marked(sandbox, home):
        with contextlib.suppress(Exception):
            if proc.environ().get(EPISODE_ENV) == episode_id:
                procs.append(proc)
    return len(supervisor.stop([], extra=procs, timeout=1.0)) if procs else 0


def undo_api_dataset(entry: UndoApiDataset, sandbox_dir: Path) -> str:
    from mlsandbox.backends.local import services as svc

    folder = svc.api_source_dir(svc.Layout(sandbox_dir)) / "datasets" / entry.dataset_id
    existed = folder.exists()
    shutil.rmtree(folder, ignore_errors=True)
    return "removed from the API source" if existed else "already gone"


def undo_database(entry: UndoDatabase, sandbox_name: str) -> str:
    """Drop the database and the role (PostgreSQL is started on its data when it is not running)."""
    import psycopg
    from psycopg import sql

    from mlsandbox.backends.local import services as svc
    from mlsandbox.backends.local.sources import SourceServices

    services = SourceServices.of(sandbox_name)
    if not services.started(svc.POSTGRES):
        return "no PostgreSQL server in this sandbox"
    if not services.is_running(svc.POSTGRES):
        services.ensure(svc.POSTGRES)
    with psycopg.connect(services.postgres_dsn(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(entry.database))
        )
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(entry.role)))
    return f"database and role {entry.role!r} dropped"


def _check(resp: httpx.Response, what: str) -> None:
    if resp.status_code >= 400:
        raise BackendError(f"{what} failed: HTTP {resp.status_code} {resp.text[:200]}")


__all__ = [
    "JournaledConfigStore",
    "JournaledFlows",
    "JournaledObjectStore",
    "JournaledTracking",
    "undo_api_dataset",
    "undo_bucket",
    "undo_database",
    "undo_experiment",
    "undo_flows",
    "undo_registered_model",
]
