"""JSON Lines: one object per row, written with the standard ``json`` module, read with Arrow's reader.

Floats are written in their shortest round-trip form (``12.0``, ``0.1``), missing values as ``null``,
timestamps as ISO 8601 text (read back as timestamps), keys in column order, no spaces: the same table
always gives the same bytes.
"""

from __future__ import annotations

import io
import json
from datetime import date, datetime
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    raise TypeError(f"cannot write a {type(value).__name__} to JSON Lines")


def write(table: pa.Table) -> bytes:
    columns = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    rows = pa.table(columns, names=table.column_names).to_pylist()
    encode = json.JSONEncoder(
        ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default
    ).encode
    return "".join(f"{encode(row)}\n" for row in rows).encode("utf-8")


def read(data: bytes) -> pd.DataFrame:
    if not data.strip():
        return pd.DataFrame()
    options = pa_json.ReadOptions(block_size=max(1 << 20, len(data) + 1))  # one block: types from all rows
    return pa_json.read_json(io.BytesIO(data), read_options=options).to_pandas()
