"""Parquet row groups written in parallel and joined: the bytes of one sequential pyarrow write."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mlsandbox.data import formats_parquet
from mlsandbox.data.formats import PARQUET_OPTIONS, _dictionary_columns, from_bytes, to_bytes


def mixed_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    floats = np.round(rng.normal(50, 5, n), 2)
    floats[rng.random(n) < 0.1] = np.nan
    codes = pa.array(rng.integers(0, 4, n).astype(np.int32), mask=rng.random(n) < 0.05)
    return pa.table(
        {
            "x": pa.array(floats, from_pandas=True),
            "i": pa.array(rng.integers(-5, 1000, n)),
            "city": pa.array(["ny", "boston", "chicago", "la"], type=pa.large_string()).take(codes),
            "id": pa.array([f"C{v:09d}" for v in rng.integers(0, 10**9, n)], type=pa.large_string()),
            "flag": pa.array(rng.random(n) < 0.3),
            "when": pa.array(rng.integers(0, 2 * 10**9, n), type=pa.timestamp("s")),
            "tags": pa.array([["a"] * int(k) for k in rng.integers(0, 3, n)]),
        }
    )


def sequential(table: pa.Table, **options: Any) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(("rows", "group"), [(10_000, 1_000), (10_001, 1_000), (2_500, 1_000), (999, 1_000)])
@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_joined_bytes_equal_one_sequential_write(rows: int, group: int, compression: str) -> None:
    table = mixed_table(rows)
    options = {**PARQUET_OPTIONS, "row_group_size": group, "compression": compression}
    joined = formats_parquet.write_table(table, options)
    assert joined == sequential(table, **options)
    back = pq.ParquetFile(pa.BufferReader(joined))
    assert back.metadata.num_row_groups == -(-rows // group)
    assert back.metadata.num_rows == rows


def test_the_library_options_give_the_same_bytes_as_pyarrow_on_a_large_table() -> None:
    """More rows than one row group of the pinned options: the parallel path, as ``to_bytes`` uses it."""
    table = mixed_table(PARQUET_OPTIONS["row_group_size"] * 2 + 123, seed=3)  # type: ignore[operator]
    options = {**PARQUET_OPTIONS, "use_dictionary": _dictionary_columns(table)}
    written = to_bytes(table, "parquet")
    assert written == sequential(table, **options)
    assert from_bytes(written, "parquet")["id"].tolist() == table.column("id").to_pylist()


def test_page_indexes_move_with_their_row_groups() -> None:
    """Page indexes lie after each part's chunks, not after all of them: other bytes, the same file."""
    table = mixed_table(5_000, seed=1)
    options = {**PARQUET_OPTIONS, "row_group_size": 1_000, "write_page_index": True}
    joined = formats_parquet.write_table(table, options)
    reader = pq.ParquetFile(pa.BufferReader(joined))
    whole = pq.read_table(pa.BufferReader(sequential(table, **options)))
    assert reader.read().equals(whole)
    for g in range(reader.metadata.num_row_groups):
        chunk = reader.metadata.row_group(g).column(0)
        assert chunk.has_column_index and chunk.has_offset_index
        assert reader.read_row_group(g).equals(whole.slice(g * 1_000, 1_000).combine_chunks())


def test_the_footer_codec_reads_and_writes_thrift_exactly() -> None:
    data = sequential(mixed_table(3_000), **{**PARQUET_OPTIONS, "row_group_size": 1_000})
    start, fields = formats_parquet._footer(data)
    out = bytearray()
    formats_parquet._encode_struct(fields, out)
    assert bytes(out) == data[start:-8]


def test_a_single_part_is_kept_as_it_is_and_rows_are_renumbered() -> None:
    table = mixed_table(3_000)
    parts = [sequential(table.slice(i, 1_000), **PARQUET_OPTIONS) for i in (0, 1_000, 2_000)]
    assert formats_parquet.join_parts(parts[:1]) == parts[0]
    joined = pq.ParquetFile(pa.BufferReader(formats_parquet.join_parts(parts)))
    assert [joined.metadata.row_group(g).num_rows for g in range(3)] == [1_000] * 3
    whole = pq.read_table(pa.BufferReader(sequential(table, **PARQUET_OPTIONS)))
    assert joined.read().equals(whole)


@pytest.mark.parametrize(
    "data", [b"", b"PAR1", b"not parquet at all", b"PAR1\x00\x00\x00\x00PAR0", b"PAR1\xff\xff\x00\x00PAR1"]
)
def test_what_is_not_parquet_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a Parquet file"):
        formats_parquet.join_parts([data])


def test_timestamps_and_dates_survive_the_join() -> None:
    table = pa.table(
        {
            "day": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=i % 400) for i in range(4_000)]),
            "t": pa.array(np.arange(4_000) * 10**9, type=pa.timestamp("ns", tz="UTC")),
        }
    )
    options = {**PARQUET_OPTIONS, "row_group_size": 1_000}
    joined = formats_parquet.write_table(table, options)
    assert joined == sequential(table, **options)
    assert pq.read_table(pa.BufferReader(joined)).equals(table)
