"""Frames to bytes and back, deterministically: identical frames give byte-identical files.

* CSV: UTF-8, ``\\n`` line ends, a header row, no index, missing values as empty fields, floats in their
  shortest round-trip form keeping a decimal point (``12.5``, ``12.0``, ``1e-7``, ``1e+16``): lossless
  and fixed for a given value; booleans as ``true``/``false``; only cells holding a comma, quote or line
  end are quoted. Cells are rendered by Arrow and written by Arrow's CSV writer (about ten times faster
  than pandas; pandas writes the rendered text when some cell needs quotes). Frames Arrow cannot convert
  (object columns of mixed types) are written by pandas directly.
* Parquet: written by pyarrow with every writer option that affects the bytes pinned (format version,
  compression, row groups of 262,144 rows, page version, dictionary encoding for every column but
  timestamps and text whose first values are mostly distinct, such as ids); the pandas metadata block
  (it carries the pandas version) is dropped. Parquet files carry no timestamps or random ids; the footer's ``created_by`` names the pyarrow version, so the bytes are
  stable for a given pyarrow. Larger tables have their row groups written in parallel and joined
  (:mod:`mlsandbox.data.formats_parquet`): the same bytes as one sequential write.

* Avro (fastavro), JSON Lines (standard ``json`` writer, Arrow reader) and "dirty" Excel (openpyxl): see
  :mod:`mlsandbox.data.formats_avro`, :mod:`mlsandbox.data.formats_jsonl`,
  :mod:`mlsandbox.data.formats_excel`. Each is deterministic too.

``to_bytes`` takes a pandas frame or an Arrow table (the generators' tables are written without pandas;
a table and the frame ``table.to_pandas()`` came from give the same bytes).

Reading back gives the values written: missing stays missing (NaN), string columns come back as strings.
"""

from __future__ import annotations

import csv
import hashlib
import io
import threading
from collections import OrderedDict
from typing import get_args

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from mlsandbox.data.randomness import SERIAL_BELOW_ROWS, parallel_map, serial_if
from mlsandbox.data.spec import FileFormat as Format

FORMATS: tuple[Format, ...] = get_args(Format)

_SUFFIXES: dict[str, Format] = {
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".avro": "avro",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".xlsx": "excel",
}
SUFFIX: dict[Format, str] = {
    "csv": ".csv",
    "parquet": ".parquet",
    "avro": ".avro",
    "jsonl": ".jsonl",
    "excel": ".xlsx",
}
"""The usual file suffix of each format (``format_of`` reads it back)."""

PARQUET_ROW_GROUP = 1 << 18
"""Rows per Parquet row group."""

PARQUET_OPTIONS: dict[str, object] = {
    "version": "2.6",
    "compression": "snappy",
    "row_group_size": PARQUET_ROW_GROUP,
    "data_page_version": "1.0",
    "use_dictionary": True,  # but not for timestamps and ids (see _dictionary_columns)
    "write_statistics": True,
}


def format_of(key: str) -> Format:
    """The format of an object key or path, by its suffix (``.csv``, ``.parquet``/``.pq``, ``.avro``,
    ``.jsonl``/``.ndjson``, ``.xlsx``)."""
    name = key.rsplit("/", 1)[-1].lower()
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return fmt
    raise ValueError(f"unsupported data format for {key!r}: expected one of {sorted(_SUFFIXES)}")


def _check(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise ValueError(f"unsupported data format {fmt!r}: expected one of {list(FORMATS)}")
    return fmt


def render_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column as its CSV text (nulls stay null); floats keep a decimal point, as pandas writes them."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    text = pc.cast(column, pa.string())
    if pa.types.is_floating(column.type):
        text = _decimal_point(column, text)
    return text


def _decimal_point(values: pa.ChunkedArray, text: pa.ChunkedArray) -> pa.ChunkedArray:
    """``12`` -> ``12.0`` where a float is integral and its text is plain digits (not ``1e+16`` or
    ``inf``). Only the integral values' text is searched: they are few in most columns."""
    integral = pc.fill_null(pc.equal(pc.floor(values), values), False)
    if not pc.any(integral).as_py():
        return text
    text = text.combine_chunks()
    rows = pc.indices_nonzero(integral.combine_chunks())
    candidates = text.take(rows)
    plain = pc.match_substring_regex(candidates, r"^-?[0-9]+$")
    mask = np.zeros(len(text), dtype=bool)
    mask[rows.filter(plain).to_numpy()] = True
    replacements = pc.binary_join_element_wise(candidates.filter(plain), ".0", "")
    return pa.chunked_array([pc.replace_with_mask(text, pa.array(mask), replacements)])


def _csv_header(names: list[str]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(names)
    return out.getvalue().encode("utf-8")


def _pandas_csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, lineterminator="\n", na_rep="").encode("utf-8")


def _arrow_table(df: pd.DataFrame | pa.Table) -> pa.Table:
    if isinstance(df, pa.Table):
        return df
    return pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)


def _csv_bytes(df: pd.DataFrame | pa.Table) -> bytes:
    """Every cell rendered to text by Arrow, written unquoted by Arrow when no cell needs quotes."""
    try:
        table = _arrow_table(df)
        columns = parallel_map(render_text, table.columns)  # Arrow's casts release the GIL
        text = pa.table(columns, names=[str(c) for c in table.column_names])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        assert isinstance(df, pd.DataFrame)
        return _pandas_csv(df)  # mixed-type object columns, nested values
    slices = [text.slice(start, _CSV_SLICE) for start in range(0, text.num_rows, _CSV_SLICE)] or [text]
    try:
        parts = parallel_map(_csv_rows, slices)
    except pa.ArrowInvalid:  # some cell holds a comma, quote or line end: pandas quotes just those
        return _pandas_csv(text.to_pandas())
    return b"".join([_csv_header(text.column_names), *parts])


_CSV_SLICE = 1 << 18
"""Rows per slice written apart on the thread pool (Arrow's CSV writer runs on one thread); a slice's
lines do not depend on the others, so the joined slices are the bytes of one write."""


def _csv_rows(text: pa.Table) -> pa.Buffer:
    """The rows of an all-text table as unquoted CSV lines (no header); ArrowInvalid when a cell needs
    quotes."""
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(text, sink, pa_csv.WriteOptions(include_header=False, quoting_style="none"))
    return sink.getvalue()


_DISTINCT_SAMPLE = 4096
"""Text columns are judged by their first 4,096 values: mostly distinct there, no dictionary."""


def _mostly_distinct(column: pa.ChunkedArray) -> bool:
    sample = column.slice(0, _DISTINCT_SAMPLE)
    present = len(sample) - sample.null_count
    return present > 0 and pc.count_distinct(sample).as_py() > present // 2


def _dictionary_columns(table: pa.Table) -> bool | list[str]:
    """Dictionary encoding for every column but timestamps and mostly-distinct text (ids): their values
    are nearly all distinct, so the dictionary only overflows and is thrown away (for a table with one
    timestamp and one id column, about a fifth of the encoding time, and a larger file). Nested tables
    keep it everywhere (their column paths are not plain names)."""
    schema = table.schema
    if any(pa.types.is_nested(f.type) for f in schema):
        return True
    plain = {
        f.name
        for f, column in zip(schema, table.columns, strict=True)
        if pa.types.is_timestamp(f.type)
        or ((pa.types.is_string(f.type) or pa.types.is_large_string(f.type)) and _mostly_distinct(column))
    }
    return [f.name for f in schema if f.name not in plain] if plain else True


def _parquet_bytes(df: pd.DataFrame | pa.Table) -> bytes:
    from mlsandbox.data import formats_parquet

    table = _arrow_table(df).replace_schema_metadata(None)
    options = {**PARQUET_OPTIONS, "use_dictionary": _dictionary_columns(table)}
    return formats_parquet.write_table(table, options)


def _plain(df: pd.DataFrame | pa.Table) -> pa.Table:
    """Dictionary columns decoded, NaN as null: what Avro, JSON Lines and Excel cells hold."""
    try:
        table = _arrow_table(df)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise ValueError(f"cannot convert the frame to typed columns ({e}); cast mixed columns to str") from e
    columns = []
    for column in table.columns:
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if pa.types.is_floating(column.type):
            column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
        columns.append(column)
    return pa.table(columns, names=[str(n) for n in table.column_names])


def _excel_bytes(df: pd.DataFrame | pa.Table) -> bytes:
    from mlsandbox.data import formats_excel

    if isinstance(df, pd.DataFrame):
        try:
            return formats_excel.write(_plain(df))
        except ValueError:  # mixed-type object columns: Excel takes the cells as they are
            return formats_excel.write(_object_table(df))
    return formats_excel.write(_plain(df))


def _object_table(df: pd.DataFrame) -> pa.Table:
    arrays = {
        str(c): pa.array([None if pd.isna(v) else str(v) for v in df[c]], type=pa.large_string()) for c in df
    }
    return pa.table(arrays)


_TIMESTAMP_RE = r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?"


def _parse_timestamps(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns holding only ISO 8601 timestamps become datetimes, as the other formats give them."""
    for name in df.columns:
        column = df[name]
        if not pd.api.types.is_string_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype):
            continue
        present = column.dropna()
        if present.empty or not isinstance(present.iloc[0], str):
            continue
        if present.str.fullmatch(_TIMESTAMP_RE).all():
            df[name] = pd.to_datetime(column, format="ISO8601")
    return df


def to_bytes(df: pd.DataFrame | pa.Table, fmt: Format) -> bytes:
    """Serialise a frame or Arrow table (a frame's index is not written)."""
    fmt = _check(fmt)
    with serial_if(len(df) < SERIAL_BELOW_ROWS):
        return _to_bytes(df, fmt)


def _to_bytes(df: pd.DataFrame | pa.Table, fmt: Format) -> bytes:
    if fmt == "csv":
        return _csv_bytes(df)
    if fmt == "parquet":
        return _parquet_bytes(df)
    if fmt == "excel":
        return _excel_bytes(df)
    if fmt == "avro":
        from mlsandbox.data import formats_avro

        return formats_avro.write(_plain(df))
    from mlsandbox.data import formats_jsonl

    return formats_jsonl.write(_plain(df))


PARSED_KEPT = 16
"""Frames :func:`from_bytes` keeps, by the digest of the bytes they were parsed from (least recently
used out first), so the same bytes read again (profiled, then cleaned several ways) are parsed once."""
PARSED_MAX_BYTES = 16 << 20
"""Bytes larger than this are parsed each time (their frames would hold too much memory)."""
_PARSED: OrderedDict[tuple[bytes, str], pd.DataFrame] = OrderedDict()
_PARSED_LOCK = threading.Lock()


def from_bytes(data: bytes, fmt: Format) -> pd.DataFrame:
    """Parse bytes written by :func:`to_bytes` (or any ordinary file of the format) into a frame.

    Each call returns a frame of its own: a frame parsed from the same bytes before is copied (see
    :data:`PARSED_KEPT`), which is what parsing them again gives."""
    fmt = _check(fmt)
    if len(data) > PARSED_MAX_BYTES:
        return _from_bytes(data, fmt)
    key = (hashlib.blake2b(data, digest_size=16).digest(), fmt)
    with _PARSED_LOCK:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
    if hit is not None:
        return hit.copy(deep=True)
    frame = _from_bytes(data, fmt)
    with _PARSED_LOCK:
        _PARSED[key] = frame.copy(deep=True)
        while len(_PARSED) > PARSED_KEPT:
            _PARSED.popitem(last=False)
    return frame


def _from_bytes(data: bytes, fmt: Format) -> pd.DataFrame:
    if fmt == "csv":
        return _parse_timestamps(pd.read_csv(io.BytesIO(data)))
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(data)).to_pandas()
    if fmt == "avro":
        from mlsandbox.data import formats_avro

        return formats_avro.read(data)
    if fmt == "jsonl":
        from mlsandbox.data import formats_jsonl

        return formats_jsonl.read(data)
    from mlsandbox.data import formats_excel

    return formats_excel.read(data)
