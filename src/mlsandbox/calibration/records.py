"""The sweep's raw records: one JSON line per measured point, plus one line per sweep session (the
machine block, the versions, the command), appended as points finish so a stopped sweep resumes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from mlsandbox.calibration.plan import Point


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Session(_Model):
    """One run of the sweep (a resumed sweep has several)."""

    type: Literal["session"] = "session"
    session: str
    started_at: float
    machine: dict[str, Any]
    generator_version: int
    mlsandbox_version: str
    sklearn_version: str
    backend: str
    quick: bool
    command: str


class Record(_Model):
    """One measured point: the point itself, what was measured, when and under which load."""

    type: Literal["record"] = "record"
    id: str
    session: str
    point: Point
    started_at: float
    load_average_1m: float
    elapsed_s: float
    """Wall time the sweep spent on this point (setup included)."""
    result: dict[str, Any] = Field(default_factory=dict)


_LINE: TypeAdapter[Session | Record] = TypeAdapter(Session | Record)


def append(path: Path, item: Session | Record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(item.model_dump_json() + "\n")


def read(path: Path) -> Iterator[Session | Record]:
    """Every line of a records file (a truncated last line, from a killed sweep, is skipped)."""
    if not path.exists():
        return
    opener: Any = open
    if path.suffix == ".gz":
        import gzip

        opener = gzip.open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield _LINE.validate_python(json.loads(line))
            except (json.JSONDecodeError, ValueError):
                continue


def records(path: Path) -> list[Record]:
    """The records of a file, the latest per point id."""
    latest: dict[str, Record] = {}
    for item in read(path):
        if isinstance(item, Record):
            latest[item.id] = item
    return list(latest.values())


def sessions(path: Path) -> list[Session]:
    return [s for s in read(path) if isinstance(s, Session)]


__all__ = ["Record", "Session", "append", "read", "records", "sessions"]
