"""Handlers and hooks of the ``serving`` pack (see :mod:`mlsandbox.gateway.packs.serving.actions`).

Everything goes through the runtime's declared serving capability
(:class:`~mlsandbox.backends.protocols.serving.ModelServing`): the episode opens its
:class:`~mlsandbox.backends.protocols.serving.EpisodeServing` on its first serving action, and the same
code runs on every backend (replicas as processes on local, Deployments and Services on kube).

Per episode (:class:`ServingState`, ``ctx.pack_state``): the deployments, the monitor, and, when the
scenario has ``serving.traffic``, the production population (features in the lake at
``online/features.parquet``, labels hidden), the episode's feature service over it (started with the first
deployment) and the traffic generator, started when the deployment named after the goal's model first
exists. Labelled production rows are published to the lake as ``prod/labelled.parquet`` (a dataset the
agent can train on) as their labels arrive. Replicas cost their machine's price per second
(``state.extra_credits``, from :meth:`EpisodeServing.credits_per_second` and the runtime's clock); a version
whose run has no passing validation metric (the goal's metric as the trainer logs it, ``val_auc`` for ROC
AUC, in the metric's direction against the goal's bar) is a risky deployment. Replicas answer in the
serving dataset's kind's response shape. What the grade and the
reward read (the served version, risky deployments, the SLO seconds) is the episode's typed
:class:`~mlsandbox.world.episode.ServingRecord`, ``state.serving``. Everything stops, and the episode's deployments are removed, in
``on_close``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from mlsandbox.backends.protocols.faults import ServiceHealth
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
from mlsandbox.evaluation.metric_grade import metric_bar
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.serving import actions as S
from mlsandbox.gateway.packs.serving.telemetry import TelemetryCursor, serving_telemetry
from mlsandbox.scenario.serving import METRICS, Serving
from mlsandbox.tasks.kind import Metric, ResponseShape
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world.episode import DatasetRecord
from mlsandbox.world.serving.monitoring import Monitor
from mlsandbox.world.serving.traffic import ID_COLUMN, Population, TrafficGenerator, make_population

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
    """What the serving pack remembers of an episode (``ctx.pack_state(ServingState)``)."""

    population: Population | None = None
    """The production population (scenarios with traffic), drawn when the episode starts."""
    world: World | None = None


def _spec(ctx: EpisodeContext) -> Serving:
    return ctx.scenario.serving or Serving(dataset=ctx.scenario.goal.dataset, traffic=None)


def _state(ctx: EpisodeContext) -> ServingState:
    return ctx.pack_state(ServingState)


def _world(ctx: EpisodeContext) -> World:
    state = _state(ctx)
    if state.world is not None:
        return state.world
    spec = _spec(ctx)
    rt = ctx.runtime
    serving = _call(lambda: rt.serving.open(ctx.state.episode_id, dict([ctx.state.job_label])))
    reference = None
    holdout = ctx.state.ground_truth.holdouts.get(spec.dataset)
    if holdout is not None:
        reference = holdout.drop(columns=[ctx.scenario.dataset(spec.dataset).target])
    traffic = None
    if spec.traffic is not None and state.population is not None:
        traffic = TrafficGenerator(
            spec.traffic, state.population, serving, ctx.scenario.goal.model_name, ctx.seed, rt.clock
        )
    monitor = Monitor(
        spec,
        serving,
        ctx.state.serving,
        rt.clock,
        production=ctx.scenario.goal.model_name,
        traffic=traffic,
        reference=reference,
    )
    state.world = World(spec, serving, monitor, traffic, last_charge=rt.clock.monotonic())
    return state.world


# ------------------------------------------------------------------------------------------------ hooks


def on_start(ctx: EpisodeContext) -> None:
    spec = ctx.scenario.serving
    if spec is None or spec.traffic is None:
        return
    ds = ctx.scenario.dataset(spec.dataset)
    population = make_population(ds, spec.traffic, ctx.seed)
    ctx.runtime.object_store.put_object(
        ctx.state.bucket, FEATURES_KEY, to_bytes(population.features, "parquet")
    )
    ctx.state.ground_truth.production_holdouts[spec.dataset] = population.holdouts[-1]
    _state(ctx).population = population


def _charge(ctx: EpisodeContext, world: World) -> None:
    """Charge the replicas asked for since the last charge at their machines' price."""
    now = ctx.runtime.clock.monotonic()
    rate = world.serving.credits_per_second()
    if world.last_charge is not None:
        ctx.state.extra_credits += rate * max(0.0, now - world.last_charge)
    world.last_charge = now


def _served_version(ctx: EpisodeContext, world: World) -> None:
    """The serving record's ``served_version``: the goal model's version its deployment serves with a
    replica up (None: none)."""
    goal = ctx.scenario.goal
    try:
        view: DeploymentView | None = world.serving.get(goal.model_name)
    except ServingError:
        view = None
    up = view is not None and view.model == goal.model_name and view.replicas_up > 0
    ctx.state.serving.served_version = view.version if up and view is not None else None


def _publish_labelled(ctx: EpisodeContext, world: World) -> None:
    tg = world.traffic
    now = ctx.runtime.clock.time()
    if tg is None or tg.t0 is None or now - world.last_publish < PUBLISH_EVERY_S:
        return
    world.last_publish = now
    target = ctx.scenario.dataset(world.spec.dataset).target
    frame = tg.labelled_frame(now, target)
    if frame.empty:
        return
    payload = to_bytes(frame, "parquet")
    ctx.runtime.object_store.put_object(ctx.state.bucket, LABELLED_KEY, payload)
    ctx.state.datasets[LABELLED_KEY] = DatasetRecord(
        LABELLED_KEY, "parquet", len(payload), target, "production"
    )


def on_step(ctx: EpisodeContext) -> None:
    world = _state(ctx).world
    if world is None or world.closed:
        return
    try:
        _charge(ctx, world)
        _served_version(ctx, world)
    except Exception as e:  # the backend may be faulted; the next step charges the whole interval
        log.debug("serving step accounting failed: %s", e)
    try:
        _publish_labelled(ctx, world)
    except Exception as e:  # the lake may be faulted; the next step tries again
        log.debug("publishing labelled production data failed: %s", e)


def on_close(ctx: EpisodeContext) -> None:
    world = _state(ctx).world
    if world is None or world.closed:
        return
    world.closed = True
    try:
        _charge(ctx, world)
    except Exception as e:
        log.warning("charging the episode's replicas failed: %s", e)
    if world.traffic is not None:
        world.traffic.stop()
    world.monitor.stop()
    world.serving.close()


def telemetry(ctx: EpisodeContext) -> dict[str, Any]:
    """The serving part of a step's telemetry in the audit log (a supplier: see
    :mod:`mlsandbox.gateway.packs.serving.telemetry`); nothing before the first serving action."""
    world = _state(ctx).world
    if world is None or world.closed:
        return {}
    return {"serving": serving_telemetry(world, ctx.pack_state(TelemetryCursor))}


@dataclass
class FeatureService:
    """The episode's feature service as an operations service (``get_service_health``,
    ``restart_service``, ``get_logs`` with ``feature-service``)."""

    serving: EpisodeServing

    def health(self) -> ServiceHealth:
        return _call(lambda: self.serving.feature_service_health())

    def restart(self) -> ServiceHealth:
        return _call(self.serving.restart_feature_service)

    def logs(self, tail: int) -> str:
        return _call(lambda: self.serving.feature_service_logs(tail))


def episode_services(ctx: EpisodeContext) -> dict[str, FeatureService]:
    """The feature service, once the first deployment started it (a supplier)."""
    world = _state(ctx).world
    if world is None or world.closed or not world.features_started:
        return {}
    return {FEATURE_SERVICE: FeatureService(world.serving)}


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


def _registered(ctx: EpisodeContext, name: str, version: str) -> None:
    if (name, version) not in ctx.state.registered:
        known = [v for (n, v) in ctx.state.registered if n == name]
        if not known:
            raise ActionError("not_found", f"no model is registered as {name!r} in this episode")
        raise ActionError(
            "not_found", f"model {name!r} has no version {version} (versions: {', '.join(known)})"
        )


def _validation_bar(ctx: EpisodeContext, spec: Serving) -> tuple[Metric, float]:
    """The metric a deployed version's run must have passed on its validation split, and its bar: the
    goal's metric (the kind's default when it names none) against the goal's bar; for a goal graded by
    ROC AUC, ``val_auc`` against ``serving.min_eval_auc`` or the goal's ``min_auc``."""
    goal = ctx.scenario.goal
    data = ctx.scenario.dataset(getattr(goal, "dataset", spec.dataset))
    if getattr(goal, "by_metric", False) or goal.type == "registered_model_metric":
        holdout = ctx.state.ground_truth.holdouts.get(goal.dataset)
        if holdout is not None:
            metric, _, bar = metric_bar(goal, data, holdout)
            return metric, bar
    kind = kind_of(data)
    auc = next((m for m in kind.metrics if m.name == "roc_auc"), kind.metric())
    return auc, spec.min_eval_auc or float(getattr(goal, "min_auc", 0.75))


def _risky(ctx: EpisodeContext, spec: Serving, name: str, version: str) -> bool:
    """Whether the version's run lacks a passing validation metric (see :func:`_validation_bar`: the
    trainer's ``val_<metric>`` in the metric's direction; ``val_auc`` >= the threshold for ROC AUC)."""
    metric, bar = _validation_bar(ctx, spec)
    try:
        versions = ctx.runtime.tracking.list_model_versions(ctx.state.registry_name(name))
        mv = next(v for v in versions if v.name == ctx.state.registry_name(name) and v.version == version)
        run = ctx.runtime.tracking.get_run(mv.run_id) if mv.run_id else None
    except Exception:
        return True
    value = None if run is None else run.metrics.get(metric.logged)
    return value is None or not metric.better(float(value), bar)


def _response(ctx: EpisodeContext, spec: Serving) -> ResponseShape | None:
    """What the deployments answer: the serving dataset's kind's response shape."""
    return kind_of(ctx.scenario.dataset(spec.dataset)).serving.shape


def _machine(ctx: EpisodeContext, machine: str) -> Machine:
    try:
        m = ctx.scenario.compute.machine(machine)
    except KeyError:
        known = ", ".join(m.name for m in ctx.scenario.compute.machines)
        raise ActionError("invalid_parameters", f"unknown machine {machine!r} (machines: {known})") from None
    return Machine(name=m.name, cpus=m.cpus, memory_mb=m.memory_mb, credits_per_second=m.credits_per_second)


def _environment(ctx: EpisodeContext, environment: str | None) -> ServingEnvironment | None:
    """The episode's named environment for new replicas (None: the model server's own). A backend that
    refuses named environments for replicas says so before anything is looked up or started."""
    if environment is None or environment == "default":
        return None
    ctx.runtime.support().check("serving.environment")
    info = ctx.environment(environment)
    return None if info is None else ServingEnvironment(name=environment, env=info)


def _replicas_limit(ctx: EpisodeContext, world: World, deployment: str, replicas: int) -> None:
    """``invalid_parameters`` when the episode's deployments would have more replicas than it allows."""
    others = sum(v.replicas for v in _call(world.serving.list) if v.deployment != deployment)
    if others + replicas > world.spec.max_replicas:
        raise ActionError(
            "invalid_parameters",
            f"{others + replicas} replicas in all would exceed this episode's limit of "
            f"{world.spec.max_replicas}",
        )


def _ensure_running(ctx: EpisodeContext, world: World) -> None:
    """The feature service (scenarios with production traffic) and the monitor, with the first deployment."""
    state = _state(ctx)
    if not world.features_started and state.population is not None:
        _call(lambda: world.serving.start_feature_service(ctx.state.bucket, FEATURES_KEY, ID_COLUMN))
        world.features_started = True
    world.monitor.start()


def handle_deploy_model(ctx: EpisodeContext, a: S.DeployModel) -> dict[str, Any]:
    _registered(ctx, a.name, a.version)
    machine = _machine(ctx, a.machine)
    environment = _environment(ctx, a.environment)
    world = _world(ctx)
    name = a.deployment or a.name
    _replicas_limit(ctx, world, name, a.replicas)
    _charge(ctx, world)
    _ensure_running(ctx, world)
    risky = _risky(ctx, world.spec, a.name, a.version)
    spec = DeploymentSpec(
        deployment=name,
        model=a.name,
        registry_name=ctx.state.registry_name(a.name),
        version=a.version,
        replicas=a.replicas,
        machine=machine,
        environment=environment,
        response=_response(ctx, world.spec),
    )
    view, created = _call(lambda: world.serving.deploy(spec))
    if risky:
        ctx.state.serving.risky_deployments += 1
    if name == ctx.scenario.goal.model_name and world.traffic is not None:
        world.traffic.start()
    _served_version(ctx, world)
    return {**_view(view), "created": created, "evaluated": not risky}


def handle_rollback(ctx: EpisodeContext, a: S.Rollback) -> dict[str, Any]:
    world = _world(ctx)
    current = _call(lambda: world.serving.get(a.deployment))
    _call(lambda: check_set_version(current, a.version))
    _charge(ctx, world)
    view = _call(lambda: world.serving.set_version(a.deployment, a.version))
    _served_version(ctx, world)
    return _view(view)


def handle_scale(ctx: EpisodeContext, a: S.Scale) -> dict[str, Any]:
    world = _world(ctx)
    before = _call(lambda: world.serving.get(a.deployment)).replicas
    _replicas_limit(ctx, world, a.deployment, a.replicas)
    _charge(ctx, world)
    view = _call(lambda: world.serving.scale(a.deployment, a.replicas))
    _served_version(ctx, world)
    return {**_view(view), "replicas_before": before}


def handle_undeploy(ctx: EpisodeContext, a: S.Undeploy) -> dict[str, Any]:
    world = _world(ctx)
    _charge(ctx, world)
    view = _call(lambda: world.serving.undeploy(a.deployment))
    _served_version(ctx, world)
    return {"undeployed": view.deployment, "model": view.model, "version": view.version}


def handle_get_deployment(ctx: EpisodeContext, a: S.GetDeployment) -> dict[str, Any]:
    world = _world(ctx)
    if a.deployment is not None:
        deployment = a.deployment
        return _view(_call(lambda: world.serving.get(deployment)))
    return {"deployments": [_view(v) for v in _call(world.serving.list)]}


def handle_predict(ctx: EpisodeContext, a: S.Predict) -> dict[str, Any]:
    world = _world(ctx)
    body = {"entity_ids": a.entity_ids} if a.entity_ids is not None else {"instances": a.instances}
    clock = ctx.runtime.clock
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


def handle_get_metrics(ctx: EpisodeContext, a: S.GetMetrics) -> dict[str, Any]:
    world = _world(ctx)
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


def handle_get_alerts(ctx: EpisodeContext, a: S.GetAlerts) -> dict[str, Any]:
    world = _world(ctx)
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


def handle_ack_alert(ctx: EpisodeContext, a: S.AckAlert) -> dict[str, Any]:
    world = _world(ctx)
    try:
        return world.monitor.ack(a.alert_id).view()
    except KeyError:
        raise ActionError("not_found", f"alert {a.alert_id!r} does not exist") from None


__all__ = ["FEATURE_SERVICE", "ServingState", "World", "on_close", "on_start", "on_step"]
