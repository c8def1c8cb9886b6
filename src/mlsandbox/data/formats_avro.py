"""Avro through fastavro: a record schema derived from the Arrow types, every field nullable.

Deterministic: deflate at a fixed level and a sync marker derived from the schema (fastavro draws a
random one otherwise). Timestamps are ``timestamp-millis`` read back as naive UTC.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC
from typing import Any

import pandas as pd
import pyarrow as pa

_PRIMITIVES: list[tuple[Any, str]] = [
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_integer, "long"),
    (pa.types.is_floating, "double"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
]
_ARROW_OF: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "long": pa.int64(),
    "double": pa.float64(),
    "string": pa.large_string(),
}


def _avro_type(t: pa.DataType) -> Any:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return {"type": "long", "logicalType": "timestamp-millis"}
    for check, name in _PRIMITIVES:
        if check(t):
            return name
    if pa.types.is_null(t):
        return "string"
    raise ValueError(f"cannot write an Arrow {t} column to Avro (cast it to string first)")


def schema_of(table: pa.Table, name: str = "dataset") -> dict[str, Any]:
    fields = [{"name": f.name, "type": ["null", _avro_type(f.type)], "default": None} for f in table.schema]
    return {"type": "record", "name": name, "fields": fields}


def _prepared(table: pa.Table) -> pa.Table:
    columns = []
    for column in table.columns:
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if pa.types.is_date(column.type):
            column = column.cast(pa.timestamp("ms"))
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def write(table: pa.Table) -> bytes:
    import fastavro

    schema = schema_of(table)
    parsed = fastavro.parse_schema(schema)
    marker = hashlib.blake2b(json.dumps(schema, sort_keys=True).encode(), digest_size=16).digest()
    out = io.BytesIO()
    fastavro.writer(
        out,
        parsed,
        _prepared(table).to_pylist(),
        codec="deflate",
        codec_compression_level=6,
        sync_marker=marker,
    )
    return out.getvalue()


def _arrow_type(avro: Any) -> pa.DataType:
    branches = [b for b in (avro if isinstance(avro, list) else [avro]) if b != "null"]
    if len(branches) != 1:
        return pa.large_string()
    branch = branches[0]
    if isinstance(branch, dict):
        if branch.get("logicalType", "").startswith("timestamp"):
            return pa.timestamp("ms", tz="UTC")
        branch = branch.get("type")
    return _ARROW_OF.get(branch, pa.large_string())


def read(data: bytes) -> pd.DataFrame:
    import fastavro

    reader = fastavro.reader(io.BytesIO(data))
    schema: dict[str, Any] = reader.writer_schema  # type: ignore[assignment]  # a record schema (a dict)
    fields: list[dict[str, Any]] = schema["fields"]
    records: list[dict[str, Any]] = list(reader)  # type: ignore[arg-type]  # records of a record schema
    arrays = {}
    for f in fields:
        t = _arrow_type(f["type"])
        values = [r.get(f["name"]) for r in records]
        if pa.types.is_timestamp(t):
            values = [v if v is None or v.tzinfo else v.replace(tzinfo=UTC) for v in values]
            arrays[f["name"]] = pa.array(values, type=t).cast(pa.timestamp("ms"))
        elif pa.types.is_large_string(t):
            arrays[f["name"]] = pa.array([v if v is None else str(v) for v in values], type=t)
        else:
            arrays[f["name"]] = pa.array(values, type=t)
    return pa.table(arrays).to_pandas() if arrays else pd.DataFrame()
