"""Handlers and hooks of the ``flows`` pack (see :mod:`mlsandbox.gateway.packs.flows.actions`).

Per episode: the runtime's flows (:class:`~mlsandbox.backends.protocols.EpisodeFlows`, opened on first
use or at start when the scenario has pipelines: one deployment per flow, carrying the sandbox's
endpoints, the runs placed where the backend runs them); flow runs are known to the agent as ``fr-N``
(only its own). Upstream batches of the scenario are delivered to ``upstream/<dataset>/<batch>.csv``
(earlier days also already ingested into ``lake/``). What a completed run produced becomes visible: a
lake batch or scores as datasets, a training run's model version as registered. On close, what the
finished runs produced and used is accounted, then the episode's flows are closed (unfinished runs
cancelled, runs and deployments deleted, whatever ran them removed).

Environments. ``run_flow(environment=)`` runs training and batch-scoring in that environment of the
episode (the runtime resolves its key; a backend whose runs cannot take one refuses with
``unsupported``).

Credits. Flows run on the sandbox's shared Prefect worker, not on a machine of the pool: each execution of
a run logs the CPU seconds its work used in its flow-run process and the processes it waited for
(``resource usage: cpu_seconds=``), and once the run is in a
final state they are charged at the budget's price per CPU second (``budget.credits_per_cpu_second``, the
rate of work without a machine) to ``state.extra_credits`` (and to ``state.charges``: ``flow_cpu_seconds``
and ``flow_credits``). A retried run is charged again for its new execution. A run whose process died before
logging its usage (crashed) is not charged.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from mlsandbox.backends.protocols import EpisodeFlows, FlowRunView
from mlsandbox.backends.protocols.flows import TERMINAL_STATES
from mlsandbox.data.formats import Format
from mlsandbox.errors import ActionError
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.flows import actions as F
from mlsandbox.world.episode import DatasetRecord

log = logging.getLogger(__name__)
START_RUNS_TIMEOUT_S = 300.0
USAGE_PREFIX = "resource usage: cpu_seconds="
"""What a flow logs at its end (:data:`mlsandbox.workloads.flows.USAGE_PREFIX`)."""
USAGE_LOG_WAIT_S = 30.0
"""How long after a run's final state its usage line may still arrive (logs are shipped in batches)."""
ENV_FLOWS = frozenset({"training", "batch-scoring"})


@dataclass
class FlowRun:
    """One of the agent's flow runs (``fr-N``)."""

    id: str
    """The orchestrator's id."""
    flow: str
    params: dict[str, Any]
    """The agent's parameters (what it is shown)."""
    environment: str
    state_type: str
    run_count: int = 1
    accounted: bool = False
    """What its completion produced is visible to the episode."""
    cpu_seconds: float = 0.0
    credits: float = 0.0
    usage_lines: int = 0
    """Executions whose usage line was read (and charged)."""
    final_since: float | None = None
    """Clock time (monotonic) since which it is in a final state without every usage line read."""


@dataclass
class FlowsState:
    """The episode's flows (``ctx.pack_state(FlowsState)``)."""

    flows: EpisodeFlows | None = None
    """The runtime's flows of the episode, once opened."""
    runs: dict[str, FlowRun] = field(default_factory=dict)
    schemas: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    pending: list[tuple[Any, Any, str | None]] = field(default_factory=list)
    """Upstream batches not delivered yet: (batch spec, rows, target)."""


def _state(ctx: EpisodeContext) -> FlowsState:
    return ctx.pack_state(FlowsState)


def _flows(ctx: EpisodeContext) -> EpisodeFlows:
    """The episode's flows, opened on first use."""
    state = _state(ctx)
    if state.flows is None:
        state.flows = ctx.backend_call(
            lambda: ctx.runtime.flows.open(ctx.state.episode_id, dict([ctx.state.job_label]))
        )
    return state.flows


# ---------------------------------------------------------------------------------------- data


def _raw_frame(ctx: EpisodeContext, dataset: str) -> Any:
    for key in sorted(ctx.state.datasets):
        rec = ctx.state.datasets[key]
        if key.startswith(f"raw/{dataset}.") and rec.origin == "scenario":
            return ctx.read(rec), rec.target
    raise ActionError("not_found", f"dataset {dataset!r} does not exist in this scenario")


def _schema(ctx: EpisodeContext, dataset: str) -> tuple[list[str], list[str]]:
    """The columns a batch of ``dataset`` must have, and those that must be numeric (from its raw data)."""
    schemas = _state(ctx).schemas
    if dataset not in schemas:
        df, _ = _raw_frame(ctx, dataset)
        schemas[dataset] = (list(df.columns), [c for c in df.columns if df[c].dtype.kind in "biuf"])
    return schemas[dataset]


def _put(ctx: EpisodeContext, key: str, payload: bytes, fmt: Format, target: str | None, origin: str) -> None:
    ctx.runtime.object_store.put_object(ctx.state.bucket, key, payload)
    ctx.state.datasets[key] = DatasetRecord(key, fmt, len(payload), target, origin)


def _deliver(ctx: EpisodeContext, batch: Any, frame: Any, target: str | None) -> None:
    df = frame
    if batch.problem == "renamed_column":
        df = df.rename(columns={batch.column: batch.renamed_to})
    _put(
        ctx,
        f"upstream/{batch.dataset}/{batch.batch}.csv",
        df.to_csv(index=False).encode(),
        "csv",
        target,
        "upstream",
    )


def _seed(ctx: EpisodeContext) -> None:
    spec = ctx.scenario.pipelines
    by_dataset: dict[str, list[Any]] = {}
    for b in spec.upstream:
        by_dataset.setdefault(b.dataset, []).append(b)
    for dataset, batches in by_dataset.items():
        df, target = _raw_frame(ctx, dataset)
        required, _ = _schema(ctx, dataset)
        for i, b in enumerate(batches):
            part = df.iloc[i :: len(batches)].reset_index(drop=True)
            if b.problem == "not_delivered":
                _state(ctx).pending.append((b, part, target))
                continue
            _deliver(ctx, b, part, target)
            if b.ingested:
                buf = io.BytesIO()
                part[required].to_parquet(buf, index=False)
                _put(ctx, f"lake/{dataset}/{b.batch}.parquet", buf.getvalue(), "parquet", target, "ingestion")


# ---------------------------------------------------------------------------------------- runs


def _flow_parameters(ctx: EpisodeContext, flow: str, params: dict[str, Any]) -> dict[str, Any]:
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
    st = ctx.state
    if isinstance(p, F.IngestionParams):
        required, numeric = _schema(ctx, p.dataset)
        return {
            "bucket": st.bucket,
            "dataset": p.dataset,
            "batch": p.batch,
            "required_columns": required,
            "numeric_columns": numeric,
            "rename": p.rename,
        }
    if isinstance(p, F.TrainingParams):
        _, target = _raw_frame(ctx, p.dataset)
        return {
            "bucket": st.bucket,
            "dataset": p.dataset,
            "target": target,
            "experiment_id": st.experiment_id,
            "model_name": st.registry_name(p.model_name),
            "algorithm": p.algorithm,
            "hyperparams": p.hyperparams,
            "min_auc": p.min_auc,
            "seed": ctx.seed,
            # The completeness check: every batch of the upstream schedule must be in the lake.
            "expected_batches": [b.batch for b in ctx.scenario.pipelines.upstream if b.dataset == p.dataset],
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
    ctx: EpisodeContext, flow: str, params: dict[str, Any], environment: str | None = None
) -> dict[str, Any]:
    full = _flow_parameters(ctx, flow, params)
    key = None
    if environment is not None and environment != "default":
        if flow not in ENV_FLOWS:
            raise ActionError(
                "invalid_parameters",
                f"flow {flow} runs in the orchestrator's environment; environment= applies to "
                f"{' and '.join(sorted(ENV_FLOWS))}",
            )
        info = ctx.environment(environment)
        key = info.key if info is not None else None
    flows = _flows(ctx)
    runs = _state(ctx).runs
    short = f"fr-{len(runs) + 1}"
    view = ctx.backend_call(
        lambda: flows.run(flow, full, name=f"{short}-{ctx.state.episode_id}", environment=key)
    )
    runs[short] = FlowRun(
        id=view.id,
        flow=flow,
        params=dict(params),
        environment=environment or "default",
        state_type=view.state_type,
    )
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


def flow_cpu_price(ctx: EpisodeContext) -> float:
    """Credits per CPU second of a flow run: the budget's price of work that runs on no machine."""
    return float(ctx.scenario.budget.credits_per_cpu_second)


def _charge_usage(ctx: EpisodeContext, short: str, view: FlowRunView) -> None:
    """Charge the CPU seconds a finished run logged that are not charged yet (each execution once)."""
    run = _state(ctx).runs[short]
    if view.state_type not in TERMINAL_STATES:
        run.final_since = None
        return
    executions = max(1, view.run_count)
    if run.usage_lines >= executions:
        return
    now = ctx.runtime.clock.monotonic()
    run.final_since = run.final_since or now
    if now - run.final_since > USAGE_LOG_WAIT_S:
        return  # its process died before it could log its usage: nothing to charge
    count, total = logged_usage(_flows(ctx).log_lines_containing(run.id, USAGE_PREFIX))
    delta = max(0.0, total - run.cpu_seconds)
    run.usage_lines, run.cpu_seconds = count, max(total, run.cpu_seconds)
    if delta > 0:
        credits = delta * flow_cpu_price(ctx)
        run.credits += credits
        st = ctx.state
        st.extra_credits += credits
        st.charges.flow_cpu_seconds += delta
        st.charges.flow_credits += credits


def _account(ctx: EpisodeContext, short: str, view: FlowRunView) -> None:
    """Make what a completed run produced visible to the episode (once per completion)."""
    run = _state(ctx).runs[short]
    if view.state_type != "COMPLETED" or run.accounted:
        return
    run.accounted = True
    st, p = ctx.state, view.parameters
    store = ctx.runtime.object_store
    if run.flow in ("ingestion", "batch-scoring"):
        prefix = "lake" if run.flow == "ingestion" else "scores"
        key = f"{prefix}/{p['dataset']}/{p['batch']}.parquet"
        size = next((o.size for o in store.list_objects(st.bucket, key) if o.key == key), 0)
        target = _raw_frame(ctx, p["dataset"])[1] if prefix == "lake" else None
        st.datasets[key] = DatasetRecord(key, "parquet", size, target, f"flow:{run.flow}")
    elif run.flow == "training":
        name = p["model_name"].removeprefix(st.model_prefix)
        versions = ctx.runtime.tracking.list_model_versions(p["model_name"])
        known = {v for (n, v) in st.registered if n == name}
        for v in versions:
            if v.name == p["model_name"] and v.version not in known:
                st.note_registered(name, v.version, v.created_at or ctx.runtime.clock.time())


def _refresh(ctx: EpisodeContext, short: str) -> FlowRunView:
    run = _state(ctx).runs[short]
    flows = _flows(ctx)
    view: FlowRunView = ctx.backend_call(lambda: flows.get(run.id))
    run.state_type, run.run_count = view.state_type, view.run_count
    if view.state_type != "COMPLETED":
        run.accounted = False
    try:
        _account(ctx, short, view)
    except Exception as e:  # the next refresh tries again
        run.accounted = False
        log.debug("accounting of %s failed: %s", short, e)
    try:
        _charge_usage(ctx, short, view)
    except Exception as e:  # the next refresh tries again
        log.debug("charging %s failed: %s", short, e)
    return view


def _needs_refresh(ctx: EpisodeContext, run: FlowRun) -> bool:
    if run.state_type not in TERMINAL_STATES:
        return True
    if run.state_type == "COMPLETED" and not run.accounted:
        return True
    now = ctx.runtime.clock.monotonic()
    waiting = run.final_since is None or now - run.final_since <= USAGE_LOG_WAIT_S
    return run.usage_lines < max(1, run.run_count) and waiting


def _row(short: str, run: FlowRun, view: FlowRunView) -> dict[str, Any]:
    return {
        "flow_run_id": short,
        "flow": run.flow,
        "state": view.state_name,
        "message": view.message,
        "run_count": view.run_count,
        "parameters": run.params,
        "environment": run.environment,
        "cpu_seconds": round(run.cpu_seconds, 3),
        "credits": round(run.credits, 4),
    }


# ------------------------------------------------------------------------------------------- hooks


def on_start(ctx: EpisodeContext) -> None:
    spec = ctx.scenario.pipelines
    if not spec.upstream and not spec.start_runs:
        return  # opened on first use
    _seed(ctx)
    _flows(ctx)
    waits = [start_run(ctx, r.flow, r.parameters)["flow_run_id"] for r in spec.start_runs if r.wait]
    for r in spec.start_runs:
        if not r.wait:
            start_run(ctx, r.flow, r.parameters)
    clock = ctx.runtime.clock
    deadline = clock.monotonic() + START_RUNS_TIMEOUT_S
    while waits and clock.monotonic() < deadline:
        waits = [s for s in waits if _refresh(ctx, s).state_type not in TERMINAL_STATES]
        clock.sleep(0.5)


def on_step(ctx: EpisodeContext) -> None:
    state = _state(ctx)
    still = []
    for b, part, target in state.pending:
        if b.delivered_at_step is not None and ctx.state.step >= b.delivered_at_step:
            _deliver(ctx, b, part, target)
        else:
            still.append((b, part, target))
    state.pending = still
    if state.flows is not None:
        for short, run in state.runs.items():
            if _needs_refresh(ctx, run):
                _refresh(ctx, short)


def on_close(ctx: EpisodeContext) -> None:
    state = _state(ctx)
    flows = state.flows
    if flows is None:
        return
    try:
        for short, run in state.runs.items():
            try:
                view = flows.get(run.id)
                if view.finished:
                    _account(ctx, short, view)  # a model registered since the last step is cleaned up too
                    _charge_usage(ctx, short, view)
            except Exception as e:
                log.warning("flow run %s: %s", short, e)
    finally:
        state.flows = None
        flows.close()  # unfinished runs cancelled; runs, deployments and what ran them deleted


# ---------------------------------------------------------------------------------------- handlers


def handle_list_flows(ctx: EpisodeContext, _: F.ListFlows) -> dict[str, Any]:
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
    runs = [_row(short, run, _refresh(ctx, short)) for short, run in _state(ctx).runs.items()]
    return {"flows": flows, "runs": runs}


def handle_run_flow(ctx: EpisodeContext, a: F.RunFlow) -> dict[str, Any]:
    return start_run(ctx, a.name, a.parameters, a.environment)


def _short(ctx: EpisodeContext, flow_run_id: str) -> FlowRun:
    run = _state(ctx).runs.get(flow_run_id)
    if run is None:
        raise ActionError("not_found", f"flow run {flow_run_id!r} does not exist")
    return run


def handle_get_flow_run(ctx: EpisodeContext, a: F.GetFlowRun) -> dict[str, Any]:
    run = _short(ctx, a.flow_run_id)
    view = _refresh(ctx, a.flow_run_id)
    flows = _flows(ctx)
    tasks = ctx.backend_call(lambda: flows.task_runs(run.id))
    return {
        **_row(a.flow_run_id, run, view),
        "start_time": view.start_time.isoformat() if view.start_time else None,
        "end_time": view.end_time.isoformat() if view.end_time else None,
        "task_runs": [{"task": t.name, "state": t.state_name, "run_count": t.run_count} for t in tasks],
        "logs": ctx.backend_call(lambda: flows.logs(run.id))[-a.log_lines :],
    }


def handle_retry_flow_run(ctx: EpisodeContext, a: F.RetryFlowRun) -> dict[str, Any]:
    run = _short(ctx, a.flow_run_id)
    view = _refresh(ctx, a.flow_run_id)
    if view.state_type == "COMPLETED":
        raise ActionError("conflict", f"{a.flow_run_id} completed: start a new run with run_flow instead")
    if not view.finished:
        raise ActionError(
            "conflict", f"{a.flow_run_id} is {view.state_name}: only a finished run can be retried"
        )
    before = view.state_name
    flows = _flows(ctx)
    view = ctx.backend_call(lambda: flows.retry(run.id))
    run.accounted, run.state_type, run.final_since = False, view.state_type, None
    return {**_row(a.flow_run_id, run, view), "previous_state": before}
