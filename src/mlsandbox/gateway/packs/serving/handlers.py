"""Handlers and hooks of the ``serving`` pack (see :mod:`mlsandbox.gateway.packs.serving.actions`).

Per episode (``gw.ext["serving"]``): the deployments (model-server replicas, and the feature service
started with the first deployment), the monitor, and, when the scenario has ``serving.traffic``, the
production population (features in the lake at ``online/features.parquet``, labels hidden) and the
traffic generator, started when the deployment named after the goal's model first exists. Labelled
production rows are published to the lake as ``prod/labelled.parquet`` (a dataset the agent can train
on) as their labels arrive. Replicas cost their machine's price per second (``state.extra_credits``); a
version whose run has no ``val_auc`` at or above the threshold is a risky deployment
(``counters["risky_deployments"]``). Everything stops in ``on_close``; ``mlsandbox gc`` stops the
processes of an episode whose process died.

On a runtime with ``model_serving`` (the kube backend: Deployments and Services on the cluster, see
:mod:`mlsandbox.backends.kube.serving`), deploy_model, scale, rollback, undeploy and get_deployment act on
those objects (the feature service is a Deployment too, started with the first deployment of a scenario
with traffic), replicas are charged at their machine's price, and the episode's objects are deleted when
it closes. Predictions, production traffic and metric scrapes reach the replicas through the API
server's proxy (``ServingRequests``), so the monitor, the alerts and the traffic are the same code as on
``local``; CPU and memory per replica are not read there (``null``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from mlsandbox.backends.local.serving.deployments import Deployments, Placement
from mlsandbox.backends.local.serving.processes import ProcessHost, ServingError, server_requirements
from mlsandbox.data.formats import to_bytes
from mlsandbox.errors import ActionError
from mlsandbox.evaluation.serving_grade import PRODUCTION_SUFFIX
from mlsandbox.gateway.packs.serving import actions as S
from mlsandbox.scenario.serving import METRICS, Serving
from mlsandbox.world.episode import DatasetRecord
from mlsandbox.world.serving.monitoring import FEATURE_SERVICE, Monitor
from mlsandbox.world.serving.traffic import ID_COLUMN, Population, TrafficGenerator, make_population

if TYPE_CHECKING:
    from mlsandbox.gateway.dispatcher import Gateway

log = logging.getLogger(__name__)
NAME = "serving"
FEATURES_KEY = "online/features.parquet"
LABELLED_KEY = "prod/labelled.parquet"
PUBLISH_EVERY_S = 5.0
CLUSTER_CHARGED = "cluster_charged_at"
CLUSTER_FEATURES = "cluster_feature_url"


@dataclass
class World:
    spec: Serving
    deployments: Deployments
    monitor: Monitor
    population: Population | None = None
    traffic: TrafficGenerator | None = None
    last_charge: float = field(default_factory=time.time)
    last_publish: float = 0.0
    closed: bool = False


def _spec(gw: Gateway) -> Serving:
    return gw.scenario.serving or Serving(dataset=gw.scenario.goal.dataset, traffic=None)


def _world(gw: Gateway) -> World:
    ext = gw.ext.setdefault(NAME, {})
    world = ext.get("world")
    if world is not None:
        return world
    spec = _spec(gw)
    deployments: Any
    if (cs := _cluster(gw)) is not None:
        from mlsandbox.backends.kube.serving import ServingRequests

        deployments = ServingRequests(cs, gw.state.job_label)
    else:
        rt = gw.runtime
        sandbox_dir, sandbox_name = getattr(rt, "sandbox_dir", None), getattr(rt, "sandbox_name", None)
        if sandbox_dir is None or sandbox_name is None:
            raise ActionError("unsupported", "deployments run on the local backend only")
        deployments = Deployments(ProcessHost(sandbox_dir, sandbox_name, rt.endpoints, gw.state.episode_id))
    reference = None
    holdout = gw.state.ground_truth.holdouts.get(spec.dataset)
    if holdout is not None:
        reference = holdout.drop(columns=[gw.scenario.dataset(spec.dataset).target])
    population = ext.get("population")
    traffic = None
    if spec.traffic is not None and population is not None:
        traffic = TrafficGenerator(
            spec.traffic, population, deployments, gw.scenario.goal.model_name, gw.seed
        )
    monitor = Monitor(
        spec,
        deployments,
        gw.state.counters,
        production=gw.scenario.goal.model_name,
        traffic=traffic,
        reference=reference,
    )
    world = World(spec, deployments, monitor, population, traffic)
    ext["world"] = world
    if cs is not None:
        monitor.start()  # on the cluster the deployments exist apart from the world: watch them now
    return world


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
    gw.ext.setdefault(NAME, {})["population"] = population


def _charge(gw: Gateway, world: World) -> None:
    now = time.time()
    dt, world.last_charge = now - world.last_charge, now
    with world.deployments.lock:
        deps = list(world.deployments.items.values())
    gw.state.extra_credits += sum(len(d.replicas) * d.credits_per_second * dt for d in deps)


def _served_version(gw: Gateway, world: World) -> None:
    goal = gw.scenario.goal
    with world.deployments.lock:
        dep = world.deployments.items.get(goal.model_name)
    up = dep is not None and dep.model == goal.model_name and bool(dep.live())
    gw.state.counters["serving_version"] = float(dep.version) if up and dep is not None else 0.0


def _publish_labelled(gw: Gateway, world: World) -> None:
    tg = world.traffic
    if tg is None or tg.t0 is None or time.time() - world.last_publish < PUBLISH_EVERY_S:
        return
    world.last_publish = time.time()
    target = gw.scenario.dataset(world.spec.dataset).target
    frame = tg.labelled_frame(time.time(), target)
    if frame.empty:
        return
    payload = to_bytes(frame, "parquet")
    gw.runtime.object_store.put_object(gw.state.bucket, LABELLED_KEY, payload)
    gw.state.datasets[LABELLED_KEY] = DatasetRecord(
        LABELLED_KEY, "parquet", len(payload), target, "production"
    )


def on_step(gw: Gateway) -> None:
    world = gw.ext.get(NAME, {}).get("world")
    if (cs := _cluster(gw)) is not None:
        if CLUSTER_CHARGED in gw.ext.get(NAME, {}):
            _cluster_charge(gw, cs)
    elif world is not None and not world.closed:
        _charge(gw, world)
        _served_version(gw, world)
    if world is None or world.closed:
        return
    try:
        _publish_labelled(gw, world)
    except Exception as e:  # the lake may be faulted; the next step tries again
        log.debug("publishing labelled production data failed: %s", e)


def on_close(gw: Gateway) -> None:
    world = gw.ext.get(NAME, {}).get("world")
    if (cs := _cluster(gw)) is not None:
        if world is not None and not world.closed:
            world.closed = True
            if world.traffic is not None:
                world.traffic.stop()
            world.monitor.stop()
            world.deployments.close()
        if CLUSTER_CHARGED in gw.ext.get(NAME, {}):
            _cluster_charge(gw, cs)
            cs.cleanup(gw.state.job_label)
        return
    if world is None or world.closed:
        return
    world.closed = True
    _charge(gw, world)
    if world.traffic is not None:
        world.traffic.stop()
    world.monitor.stop()
    world.deployments.close()


# -------------------------------------------------------------------------------------------- handlers


def _call(fn: Any) -> Any:
    try:
        return fn()
    except ServingError as e:
        raise ActionError(e.code, e.message) from None


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


def _machine(gw: Gateway, machine: str) -> Any:
    try:
        return gw.scenario.compute.machine(machine)
    except KeyError:
        known = ", ".join(m.name for m in gw.scenario.compute.machines)
        raise ActionError("invalid_parameters", f"unknown machine {machine!r} (machines: {known})") from None


def _placement(gw: Gateway, machine_name: str, environment: str | None) -> Placement:
    """The machine (limits, price) and environment of new replicas. A named environment serves through a
    derived one: its requirements plus the model server's own packages (built once by uv, from its cache)."""
    from mlsandbox.backends.local import venvs as envs
    from mlsandbox.gateway.packs.compute.handlers import environment_info

    machine = _machine(gw, machine_name)
    info = environment_info(gw, environment)
    python = None
    if info is not None:
        try:
            served = envs.build([*info.requirements, *server_requirements()])
        except (ValueError, envs.EnvironmentBuildError) as e:
            raise ActionError(
                "environment_build_failed",
                f"environment {environment!r} cannot run the model server: {e}",
            ) from None
        python = str(served.python)
    return Placement(
        machine.name,
        machine.cpus,
        machine.memory_mb,
        machine.credits_per_second,
        environment if info is not None else "default",
        python,
    )


def _ensure_running(gw: Gateway, world: World) -> None:
    if world.deployments.feature_service is None and world.population is not None:
        _call(lambda: world.deployments.start_feature_service(gw.state.bucket, FEATURES_KEY, ID_COLUMN))
    world.monitor.start()


def _deploy(gw: Gateway, a: S.DeployModel) -> dict[str, Any]:
    world = _world(gw)
    _registered(gw, a.name, a.version)
    placement = _placement(gw, a.machine, a.environment)
    name = a.deployment or a.name
    with world.deployments.lock:
        existing = world.deployments.items.get(name)
    total = sum(len(d.replicas) for d in world.deployments.items.values() if d is not existing) + a.replicas
    if total > world.spec.max_replicas:
        raise ActionError(
            "invalid_parameters",
            f"{total} replicas in all would exceed this episode's limit of {world.spec.max_replicas}",
        )
    _charge(gw, world)
    _ensure_running(gw, world)
    risky = _risky(gw, world.spec, a.name, a.version)
    dep, created = _call(
        lambda: world.deployments.deploy(
            name,
            a.name,
            gw.state.registry_name(a.name),
            a.version,
            a.replicas,
            placement,
        )
    )
    if risky:
        gw.state.counters["risky_deployments"] = gw.state.counters.get("risky_deployments", 0.0) + 1
    if name == gw.scenario.goal.model_name and world.traffic is not None:
        world.traffic.start()
    _served_version(gw, world)
    return {**dep.describe(), "created": created, "evaluated": not risky}


def _rollback(gw: Gateway, a: S.Rollback) -> dict[str, Any]:
    world = _world(gw)
    dep = _call(lambda: world.deployments.get(a.deployment))
    if a.version not in dep.history:
        raise ActionError(
            "conflict",
            f"deployment {a.deployment!r} never served version {a.version} "
            f"(served: {', '.join(dep.history)}); use deploy_model for a new version",
        )
    if a.version == dep.version:
        raise ActionError("conflict", f"deployment {a.deployment!r} already serves version {a.version}")
    _charge(gw, world)
    dep = _call(lambda: world.deployments.set_version(a.deployment, a.version))
    _served_version(gw, world)
    return dep.describe()


def _scale(gw: Gateway, a: S.Scale) -> dict[str, Any]:
    world = _world(gw)
    dep = _call(lambda: world.deployments.get(a.deployment))
    others = sum(len(d.replicas) for d in world.deployments.items.values() if d is not dep)
    if others + a.replicas > world.spec.max_replicas:
        raise ActionError(
            "invalid_parameters",
            f"{others + a.replicas} replicas in all would exceed this episode's limit of {world.spec.max_replicas}",
        )
    _charge(gw, world)
    before = len(dep.replicas)
    dep = _call(lambda: world.deployments.scale(a.deployment, a.replicas))
    _served_version(gw, world)
    return {**dep.describe(), "replicas_before": before}


def _undeploy(gw: Gateway, a: S.Undeploy) -> dict[str, Any]:
    world = _world(gw)
    _charge(gw, world)
    dep = _call(lambda: world.deployments.undeploy(a.deployment))
    _served_version(gw, world)
    return {"undeployed": dep.name, "model": dep.model, "version": dep.version}


def _get_deployment(gw: Gateway, a: S.GetDeployment) -> dict[str, Any]:
    world = _world(gw)
    if a.deployment is not None:
        return _call(lambda: world.deployments.get(a.deployment)).describe()  # type: ignore[arg-type]
    with world.deployments.lock:
        deps = sorted(world.deployments.items.values(), key=lambda d: d.name)
    return {"deployments": [d.describe() for d in deps]}


def _predict(gw: Gateway, a: S.Predict) -> dict[str, Any]:
    world = _world(gw)
    body = {"entity_ids": a.entity_ids} if a.entity_ids is not None else {"instances": a.instances}
    t0 = time.perf_counter()
    post = lambda: world.deployments.post(a.deployment, orjson.dumps(body), timeout_s=10.0)  # noqa: E731
    resp = _call(post) if _cluster(gw) is None else _cluster_call(post)
    latency = (time.perf_counter() - t0) * 1000.0
    try:
        payload = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        payload = {"body": resp.text[:500]}
    out: dict[str, Any] = {
        "deployment": a.deployment,
        "status": resp.status_code,
        "latency_ms": round(latency, 2),
    }
    if resp.status_code == 200:
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
    with world.deployments.lock:
        known = set(world.deployments.items) | (
            {FEATURE_SERVICE} if world.deployments.feature_service else set()
        )
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


# ------------------------------------------------------------------------- deployments on a cluster


def _cluster(gw: Gateway) -> Any | None:
    """The runtime's deployments on a cluster (``KubeServing``), None on a runtime without them."""
    return getattr(gw.runtime, "model_serving", None)


def _cluster_call(fn: Any) -> Any:
    from mlsandbox.backends.kube.serving import ServingRefused

    try:
        return fn()
    except ServingRefused as e:
        raise ActionError(e.code, e.message) from None


def _cluster_charge(gw: Gateway, cs: Any) -> None:
    """Charge the episode's replicas since the last charge (desired replicas x machine price)."""
    ext = gw.ext.setdefault(NAME, {})
    now = time.time()
    last = ext.get(CLUSTER_CHARGED)
    if last is not None:
        gw.state.extra_credits += cs.credits_per_second(gw.state.job_label) * (now - last)
    ext[CLUSTER_CHARGED] = now


def _cluster_served_version(gw: Gateway, cs: Any) -> None:
    goal = gw.scenario.goal
    try:
        view = cs.get(goal.model_name)
    except Exception:
        view = None
    up = view is not None and view["model"] == goal.model_name and view["replicas_up"] > 0
    gw.state.counters["serving_version"] = float(view["version"]) if up and view is not None else 0.0


def _cluster_replicas_check(gw: Gateway, cs: Any, name: str, replicas: int) -> None:
    limit = _spec(gw).max_replicas
    deps = _cluster_call(lambda: cs.list(gw.state.job_label))
    total = sum(d["replicas"] for d in deps if d["deployment"] != name) + replicas
    if total > limit:
        raise ActionError(
            "invalid_parameters", f"{total} replicas in all would exceed this episode's limit of {limit}"
        )


def _cluster_deploy(gw: Gateway, cs: Any, a: S.DeployModel) -> dict[str, Any]:
    from mlsandbox.backends.kube.serving import ModelServerSpec

    _registered(gw, a.name, a.version)
    machine = _machine(gw, a.machine)
    if a.environment is not None:
        raise ActionError(
            "unsupported",
            "named environments serve on the local backend only: on this backend replicas run the "
            "model-server image",
        )
    name = a.deployment or a.name
    _cluster_replicas_check(gw, cs, name, a.replicas)
    ext = gw.ext.setdefault(NAME, {})
    if ext.get("population") is not None and CLUSTER_FEATURES not in ext:
        # As on local: the episode's feature service starts with its first deployment.
        ext[CLUSTER_FEATURES] = _cluster_call(
            lambda: cs.start_feature_service(
                gw.state.bucket, FEATURES_KEY, ID_COLUMN, dict([gw.state.job_label])
            )
        )
    spec = ModelServerSpec(
        deployment=name,
        model=a.name,
        registry_name=gw.state.registry_name(a.name),
        version=a.version,
        replicas=a.replicas,
        machine=machine.name,
        cpus=machine.cpus,
        memory_mb=machine.memory_mb,
        credits_per_second=machine.credits_per_second,
        labels=dict([gw.state.job_label]),
        feature_url=ext.get(CLUSTER_FEATURES),
    )
    risky = _risky(gw, _spec(gw), a.name, a.version)
    _cluster_charge(gw, cs)
    view, created = _cluster_call(lambda: cs.deploy(spec))
    if risky:
        gw.state.counters["risky_deployments"] = gw.state.counters.get("risky_deployments", 0.0) + 1
    _cluster_served_version(gw, cs)
    if name == gw.scenario.goal.model_name:
        world = _world(gw)
        if world.traffic is not None:
            world.traffic.start()
    return {**view, "created": created, "evaluated": not risky}


def _cluster_rollback(gw: Gateway, cs: Any, a: S.Rollback) -> dict[str, Any]:
    _cluster_charge(gw, cs)
    view = _cluster_call(lambda: cs.rollback(a.deployment, a.version))
    _cluster_served_version(gw, cs)
    return dict(view)


def _cluster_scale(gw: Gateway, cs: Any, a: S.Scale) -> dict[str, Any]:
    before = _cluster_call(lambda: cs.get(a.deployment))["replicas"]
    _cluster_replicas_check(gw, cs, a.deployment, a.replicas)
    _cluster_charge(gw, cs)
    view = _cluster_call(lambda: cs.scale(a.deployment, a.replicas))
    _cluster_served_version(gw, cs)
    return {**view, "replicas_before": before}


def _cluster_undeploy(gw: Gateway, cs: Any, a: S.Undeploy) -> dict[str, Any]:
    _cluster_charge(gw, cs)
    view = _cluster_call(lambda: cs.undeploy(a.deployment))
    _cluster_served_version(gw, cs)
    return {"undeployed": view["deployment"], "model": view["model"], "version": view["version"]}


def _cluster_get_deployment(gw: Gateway, cs: Any, a: S.GetDeployment) -> dict[str, Any]:
    if a.deployment is not None:
        return dict(_cluster_call(lambda: cs.get(a.deployment)))
    return {"deployments": _cluster_call(lambda: cs.list(gw.state.job_label))}


def _or_cluster(local: Any, on_cluster: Any) -> Any:
    """The local handler, or ``on_cluster`` on a runtime whose deployments are cluster objects."""

    def handler(gw: Gateway, a: Any) -> dict[str, Any]:
        cs = _cluster(gw)
        return local(gw, a) if cs is None else on_cluster(gw, cs, a)

    return handler


HANDLERS = {
    "deploy_model": _or_cluster(_deploy, _cluster_deploy),
    "rollback": _or_cluster(_rollback, _cluster_rollback),
    "scale": _or_cluster(_scale, _cluster_scale),
    "undeploy": _or_cluster(_undeploy, _cluster_undeploy),
    "get_deployment": _or_cluster(_get_deployment, _cluster_get_deployment),
    "predict": _predict,
    "get_metrics": _get_metrics,
    "get_alerts": _get_alerts,
    "ack_alert": _ack_alert,
}
