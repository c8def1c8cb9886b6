"""Faults of the scenario's data sources (``source:NAME``): lake batches and database outages. Their
mechanisms live above the fault engine (the gateway's sources pack supplies them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mlsandbox.faultkinds.base import SOURCE_NAME_RE, FaultKind, FaultParams, Mechanism

_SOURCES = Mechanism("sources", "the sources pack, on the episode's data source")


class _LakeBatchFault(FaultParams):
    targets = ("source",)
    category = "data"
    batch: int = Field(ge=0, description="The lake batch (0 = the first) the fault acts on.")


class LateBatchFault(_LakeBatchFault):
    """A lake source's ``batch`` arrives ``steps`` steps later than scheduled (``list_sources`` shows it
    overdue meanwhile). Recovery before it arrived puts its schedule back: it arrives at the next step."""

    type: Literal["late_batch"] = "late_batch"
    steps: int = Field(default=3, ge=1, le=10_000)


LATE_BATCH = FaultKind(
    params=LateBatchFault,
    symptom="a lake batch is overdue",
    behaviour="NotSupplied",
    sources=("lake",),
    backends={"local": _SOURCES, "kube": _SOURCES, "sim": _SOURCES},
)


class MissingBatchFault(_LakeBatchFault):
    """A lake source's ``batch`` does not arrive while the fault is active (overdue in ``list_sources``,
    ``not_found`` when ingested); on recovery it arrives at the next step boundary."""

    type: Literal["missing_batch"] = "missing_batch"


MISSING_BATCH = FaultKind(
    params=MissingBatchFault,
    symptom="a lake batch is overdue and not found when ingested",
    behaviour="NotSupplied",
    sources=("lake",),
    backends={"local": _SOURCES, "kube": _SOURCES, "sim": _SOURCES},
)


class SchemaChangeFault(_LakeBatchFault):
    """A lake source's ``batch`` arrives with ``column`` renamed (to ``new_name``), dropped or retyped (to
    ``new_type``): ingesting it with the earlier batches fails with ``schema_mismatch``. Recovery before
    the batch arrived cancels the change; a batch that arrived changed stays as it arrived."""

    type: Literal["schema_change"] = "schema_change"
    change: Literal["rename", "drop", "retype"]
    column: str = Field(min_length=1)
    new_name: str | None = Field(default=None, pattern=SOURCE_NAME_RE)
    new_type: Literal["string", "float", "int"] = "string"

    @model_validator(mode="after")
    def _new_name(self) -> SchemaChangeFault:
        if self.change == "rename" and self.new_name is None:
            raise ValueError("a schema_change rename needs new_name")
        if self.change != "rename" and self.new_name is not None:
            raise ValueError(f"new_name applies to a rename, not a {self.change}")
        return self


SCHEMA_CHANGE = FaultKind(
    params=SchemaChangeFault,
    symptom="ingesting a lake batch fails with schema_mismatch",
    behaviour="NotSupplied",
    sources=("lake",),
    backends={"local": _SOURCES, "kube": _SOURCES, "sim": _SOURCES},
)


class DatabaseDownFault(FaultParams):
    """The PostgreSQL server of a postgres ``source:NAME`` is stopped (a real outage: every connection is
    refused); recovery starts it again on the same data. The server is shared by the sandbox's
    episodes."""

    targets = ("source",)
    category = "data"
    type: Literal["database_down"] = "database_down"


DATABASE_DOWN = FaultKind(
    params=DatabaseDownFault,
    symptom="connections to the PostgreSQL source are refused",
    behaviour="NotSupplied",
    sources=("postgres",),
    backends={"local": _SOURCES, "kube": _SOURCES, "sim": _SOURCES},
)
