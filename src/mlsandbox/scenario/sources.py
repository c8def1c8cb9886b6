"""Data sources of a scenario: where the agent has to fetch its data from, each a real server.

- ``api``: an HTTP API (the sandbox's API data source) serving a scenario dataset's training rows as JSON
  or CSV pages, behind a bearer token and a rate limit;
- ``postgres``: a table in the sandbox's PostgreSQL server holding a scenario dataset's training rows;
- ``lake``: batches of a scenario dataset arriving in the data lake (the episode's bucket, under
  ``lake/<source>/``) at given steps, optionally drifting and with schema changes in given batches.

A source serves one of the scenario's ``datasets`` (by name), so grading works as for any dataset: the
goal names the dataset, and its hidden holdout grades the registered model. For a lake source with
``holdout: last_batch``, the holdout is drawn from the distribution of the last batch instead (a model
trained on stale data then scores worse).

Validation errors name the source and the field (``sources.1 (lake 'sales'): arrivals has 3 steps but
batches is 4``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.drift import Drift
from mlsandbox.data.spec import TabularDataset

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_TOKEN_RE = r"^[A-Za-z0-9._~+/=-]{8,128}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise ValueError(f"{v!r} is not a valid source name: use lowercase letters, digits and _, 1-40 chars")
    return v


class _Source(_Model):
    name: str
    """How the agent refers to the source (list_sources, ingest_source)."""
    dataset: str
    """The scenario dataset whose training rows the source holds."""
    description: str = ""
    """Shown to the agent by list_sources."""
    hide_raw: bool = True
    """Remove the dataset's ``raw/`` copy from the lake: the agent has to fetch it from the source."""

    _name = field_validator("name")(_check_name)


class ApiSource(_Source):
    """The dataset served by the sandbox's HTTP API source (JSON and CSV pages, bearer token, rate limit)."""

    type: Literal["api"] = "api"
    token: str | None = Field(default=None, pattern=_TOKEN_RE)
    """The token the server accepts (default: a random one per episode)."""
    client_token: str | None = Field(default=None, pattern=_TOKEN_RE)
    """The token the agent's connector is configured with (default: the server's). A different value
    models a misconfigured connection: every request gets 401."""
    rate_limit_per_s: float = Field(default=20.0, gt=0, le=10_000)
    burst: int = Field(default=10, ge=1, le=10_000)
    max_page_size: int = Field(default=1000, ge=10, le=100_000)


class PostgresSource(_Source):
    """The dataset as a table in the sandbox's PostgreSQL server (one database per episode)."""

    type: Literal["postgres"] = "postgres"
    table: str = "records"

    _table = field_validator("table")(_check_name)


class SchemaChange(_Model):
    """A schema change in one arriving batch."""

    batch: int = Field(ge=0)
    change: Literal["rename", "drop", "retype"]
    column: str
    new_name: str | None = None
    """rename: the column's new name."""
    new_type: Literal["string", "float", "int"] = "string"
    """retype: the column's new type."""

    @model_validator(mode="after")
    def _new_name(self) -> SchemaChange:
        if self.change == "rename":
            if self.new_name is None:
                raise ValueError("a rename needs new_name")
            _check_name(self.new_name)
        elif self.new_name is not None:
            raise ValueError(f"new_name applies to a rename, not a {self.change}")
        return self


class LakeSource(_Source):
    """Batches of the dataset that arrive in the data lake at given steps (``lake/<name>/batch-NN.<fmt>``).

    Batch ``b`` is drawn from the dataset's spec with the declared drifts at intensity for batch ``b``
    (see :mod:`mlsandbox.data.drift`); ``arrivals[b]`` is the step at whose boundary it appears (0: at
    the start of the episode)."""

    type: Literal["lake"] = "lake"
    hide_raw: bool = False
    batches: int = Field(ge=1, le=48)
    batch_rows: int = Field(ge=50, le=1_000_000)
    arrivals: list[Annotated[int, Field(ge=0)]]
    format: Literal["csv", "parquet"] = "parquet"
    period: Literal["day", "week", "month"] = "month"
    drifts: list[Drift] = Field(default_factory=list)
    schema_changes: list[SchemaChange] = Field(default_factory=list)
    holdout: Literal["dataset", "last_batch"] = "dataset"
    """What grades models trained on this data: the dataset's own holdout, or a fresh holdout from the
    last batch's distribution (so only a model that follows the drift succeeds)."""

    @model_validator(mode="after")
    def _consistent(self) -> LakeSource:
        if len(self.arrivals) != self.batches:
            raise ValueError(f"arrivals has {len(self.arrivals)} steps but batches is {self.batches}")
        if self.arrivals != sorted(self.arrivals):
            raise ValueError(f"arrivals must not decrease (batches arrive in order): {self.arrivals}")
        seen: set[int] = set()
        for i, c in enumerate(self.schema_changes):
            if c.batch >= self.batches:
                raise ValueError(
                    f"schema_changes.{i}: batch {c.batch} is past the last batch {self.batches - 1}"
                )
            if c.batch in seen:
                raise ValueError(f"schema_changes.{i}: batch {c.batch} already has a schema change")
            seen.add(c.batch)
        return self


Source = Annotated[ApiSource | PostgresSource | LakeSource, Field(discriminator="type")]


def check_sources(
    sources: list[ApiSource | PostgresSource | LakeSource],
    datasets: dict[str, TabularDataset],
    max_steps: int,
) -> None:
    """Cross-checks against the scenario: names unique, datasets known, columns and steps in range."""
    names = [s.name for s in sources]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate source names: {dupes}")
    for i, s in enumerate(sources):
        where = f"sources.{i} ({s.type} {s.name!r})"
        spec = datasets.get(s.dataset)
        if spec is None:
            raise ValueError(f"{where}: dataset {s.dataset!r} is not one of the datasets {sorted(datasets)}")
        if not isinstance(s, LakeSource):
            continue
        late = [a for a in s.arrivals if a > max_steps]
        if late:
            raise ValueError(f"{where}: arrivals {late} are after max_steps {max_steps}")
        columns = [c.name for c in spec.columns]
        for j, c in enumerate(s.schema_changes):
            if c.column not in columns:
                raise ValueError(
                    f"{where}: schema_changes.{j}: column {c.column!r} is not a feature column of "
                    f"{s.dataset!r} ({', '.join(columns)})"
                )
            if c.new_name is not None and (c.new_name in columns or c.new_name == spec.target):
                raise ValueError(f"{where}: schema_changes.{j}: new_name {c.new_name!r} is already a column")
        try:
            drifting(s, spec)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    lake_holdouts = [s.dataset for s in sources if isinstance(s, LakeSource) and s.holdout == "last_batch"]
    twice = sorted({d for d in lake_holdouts if lake_holdouts.count(d) > 1})
    if twice:
        raise ValueError(
            f"only one lake source per dataset may set holdout: last_batch; {twice} have several"
        )


def refuse_non_table(spec: object, what: str) -> None:
    """A :class:`ValueError` naming the dataset and its kind when ``spec`` is not a table's spec (drift
    moves a table's columns: a kind whose data is not a table cannot drift, nor feed production traffic)."""
    if not isinstance(spec, TabularDataset):
        name, kind = getattr(spec, "name", "?"), getattr(spec, "kind", "?")
        raise ValueError(
            f"{what} needs a tabular dataset; dataset {name!r} is of kind {kind!r}, whose data is not a table"
        )


def drifting(source: LakeSource, spec: TabularDataset) -> object:
    """The :class:`~mlsandbox.data.drift.DriftingDataset` of a lake source (ValueError when invalid)."""
    from pydantic import ValidationError

    from mlsandbox.data.drift import DriftingDataset

    refuse_non_table(spec, "a drifting lake source")
    try:
        return DriftingDataset(
            base=spec,
            batches=max(2, source.batches),
            batch_rows=source.batch_rows,
            period=source.period,
            time_column=None,
            drifts=source.drifts,
        )
    except ValidationError as e:
        msg = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors(include_url=False))
        raise ValueError(msg) from None


__all__ = [
    "ApiSource",
    "LakeSource",
    "PostgresSource",
    "SchemaChange",
    "Source",
    "check_sources",
    "drifting",
    "refuse_non_table",
]
