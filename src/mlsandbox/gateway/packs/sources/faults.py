"""Data-layer faults tied to the scenario's sources: each changes the real source and records ground truth.

Every function takes the episode's :class:`~mlsandbox.gateway.context.EpisodeContext` and a source name,
makes the fault real, and appends a :class:`~mlsandbox.faults.engine.FaultRecord` to
``episode.state.ground_truth.faults`` (``fault`` is the kind below, ``target`` is ``source:<name>``):

- ``late_batch``: a lake batch arrives ``steps`` later than scheduled;
- ``missing_batch``: a lake batch never arrives;
- ``schema_change``: an arriving lake batch has a renamed, dropped or retyped column;
- ``api_unavailable``: the HTTP API source answers 503 (an HTTP fault of the runtime's fault control on
  the source's name) until recovered;
- ``database_down``: the PostgreSQL server is stopped (a real outage) until recovered;
- ``credentials_rotated``: the source's token or password is changed on the server and in the secret
  store; the agent's connector keeps the old one until it refreshes its credentials.

``recover(episode, record)`` undoes what can be undone (the API fault, the database outage) and
``recover_all`` runs at the end of the episode.

The same mechanisms serve perturbation plans: :func:`plan_behaviours` gives the perturbation engine one
:class:`~mlsandbox.faults.behaviours.Behaviour` per fault type on ``source:NAME`` targets (``late_batch``,
``missing_batch``, ``schema_change``, ``database_down``, ``rotated_credentials``); the gateway collects it
from this pack (the ``fault_behaviours`` hook of :mod:`.handlers`) when it makes the engine, so the
fault layer never imports the gateway. The engine keeps the ground truth of those (its own FaultRecord,
with ``target`` ``source:<name>``), and :func:`mark` updates them like the records made here. An API
outage in a plan is ``http_errors`` on ``http:<source>``. The agent sees the symptoms only through its actions
(errors of preview/ingest, overdue batches in list_sources, schema_diff); the sources pack marks a record
``detected`` when an action met the symptom and ``mitigated`` when a later action worked around it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from mlsandbox.backends.protocols import HttpFault
from mlsandbox.backends.protocols.sources import POSTGRES
from mlsandbox.errors import ActionError, Unsupported
from mlsandbox.faults.behaviours import Behaviour, BehaviourFactory, FaultContext, FaultUnavailable
from mlsandbox.faults.engine import FaultRecord
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.sources import handlers as impl
from mlsandbox.scenario.sources import ApiSource, LakeSource, PostgresSource

if TYPE_CHECKING:
    from mlsandbox.scenario.perturbations import Perturbation

KINDS = (
    "late_batch",
    "missing_batch",
    "schema_change",
    "api_unavailable",
    "database_down",
    "credentials_rotated",
)


def _record(
    episode: EpisodeContext, fault: str, source: str, params: dict[str, Any], recovery: str
) -> FaultRecord:
    rec = FaultRecord(
        name=f"{fault}:{source}",
        fault=fault,
        target=f"source:{source}",
        params=params,
        injected_step=episode.state.step,
        injected_at=episode.runtime.clock.time(),
        recovery=recovery,
    )
    episode.state.ground_truth.faults.append(rec)
    return rec


def _source(episode: EpisodeContext, name: str, kind: type) -> impl.SourceRuntime:
    rt = impl.runtimes(episode).get(name)
    if rt is None:
        raise ValueError(f"no source {name!r} in this episode (sources: {sorted(impl.runtimes(episode))})")
    if not isinstance(rt.spec, kind):
        raise ValueError(f"source {name!r} is a {rt.spec.type} source; this fault needs a {kind.__name__}")
    return rt


def _pending_batch(rt: impl.SourceRuntime, batch: int) -> None:
    if not 0 <= batch < len(rt.batches):
        raise ValueError(f"batch {batch} is not a batch of {rt.spec.name!r} (0..{len(rt.batches) - 1})")
    if batch in rt.arrived:
        raise ValueError(f"batch {batch} of {rt.spec.name!r} has already arrived")


def late_batch(episode: EpisodeContext, source: str, batch: int, steps: int) -> FaultRecord:
    """Delay the arrival of ``batch`` by ``steps`` steps."""
    scheduled = _delay_batch(episode, source, batch, steps)
    return _record(
        episode,
        "late_batch",
        source,
        {"batch": batch, "scheduled_step": scheduled, "arrival_step": scheduled + steps},
        "none",
    )


def _delay_batch(episode: EpisodeContext, source: str, batch: int, steps: int) -> int:
    """Delay ``batch`` by ``steps``; its scheduled arrival step."""
    rt = _source(episode, source, LakeSource)
    _pending_batch(rt, batch)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    scheduled = rt.due[batch]
    rt.due[batch] = scheduled + steps
    return scheduled


def missing_batch(episode: EpisodeContext, source: str, batch: int) -> FaultRecord:
    """``batch`` never arrives."""
    rt = _source(episode, source, LakeSource)
    _pending_batch(rt, batch)
    rt.missing.add(batch)
    return _record(
        episode, "missing_batch", source, {"batch": batch, "scheduled_step": rt.due[batch]}, "none"
    )


def schema_change(
    episode: EpisodeContext,
    source: str,
    batch: int,
    change: Literal["rename", "drop", "retype"],
    column: str,
    new_name: str | None = None,
    new_type: Literal["string", "float", "int"] = "string",
) -> FaultRecord:
    """``batch`` arrives with ``column`` renamed, dropped or retyped."""
    args, _ = _change_schema(episode, source, batch, change, column, new_name, new_type)
    return _record(episode, "schema_change", source, {"batch": batch, **args}, "none")


def _change_schema(
    episode: EpisodeContext,
    source: str,
    batch: int,
    change: str,
    column: str,
    new_name: str | None,
    new_type: str,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Set the schema change of ``batch``; (its arguments, the change it replaced)."""
    rt = _source(episode, source, LakeSource)
    _pending_batch(rt, batch)
    columns = list(rt.batches[batch].train_table.column_names)
    if column not in columns:
        raise ValueError(f"column {column!r} is not in the batches of {source!r} ({columns})")
    if change == "rename" and (not new_name or new_name in columns):
        raise ValueError(f"a rename needs a new column name, got {new_name!r}")
    args: dict[str, Any] = {"change": change, "column": column, "new_name": new_name, "new_type": new_type}
    before = rt.schema_changes.get(batch)
    rt.schema_changes[batch] = args
    return args, before


def api_unavailable(
    episode: EpisodeContext, source: str, error_rate: float = 1.0, status: int = 503
) -> FaultRecord:
    """The API source answers ``status`` to ``error_rate`` of the requests (its fault hook)."""
    _source(episode, source, ApiSource)
    fault = HttpFault(error_rate=error_rate, status=status, seed=episode.seed)
    episode.runtime.faults.set_http_fault(source, fault, episode_id=episode.state.episode_id)
    return _record(
        episode, "api_unavailable", source, {"error_rate": error_rate, "status": status}, "recover"
    )


def database_down(episode: EpisodeContext, source: str) -> FaultRecord:
    """Stop the PostgreSQL server (every connection fails until it is started again)."""
    _source(episode, source, PostgresSource)
    was_running = impl.hosting(episode).stop(POSTGRES)
    return _record(episode, "database_down", source, {"was_running": was_running}, "recover")


def credentials_rotated(episode: EpisodeContext, source: str) -> FaultRecord:
    """Change the source's token (API) or password (PostgreSQL) on the server and in the secret store."""
    rt = _rotate(episode, source)
    return _record(episode, "credentials_rotated", source, {"kind": rt.spec.type}, "agent")


def _rotate(episode: EpisodeContext, source: str) -> impl.SourceRuntime:
    import secrets

    rt = impl.runtimes(episode).get(source)
    if rt is None or isinstance(rt.spec, LakeSource):
        raise ValueError(f"credentials_rotated needs an api or postgres source, got {source!r}")
    new = secrets.token_urlsafe(24)
    if isinstance(rt.spec, ApiSource):
        rt.secret = new
        impl.hosting(episode).update_access(rt.api_dataset())
    else:
        assert rt.role is not None
        impl.hosting(episode).set_password(rt.role, new)
        rt.secret = new
    return rt


INJECT = {
    "late_batch": late_batch,
    "missing_batch": missing_batch,
    "schema_change": schema_change,
    "api_unavailable": api_unavailable,
    "database_down": database_down,
    "credentials_rotated": credentials_rotated,
}
"""Fault kind -> injection function ``(episode, source, **params)``."""


def recover(episode: EpisodeContext, rec: FaultRecord, by: str = "expiry") -> None:
    """Undo an API outage or a database outage (idempotent); other faults stay as they are."""
    if rec.recovered_at is not None:
        return
    if rec.fault == "api_unavailable":
        source = rec.target.removeprefix("source:")
        episode.runtime.faults.clear_http_fault(source, episode_id=episode.state.episode_id)
    elif rec.fault == "database_down":
        impl.hosting(episode).start(POSTGRES)
    elif rec.recovery != "recover":
        return
    rec.recovered_at, rec.recovered_step, rec.recovered_by = (
        episode.runtime.clock.time(),
        episode.state.step,
        by,
    )


def recover_all(episode: EpisodeContext) -> None:
    """Recover the records made here (those of a perturbation plan belong to the engine)."""
    for rec in list(episode.state.ground_truth.faults):
        if (
            isinstance(rec, FaultRecord)
            and rec.target.startswith("source:")
            and rec.fault in KINDS
            and rec.recovery not in ("auto", "manual")
        ):
            recover(episode, rec, "episode_end")


def mark(
    episode: EpisodeContext,
    source: str,
    kind: str,
    what: Literal["detected", "mitigated"],
    batch: int | None = None,
) -> None:
    """Mark the faults of ``kind`` on ``source`` (on lake batch ``batch`` when given) detected (the agent
    met the symptom) or mitigated (a later action worked around it)."""
    now = episode.runtime.clock.time()
    for rec in episode.state.ground_truth.faults:
        if not isinstance(rec, FaultRecord) or rec.target != f"source:{source}":
            continue
        if _ALIASES.get(rec.fault, rec.fault) != kind:
            continue
        if batch is not None and rec.params.get("batch") != batch:
            continue
        if what == "detected" and rec.detected_step is None:
            rec.detected_step, rec.time_to_detect_s = episode.state.step, round(now - rec.injected_at, 3)
        elif what == "mitigated" and rec.detected_step is not None and rec.mitigated_step is None:
            rec.mitigated_step, rec.time_to_mitigate_s = episode.state.step, round(now - rec.injected_at, 3)


# ------------------------------------------------------------------------------- perturbation plans

_ALIASES = {"rotated_credentials": "credentials_rotated"}
"""Plan fault type -> the kind the sources pack marks."""
SOURCE_ACTIONS = ("preview_source", "ingest_source")


class _SourceFault(Behaviour):
    """A plan fault on ``source:NAME``, made real by the mechanisms above; every step idempotent."""

    def __init__(self, entry: Perturbation, episode: EpisodeContext) -> None:
        super().__init__(entry)
        self.episode = episode
        self.done = False

    def inject(self, ctx: FaultContext) -> None:
        if self.done:
            return
        try:
            self.apply()
        except Unsupported as e:  # no such source servers on this backend
            raise FaultUnavailable(str(e)) from None
        except ActionError as e:
            raise FaultUnavailable(e.message) from None
        self.done = True

    def recover(self, ctx: FaultContext) -> None:
        if not self.done:
            return
        self.undo()
        self.done = False

    def apply(self) -> None:
        raise NotImplementedError

    def undo(self) -> None: ...

    def runtime(self) -> impl.SourceRuntime:
        return _source(self.episode, self.target_name, LakeSource)

    def addresses(self, action: dict[str, Any]) -> bool:
        return action.get("type") in SOURCE_ACTIONS and action.get("source") == self.target_name


class _LateBatch(_SourceFault):
    scheduled: int | None = None

    def apply(self) -> None:
        self.scheduled = _delay_batch(self.episode, self.target_name, self.fault.batch, self.fault.steps)

    def undo(self) -> None:
        rt = self.runtime()
        if self.scheduled is not None and self.fault.batch not in rt.arrived:
            rt.due[self.fault.batch] = self.scheduled  # arrives at the next step boundary


class _MissingBatch(_SourceFault):
    def apply(self) -> None:
        rt = self.runtime()
        _pending_batch(rt, self.fault.batch)
        rt.missing.add(self.fault.batch)

    def undo(self) -> None:
        self.runtime().missing.discard(self.fault.batch)  # arrives at the next step boundary


class _SchemaChange(_SourceFault):
    before: dict[str, Any] | None = None

    def apply(self) -> None:
        f = self.fault
        _, self.before = _change_schema(
            self.episode, self.target_name, f.batch, f.change, f.column, f.new_name, f.new_type
        )

    def undo(self) -> None:
        rt = self.runtime()
        if self.fault.batch in rt.arrived:  # it arrived changed: that is history
            return
        if self.before is None:
            rt.schema_changes.pop(self.fault.batch, None)
        else:
            rt.schema_changes[self.fault.batch] = self.before


class _DatabaseDown(_SourceFault):
    def apply(self) -> None:
        _source(self.episode, self.target_name, PostgresSource)
        impl.hosting(self.episode).stop(POSTGRES)

    def undo(self) -> None:
        impl.hosting(self.episode).start(POSTGRES)


class _RotatedCredentials(_SourceFault):
    """A rotation is not undone; its symptom is gone once the connector holds the new secret."""

    def apply(self) -> None:
        _rotate(self.episode, self.target_name)

    def symptom_gone(self, ctx: FaultContext) -> bool:
        rt = impl.runtimes(self.episode).get(self.target_name)
        return rt is not None and rt.cached == rt.secret


_PLAN_FAULTS: dict[str, type[_SourceFault]] = {
    "late_batch": _LateBatch,
    "missing_batch": _MissingBatch,
    "schema_change": _SchemaChange,
    "database_down": _DatabaseDown,
    "rotated_credentials": _RotatedCredentials,
}


def plan_behaviours(episode: EpisodeContext) -> dict[tuple[str, str], BehaviourFactory]:
    """The behaviours of plan faults on ``source:NAME`` targets of ``episode``'s episode, for the engine."""

    def factory(cls: type[_SourceFault]) -> BehaviourFactory:
        return lambda entry: cls(entry, episode)

    return {(kind, "source"): factory(cls) for kind, cls in _PLAN_FAULTS.items()}
