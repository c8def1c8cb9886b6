"""Handlers of the ``workspace`` pack (see :mod:`mlsandbox.gateway.packs.workspace.actions`).

The episode's workspace is opened through the runtime's ``workspaces`` capability on first use (a backend
that cannot run agent code isolated refuses it: ``unsupported``) and removed by ``on_close``. A
``run_python`` is a ``script`` job of the episode submitted through its compute pool, exactly as
``train_model``'s are: ``get_job``, ``wait``, ``get_logs`` and ``cancel_job`` work on it, and its CPU
seconds are charged. A model a script registers under the episode's model names (``ep-<episode>.<name>``,
given to it as ``$MLSANDBOX_MODEL_PREFIX``) from a run of the episode's experiment is recorded at the next
step as if ``register_model`` had registered it, so the grader grades it the same way. For a
``predictions_file`` goal, ``on_start`` puts the holdout's features (no labels) in the episode's bucket and
``on_end`` reads the predictions file the grader grades.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.backends.protocols import JobSpec, WorkspaceError, Workspaces
from mlsandbox.errors import ActionError
from mlsandbox.evaluation.predictions_grade import holdout_with_ids
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.workspace import actions as A
from mlsandbox.scenario.predictions_goal import ID_COLUMN, PredictionsFileGoal, features_key
from mlsandbox.world.episode import DeliveredFile, JobRecord

log = logging.getLogger(__name__)


@dataclass
class WorkspaceState:
    """The episode's workspace (``ctx.pack_state(WorkspaceState)``)."""

    opened: bool = False
    scripts: int = 0
    """Scripts run so far (``code`` is saved as ``run_<n>.py``)."""
    synced: set[tuple[str, str]] = field(default_factory=set)
    """Model versions a script registered that the episode already knows."""


def _error(e: WorkspaceError) -> ActionError:
    return ActionError(e.code, str(e))


def _open(ctx: EpisodeContext) -> Workspaces:
    state = ctx.pack_state(WorkspaceState)
    spaces = ctx.backend_call(lambda: ctx.runtime.workspaces)
    if not state.opened:
        ctx.backend_call(lambda: spaces.open(ctx.state.episode_id, ctx.state.bucket))
        state.opened = True
    return spaces


def handle_write_file(ctx: EpisodeContext, a: A.WriteFile) -> dict[str, Any]:
    spaces = _open(ctx)
    try:
        size = spaces.write_file(ctx.state.episode_id, a.path, a.content.encode())
    except WorkspaceError as e:
        raise _error(e) from None
    return {"path": a.path, "bytes": size}


def handle_read_file(ctx: EpisodeContext, a: A.ReadFile) -> dict[str, Any]:
    spaces = _open(ctx)
    try:
        data, size = spaces.read_file(ctx.state.episode_id, a.path, a.max_bytes)
    except WorkspaceError as e:
        raise _error(e) from None
    return {
        "path": a.path,
        "size": size,
        "truncated": size > len(data),
        "content": data.decode("utf-8", errors="replace"),
    }


def handle_list_files(ctx: EpisodeContext, a: A.ListFiles) -> dict[str, Any]:
    spaces = _open(ctx)
    try:
        entries = spaces.list_files(ctx.state.episode_id, a.path)
        usage = spaces.usage(ctx.state.episode_id)
    except WorkspaceError as e:
        raise _error(e) from None
    return {
        "path": a.path,
        "files": [e.model_dump() for e in entries],
        "used_bytes": usage.used_bytes,
        "quota_bytes": usage.quota_bytes,
    }


def handle_run_python(ctx: EpisodeContext, a: A.RunPython) -> dict[str, Any]:
    st = ctx.state
    spaces = _open(ctx)
    refused = ctx.start_refusal()
    if refused is not None:
        raise refused
    state = ctx.pack_state(WorkspaceState)
    path = a.path
    if a.code is not None:
        path = f"run_{state.scripts + 1}.py"
        try:
            spaces.write_file(st.episode_id, path, a.code.encode())
        except WorkspaceError as e:
            raise _error(e) from None
    assert path is not None
    try:
        spaces.read_file(st.episode_id, path, 1)  # there, and a regular file of the workspace
    except WorkspaceError as e:
        raise _error(e) from None
    limit = ctx.scenario.budget.max_job_seconds
    timeout = min(a.timeout_s, limit) if a.timeout_s is not None else limit
    job_id = f"job-{len(st.jobs) + 1}"
    backend_id = f"{st.episode_id}-{job_id}"
    spec = JobSpec(
        job_id=backend_id,
        workload="script",
        args=[path, *a.args],
        cpus=a.resources.cpus,
        memory_mb=a.resources.memory_mb,
        labels=dict([st.job_label]),
        timeout_s=timeout,
        workspace=st.episode_id,
        env={
            "MLSANDBOX_EXPERIMENT_ID": st.experiment_id,
            "MLSANDBOX_MODEL_PREFIX": st.model_prefix,
            "MLSANDBOX_MODEL_NAME": st.registry_name(ctx.scenario.goal.model_name),
            "MLSANDBOX_RUN_NAME": job_id,
            "MLSANDBOX_SEED": str(ctx.seed),
        },
    )
    spec = ctx.adjust_job(spec, job_id)
    try:
        status = ctx.backend_call(lambda: ctx.pool.submit(spec))
    except WorkspaceError as e:
        raise _error(e) from None
    state.scripts += 1
    st.jobs[job_id] = JobRecord(job_id, backend_id, "", "script", st.step, state=status.state)
    return {"job_id": job_id, "state": status.state, "script": path, "timeout_s": timeout}


def on_step(ctx: EpisodeContext) -> None:
    """Record the model versions the episode's scripts registered (see the module docstring)."""
    state = ctx.pack_state(WorkspaceState)
    if not state.scripts:
        return
    st = ctx.state
    known = set(st.registered) | state.synced
    versions = ctx.runtime.tracking.list_model_versions(st.model_prefix)
    for mv in sorted(versions, key=lambda v: (v.created_at or 0.0, int(v.version))):
        name = mv.name.removeprefix(st.model_prefix)
        if mv.name == name or (name, mv.version) in known:
            continue
        state.synced.add((name, mv.version))
        if mv.run_id is None:
            continue
        try:
            run = ctx.runtime.tracking.get_run(mv.run_id)
        except KeyError:
            continue
        if run.experiment_id == st.experiment_id:  # only the episode's own runs count
            st.note_registered(name, mv.version, mv.created_at or ctx.runtime.clock.time())


MAX_DELIVERED_BYTES = 32 << 20
"""The largest predictions file the grader reads (32 MiB)."""


def on_start(ctx: EpisodeContext) -> None:
    """For a ``predictions_file`` goal: the holdout's features, no labels, in the episode's bucket."""
    goal = ctx.scenario.goal
    if not isinstance(goal, PredictionsFileGoal):
        return
    holdout = holdout_with_ids(ctx.state.ground_truth.holdouts[goal.dataset])
    target = ctx.scenario.dataset(goal.dataset).target
    features = holdout.drop(columns=[target])
    features.insert(0, ID_COLUMN, features.index)
    data = features.to_csv(index=False).encode()
    ctx.runtime.object_store.put_object(ctx.state.bucket, features_key(goal.dataset), data)


def on_end(ctx: EpisodeContext) -> None:
    """For a ``predictions_file`` goal: read the file the grader grades (before the workspace goes)."""
    goal = ctx.scenario.goal
    if not isinstance(goal, PredictionsFileGoal):
        return
    st = ctx.state
    if not ctx.pack_state(WorkspaceState).opened:
        st.delivered[goal.path] = DeliveredFile(None, "the workspace was never used")
        return
    try:
        data, size = ctx.runtime.workspaces.read_file(st.episode_id, goal.path, MAX_DELIVERED_BYTES)
    except WorkspaceError as e:
        st.delivered[goal.path] = DeliveredFile(None, str(e))
        return
    if size > len(data):
        st.delivered[goal.path] = DeliveredFile(None, f"{size} bytes is over the {MAX_DELIVERED_BYTES} limit")
        return
    st.delivered[goal.path] = DeliveredFile(data)


def on_close(ctx: EpisodeContext) -> None:
    state = ctx.pack_state(WorkspaceState)
    if state.opened:
        state.opened = False
        ctx.runtime.workspaces.close(ctx.state.episode_id)
