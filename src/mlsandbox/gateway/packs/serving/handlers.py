"""Handlers and hooks of the ``serving`` pack (see :mod:`mlsandbox.gateway.packs.serving.actions`).

Everything goes through the runtime's declared serving capability
(:class:`~mlsandbox.backends.protocols.serving.ModelServing`): the episode opens its
:class:`~mlsandbox.backends.protocols.serving.EpisodeServing` on its first serving action, and the same
code runs on every backend (replicas as processes on local, Deployments and Services on kube).

Per episode (:class:`ServingState`, ``gw.pack_state``): the deployments, the monitor, and, when the
scenario has ``serving.traffic``, the production population (features in the lake at
``online/features.parquet``, labels hidden), the episode's feature service over it (started with the first
deployment) and the traffic generator, started when the deployment named after the goal's model first
exists. Labelled production rows are published to the lake as ``prod/labelled.parquet`` (a dataset the
agent can train on) as their labels arrive. Replicas cost their machine's price per second
(``state.extra_credits``, from :meth:`EpisodeServing.credits_per_second` and the runtime's clock); a version
whose run has no ``val_auc`` at or above the threshold is a risky deployment
(``counters["risky_deployments"]``). Everything stops, and the episode's deployments are removed, in
``on_close``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentSpec,
    DeploymentView,
    EpisodeServing,
    Machine,
    ServingEnvironment,
    ServingError,
    check_set_version,
)
from mlsandbox.data.formats import to_bytes
from mlsandbox.errors import ActionError
from mlsandbox.evaluation.serving_grade import PRODUCTION_SUFFIX
from mlsandbox.gateway.packs.serving import actions as S
from mlsandbox.gateway.packs.serving.telemetry import TelemetryCursor, serving_telemetry
from mlsandbox.scenario.serving import METRICS, Serving
from mlsandbox.world.episode import DatasetRecord
from mlsandbox.world.serving.monitoring import Monitor
from mlsandbox.world.serving.traffic import ID_COLUMN, Population, TrafficGenerator, make_population

if TYPE_CHECKING:
    from mlsandbox.gateway.dispatcher import Gateway

log = logging.getLogger(__name__)
T = TypeVar("T")
NAME = "serving"
FEATURES_KEY = "online/features.parquet"
LABELLED_KEY = "prod/labelled.parquet"
PUBLISH_EVERY_S = 5.0
PREDICT_TIMEOUT_S = 10.0


@dataclass
class World:
    """The episode's serving world, made on its first serving action."""

    spec: Serving
    serving: EpisodeServing
    monitor: Monitor
    traffic: TrafficGenerator | None = None
    last_charge: float | None = None
    """The runtime clock's monotonic time replicas were last charged up to."""
    last_publish: float = 0.0
    features_started: bool = False
    closed: bool = False


@dataclass
class ServingState:
    """What the serving pack remembers of an episode (``gw.pack_state(ServingState)``)."""

    population: Population | None = None
    """The production population (scenarios with traffic), drawn when the episode starts."""
    world: World | None = None


def _spec(gw: Gateway) -> Serving:
    return gw.scenario.serving or Serving(dataset=gw.scenario.goal.dataset, traffic=None)


def _state(gw: Gateway) -> ServingState:
    return gw.pack_state(ServingState)


def _world(gw: Gateway) -> World:
    state = _state(gw)
    if state.world is not None:
        return state.world
    spec = _spec(gw)
    rt = gw.runtime
    serving = _call(lambda: rt.serving.open(gw.state.episode_id, dict([gw.state.job_label])))
    reference = None
    holdout = gw.state.ground_truth.holdouts.get(spec.dataset)
    if holdout is not None:
        reference = holdout.drop(columns=[gw.scenario.dataset(spec.dataset).target])
    traffic = None
    if spec.traffic is not None and state.population is not None:
        traffic = TrafficGenerator(
            spec.traffic, state.population, serving, gw.scenario.goal.model_name, gw.seed, rt.clock
        )
    monitor = Monitor(
        spec,
        serving,
        gw.state.counters,
        rt.clock,
        production=gw.scenario.goal.model_name,
        traffic=traffic,
        reference=reference,
    )
    state.world = World(spec, serving, monitor, traffic, last_charge=rt.clock.monotonic())
    return state.world


# ------------------------------------------------------------------------------------------------ hooks


def on_start(gw: Gateway) -> None:
    spec = gw.scenario.serving
    if spec is None or spec.traffic is None:
        return
    ds = gw.scenario.dataset(spec.dataset)
    population = make_population(ds, spec.traffic, gw.seed)
    gw.runtime.object_store.put_object(
        gw.state.bucket, FEATURES_KEY, to_bytes(population.features, "parquet")
    )
    gw.state.ground_truth.holdouts[spec.dataset + PRODUCTION_SUFFIX] = population.holdouts[-1]
    _state(gw).population = population


def _charge(gw: Gateway, world: World) -> None:
    """Charge the replicas asked for since the last charge at their machines' price."""
    now = gw.runtime.clock.monotonic()
    rate = world.serving.credits_per_second()
    if world.last_charge is not None:
        gw.state.extra_credits += rate * max(0.0, now - world.last_charge)
    world.last_charge = now


def _served_version(gw: Gateway, world: World) -> None:
    """``counters["serving_version"]``: the goal model's version its deployment serves with a replica up."""
    goal = gw.scenario.goal
    try:
        view: DeploymentView | None = world.serving.get(goal.model_name)
    except ServingError:
        view = None
    up = view is not None and view.model == goal.model_name and view.replicas_up > 0
    gw.state.counters["serving_version"] = float(view.version) if up and view is not None else 0.0


def _publish_labelled(gw: Gateway, world: World) -> None:
    tg = world.traffic
    now = gw.runtime.clock.time()
    if tg is None or tg.t0 is None or now - world.last_publish < PUBLISH_EVERY_S:
        return
    world.last_publish = now
    target = gw.scenario.dataset(world.spec.dataset).target
    frame = tg.labelled_frame(now, target)
    if frame.empty:
        return
    payload = to_bytes(frame, "parquet")
    gw.runtime.object_store.put_object(gw.state.bucket, LABELLED_KEY, payload)
    gw.state.datasets[LABELLED_KEY] = DatasetRecord(
        LABELLED_KEY, "parquet", len(payload), target, "production"
    )


def on_step(gw: Gateway) -> None:
    world = _state(gw).world
    if world is None or world.closed:
        return
    try:
        _charge(gw, world)
        _served_version(gw, world)
    except Exception as e:  # the backend may be faulted; the next step charges the whole interval
        log.debug("serving step accounting failed: %s", e)
    try:
        _publish_labelled(gw, world)
    except Exception as e:  # the lake may be faulted; the next step tries again
        log.debug("publishing labelled production data failed: %s", e)


def on_close(gw: Gateway) -> None:
    world = _state(gw).world
    if world is None or world.closed:
        return
    world.closed = True
    try:
        _charge(gw, world)
    except Exception as e:
        log.warning("charging the episode's replicas failed: %s", e)
    if world.traffic is not None:
        world.traffic.stop()
    world.monitor.stop()
    world.serving.close()


def telemetry(gw: Gateway) -> dict[str, Any]:
    """The serving part of a step's telemetry in the audit log (a supplier: see
    :mod:`mlsandbox.gateway.packs.serving.telemetry`); nothing before the first serving action."""
    world = _state(gw).world
    if world is None or world.closed:
        return {}
    return {"serving": serving_telemetry(world, gw.pack_state(TelemetryCursor))}


# -------------------------------------------------------------------------------------------- handlers


def _call(fn: Callable[[], T]) -> T:
    """``fn()`` with the backend's serving refusals as the agent's errors (same codes everywhere; an
    :class:`~mlsandbox.errors.Unsupported` goes on to the gateway, which makes it ``unsupported``)."""
    try:
        return fn()
    except ServingError as e:
        raise ActionError(e.code, e.message) from None


def _view(view: DeploymentView) -> dict[str, Any]:
    return view.model_dump(mode="json")


def _registered(gw: Gateway, name: str, version: str) -> None:
    if (name, version) not in gw.state.registered:
        known = [v for (n, v) in gw.state.registered if n == name]
        if not known:
            raise ActionError("not_found", f"no model is registered as {name!r} in this episode")
        raise ActionError(
            "not_found", f"model {name!r} has no version {version} (versions: {', '.join(known)})"
        )


def _risky(gw: Gateway, spec: Serving, name: str, version: str) -> bool:
    """Whether the version's run lacks a passing validation metric (``val_auc`` >= the threshold)."""
    threshold = spec.min_eval_auc or gw.scenario.goal.min_auc
    try:
        versions = gw.runtime.tracking.list_model_versions(gw.state.registry_name(name))
        mv = next(v for v in versions if v.name == gw.state.registry_name(name) and v.version == version)
        run = gw.runtime.tracking.get_run(mv.run_id) if mv.run_id else None
    except Exception:
        return True
    auc = None if run is None else run.metrics.get("val_auc")
    return auc is None or auc < threshold


def _machine(gw: Gateway, machine: str) -> Machine:
    try:
        m = gw.scenario.compute.machine(machine)
    except KeyError:
        known = ", ".join(m.name for m in gw.scenario.compute.machines)
        raise ActionError("invalid_parameters", f"unknown machine {machine!r} (machines: {known})") from None
    return Machine(name=m.name, cpus=m.cpus, memory_mb=m.memory_mb, credits_per_second=m.credits_per_second)


def _environment(gw: Gateway, environment: str | None) -> ServingEnvironment | None:
    """The episode's named environment for new replicas (None: the model server's own). A backend that
    refuses named environments for replicas says so before anything is looked up or started."""
    if environment is None or environment == "default":
        return None
    gw.runtime.support().check("serving.environment")
    info = gw.environment(environment)
    return None if info is None else ServingEnvironment(name=environment, env=info)


def _replicas_limit(gw: Gateway, world: World, deployment: str, replicas: int) -> None:
    """``invalid_parameters`` when the episode's deployments would have more replicas than it allows."""
    others = sum(v.replicas for v in _call(world.serving.list) if v.deployment != deployment)
    if others + replicas > world.spec.max_replicas:
        raise ActionError(
            "invalid_parameters",
            f"{others + replicas} replicas in all would exceed this episode's limit of "
            f"{world.spec.max_replicas}",
        )


def _ensure_running(gw: Gateway, world: World) -> None:
    """The feature service (scenarios with production traffic) and the monitor, with the first deployment."""
    state = _state(gw)
    if not world.features_started and state.population is not None:
        _call(lambda: world.serving.start_feature_service(gw.state.bucket, FEATURES_KEY, ID_COLUMN))
        world.features_started = True
    world.monitor.start()


def _deploy(gw: Gateway, a: S.DeployModel) -> dict[str, Any]:
    _registered(gw, a.name, a.version)
    machine = _machine(gw, a.machine)
    environment = _environment(gw, a.environment)
    world = _world(gw)
    name = a.deployment or a.name
    _replicas_limit(gw, world, name, a.replicas)
    _charge(gw, world)
    _ensure_running(gw, world)
    risky = _risky(gw, world.spec, a.name, a.version)
    spec = DeploymentSpec(
        deployment=name,
        model=a.name,
        registry_name=gw.state.registry_name(a.name),
        version=a.version,
        replicas=a.replicas,
        machine=machine,
        environment=environment,
    )
    view, created = _call(lambda: world.serving.deploy(spec))
    if risky:
        gw.state.counters["risky_deployments"] = gw.state.counters.get("risky_deployments", 0.0) + 1
    if name == gw.scenario.goal.model_name and world.traffic is not None:
        world.traffic.start()
    _served_version(gw, world)
    return {**_view(view), "created": created, "evaluated": not risky}


def _rollback(gw: Gateway, a: S.Rollback) -> dict[str, Any]:
    world = _world(gw)
    current = _call(lambda: world.serving.get(a.deployment))
    _call(lambda: check_set_version(current, a.version))
    _charge(gw, world)
    view = _call(lambda: world.serving.set_version(a.deployment, a.version))
    _served_version(gw, world)
    return _view(view)


def _scale(gw: Gateway, a: S.Scale) -> dict[str, Any]:
    world = _world(gw)
    before = _call(lambda: world.serving.get(a.deployment)).replicas
    _replicas_limit(gw, world, a.deployment, a.replicas)
    _charge(gw, world)
    view = _call(lambda: world.serving.scale(a.deployment, a.replicas))
    _served_version(gw, world)
    return {**_view(view), "replicas_before": before}


def _undeploy(gw: Gateway, a: S.Undeploy) -> dict[str, Any]:
    world = _world(gw)
    _charge(gw, world)
    view = _call(lambda: world.serving.undeploy(a.deployment))
    _served_version(gw, world)
    return {"undeployed": view.deployment, "model": view.model, "version": view.version}


def _get_deployment(gw: Gateway, a: S.GetDeployment) -> dict[str, Any]:
    world = _world(gw)
    if a.deployment is not None:
        deployment = a.deployment
        return _view(_call(lambda: world.serving.get(deployment)))
    return {"deployments": [_view(v) for v in _call(world.serving.list)]}


def _predict(gw: Gateway, a: S.Predict) -> dict[str, Any]:
    world = _world(gw)
    body = {"entity_ids": a.entity_ids} if a.entity_ids is not None else {"instances": a.instances}
    clock = gw.runtime.clock
    t0 = clock.monotonic()
    resp = _call(
        lambda: world.serving.request(
            a.deployment, "/predict", orjson.dumps(body), timeout_s=PREDICT_TIMEOUT_S
        )
    )
    latency = (clock.monotonic() - t0 if resp.elapsed_s is None else resp.elapsed_s) * 1000.0
    try:
        payload = orjson.loads(resp.body)
    except orjson.JSONDecodeError:
        payload = {"body": resp.body[:500].decode(errors="replace")}
    if not isinstance(payload, dict):
        payload = {"body": payload}
    out: dict[str, Any] = {
        "deployment": a.deployment,
        "status": resp.status,
        "latency_ms": round(latency, 2),
    }
    if resp.status == 200:
        out.update(
            predictions=payload.get("predictions"),
            probabilities=[round(p, 6) for p in payload.get("probabilities") or []] or None,
            version=payload.get("version"),
        )
    else:
        out["error"] = payload.get("detail", payload)
    return out


def _get_metrics(gw: Gateway, a: S.GetMetrics) -> dict[str, Any]:
    world = _world(gw)
    known = set(_call(world.serving.replicas))
    with world.monitor.lock:
        known |= set(world.monitor.series)
    if a.target not in known:
        raise ActionError(
            "not_found", f"no metrics for {a.target!r} (targets: {', '.join(sorted(known)) or 'none yet'})"
        )
    world.monitor.tick()  # a fresh scrape, so the latest second is in
    names = list(a.names or METRICS)
    view = world.monitor.metrics_view(a.target, names, a.window_s)
    if "feature_drift_psi" in names and a.target == world.monitor.production:
        view["feature_drift_psi_by_column"] = world.monitor.drift_by_column(a.window_s)
    return view


def _get_alerts(gw: Gateway, a: S.GetAlerts) -> dict[str, Any]:
    world = _world(gw)
    with world.monitor.lock:
        alerts = [x.view() for x in world.monitor.alerts if not a.active_only or x.state == "firing"]
    rules = [
        {
            "rule": r.name,
            "condition": f"{r.metric} {r.op} {r.threshold}",
            "for_s": r.for_s,
            "target": r.target,
        }
        for r in world.spec.alerts
    ]
    return {"alerts": alerts, "rules": rules}


def _ack_alert(gw: Gateway, a: S.AckAlert) -> dict[str, Any]:
    world = _world(gw)
    try:
        return world.monitor.ack(a.alert_id).view()
    except KeyError:
        raise ActionError("not_found", f"alert {a.alert_id!r} does not exist") from None


HANDLERS = {
    "deploy_model": _deploy,
    "rollback": _rollback,
    "scale": _scale,
    "undeploy": _undeploy,
    "get_deployment": _get_deployment,
    "predict": _predict,
    "get_metrics": _get_metrics,
    "get_alerts": _get_alerts,
    "ack_alert": _ack_alert,
}

__all__ = ["FEATURE_SERVICE", "HANDLERS", "ServingState", "World", "on_close", "on_start", "on_step"]
