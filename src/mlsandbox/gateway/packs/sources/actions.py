"""Action pack ``sources``: the scenario's data sources (HTTP API, PostgreSQL table, lake batches) and
data checks between datasets (sample, schema diff, drift).

Models only (light); the handlers are in :mod:`mlsandbox.gateway.packs.sources.handlers`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.registry import ActionPack, PackAction
from mlsandbox.gateway.safety import DatasetName

SourceName = Annotated[
    str, Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="A source name as listed by list_sources")
]
ColumnName = Annotated[str, Field(min_length=1, max_length=64)]


class ListSources(ActionModel):
    """List the data sources of this episode: name, kind (api, postgres, lake), description, and for a
    lake source the batches that have arrived so far (as datasets under lake/<source>/)."""

    type: Literal["list_sources"] = "list_sources"


class PreviewSource(ActionModel):
    """Fetch the first rows of a source through its real server (API: the first page; PostgreSQL: the
    first rows of the table; lake: the first rows of the newest arrived batch) with the column names and
    the total row count."""

    type: Literal["preview_source"] = "preview_source"
    source: SourceName
    rows: int = Field(default=5, ge=1, le=50, description="How many rows to show")
    refresh_credentials: bool = Field(
        default=False, description="Re-read the source's credentials from the secret store before connecting"
    )


def default_output(source: str) -> str:
    """The dataset an ingestion of ``source`` writes when it names no ``output``."""
    return f"sources/{source}.parquet"


class IngestSource(ActionModel):
    """Pull a source into the data lake as a new dataset that the other actions can use (profile, clean,
    train). API: every page is fetched (pagination, waiting out 429 rate limits, retrying 5xx a few
    times); PostgreSQL: the whole table; lake: the chosen arrived batches concatenated. ``rename`` maps
    old column names to new ones before batches are combined (to repair a renamed column). The output
    defaults to ``sources/<source>.parquet``."""

    type: Literal["ingest_source"] = "ingest_source"
    source: SourceName
    batches: list[Annotated[int, Field(ge=0, le=999)]] | None = Field(
        default=None,
        max_length=100,
        description="Lake sources: batch numbers to combine (default: all arrived)",
    )
    rename: dict[ColumnName, ColumnName] = Field(
        default_factory=dict, max_length=50, description="Column renames applied to every part, old -> new"
    )
    output: DatasetName | None = Field(
        default=None, description="Name of the new dataset, ending in .csv, .parquet, .avro, .jsonl or .xlsx"
    )
    refresh_credentials: bool = Field(
        default=False, description="Re-read the source's credentials from the secret store before connecting"
    )


class SampleDataset(ActionModel):
    """A reproducible random sample of rows of a dataset in the lake (values as stored)."""

    type: Literal["sample_dataset"] = "sample_dataset"
    dataset: DatasetName
    rows: int = Field(default=10, ge=1, le=100)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)


class SchemaDiff(ActionModel):
    """Compare the schemas of two datasets (e.g. two batches): columns only in one of them, columns whose
    type changed, and likely renames (a removed and an added column with matching values)."""

    type: Literal["schema_diff"] = "schema_diff"
    reference: DatasetName
    current: DatasetName


class DriftCheck(ActionModel):
    """Drift per column between a reference and a current dataset: PSI (population stability index over
    the reference's deciles or the categories; < 0.1 stable, 0.1-0.25 moderate, > 0.25 significant) and
    the two-sample Kolmogorov-Smirnov statistic for numeric columns, plus the target's positive rate in
    each when both have it."""

    type: Literal["drift_check"] = "drift_check"
    reference: DatasetName
    current: DatasetName


_SOURCE_FAULTS = ("late_batch", "missing_batch", "schema_change", "database_down", "rotated_credentials")
"""The fault kinds the source actions address."""

PACK = ActionPack(
    name="sources",
    # Lake sources need only the object store; which API or PostgreSQL sources a backend hosts is said by
    # ``sources.api`` and ``sources.postgres`` (an episode with a refused one does not start).
    actions=(
        PackAction(ListSources, capability="sources", read_only=True),
        PackAction(PreviewSource, capability="sources", read_only=True, addresses=_SOURCE_FAULTS),
        PackAction(IngestSource, capability="sources", addresses=_SOURCE_FAULTS),
        PackAction(SampleDataset, capability="object_store", read_only=True),
        PackAction(SchemaDiff, capability="object_store", read_only=True),
        PackAction(DriftCheck, capability="object_store", read_only=True),
    ),
    implementation="mlsandbox.gateway.packs.sources.handlers",
    description="Data sources (HTTP API, PostgreSQL, lake batches) and data checks between datasets",
)
