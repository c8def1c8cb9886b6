"""Handlers and hooks of the ``flows`` pack (see :mod:`mlsandbox.gateway.packs.flows.actions`).

Per episode: one deployment per flow (named after the episode, carrying the sandbox's endpoints), made
on first use or at start when the scenario has pipelines; flow runs are known to the agent as ``fr-N``
(only its own). Upstream batches of the scenario are delivered to ``upstream/<dataset>/<batch>.csv``
(earlier days also already ingested into ``lake/``). What a completed run produced becomes visible: a
lake batch or scores as datasets, a training run's model version as registered. On close, unfinished
runs are cancelled and the runs and deployments deleted.

Environments. ``run_flow(environment=)`` passes that environment's interpreter to the flow (``python``):
training and batch-scoring do their work with it (see :mod:`mlsandbox.workloads.flows`).

Placement. A runtime with ``flow_placement`` (the kube backend) names the work pool, the runs' environment
and job variables (its Kubernetes work pool: each run a Job in the sandbox's namespace); its
``flow_cleanup`` deletes the episode's flow-run Jobs on close. Named environments are local-only.

Credits. Flows run on the sandbox's shared Prefect worker, not on a machine of the pool: each execution of
a run logs the CPU seconds its work used in its flow-run process and the processes it waited for
(``resource usage: cpu_seconds=``), and once the run is in a
final state they are charged at the budget's price per CPU second (``budget.credits_per_cpu_second``, the
rate of work without a machine) to ``state.extra_credits`` (counters ``flow_cpu_seconds`` and
``flow_credits``). A retried run is charged again for its new execution. A run whose process died before
logging its usage (crashed) is not charged.
"""

from __future__ import annotations

import io
import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from mlsandbox.errors import ActionError
from mlsandbox.gateway.packs.flows import actions as F
from mlsandbox.world.episode import DatasetRecord

if TYPE_CHECKING:
    from mlsandbox.backends.common.prefect import FlowRunView, PrefectPipelines
    from mlsandbox.gateway.dispatcher import Gateway

log = logging.getLogger(__name__)
NAME = "flows"
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
START_RUNS_TIMEOUT_S = 300.0
USAGE_PREFIX = "resource usage: cpu_seconds="
"""What a flow logs at its end (:data:`mlsandbox.workloads.flows.USAGE_PREFIX`)."""
NO_TORCH_ENV = "MLSANDBOX_NO_TORCH"
"""Set in the flow runs' environment (:data:`mlsandbox.workloads.flows.NO_TORCH_ENV`)."""
USAGE_LOG_WAIT_S = 30.0
"""How long after a run's final state its usage line may still arrive (logs are shipped in batches)."""
ENV_FLOWS = frozenset({"training", "batch-scoring"})


def _ext(gw: Gateway) -> dict[str, Any]:
    ext = gw.ext.setdefault(NAME, {})
    ext.setdefault("runs", {})  # fr-N -> {"id", "flow", "params", "accounted"}
    ext.setdefault("schemas", {})
    ext.setdefault("pending", [])  # upstream batches not delivered yet
    return ext


def _api(gw: Gateway) -> PrefectPipelines:
    ext = _ext(gw)
    if "api" not in ext:
        from mlsandbox.backends.common.prefect import FLOW_ENTRYPOINTS, WORK_POOL, PrefectPipelines
        from mlsandbox.workloads.contract import endpoint_env

        api = PrefectPipelines(gw.runtime.endpoints.prefect_api_url)
        placement = getattr(gw.runtime, "flow_placement", None)
        if placement is None:  # the sandbox's process pool; the runs reach the services as this process does
            pool, env, job_variables = WORK_POOL, endpoint_env(**gw.runtime.endpoints.model_dump()), {}
        else:  # e.g. the kube backend: Jobs of its Kubernetes work pool
            pool, env, job_variables = placement(dict([gw.state.job_label]))
        env = {
            **env,
            "MLSANDBOX_EPISODE": gw.state.episode_id,
            NO_TORCH_ENV: "1",  # the flow runs train and score scikit-learn models only
        }
        deployments = {}
        try:
            for flow in FLOW_ENTRYPOINTS:
                deployments[flow] = api.deploy(
                    flow,
                    f"ep-{gw.state.episode_id}",
                    env,
                    tags=[f"episode:{gw.state.episode_id}"],
                    work_pool=pool,
                    job_variables=job_variables,
                )
        except Exception as e:
            for dep in deployments.values():
                api.delete_deployment(dep)
            api.close()
            raise ActionError("backend_error", f"the orchestrator cannot deploy the flows: {e}") from None
        ext["api"], ext["deployments"] = api, deployments
    return ext["api"]


# ---------------------------------------------------------------------------------------- data


def _raw_frame(gw: Gateway, dataset: str) -> Any:
    for key in sorted(gw.state.datasets):
        rec = gw.state.datasets[key]
        if key.startswith(f"raw/{dataset}.") and rec.origin == "scenario":
            return gw.read(rec), rec.target
    raise ActionError("not_found", f"dataset {dataset!r} does not exist in this scenario")


def _schema(gw: Gateway, dataset: str) -> tuple[list[str], list[str]]:
    """The columns a batch of ``dataset`` must have, and those that must be numeric (from its raw data)."""
    schemas = _ext(gw)["schemas"]
    if dataset not in schemas:
        df, _ = _raw_frame(gw, dataset)
        schemas[dataset] = (list(df.columns), [c for c in df.columns if df[c].dtype.kind in "biuf"])
    return schemas[dataset]


def _put(gw: Gateway, key: str, payload: bytes, fmt: str, target: str | None, origin: str) -> None:
    gw.runtime.object_store.put_object(gw.state.bucket, key, payload)
    gw.state.datasets[key] = DatasetRecord(key, fmt, len(payload), target, origin)


def _deliver(gw: Gateway, batch: Any, frame: Any, target: str | None) -> None:
    df = frame
    if batch.problem == "renamed_column":
        df = df.rename(columns={batch.column: batch.renamed_to})
    _put(
        gw,
        f"upstream/{batch.dataset}/{batch.batch}.csv",
        df.to_csv(index=False).encode(),
        "csv",
        target,
        "upstream",
    )


def _seed(gw: Gateway) -> None:
    spec = gw.scenario.pipelines
    by_dataset: dict[str, list[Any]] = {}
    for b in spec.upstream:
        by_dataset.setdefault(b.dataset, []).append(b)
    for dataset, batches in by_dataset.items():
        df, target = _raw_frame(gw, dataset)
        required, _ = _schema(gw, dataset)
        for i, b in enumerate(batches):
            part = df.iloc[i :: len(batches)].reset_index(drop=True)
            if b.problem == "not_delivered":
                _ext(gw)["pending"].append((b, part, target))
                continue
            _deliver(gw, b, part, target)
            if b.ingested:
                buf = io.BytesIO()
                part[required].to_parquet(buf, index=False)
                _put(gw, f"lake/{dataset}/{b.batch}.parquet", buf.getvalue(), "parquet", target, "ingestion")


# ---------------------------------------------------------------------------------------- runs


def _flow_parameters(gw: Gateway, flow: str, params: dict[str, Any]) -> dict[str, Any]:
    """The agent's parameters validated, plus what binds the run to this episode (bucket, experiment,
    model-name prefix); ``invalid_parameters`` naming the field otherwise."""
    try:
        p = F.FLOW_PARAMS[flow].model_validate(params)
    except ValidationError as e:
        msg = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or '<parameters>'}: {err['msg']}"
            for err in e.errors(include_url=False)
        )
        raise ActionError("invalid_parameters", f"invalid parameters for flow {flow}: {msg}") from None
    st = gw.state
    if isinstance(p, F.IngestionParams):
        required, numeric = _schema(gw, p.dataset)
        return {
            "bucket": st.bucket,
            "dataset": p.dataset,
            "batch": p.batch,
            "required_columns": required,
            "numeric_columns": numeric,
            "rename": p.rename,
        }
    if isinstance(p, F.TrainingParams):
        _, target = _raw_frame(gw, p.dataset)
        return {
            "bucket": st.bucket,
            "dataset": p.dataset,
            "target": target,
            "experiment_id": st.experiment_id,
            "model_name": st.registry_name(p.model_name),
            "algorithm": p.algorithm,
            "hyperparams": p.hyperparams,
            "min_auc": p.min_auc,
            "seed": gw.seed,
            # The completeness check: every batch of the upstream schedule must be in the lake.
            "expected_batches": [b.batch for b in gw.scenario.pipelines.upstream if b.dataset == p.dataset],
        }
    assert isinstance(p, F.BatchScoringParams)
    if (p.version is None) == (p.alias is None):
        raise ActionError("invalid_parameters", "batch-scoring needs exactly one of version or alias")
    return {
        "bucket": st.bucket,
        "dataset": p.dataset,
        "batch": p.batch,
        "model_name": st.registry_name(p.model_name),
        "model_ref": str(p.version) if p.version is not None else p.alias,
    }


def start_run(
    gw: Gateway, flow: str, params: dict[str, Any], environment: str | None = None
) -> dict[str, Any]:
    full = _flow_parameters(gw, flow, params)
    if environment is not None and environment != "default":
        from mlsandbox.gateway.packs.compute.handlers import environment_info

        if flow not in ENV_FLOWS:
            raise ActionError(
                "invalid_parameters",
                f"flow {flow} runs in the orchestrator's environment; environment= applies to "
                f"{' and '.join(sorted(ENV_FLOWS))}",
            )
        info = environment_info(gw, environment)
        if info is not None and getattr(gw.runtime, "flow_placement", None) is not None:
            raise ActionError(
                "unsupported",
                "named environments run flows on the local backend only: here flow runs are Jobs in "
                "the trainer image",
            )
        if info is not None:
            full["python"] = str(info.python)
    api = _api(gw)
    runs = _ext(gw)["runs"]
    short = f"fr-{len(runs) + 1}"
    view = gw.backend_call(
        lambda: api.run(_ext(gw)["deployments"][flow], full, name=f"{short}-{gw.state.episode_id}")
    )
    runs[short] = {
        "id": view.id,
        "flow": flow,
        "params": dict(params),
        "accounted": False,
        "state_type": view.state_type,
        "environment": environment or "default",
        "cpu_seconds": 0.0,
        "credits": 0.0,
        "usage_lines": 0,
        "final_since": None,
    }
    return {
        "flow_run_id": short,
        "flow": flow,
        "state": view.state_name,
        "parameters": dict(params),
        "environment": environment or "default",
    }


def logged_usage(lines: list[str]) -> tuple[int, float]:
    """How many executions logged their usage, and their CPU seconds in all."""
    count, total = 0, 0.0
    for line in lines:
        if USAGE_PREFIX not in line:
            continue
        try:
            total += float(line.rsplit(USAGE_PREFIX, 1)[1].split()[0])
        except (IndexError, ValueError):
            continue
        count += 1
    return count, total


def flow_cpu_price(gw: Gateway) -> float:
    """Credits per CPU second of a flow run: the budget's price of work that runs on no machine."""
    return float(gw.scenario.budget.credits_per_cpu_second)


def _charge_usage(gw: Gateway, short: str, view: FlowRunView, api: PrefectPipelines | None = None) -> None:
    """Charge the CPU seconds a finished run logged that are not charged yet (each execution once)."""
    run = _ext(gw)["runs"][short]
    if view.state_type not in TERMINAL_STATES:
        run["final_since"] = None
        return
    executions = max(1, view.run_count)
    if run["usage_lines"] >= executions:
        return
    now = time.monotonic()
    run["final_since"] = run["final_since"] or now
    if now - run["final_since"] > USAGE_LOG_WAIT_S:
        return  # its process died before it could log its usage: nothing to charge
    api = api or _api(gw)
    count, total = logged_usage(api.log_lines_containing(run["id"], USAGE_PREFIX))
    delta = max(0.0, total - run["cpu_seconds"])
    run["usage_lines"], run["cpu_seconds"] = count, max(total, run["cpu_seconds"])
    if delta > 0:
        credits = delta * flow_cpu_price(gw)
        run["credits"] += credits
        st = gw.state
        st.extra_credits += credits
        st.counters["flow_cpu_seconds"] = st.counters.get("flow_cpu_seconds", 0.0) + delta
        st.counters["flow_credits"] = st.counters.get("flow_credits", 0.0) + credits


def _account(gw: Gateway, short: str, view: FlowRunView) -> None:
    """Make what a completed run produced visible to the episode (once per completion)."""
    run = _ext(gw)["runs"][short]
    if view.state_type != "COMPLETED" or run["accounted"]:
        return
    run["accounted"] = True
    st, p = gw.state, view.parameters
    store = gw.runtime.object_store
    if run["flow"] in ("ingestion", "batch-scoring"):
        prefix = "lake" if run["flow"] == "ingestion" else "scores"
        key = f"{prefix}/{p['dataset']}/{p['batch']}.parquet"
        size = next((o.size for o in store.list_objects(st.bucket, key) if o.key == key), 0)
        target = _raw_frame(gw, p["dataset"])[1] if prefix == "lake" else None
        st.datasets[key] = DatasetRecord(key, "parquet", size, target, f"flow:{run['flow']}")
    elif run["flow"] == "training":
        name = p["model_name"].removeprefix(st.model_prefix)
        versions = gw.runtime.tracking.list_model_versions(p["model_name"])
        known = {v for (n, v) in st.registered if n == name}
        for v in versions:
            if v.name == p["model_name"] and v.version not in known:
                st.registered.append((name, v.version))


def _refresh(gw: Gateway, short: str) -> FlowRunView:
    run = _ext(gw)["runs"][short]
    view = gw.backend_call(lambda: _api(gw).get(run["id"]))
    run["state_type"], run["run_count"] = view.state_type, view.run_count
    if view.state_type != "COMPLETED":
        run["accounted"] = False
    try:
        _account(gw, short, view)
    except Exception as e:  # the next refresh tries again
        run["accounted"] = False
        log.debug("accounting of %s failed: %s", short, e)
    try:
        _charge_usage(gw, short, view)
    except Exception as e:  # the next refresh tries again
        log.debug("charging %s failed: %s", short, e)
    return view


def _needs_refresh(run: dict[str, Any]) -> bool:
    if run["state_type"] not in TERMINAL_STATES:
        return True
    if run["state_type"] == "COMPLETED" and not run["accounted"]:
        return True
    waiting = run["final_since"] is None or time.monotonic() - run["final_since"] <= USAGE_LOG_WAIT_S
    return run["usage_lines"] < max(1, run.get("run_count", 1)) and waiting


def _row(short: str, run: dict[str, Any], view: FlowRunView) -> dict[str, Any]:
    return {
        "flow_run_id": short,
        "flow": run["flow"],
        "state": view.state_name,
        "message": view.message,
        "run_count": view.run_count,
        "parameters": run["params"],
        "environment": run["environment"],
        "cpu_seconds": round(run["cpu_seconds"], 3),
        "credits": round(run["credits"], 4),
    }


# ------------------------------------------------------------------------------------------- hooks


def on_start(gw: Gateway) -> None:
    _ext(gw)
    spec = gw.scenario.pipelines
    if not spec.upstream and not spec.start_runs:
        return  # deployed on first use
    _seed(gw)
    _api(gw)
    waits = [start_run(gw, r.flow, r.parameters)["flow_run_id"] for r in spec.start_runs if r.wait]
    for r in spec.start_runs:
        if not r.wait:
            start_run(gw, r.flow, r.parameters)
    deadline = time.monotonic() + START_RUNS_TIMEOUT_S
    while waits and time.monotonic() < deadline:
        waits = [s for s in waits if _refresh(gw, s).state_type not in TERMINAL_STATES]
        time.sleep(0.5)


def on_step(gw: Gateway) -> None:
    ext = _ext(gw)
    still = []
    for b, part, target in ext["pending"]:
        if b.delivered_at_step is not None and gw.state.step >= b.delivered_at_step:
            _deliver(gw, b, part, target)
        else:
            still.append((b, part, target))
    ext["pending"] = still
    if "api" in ext:
        for short, run in ext["runs"].items():
            if _needs_refresh(run):
                _refresh(gw, short)


def on_close(gw: Gateway) -> None:
    ext = gw.ext.get(NAME) or {}
    api = ext.pop("api", None)
    if api is None:
        return
    try:
        for short, run in ext.get("runs", {}).items():
            try:
                view = api.get(run["id"])
                if not view.finished:
                    api.cancel(run["id"])
                else:
                    _account(gw, short, view)  # a model registered since the last step is cleaned up too
                    _charge_usage(gw, short, view, api)
            except Exception as e:
                log.warning("flow run %s: %s", short, e)
            api.delete_flow_run(run["id"])
        for dep in ext.get("deployments", {}).values():
            api.delete_deployment(dep)
    finally:
        api.close()
        cleanup = getattr(gw.runtime, "flow_cleanup", None)
        if cleanup is not None:  # flow runs that were Jobs: none outlives the episode
            try:
                cleanup(dict([gw.state.job_label]))
            except Exception as e:
                log.warning("deleting the episode's flow-run Jobs failed: %s", e)


# ---------------------------------------------------------------------------------------- handlers


def list_flows(gw: Gateway, _: F.ListFlows) -> dict[str, Any]:
    flows = [
        {
            "name": name,
            "description": " ".join((model.__doc__ or "").split()),
            "parameters": {
                k: {"type": str(f.annotation).replace("typing.", ""), "required": f.is_required()}
                for k, f in model.model_fields.items()
            },
        }
        for name, model in F.FLOW_PARAMS.items()
    ]
    runs = []
    if "api" in _ext(gw) or _ext(gw)["runs"]:
        for short, run in _ext(gw)["runs"].items():
            runs.append(_row(short, run, _refresh(gw, short)))
    return {"flows": flows, "runs": runs}


def run_flow(gw: Gateway, a: F.RunFlow) -> dict[str, Any]:
    return start_run(gw, a.name, a.parameters, a.environment)


def _short(gw: Gateway, flow_run_id: str) -> dict[str, Any]:
    run = _ext(gw)["runs"].get(flow_run_id)
    if run is None:
        raise ActionError("not_found", f"flow run {flow_run_id!r} does not exist")
    return run


def get_flow_run(gw: Gateway, a: F.GetFlowRun) -> dict[str, Any]:
    run = _short(gw, a.flow_run_id)
    view = _refresh(gw, a.flow_run_id)
    api = _api(gw)
    return {
        **_row(a.flow_run_id, run, view),
        "start_time": view.start_time.isoformat() if view.start_time else None,
        "end_time": view.end_time.isoformat() if view.end_time else None,
        "task_runs": gw.backend_call(lambda: api.task_runs(run["id"])),
        "logs": gw.backend_call(lambda: api.logs(run["id"]))[-a.log_lines :],
    }


def retry_flow_run(gw: Gateway, a: F.RetryFlowRun) -> dict[str, Any]:
    run = _short(gw, a.flow_run_id)
    view = _refresh(gw, a.flow_run_id)
    if view.state_type == "COMPLETED":
        raise ActionError("conflict", f"{a.flow_run_id} completed: start a new run with run_flow instead")
    if not view.finished:
        raise ActionError(
            "conflict", f"{a.flow_run_id} is {view.state_name}: only a finished run can be retried"
        )
    before = view.state_name
    view = gw.backend_call(lambda: _api(gw).retry(run["id"]))
    run["accounted"], run["state_type"], run["final_since"] = False, view.state_type, None
    return {**_row(a.flow_run_id, run, view), "previous_state": before}


HANDLERS = {
    "list_flows": list_flows,
    "run_flow": run_flow,
    "get_flow_run": get_flow_run,
    "retry_flow_run": retry_flow_run,
}
