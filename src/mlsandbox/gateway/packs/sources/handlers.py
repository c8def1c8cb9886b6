"""Handlers and episode hooks of the ``sources`` action pack.

At the start of an episode every source of the scenario is made real through the runtime's source
hosting (:class:`~mlsandbox.backends.protocols.EpisodeSources`):

- ``api``: the dataset's training rows are published on the sandbox's HTTP API source under an id of
  this episode, with a bearer token and a rate limit;
- ``postgres``: this episode gets its own database and login role on the sandbox's PostgreSQL server, and
  the rows are copied into the source's table;
- ``lake``: the batches are generated (with their drifts); each is written under ``lake/<source>/`` at
  the step boundary of its arrival (the ``on_step`` hook), with its schema change if it has one. Lake
  sources need only the object store: they work on every backend.

The connector (this pack) reads the servers as a client would: pages of the API, waiting out its 429s on
the runtime's clock and retrying its 5xx, a query of the table; what it cannot fix becomes the agent's
error code, and the symptom it met marks the matching fault detected. The agent's connector holds a copy
of each source's credentials, read from the episode's secret store at the start;
``refresh_credentials`` reads them again (what an engineer does after a rotation). Everything is removed
again by ``on_close``: the published dataset, the database and its role, the fault hooks.
"""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mlsandbox.backends.protocols import (
    ApiDataset,
    ApiProbe,
    EpisodeSources,
    HttpAnswer,
    PostgresProbe,
    ServiceHealth,
    SourceError,
)
from mlsandbox.backends.protocols.sources import API_SOURCE, POSTGRES
from mlsandbox.data.corruption import change_schema
from mlsandbox.data.drift_stats import column_drift, ks_statistic
from mlsandbox.data.formats import SUFFIX, Format, format_of, from_bytes, to_bytes
from mlsandbox.errors import ActionError
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.sources import actions as S
from mlsandbox.scenario.sources import ApiSource, LakeSource, PostgresSource, drifting
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world.episode import DatasetRecord

log = logging.getLogger(__name__)

PACK = "sources"
MAX_RATE_LIMIT_WAIT_S = 30.0
SERVER_ERROR_RETRIES = 3
PAGE_SIZE = 1000
HTTP_TIMEOUT_S = 10.0


@dataclass
class SourceRuntime:
    """What the episode knows about one source."""

    spec: ApiSource | PostgresSource | LakeSource
    target: str
    # api
    api_id: str | None = None
    # credentials: the secret store's value (what the server accepts) and the connector's cached copy
    secret: str | None = None
    cached: str | None = None
    # postgres
    database: str | None = None
    role: str | None = None
    # lake
    batches: list[Any] = field(default_factory=list)
    """Generated batches (``GeneratedTabular``), oldest first."""
    due: dict[int, int] = field(default_factory=dict)
    """Batch -> the step at whose boundary it arrives (faults may delay it)."""
    missing: set[int] = field(default_factory=set)
    """Batches that never arrive (a fault)."""
    schema_changes: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Batch -> change_schema arguments (declared in the scenario or injected as a fault)."""
    arrived: dict[int, tuple[str, int]] = field(default_factory=dict)
    """Batch -> (dataset key, step it arrived)."""

    def api_dataset(self) -> ApiDataset:
        """The published dataset with the server's current token."""
        source = self.spec
        assert isinstance(source, ApiSource) and self.api_id is not None and self.secret is not None
        return ApiDataset(
            dataset_id=self.api_id,
            name=source.name,
            token=self.secret,
            rate_limit_per_s=source.rate_limit_per_s,
            burst=source.burst,
            max_page_size=source.max_page_size,
        )


@dataclass
class FetchStats:
    """What the last API ingest met (part of its observation)."""

    rate_limited: int = 0
    server_errors: int = 0
    waited_s: float = 0.0


@dataclass
class SourcesState:
    """The episode's sources (``ctx.pack_state(SourcesState)``)."""

    sources: dict[str, SourceRuntime] = field(default_factory=dict)
    hosting: EpisodeSources | None = None
    """The runtime's source servers as this episode uses them (opened for an API or PostgreSQL source)."""
    last_fetch: FetchStats = field(default_factory=FetchStats)


# ------------------------------------------------------------------------------------------- access


def _state(ctx: EpisodeContext) -> SourcesState:
    return ctx.pack_state(SourcesState)


def runtimes(ctx: EpisodeContext) -> dict[str, SourceRuntime]:
    return _state(ctx).sources


def source_of(ctx: EpisodeContext, name: str) -> SourceRuntime:
    found = runtimes(ctx).get(name)
    if found is None:
        known = ", ".join(sorted(runtimes(ctx))) or "none in this scenario"
        raise ActionError("not_found", f"source {name!r} does not exist (sources: {known})")
    return found


def hosting(ctx: EpisodeContext) -> EpisodeSources:
    """The runtime's source servers for this episode (opened on first use)."""
    state = _state(ctx)
    if state.hosting is None:
        state.hosting = ctx.runtime.sources.open(ctx.state.episode_id)
    return state.hosting


def _episode_slug(ctx: EpisodeContext) -> str:
    return re.sub(r"[^a-z0-9]", "_", ctx.state.episode_id.lower())


# ------------------------------------------------------------------------------------------- hooks


def on_start(ctx: EpisodeContext) -> None:
    sources = ctx.scenario.sources
    if not sources:
        return
    from mlsandbox.data.tabular import generate_tabular

    index = {d.name: i for i, d in enumerate(ctx.scenario.datasets)}
    for source in sources:
        spec = ctx.scenario.dataset(source.dataset)
        rt = SourceRuntime(spec=source, target=spec.target)
        runtimes(ctx)[source.name] = rt
        if source.hide_raw:
            _hide_raw(ctx, source.dataset)
        if isinstance(source, LakeSource):
            _start_lake(ctx, rt, spec)
            continue
        table = generate_tabular(spec, ctx.seed * 1000 + index[source.dataset]).train_table
        if isinstance(source, ApiSource):
            _start_api(ctx, rt, source, table)
        else:
            _start_postgres(ctx, rt, source, table)
    deliver_batches(ctx)


def on_step(ctx: EpisodeContext) -> None:
    if runtimes(ctx):
        deliver_batches(ctx)


def fault_behaviours(ctx: EpisodeContext) -> dict[tuple[str, str], Any]:
    """The perturbation engine's behaviours of plan faults on ``source:NAME`` targets."""
    from mlsandbox.gateway.packs.sources import faults as sources_faults

    return sources_faults.plan_behaviours(ctx)


SERVICE_FAULTS = {POSTGRES: "database_down", API_SOURCE: "api_unavailable"}
"""Source service -> the kind of source fault that takes it down."""


class SourceService:
    """A data-source server in use by the episode, as the agent's service (``get_service_health``,
    ``restart_service``, ``get_logs``): probed as the episode's client (``SELECT 1`` on its database as
    its role, an authenticated GET of one record of its dataset), restarted on its data. An unhealthy
    probe marks the outage faults of the sources it serves detected; a restart that brings it back
    recovers them (the agent's repair) and marks them mitigated."""

    def __init__(self, ctx: EpisodeContext, name: str, users: list[SourceRuntime]) -> None:
        self.ctx, self.name, self.users = ctx, name, users

    def health(self) -> ServiceHealth:
        rt = self.users[0]
        if self.name == POSTGRES:
            probe: ApiProbe | PostgresProbe = PostgresProbe(
                database=rt.database or "postgres", user=rt.role or "", password=rt.secret
            )
        else:
            probe = ApiProbe(dataset_id=rt.api_id or "", token=rt.secret)
        found = hosting(self.ctx).health(probe)
        if not found.healthy:
            now = self.ctx.runtime.clock.time()
            for rec in self._outages():
                if rec.detected_step is None:
                    rec.detected_step = self.ctx.state.step
                    rec.time_to_detect_s = round(now - rec.injected_at, 3)
        return found

    def restart(self) -> ServiceHealth:
        from mlsandbox.gateway.packs.sources import faults as sources_faults

        clock = self.ctx.runtime.clock
        t0 = clock.monotonic()
        outages = self._outages()
        try:
            hosting(self.ctx).restart(self.name)
        except Exception as e:  # it did not come back: the observation says why
            return ServiceHealth(service=self.name, healthy=False, error=f"{type(e).__name__}: {e}")
        found = self.health()
        if found.healthy:
            step, now = self.ctx.state.step, clock.time()
            for rec in outages:
                if rec.detected_step is None:  # the restart addressed it
                    rec.detected_step, rec.time_to_detect_s = step, round(now - rec.injected_at, 3)
                if rec.mitigated_step is None:
                    rec.mitigated_step, rec.time_to_mitigate_s = step, round(now - rec.injected_at, 3)
                if rec.recovery not in ("auto", "manual"):  # the engine's own records end by the plan
                    sources_faults.recover(self.ctx, rec, "agent")
        return found.model_copy(update={"latency_ms": round((clock.monotonic() - t0) * 1000, 1)})

    def logs(self, tail: int = 50) -> str:
        return hosting(self.ctx).logs(self.name, tail)

    def _outages(self) -> list[Any]:
        from mlsandbox.faults.engine import FaultRecord

        targets = {f"source:{rt.spec.name}" for rt in self.users}
        return [
            r
            for r in self.ctx.state.ground_truth.faults
            if isinstance(r, FaultRecord)
            and r.target in targets
            and r.fault == SERVICE_FAULTS[self.name]
            and r.recovered_at is None
        ]


def episode_services(ctx: EpisodeContext) -> dict[str, SourceService]:
    """The data-source servers this episode uses (started for its sources), by service name."""
    users: dict[str, list[SourceRuntime]] = {}
    for rt in runtimes(ctx).values():
        if isinstance(rt.spec, PostgresSource) and rt.database is not None:
            users.setdefault(POSTGRES, []).append(rt)
        elif isinstance(rt.spec, ApiSource) and rt.api_id is not None:
            users.setdefault(API_SOURCE, []).append(rt)
    return {name: SourceService(ctx, name, rts) for name, rts in users.items()}


def on_close(ctx: EpisodeContext) -> None:
    from mlsandbox.gateway.packs.sources import faults as sources_faults

    state = _state(ctx)
    try:
        sources_faults.recover_all(ctx)
    finally:
        found, state.hosting = state.hosting, None
        if found is not None:
            found.close()  # the published datasets, the databases and roles, the fault hooks


def _hide_raw(ctx: EpisodeContext, dataset: str) -> None:
    st = ctx.state
    for key in [
        k for k, r in st.datasets.items() if r.origin == "scenario" and k.startswith(f"raw/{dataset}.")
    ]:
        del st.datasets[key]
        try:
            ctx.runtime.object_store.delete_object(st.bucket, key)
        except Exception as e:
            log.warning("could not delete %s: %s", key, e)


# --------------------------------------------------------------------------------------------- lake


def _start_lake(ctx: EpisodeContext, rt: SourceRuntime, spec: Any) -> None:
    from mlsandbox.data.drift import generate_batches

    source = rt.spec
    assert isinstance(source, LakeSource)
    series = generate_batches(
        drifting(source, spec),  # type: ignore[arg-type]
        ctx.seed * 1000 + 500 + _stable(source.name),
        lambda batch, seed: kind_of(batch).generate(batch, seed),
    )
    rt.batches = series.batches[: source.batches]
    rt.due = dict(enumerate(source.arrivals))
    for change in source.schema_changes:
        rt.schema_changes[change.batch] = change.model_dump(exclude={"batch"})
    manifest = dict(series.manifest)
    manifest["batches"] = manifest["batches"][: source.batches]
    manifest["arrivals"] = list(source.arrivals)
    manifest["schema_changes"] = [c.model_dump() for c in source.schema_changes]
    ctx.state.ground_truth.manifests[f"source:{source.name}"] = manifest
    if source.holdout == "last_batch":
        ctx.state.ground_truth.holdouts[source.dataset] = rt.batches[-1].holdout


def _stable(name: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % 400


def batch_key(source: LakeSource, batch: int) -> str:
    return f"lake/{source.name}/batch-{batch:02d}{SUFFIX[source.format]}"


def deliver_batches(ctx: EpisodeContext) -> None:
    """Write every lake batch whose arrival step has come (and that is not missing)."""
    step = ctx.state.step
    for rt in runtimes(ctx).values():
        if not isinstance(rt.spec, LakeSource):
            continue
        for batch, due in sorted(rt.due.items()):
            if batch in rt.arrived or batch in rt.missing or due > step:
                continue
            _write_batch(ctx, rt, batch)


def _write_batch(ctx: EpisodeContext, rt: SourceRuntime, batch: int) -> None:
    source = rt.spec
    assert isinstance(source, LakeSource)
    generated = rt.batches[batch]
    data: Any = generated.train_table
    change = rt.schema_changes.get(batch)
    if change is not None:
        data = change_schema(generated.train_table.to_pandas(), **change).data
    payload = to_bytes(data, source.format)
    key = batch_key(source, batch)
    ctx.runtime.object_store.put_object(ctx.state.bucket, key, payload)
    target = rt.target
    ctx.state.datasets[key] = DatasetRecord(key, source.format, len(payload), target, "scenario")
    rt.arrived[batch] = (key, ctx.state.step)


# ---------------------------------------------------------------------------------------------- api


def _start_api(ctx: EpisodeContext, rt: SourceRuntime, source: ApiSource, table: Any) -> None:
    import pyarrow.parquet as pq

    rt.api_id = f"{_episode_slug(ctx)}-{source.name}".replace("_", "-")
    rt.secret = source.token or secrets.token_urlsafe(24)
    rt.cached = source.client_token or rt.secret
    buf = io.BytesIO()
    pq.write_table(table, buf)
    hosting(ctx).publish(rt.api_dataset(), buf.getvalue())


def _api_get(ctx: EpisodeContext, rt: SourceRuntime, params: dict[str, str | int]) -> HttpAnswer:
    """One page, waiting out 429s (Retry-After) and retrying 5xx; ActionError for what cannot be fixed."""
    assert rt.api_id is not None
    host, clock = hosting(ctx), ctx.runtime.clock
    what = f"GET /v1/datasets/{rt.api_id}/records"
    waited, failures = 0.0, 0
    stats = _state(ctx).last_fetch
    while True:
        try:
            resp = host.api_get(rt.api_id, params, rt.cached, timeout_s=HTTP_TIMEOUT_S)
        except SourceError as e:
            raise ActionError("source_unavailable", f"API source {rt.spec.name!r}: {e.message}") from None
        if resp.status == 200:
            return resp
        detail = _error_text(resp)
        if resp.status == 429:
            retry = float(resp.headers.get("retry-after", "1") or 1)
            if waited + retry > MAX_RATE_LIMIT_WAIT_S:
                raise ActionError(
                    "rate_limited",
                    f"API source {rt.spec.name!r}: still rate limited after waiting {waited:.0f} s: {detail}",
                )
            stats.rate_limited += 1
            stats.waited_s += retry
            waited += retry
            clock.sleep(retry)
            continue
        if resp.status >= 500:
            failures += 1
            stats.server_errors += 1
            if failures > SERVER_ERROR_RETRIES:
                _observed(ctx, rt.spec.name, "api_unavailable")
                raise ActionError(
                    "source_unavailable",
                    f"API source {rt.spec.name!r} answered HTTP {resp.status} to {what} "
                    f"(page {params.get('page')}) {failures} times in a row: {detail}",
                )
            clock.sleep(0.2 * failures)
            continue
        if resp.status == 401:
            _observed(ctx, rt.spec.name, "credentials_rotated")
            raise ActionError(
                "auth_failed",
                f"API source {rt.spec.name!r} rejected the connector's bearer token (HTTP 401): {detail}",
            )
        raise ActionError(
            "source_error", f"API source {rt.spec.name!r} answered HTTP {resp.status}: {detail}"
        )


def _error_text(resp: HttpAnswer) -> str:
    try:
        body = json.loads(resp.body)
    except ValueError:
        return resp.body[:200].decode(errors="replace")
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body)
    return str(body)


def _api_preview(ctx: EpisodeContext, rt: SourceRuntime, rows: int) -> tuple[pd.DataFrame, int]:
    body = json.loads(_api_get(ctx, rt, {"page": 1, "page_size": rows, "format": "json"}).body)
    return pd.DataFrame.from_records(body["records"]), int(body["total_rows"])


def _api_fetch(ctx: EpisodeContext, rt: SourceRuntime) -> tuple[pd.DataFrame, dict[str, Any]]:
    source = rt.spec
    assert isinstance(source, ApiSource)
    stats = _state(ctx).last_fetch = FetchStats()
    size = min(PAGE_SIZE, source.max_page_size)
    frames, page, pages = [], 1, 0
    while True:
        resp = _api_get(ctx, rt, {"page": page, "page_size": size, "format": "csv"})
        frames.append(from_bytes(resp.body, "csv"))
        pages += 1
        nxt = resp.headers.get("x-next-page")
        if not nxt:
            break
        page = int(nxt)
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return frame, {
        "pages": pages,
        "rate_limited": stats.rate_limited,
        "server_errors": stats.server_errors,
        "waited_s": stats.waited_s,
    }


# ----------------------------------------------------------------------------------------- postgres


def _start_postgres(ctx: EpisodeContext, rt: SourceRuntime, source: PostgresSource, table: Any) -> None:
    import pyarrow.parquet as pq

    slug = _episode_slug(ctx)[:40]
    database = f"ep_{slug}_{source.name}"[:63]
    rt.role = database
    rt.secret = secrets.token_urlsafe(18)
    rt.cached = rt.secret
    buf = io.BytesIO()
    pq.write_table(table, buf)
    hosting(ctx).create_database(database, rt.role, rt.secret, source.table, buf.getvalue())
    rt.database = database


def _pg_query(ctx: EpisodeContext, rt: SourceRuntime, limit: int | None) -> tuple[pd.DataFrame, int]:
    source = rt.spec
    assert isinstance(source, PostgresSource) and rt.database is not None and rt.role is not None
    host = hosting(ctx)
    try:
        rows = host.query(rt.database, rt.role, rt.cached, source.table, limit=limit)
    except SourceError as e:
        where = f"PostgreSQL source {source.name!r} at {host.address(POSTGRES)}"
        if e.kind == "auth":
            _observed(ctx, source.name, "credentials_rotated")
            raise ActionError("auth_failed", f"{where}: login refused: {e.message}") from None
        if e.kind == "unavailable":
            _observed(ctx, source.name, "database_down")
            raise ActionError("source_unavailable", f"{where}: cannot connect: {e.message}") from None
        raise ActionError("source_error", f"{where}: {e.message}") from None
    return from_bytes(rows.parquet, "parquet"), rows.total_rows


# -------------------------------------------------------------------------------------- fault marks


def _observed(ctx: EpisodeContext, source: str, kind: str, batch: int | None = None) -> None:
    """The agent met the symptom of a data fault on ``source``: mark it detected."""
    from mlsandbox.gateway.packs.sources import faults as sources_faults

    sources_faults.mark(ctx, source, kind, "detected", batch)


def _overdue(ctx: EpisodeContext, source: str, batches: list[int]) -> None:
    for b in batches:
        _observed(ctx, source, "late_batch", b)
        _observed(ctx, source, "missing_batch", b)


def _handled(ctx: EpisodeContext, source: str, kinds: tuple[str, ...]) -> None:
    from mlsandbox.gateway.packs.sources import faults as sources_faults

    for kind in kinds:
        sources_faults.mark(ctx, source, kind, "mitigated")


def _refresh(ctx: EpisodeContext, rt: SourceRuntime, refresh: bool) -> bool:
    """Re-read the credentials from the secret store; True when they changed."""
    if not refresh or rt.cached == rt.secret:
        return False
    rt.cached = rt.secret
    return True


# ----------------------------------------------------------------------------------------- handlers


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(frame.to_json(orient="records", date_format="iso", date_unit="s"))


def _dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {str(c): str(frame[c].dtype) for c in frame.columns}


def handle_list_sources(ctx: EpisodeContext, _: S.ListSources) -> dict[str, Any]:
    out = []
    for name, rt in sorted(runtimes(ctx).items()):
        s = rt.spec
        entry: dict[str, Any] = {"name": name, "kind": s.type, "description": s.description}
        if isinstance(s, ApiSource):
            entry.update(
                endpoint=f"/v1/datasets/{rt.api_id}/records",
                formats=["json", "csv"],
                auth="bearer token (from the secret store)",
                max_page_size=s.max_page_size,
            )
        elif isinstance(s, PostgresSource):
            entry.update(
                database=rt.database, table=s.table, user=rt.role, auth="password (from the secret store)"
            )
        else:
            entry.update(
                prefix=f"lake/{s.name}/",
                format=s.format,
                period=s.period,
                schedule=[{"batch": b, "due_step": a} for b, a in enumerate(s.arrivals)],
                arrived=[
                    {"batch": b, "dataset": key, "arrived_step": at}
                    for b, (key, at) in sorted(rt.arrived.items())
                ],
            )
            overdue = [b for b, a in enumerate(s.arrivals) if a <= ctx.state.step and b not in rt.arrived]
            if overdue:
                entry["overdue"] = overdue
                _overdue(ctx, name, overdue)
        out.append(entry)
    return {"sources": out, "step": ctx.state.step}


def handle_preview_source(ctx: EpisodeContext, a: S.PreviewSource) -> dict[str, Any]:
    rt = source_of(ctx, a.source)
    refreshed = _refresh(ctx, rt, a.refresh_credentials)
    if isinstance(rt.spec, ApiSource):
        frame, total = _api_preview(ctx, rt, a.rows)
    elif isinstance(rt.spec, PostgresSource):
        frame, total = _pg_query(ctx, rt, a.rows)
        frame = frame.head(a.rows)
    else:
        if not rt.arrived:
            raise ActionError("not_found", f"lake source {a.source!r}: no batch has arrived yet")
        key = rt.arrived[max(rt.arrived)][0]
        full = ctx.read(ctx.dataset(key))
        frame, total = full.head(a.rows), len(full)
    if refreshed:
        _handled(ctx, a.source, ("credentials_rotated",))
    return {
        "source": a.source,
        "kind": rt.spec.type,
        "columns": _dtypes(frame),
        "total_rows": total,
        "rows": _records(frame),
        "credentials_refreshed": refreshed,
    }


def _output_key(a: S.IngestSource) -> tuple[str, Format]:
    key = a.output or S.default_output(a.source)
    if key.split("/", 1)[0] in ("raw", "lake"):
        raise ActionError("forbidden_name", f"{key!r}: raw/ and lake/ hold source data and are read-only")
    try:
        return key, format_of(key)
    except ValueError:
        raise ActionError(
            "invalid_parameters",
            f"output {key!r} must end in one of {', '.join(sorted(set(SUFFIX.values())))}",
        ) from None


def _lake_parts(
    ctx: EpisodeContext, rt: SourceRuntime, a: S.IngestSource
) -> tuple[pd.DataFrame, dict[str, Any]]:
    wanted = sorted(rt.arrived) if a.batches is None else sorted(set(a.batches))
    if not wanted:
        raise ActionError("not_found", f"lake source {a.source!r}: no batch has arrived yet")
    source = rt.spec
    assert isinstance(source, LakeSource)
    unknown = [b for b in wanted if b >= source.batches]
    if unknown:
        raise ActionError(
            "not_found",
            f"lake source {a.source!r} has no batches {unknown} (batches 0..{source.batches - 1})",
        )
    absent = [b for b in wanted if b not in rt.arrived]
    if absent:
        _overdue(ctx, a.source, [b for b in absent if source.arrivals[b] <= ctx.state.step])
        raise ActionError(
            "not_found",
            f"lake source {a.source!r}: batches {absent} have not arrived (arrived: {sorted(rt.arrived)})",
        )
    parts = []
    for b in wanted:
        frame = ctx.read(ctx.dataset(rt.arrived[b][0]))
        missing_columns = sorted(set(a.rename) - set(frame.columns) - set(a.rename.values()))
        if len(missing_columns) == len(a.rename) and a.rename and len(wanted) == 1:
            raise ActionError(
                "invalid_parameters", f"rename names columns {missing_columns} that batch {b} does not have"
            )
        parts.append((b, frame.rename(columns={k: v for k, v in a.rename.items() if k in frame.columns})))
    first_b, first = parts[0]
    for b, frame in parts[1:]:
        missing = [c for c in first.columns if c not in frame.columns]
        extra = [c for c in frame.columns if c not in first.columns]
        retyped = [
            c
            for c in first.columns
            if c in frame.columns and _kind(first[c]) != _kind(frame[c]) and frame[c].notna().any()
        ]
        if missing or extra or retyped:
            _observed(ctx, a.source, "schema_change")
            problems = []
            if missing:
                problems.append(f"lacks {missing}")
            if extra:
                problems.append(f"has extra {extra}")
            if retyped:
                problems.append(
                    "changed type of "
                    + ", ".join(f"{c} ({_kind(first[c])} -> {_kind(frame[c])})" for c in retyped)
                )
            raise ActionError(
                "schema_mismatch",
                f"lake source {a.source!r}: batch {b} does not match batch {first_b}: {'; '.join(problems)}. "
                "Use schema_diff to inspect; rename can map renamed columns; or choose other batches",
            )
    combined = pd.concat([f[first.columns] for _, f in parts], ignore_index=True)
    if a.rename:
        _handled(ctx, a.source, ("schema_change",))
    return combined, {"batches": wanted}


def _kind(column: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(column.dtype):
        return "boolean"
    if pd.api.types.is_numeric_dtype(column.dtype):
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(column.dtype):
        return "datetime"
    return "text"


def handle_ingest_source(ctx: EpisodeContext, a: S.IngestSource) -> dict[str, Any]:
    rt = source_of(ctx, a.source)
    key, fmt = _output_key(a)
    if a.batches is not None and not isinstance(rt.spec, LakeSource):
        raise ActionError(
            "invalid_parameters", f"batches applies to lake sources; {a.source!r} is {rt.spec.type}"
        )
    refreshed = _refresh(ctx, rt, a.refresh_credentials)
    details: dict[str, Any]
    if isinstance(rt.spec, ApiSource):
        frame, details = _api_fetch(ctx, rt)
        _handled(ctx, a.source, ("api_unavailable",))
    elif isinstance(rt.spec, PostgresSource):
        frame, total = _pg_query(ctx, rt, None)
        details = {"table": rt.spec.table, "table_rows": total}
        _handled(ctx, a.source, ("database_down",))
    else:
        frame, details = _lake_parts(ctx, rt, a)
    if a.rename and not isinstance(rt.spec, LakeSource):
        unknown = sorted(set(a.rename) - set(frame.columns))
        if unknown:
            raise ActionError("invalid_parameters", f"rename names unknown columns {unknown}")
        frame = frame.rename(columns=a.rename)
    if refreshed:
        _handled(ctx, a.source, ("credentials_rotated",))
    payload = to_bytes(frame, fmt)
    ctx.backend_call(lambda: ctx.runtime.object_store.put_object(ctx.state.bucket, key, payload))
    target = rt.target if rt.target in frame.columns else None
    ctx.state.datasets[key] = DatasetRecord(
        key, fmt, len(payload), target, "ingest_source", f"source:{a.source}"
    )
    return {
        "dataset": key,
        "source": a.source,
        "rows": len(frame),
        "columns": _dtypes(frame),
        "credentials_refreshed": refreshed,
        **details,
    }


def handle_sample_dataset(ctx: EpisodeContext, a: S.SampleDataset) -> dict[str, Any]:
    rec = ctx.dataset(a.dataset)
    frame = ctx.read(rec)
    sample = frame.sample(n=min(a.rows, len(frame)), random_state=a.seed) if len(frame) else frame
    return {"dataset": rec.key, "total_rows": len(frame), "columns": _dtypes(frame), "rows": _records(sample)}


def handle_schema_diff(ctx: EpisodeContext, a: S.SchemaDiff) -> dict[str, Any]:
    ref_rec, cur_rec = ctx.dataset(a.reference), ctx.dataset(a.current)
    ref, cur = ctx.read(ref_rec), ctx.read(cur_rec)
    removed = [str(c) for c in ref.columns if c not in cur.columns]
    added = [str(c) for c in cur.columns if c not in ref.columns]
    changed = [
        {"column": str(c), "reference": str(ref[c].dtype), "current": str(cur[c].dtype)}
        for c in ref.columns
        if c in cur.columns and _kind(ref[c]) != _kind(cur[c])
    ]
    renames = []
    for old in removed:
        for new in added:
            if _kind(ref[old]) != _kind(cur[new]):
                continue
            if _kind(ref[old]) == "numeric":
                ks = ks_statistic(
                    ref[old].to_numpy(np.float64, na_value=np.nan),
                    cur[new].to_numpy(np.float64, na_value=np.nan),
                )
                similar = ks is not None and ks < 0.1
            else:
                a_vals, b_vals = set(ref[old].dropna().astype(str)), set(cur[new].dropna().astype(str))
                similar = bool(a_vals) and len(a_vals & b_vals) >= 0.8 * len(a_vals | b_vals)
            if similar:
                renames.append({"from": old, "to": new})
    if removed or added or changed:
        for rt in runtimes(ctx).values():
            keys = {k for k, _ in rt.arrived.values()}
            if cur_rec.key in keys or ref_rec.key in keys:
                _observed(ctx, rt.spec.name, "schema_change")
    return {
        "reference": ref_rec.key,
        "current": cur_rec.key,
        "same_schema": not (removed or added or changed),
        "removed_columns": removed,
        "added_columns": added,
        "type_changes": changed,
        "likely_renames": renames,
    }


def handle_drift_check(ctx: EpisodeContext, a: S.DriftCheck) -> dict[str, Any]:
    ref_rec, cur_rec = ctx.dataset(a.reference), ctx.dataset(a.current)
    ref, cur = ctx.read(ref_rec), ctx.read(cur_rec)
    targets = {t for t in (ref_rec.target, cur_rec.target) if t}
    features = [c for c in ref.columns if c not in targets]
    stats = column_drift(ref[features], cur[[c for c in cur.columns if c not in targets]])
    if not stats:
        raise ActionError(
            "invalid_parameters", f"{ref_rec.key} and {cur_rec.key} have no feature column in common"
        )

    def level(psi: float | None) -> str:
        if psi is None:
            return "unknown"
        return "significant" if psi > 0.25 else "moderate" if psi >= 0.1 else "stable"

    columns = {name: {**s, "drift": level(s.get("psi"))} for name, s in stats.items()}
    out: dict[str, Any] = {
        "reference": ref_rec.key,
        "current": cur_rec.key,
        "columns": columns,
        "drifted_columns": sorted(n for n, s in columns.items() if s["drift"] == "significant"),
    }
    for t in targets:
        if t in ref.columns and t in cur.columns and pd.api.types.is_numeric_dtype(ref[t]):
            out["target"] = {
                "column": t,
                "reference_positive_rate": round(float(ref[t].mean()), 4),
                "current_positive_rate": round(float(cur[t].mean()), 4),
            }
    return out
