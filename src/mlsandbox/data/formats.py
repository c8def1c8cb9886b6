"""Frames to bytes and back, deterministically: identical frames give byte-identical files.

* CSV: UTF-8, ``\\n`` line ends, a header row, no index, missing values as empty fields, floats in their
  shortest round-trip form keeping a decimal point (``12.5``, ``12.0``, ``1e-7``, ``1e+16``): lossless
  and fixed for a given value; booleans as ``true``/``false``; only cells holding a comma, quote or line
  end are quoted. Cells are rendered by Arrow and written by Arrow's CSV writer (about ten times faster
  than pandas; pandas writes the rendered text when some cell needs quotes). Frames Arrow cannot convert
  (object columns of mixed types) are written by pandas directly.
* Parquet: written by pyarrow with every writer option that affects the bytes pinned (format version,
  compression, row-group size, page version); the pandas metadata block (it carries the pandas version) is
  dropped. Parquet files carry no timestamps or random ids; the footer's ``created_by`` names the
  pyarrow version, so the bytes are stable for a given pyarrow.

Reading back gives the values written: missing stays missing (NaN), string columns come back as strings.
"""

from __future__ import annotations

import csv
import io
from typing import Literal, get_args

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

Format = Literal["csv", "parquet"]
FORMATS: tuple[Format, ...] = get_args(Format)

_SUFFIXES: dict[str, Format] = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}

PARQUET_OPTIONS: dict[str, object] = {
    "version": "2.6",
    "compression": "snappy",
    "row_group_size": 1 << 20,
    "data_page_version": "1.0",
    "use_dictionary": True,
    "write_statistics": True,
}


def format_of(key: str) -> Format:
    """The format of an object key or path, by its suffix (``.csv``, ``.parquet``, ``.pq``)."""
    name = key.rsplit("/", 1)[-1].lower()
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return fmt
    raise ValueError(f"unsupported data format for {key!r}: expected one of {sorted(_SUFFIXES)}")


def _check(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise ValueError(f"unsupported data format {fmt!r}: expected one of {list(FORMATS)}")
    return fmt  # type: ignore[return-value]


def _text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column as its CSV text (nulls stay null); floats keep a decimal point, as pandas writes them."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    text = pc.cast(column, pa.string())
    if pa.types.is_floating(column.type):
        integral = pc.match_substring_regex(text, r"^-?[0-9]+$")
        text = pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)
    return text


def _csv_header(names: list[str]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(names)
    return out.getvalue().encode("utf-8")


def _pandas_csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, lineterminator="\n", na_rep="").encode("utf-8")


def _csv_bytes(df: pd.DataFrame) -> bytes:
    """Every cell rendered to text by Arrow, written unquoted by Arrow when no cell needs quotes."""
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
        text = pa.table([_text(c) for c in table.columns], names=[str(c) for c in df.columns])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return _pandas_csv(df)  # mixed-type object columns, nested values
    sink = pa.BufferOutputStream()
    try:
        pa_csv.write_csv(text, sink, pa_csv.WriteOptions(include_header=False, quoting_style="none"))
    except pa.ArrowInvalid:  # some cell holds a comma, quote or line end: pandas quotes just those
        return _pandas_csv(text.to_pandas())
    return _csv_header(text.column_names) + sink.getvalue().to_pybytes()


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **PARQUET_OPTIONS)  # type: ignore[arg-type]
    return sink.getvalue().to_pybytes()


def to_bytes(df: pd.DataFrame, fmt: Format) -> bytes:
    """Serialise a frame (its index is not written)."""
    return _csv_bytes(df) if _check(fmt) == "csv" else _parquet_bytes(df)


def from_bytes(data: bytes, fmt: Format) -> pd.DataFrame:
    """Parse bytes written by :func:`to_bytes` (or any ordinary CSV/Parquet file) into a frame."""
    if _check(fmt) == "csv":
        return pd.read_csv(io.BytesIO(data))
    return pq.read_table(pa.BufferReader(data)).to_pandas()
