"""A "dirty" Excel workbook (openpyxl), as people export them, and a reader that copes with it.

Layout of the single sheet ``data``: a title row and a source row, each merged across the table's width;
an empty row; the header; the data; an empty row; trailing notes. Text cells that read back exactly as a
number are stored as numbers, so a text column with junk becomes a column of mixed types, as in real
exports. Bytes are deterministic: fixed document timestamps and fixed zip entry dates.

The reader finds the header (a row as wide as the widest of the first rows, all text, after a blank row
when there is one), reads
down to the first empty row, and types each column: all numbers -> float (int when whole and complete),
all booleans -> bool, all datetimes -> datetime, anything else -> text (numbers written as text).
"""

from __future__ import annotations

import io
import re
import zipfile
from datetime import date, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

SHEET = "data"
TITLE_ROWS = 3
"""Rows above the header: title (merged), source line (merged), an empty row."""
FIXED_TIME = datetime(2000, 1, 1)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_INT_RE = re.compile(r"^-?[1-9][0-9]{0,14}$|^0$")
_HEADER_SCAN = 50
_STAMP_RE = re.compile(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms:)")


def _cell(value: Any) -> Any:
    """A text cell that reads back as exactly the same text when stored as a number, as that number."""
    if isinstance(value, str):
        if _INT_RE.match(value):
            return int(value)
        try:
            number = float(value)
        except ValueError:
            return value
        if np.isfinite(number) and not number.is_integer() and repr(number) == value:
            return number
        return value
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _normalised_zip(data: bytes) -> bytes:
    """The same archive with fixed entry dates (openpyxl stamps them with the current time)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=_ZIP_TIME)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o600 << 16
            content = src.read(info.filename)
            if info.filename == "docProps/core.xml":  # openpyxl stamps "modified" with the time of saving
                content = _STAMP_RE.sub(rb"\g<1>2000-01-01T00:00:00Z\g<2>", content)
            dst.writestr(fixed, content)
    return out.getvalue()


def write(table: pa.Table, title: str = "Data export", notes: list[str] | None = None) -> bytes:
    from openpyxl import Workbook
    from openpyxl.utils import get_column_letter

    workbook = Workbook(write_only=True)  # streams rows: about 1.5x faster than the normal mode
    sheet = workbook.create_sheet(SHEET)
    width = max(1, table.num_columns)
    last = get_column_letter(width)
    if width > 1:
        sheet.merged_cells.add(f"A1:{last}1")
        sheet.merged_cells.add(f"A2:{last}2")
    sheet.append([title])
    sheet.append([f"Source: mlsandbox synthetic data, {table.num_rows} rows, {table.num_columns} columns"])
    sheet.append([])
    sheet.append(table.column_names)
    columns = [c.to_pylist() for c in table.columns]
    for row in zip(*columns, strict=True):
        sheet.append([_cell(v) for v in row])
    sheet.append([])
    for note in notes if notes is not None else _default_notes(table):
        sheet.append([note])
    workbook.properties.created = FIXED_TIME
    workbook.properties.modified = FIXED_TIME
    workbook.properties.creator = "mlsandbox"
    out = io.BytesIO()
    workbook.save(out)
    return _normalised_zip(out.getvalue())


def _default_notes(table: pa.Table) -> list[str]:
    return [
        "Notes:",
        "* Exported from the operational system; some values were typed in by hand.",
        f"Total rows: {table.num_rows}",
    ]


def _rows(data: bytes) -> list[tuple[Any, ...]]:
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheet = workbook[SHEET] if SHEET in workbook.sheetnames else workbook.worksheets[0]
        return [tuple(r) for r in sheet.iter_rows(values_only=True)]
    finally:
        workbook.close()


def _filled(row: tuple[Any, ...]) -> list[Any]:
    cells = list(row)
    while cells and cells[-1] in (None, ""):
        cells.pop()
    return cells


def _header_index(rows: list[tuple[Any, ...]]) -> int:
    """The first row as wide as the widest, all text, that follows an empty row (exports put a blank line
    under their title); failing that, the first such row at all."""
    scan = [_filled(r) for r in rows[:_HEADER_SCAN]]
    width = max((len(r) for r in scan), default=0)
    candidates = [
        i
        for i, cells in enumerate(scan)
        if width and len(cells) == width and all(isinstance(c, str) and c for c in cells)
    ]
    if not candidates:
        raise ValueError("no header row found: expected a row of column names as wide as the table")
    after_blank = [i for i in candidates if i > 0 and not scan[i - 1]]
    return (after_blank or candidates)[0]


def _text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _column(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return (
            pd.array(values, dtype="boolean") if len(present) < len(values) else np.array(values, dtype=bool)
        )
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        if len(present) == len(values) and all(isinstance(v, int) for v in present):
            return np.array(values, dtype=np.int64)
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    if present and all(isinstance(v, datetime | date) for v in present):
        return pd.to_datetime(pd.Series(values, dtype=object)).to_numpy()
    return pd.array([None if v is None else _text(v) for v in values], dtype="str")


def read(data: bytes) -> pd.DataFrame:
    rows = _rows(data)
    start = _header_index(rows)
    names = [str(c) for c in _filled(rows[start])]
    body: list[tuple[Any, ...]] = []
    for row in rows[start + 1 :]:
        if not _filled(row):
            break  # the empty row before the trailing notes
        body.append(row)
    columns = {
        name: _column([r[j] if j < len(r) and r[j] != "" else None for r in body])
        for j, name in enumerate(names)
    }
    return pd.DataFrame(columns)
