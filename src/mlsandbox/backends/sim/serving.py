"""Model serving of a ``sim`` sandbox: deployments of registered versions in memory, answered by a
calibrated queueing model (:class:`SimServing` per episode).

A replica serves the registered model (the proxy the surrogate fitted, the same object the grade loads):
a request is validated as the model server validates it (its own code: 422 with the field path), scored,
and answered with the model server's JSON. Its latency comes from the calibration: each replica takes one
request at a time (``workers`` of them); a request that arrives while the replica is busy waits for it;
answering takes ``service_ms`` (residual drawn per request), plus a feature-service lookup for requests by
entity ids, plus an injected fault's delay. The virtual clock does not move while production traffic
sends its requests (they overlap in time, as concurrent clients do): the answer carries the latency the
model gives (:attr:`~mlsandbox.backends.protocols.ServingResponse.elapsed_s`); a request of the agent's
own charges it to the clock. Each replica counts its requests in the model server's Prometheus metrics
(the same ``HttpMetrics``), which a scrape renders as text for the world's monitor.

A rollout starts the new replicas (charged the calibrated start time) before the old ones go; a version
that does not exist in the registry, or whose replicas need more memory than their machine has, does not
become ready: ``deploy_failed`` with the replica's log tail, the deployment left as it was.
"""

from __future__ import annotations

import builtins
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentSpec,
    DeploymentView,
    Limits,
    ReplicaRef,
    ReplicaStats,
    ReplicaView,
    ServingError,
    ServingResponse,
    check_set_version,
    not_found,
)
from mlsandbox.backends.sim.realfit import boolean_columns, numeric_columns
from mlsandbox.backends.sim.world import SimWorld, stable_seed
from mlsandbox.workloads.http_metrics import HttpMetrics

if TYPE_CHECKING:
    from mlsandbox.backends.sim.faults import HttpTarget, HttpTargets
    from mlsandbox.backends.sim.storage import MemoryObjectStore
    from mlsandbox.backends.sim.tracking import MemoryTracking


@dataclass
class _Replica:
    id: str
    version: str
    metrics: HttpMetrics
    memory_mb: float
    state: str = "running"
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    busy_until: float = 0.0
    busy_s: float = 0.0
    stats_at: float = 0.0
    stats_busy: float = 0.0

    @property
    def ready(self) -> bool:
        return self.state == "running"


@dataclass
class _Deployment:
    spec: DeploymentSpec
    replicas: list[_Replica]
    history: list[str]
    served: Any
    """The model server's loaded model (``LoadedModel``) of the current version."""
    algorithm: str
    rr: Any = field(default_factory=itertools.count)
    scored: tuple[Any, Any, dict[str, tuple[Any, Any]]] | None = None
    """(served model, feature table, entity id -> (prediction, probability)): the feature service's whole
    population scored in one batch by the served model, as each by-entity request would score its rows
    (see :meth:`SimServing._by_entity`)."""


class SimServing:
    """The serving capability (:class:`~mlsandbox.backends.protocols.ModelServing`)."""

    def __init__(
        self, world: SimWorld, tracking: MemoryTracking, store: MemoryObjectStore, http: HttpTargets
    ) -> None:
        self.world = world
        self.tracking = tracking
        self.store = store
        self.http = http
        self.episodes: dict[str, SimEpisodeServing] = {}

    def open(self, episode_id: str, labels: dict[str, str]) -> SimEpisodeServing:
        found = self.episodes.get(episode_id)
        if found is None or found.closed:
            found = self.episodes[episode_id] = SimEpisodeServing(self, episode_id)
        return found


class SimEpisodeServing:
    """The deployments of one episode (:class:`~mlsandbox.backends.protocols.EpisodeServing`)."""

    def __init__(self, owner: SimServing, episode_id: str) -> None:
        self.owner = owner
        self.world = owner.world
        self.tracking = owner.tracking
        self.store = owner.store
        self.http = owner.http
        self.episode_id = episode_id
        self.items: dict[str, _Deployment] = {}
        self.features: dict[str, list[Any]] | None = None
        self.feature_columns: list[str] = []
        self.feature_replica: _Replica | None = None
        self.feature_log: builtins.list[str] = []
        self.closed = False
        self.rng = random.Random(stable_seed("serving", self.world.seed, episode_id))
        self._ids = itertools.count(1)
        self.cal = self.world.calibration.serving

    # ----------------------------------------------------------------------------------- replicas

    def _served(self, spec: DeploymentSpec, version: str) -> tuple[Any, str]:
        """The model server's loaded model of ``version`` (its start), or ``deploy_failed``."""
        from mlsandbox.workloads.model_server import LoadedModel, LoadError

        reg = self.tracking.models.get(spec.registry_name)
        found = None if reg is None else next((v for v in reg.versions if v.version == version), None)
        if found is None or found.model is None:
            detail = (
                f"cannot fetch models:/{spec.registry_name}/{version} from the registry: RESOURCE_DOES_NOT_EXIST: "
                f"Model Version (name={spec.registry_name}, version={version}) not found"
            )
            raise self._failed(spec, version, detail, exit_status=3)
        model = found.model
        names = [str(n) for n in getattr(model, "feature_names_in_", [])]
        numeric, boolean = set(numeric_columns(model)), set(boolean_columns(model))
        columns = [(n, "number" if n in numeric else "boolean" if n in boolean else "string") for n in names]
        classes = list(getattr(model, "classes_", []))
        try:
            served = LoadedModel(
                model,
                spec.registry_name,
                version,
                columns,
                [_plain(c) for c in classes] or None,
                spec.response,
            )
        except LoadError as e:  # the model server's start fails the same way (exit status 3)
            raise self._failed(spec, version, f"cannot serve: {e}", exit_status=3) from None
        return served, str(getattr(model, "algorithm", "gradient_boosting"))

    def _failed(self, spec: DeploymentSpec, version: str, detail: str, *, exit_status: int) -> ServingError:
        values = {
            "deployment": spec.deployment,
            "version": version,
            "model_name": spec.registry_name,
            "detail": detail,
        }
        tail = "\n".join(line.text.format(**values) for line in self.cal.deploy_failed_log)
        return ServingError(
            "deploy_failed",
            f"version {version} did not start: replica exited with status {exit_status}; log tail:\n{tail}",
        )

    def _start(self, spec: DeploymentSpec, version: str, n: int) -> tuple[list[_Replica], Any, str]:
        served, algorithm = self._served(spec, version)
        features = {"one": 1.0, "cpus": spec.machine.cpus, "onehot_width": float(len(served.columns))}
        rss_model = self.cal.replica_rss_mb.get(algorithm) or next(iter(self.cal.replica_rss_mb.values()))
        rss = rss_model.mean(features)
        if n > 0:
            start_s = self.cal.replica_start_s.value(features, self.rng.gauss(0, 1))
            start_s /= min(1.0, max(spec.machine.cpus, 0.25))
            if rss > spec.machine.memory_mb:
                self.world.clock.charge(start_s * 0.6)
                message = self.cal.oom_message.text.format(memory_mb=spec.machine.memory_mb)
                raise ServingError(
                    "deploy_failed",
                    f"version {version} did not start: a replica exited with code 137 (OOMKilled): {message}",
                )
            self.world.clock.charge(start_s)
        replicas = [self._replica(version, rss) for _ in range(n)]
        return replicas, served, algorithm

    def _replica(self, version: str, rss: float) -> _Replica:
        now = self.world.clock.monotonic()
        return _Replica(
            f"r{next(self._ids)}", version, HttpMetrics("model-server"), rss, busy_until=now, stats_at=now
        )

    def _view(self, dep: _Deployment) -> DeploymentView:
        states = [
            ReplicaView(
                replica=i,
                version=r.version,
                state="running" if r.ready else "exited",
                exit_code=r.exit_code,
                reason=r.reason,
                message=r.message,
            )
            for i, r in enumerate(dep.replicas)
        ]
        up = sum(1 for r in dep.replicas if r.ready)
        m = dep.spec.machine
        return DeploymentView(
            deployment=dep.spec.deployment,
            model=dep.spec.model,
            version=dep.spec.version,
            machine=m.name,
            limits=Limits(cpus=m.cpus, memory_mb=m.memory_mb),
            environment=dep.spec.environment.name if dep.spec.environment else "default",
            replicas=dep.spec.replicas,
            replicas_up=up,
            rollout="complete"
            if up == dep.spec.replicas and all(r.version == dep.spec.version for r in dep.replicas)
            else "progressing",
            replica_states=states,
            version_history=list(dep.history),
        )

    def _get(self, deployment: str) -> _Deployment:
        dep = self.items.get(deployment)
        if dep is None:
            raise not_found(deployment, list(self.items))
        return dep

    # ----------------------------------------------------------------------------------- protocol

    def deploy(self, spec: DeploymentSpec) -> tuple[DeploymentView, bool]:
        self.world.charge("serving.deploy")
        dep = self.items.get(spec.deployment)
        if dep is not None and dep.spec.model != spec.model:
            raise ServingError(
                "conflict",
                f"deployment {spec.deployment!r} serves model {dep.spec.model!r}, not {spec.model!r}",
            )
        replicas, served, algorithm = self._start(spec, spec.version, spec.replicas)
        if dep is None:
            self.items[spec.deployment] = _Deployment(spec, replicas, [spec.version], served, algorithm)
            self.http.register(self.episode_id, spec.deployment)
            return self._view(self.items[spec.deployment]), True
        dep.spec, dep.replicas, dep.served, dep.algorithm = spec, replicas, served, algorithm
        dep.history.append(spec.version)
        return self._view(dep), False

    def set_version(self, deployment: str, version: str) -> DeploymentView:
        dep = self._get(deployment)
        check_set_version(self._view(dep), version)
        spec = dep.spec.model_copy(update={"version": version})
        replicas, served, algorithm = self._start(spec, version, dep.spec.replicas)
        dep.spec, dep.replicas, dep.served, dep.algorithm = spec, replicas, served, algorithm
        dep.history.append(version)
        return self._view(dep)

    def scale(self, deployment: str, replicas: int) -> DeploymentView:
        if replicas < 0:
            raise ServingError("invalid_parameters", f"replicas must be 0 or more, not {replicas}")
        dep = self._get(deployment)
        live = [r for r in dep.replicas if r.ready]
        if replicas > len(live):
            spec = dep.spec.model_copy(update={"replicas": replicas})
            new, _, _ = self._start(spec, dep.spec.version, replicas - len(live))
            live += new
        dep.replicas = live[:replicas]
        dep.spec = dep.spec.model_copy(update={"replicas": replicas})
        return self._view(dep)

    def undeploy(self, deployment: str) -> DeploymentView:
        dep = self._get(deployment)
        view = self._view(dep)
        del self.items[deployment]
        self.http.unregister(self.episode_id, deployment)
        return view

    def get(self, deployment: str) -> DeploymentView:
        return self._view(self._get(deployment))

    def list(self) -> builtins.list[DeploymentView]:
        return [self._view(self.items[n]) for n in sorted(self.items)]

    def start_feature_service(self, bucket: str, key: str, id_column: str) -> None:
        if self.features is not None:
            return
        data = self.store.peek(bucket, key)
        if data is None:
            raise ServingError(
                "unavailable", f"the feature service did not start: s3://{bucket}/{key} does not exist"
            )
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(pa.BufferReader(data))
        if id_column not in table.column_names:
            raise ServingError(
                "unavailable", f"the feature service did not start: no column {id_column!r} in {key}"
            )
        ids = [str(x) for x in table.column(id_column).to_pylist()]
        others = [c for c in table.column_names if c != id_column]
        columns = [table.column(c).to_pylist() for c in others]
        self.feature_columns = others
        self.features = {i: [_json_value(col[k]) for col in columns] for k, i in enumerate(ids)}
        self.world.clock.charge(self.cal.feature_service_start_s)
        self._new_feature_replica()
        self.http.register(self.episode_id, FEATURE_SERVICE)

    def _new_feature_replica(self) -> None:
        now = self.world.clock.monotonic()
        n = 1 if self.feature_replica is None else int(self.feature_replica.id[1:]) + 1
        self.feature_replica = _Replica(
            f"f{n}",
            "",
            HttpMetrics("feature-service"),
            self.cal.feature_service_rss_mb,
            busy_until=now,
            stats_at=now,
        )
        self.feature_log.append(
            f"INFO mlsandbox.feature_service: serving {len(self.features or {})} entities"
        )

    def _feature_target(self) -> Any:
        if self.features is None or self.feature_replica is None:
            raise ServingError("unavailable", "the feature service is not running (no deployment yet)")
        return self.http.get(self.episode_id, FEATURE_SERVICE)

    def feature_service_health(self, *, timeout_s: float = 2.0) -> ServiceHealth:
        target = self._feature_target()
        status, delay = (None, 0.0) if target is None else target.draw()
        lookup_ms = self.cal.feature_lookup_ms.value({"one": 1.0, "rows_per_request": 1.0}, 0.0)
        ms = round(1000.0 * delay + lookup_ms, 1)
        if status is not None:
            body = orjson.dumps({"error": "internal fault", "status": status}).decode()
            return ServiceHealth(
                service=FEATURE_SERVICE, healthy=False, latency_ms=ms, error=f"HTTP {status}: {body}"
            )
        return ServiceHealth(service=FEATURE_SERVICE, healthy=True, latency_ms=ms)

    def restart_feature_service(self) -> ServiceHealth:
        target = self._feature_target()
        if target is not None:
            target.fault = None  # the fault was the old process's state
        # A start takes its calibrated time; no request is answered meanwhile (none is sent: no ticker
        # runs while an operation is charged).
        self.world.clock.charge(self.cal.feature_service_start_s)
        self._new_feature_replica()
        return self.feature_service_health()

    def feature_service_logs(self, tail: int = 50) -> str:
        self._feature_target()
        lines = self.feature_log if tail <= 0 else self.feature_log[-tail:]
        return "".join(line + "\n" for line in lines)

    def request(
        self,
        deployment: str,
        path: str,
        body: bytes,
        *,
        timeout_s: float,
        content_type: str = "application/json",
    ) -> ServingResponse:
        dep = self._get(deployment)
        ready = [r for r in dep.replicas if r.ready]
        if not ready:
            raise ServingError("unavailable", f"deployment {deployment!r} has no replica")
        replica = ready[next(dep.rr) % len(ready)]
        now = self.world.clock.monotonic()
        status, payload, rows, by_entity, fetch_s = self._answer(dep, path, body)
        target: HttpTarget | None = self.http.get(self.episode_id, deployment)
        fault_status, delay = (None, 0.0) if target is None else target.draw()
        model = self.cal.service_ms.get(dep.algorithm) or next(iter(self.cal.service_ms.values()))
        features = {
            "one": 1.0,
            "rows_per_request": float(max(rows, 1)),
            "by_entity": 1.0 if by_entity else 0.0,
            "cpus": dep.spec.machine.cpus,
        }
        service = model.value(features, self.rng.gauss(0, 1)) / 1000.0
        service /= min(1.0, max(dep.spec.machine.cpus, 0.05))
        service += fetch_s + delay
        if fault_status is not None:
            status = fault_status
            payload = orjson.dumps({"error": "internal fault", "status": fault_status})
        start = max(now, replica.busy_until)
        finish = start + service
        replica.busy_until = finish
        replica.busy_s += service
        latency = finish - now
        replica.metrics.observe(path, status, latency)
        if latency > timeout_s:
            self._wait(timeout_s)
            raise ServingError("timeout", f"deployment {deployment!r} did not answer within {timeout_s} s")
        self._wait(latency)
        return ServingResponse(
            status=status, body=payload, content_type="application/json", elapsed_s=latency
        )

    def _wait(self, seconds: float) -> None:
        """The agent's own request waits for its answer; production traffic's do not move the clock."""
        if not self.world.clock.in_ticker:
            self.world.clock.charge(seconds)

    def _answer(self, dep: _Deployment, path: str, body: bytes) -> tuple[int, bytes, int, bool, float]:
        """(status, body, rows, by entity ids, feature fetch seconds) as the model server answers."""
        from mlsandbox.workloads.model_server import RequestError, _err, columns_from_body

        served = dep.served
        if path != "/predict":
            return 404, orjson.dumps({"detail": "Not Found"}), 0, False, 0.0
        fetch_s = 0.0
        by_entity = False
        try:
            try:
                req = orjson.loads(body)
            except orjson.JSONDecodeError as e:
                raise RequestError(422, [_err(["body"], f"JSON decode error: {e}", "json_invalid")]) from None
            if not isinstance(req, dict):
                raise RequestError(422, [_err(["body"], "Input should be a valid object", "dict_type")])
            if "entity_ids" in req:
                by_entity = True
                cols, fetch_s = self._fetch(served, req["entity_ids"])
                answered = self._by_entity(dep, req["entity_ids"])
                if answered is not None:
                    return 200, _ok_body(served, *answered), len(answered[0]), by_entity, fetch_s
            else:
                cols = columns_from_body(served, req)
            n = len(cols[served.columns[0][0]]) if served.columns else 0
            if n == 0:
                raise RequestError(422, [_err(["body"], "no rows to predict", "too_short")])
            try:
                labels, proba = served.predict(_scoring_frame(served, cols))
            except (ValueError, TypeError) as e:
                raise RequestError(400, f"the model cannot score this input: {e}") from None
        except RequestError as e:
            return e.status, orjson.dumps({"detail": e.detail}), 0, by_entity, fetch_s
        return 200, _ok_body(served, labels, proba), n, by_entity, fetch_s

    def _by_entity(self, dep: _Deployment, ids: builtins.list[Any]) -> tuple[builtins.list[Any], Any] | None:
        """The answer to a by-entity request whose ids were fetched: each entity's prediction (and
        probability) as the served model scores the feature service's row of it. Production traffic asks
        for one or a few entities hundreds of times a minute, so the whole population is scored once per
        served version (a model scores each row on its own: a batch gives each row the answer a request
        of that row alone gets) and each request looks its entities up. None when the population cannot
        be scored in one batch; the request is then scored on its own, as before."""
        served, table = dep.served, self.features
        if table is None:
            return None
        if dep.scored is None or dep.scored[0] is not served or dep.scored[1] is not table:
            dep.scored = (served, table, self._score_population(served, table))
        memo = dep.scored[2]
        if not memo:
            return None
        rows = [memo[str(i)] for i in ids]
        labels = [label for label, _ in rows]
        proba = None if rows[0][1] is None else [p for _, p in rows]
        return labels, proba

    def _score_population(
        self, served: Any, table: dict[str, builtins.list[Any]]
    ) -> dict[str, tuple[Any, Any]]:
        index = {c: k for k, c in enumerate(self.feature_columns)}
        ids = list(table)
        try:
            cols = {c: [table[i][index[c]] for i in ids] for c, _ in served.columns}
            labels, proba = served.predict(_scoring_frame(served, cols))
        except (ValueError, TypeError, KeyError):  # scored request by request instead, errors included
            return {}
        return {i: (labels[k], None if proba is None else proba[k]) for k, i in enumerate(ids)}

    def _fetch(self, served: Any, ids: Any) -> tuple[dict[str, builtins.list[Any]], float]:
        from mlsandbox.workloads.model_server import RequestError, _err

        if self.features is None or self.feature_replica is None:
            raise RequestError(400, "this server has no feature service: send features, not entity_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str | int) for i in ids):
            raise RequestError(
                422, [_err(["body", "entity_ids"], "Input should be a non-empty list of ids", "list_type")]
            )
        fr = self.feature_replica
        now = self.world.clock.monotonic()
        lookup = (
            self.cal.feature_lookup_ms.value(
                {"one": 1.0, "rows_per_request": float(len(ids))}, self.rng.gauss(0, 1)
            )
            / 1000.0
        )
        target = self.http.get(self.episode_id, FEATURE_SERVICE)
        fault_status, delay = (None, 0.0) if target is None else target.draw()
        start = max(now, fr.busy_until)
        finish = start + lookup + delay
        fr.busy_until = finish
        fr.busy_s += lookup
        fetch_s = finish - now
        if fault_status is not None:
            fr.metrics.observe("/features", fault_status, fetch_s)
            raise RequestError(502, f"feature service answered {fault_status}")
        if fetch_s > 2.0:  # the model server's --feature-timeout
            fr.metrics.observe("/features", 200, fetch_s)
            raise RequestError(504, "feature service timed out")
        fr.metrics.observe("/features", 200, fetch_s)
        missing = [i for i in ids if str(i) not in self.features]
        if missing:
            pos = {str(i): k for k, i in enumerate(ids)}
            raise RequestError(
                404,
                [
                    _err(["body", "entity_ids", pos.get(str(i), 0)], f"unknown entity {i!r}", "not_found")
                    for i in missing[:20]
                ],
            )
        index = {c: k for k, c in enumerate(self.feature_columns)}
        absent = [c for c, _ in served.columns if c not in index]
        if absent:
            raise RequestError(502, f"feature service has no column(s) {absent} the model needs")
        cols: dict[str, list[Any]] = {c: [] for c, _ in served.columns}
        for i in ids:
            row = self.features[str(i)]
            for c, _ in served.columns:
                cols[c].append(row[index[c]])
        return cols, fetch_s

    def replicas(self) -> dict[str, builtins.list[ReplicaRef]]:
        out = {
            name: [ReplicaRef(target=name, replica=r.id, ready=r.ready) for r in dep.replicas]
            for name, dep in self.items.items()
        }
        if self.feature_replica is not None:
            out[FEATURE_SERVICE] = [
                ReplicaRef(target=FEATURE_SERVICE, replica=self.feature_replica.id, ready=True)
            ]
        return out

    def _replica_of(self, ref: ReplicaRef) -> _Replica:
        if ref.target == FEATURE_SERVICE:
            if self.feature_replica is not None and self.feature_replica.id == ref.replica:
                return self.feature_replica
        else:
            dep = self.items.get(ref.target)
            for r in dep.replicas if dep is not None else []:
                if r.id == ref.replica:
                    return r
        raise ServingError("unavailable", f"replica {ref.replica} of {ref.target!r} is gone")

    def scrape(self, ref: ReplicaRef, *, timeout_s: float) -> str:
        r = self._replica_of(ref)
        if not r.ready:
            raise ServingError("unavailable", f"replica {ref.replica} of {ref.target!r} is not ready")
        from prometheus_client import generate_latest

        return generate_latest(r.metrics.registry).decode()

    def stats(self, ref: ReplicaRef) -> ReplicaStats:
        r = self._replica_of(ref)
        now = self.world.clock.monotonic()
        span = now - r.stats_at
        cpu = None
        if span > 0:
            cpu = min(100.0 * max(1.0, 1.0), (r.busy_s - r.stats_busy) / span * self.cal.cpu_percent_busy)
        r.stats_at, r.stats_busy = now, r.busy_s
        return ReplicaStats(
            cpu_percent=None if cpu is None else round(cpu, 2), memory_mb=round(r.memory_mb, 1)
        )

    def credits_per_second(self) -> float:
        return sum(dep.spec.replicas * dep.spec.machine.credits_per_second for dep in self.items.values())

    def close(self) -> None:
        for name in list(self.items):
            self.http.unregister(self.episode_id, name)
        self.items.clear()
        if self.feature_replica is not None:
            self.http.unregister(self.episode_id, FEATURE_SERVICE)
        self.features = None
        self.feature_replica = None
        self.closed = True
        if self.owner.episodes.get(self.episode_id) is self:
            del self.owner.episodes[self.episode_id]


def _scoring_frame(served: Any, cols: dict[str, builtins.list[Any]]) -> Any:
    """The frame the model server scores (its batcher's): the served model's columns in order, numbers
    as float64, the rest as given."""
    import pandas as pd

    frame = pd.DataFrame({c: cols[c] for c, _ in served.columns}, columns=[c for c, _ in served.columns])
    for c, kind in served.columns:
        if kind == "number":
            frame[c] = frame[c].astype("float64")
    return frame


def _ok_body(served: Any, labels: builtins.list[Any], proba: Any) -> bytes:
    """The model server's answer to a request it scored: predictions, the model and version served, and
    the probabilities when the model gives them."""
    out: dict[str, Any] = {"predictions": labels, "model": served.name, "version": served.version}
    if proba is not None:
        out["probabilities"] = proba
    return orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


__all__ = ["SimEpisodeServing", "SimServing"]
