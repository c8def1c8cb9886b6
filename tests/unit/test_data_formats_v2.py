"""Avro, JSON Lines and dirty Excel: round trips through each format's own library, determinism, dirt."""

from __future__ import annotations

import io
import zipfile

import fastavro
import numpy as np
import openpyxl
import pandas as pd
import pyarrow as pa
import pytest

from mlsandbox.data import SUFFIX, format_of, from_bytes, to_bytes

NEW = ["avro", "jsonl", "excel"]


def awkward() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "f": [1.5, np.nan, -0.1, 1e-7, 123456.789],
            "s": ["a,b", 'quote "q"', None, "ünïcode", "line\nbreak"],
            "i": [1, 2, 3, 4, 5],
            "b": [True, False, True, True, False],
            "t": pd.to_datetime(
                [
                    "2024-01-01 10:00:00",
                    None,
                    "2024-03-01 00:00:00",
                    "2024-12-31 23:59:59",
                    "2020-02-29 12:00:00",
                ]
            ),
        }
    )


@pytest.mark.parametrize("fmt", NEW)
def test_round_trip_preserves_values_and_types(fmt: str) -> None:
    df = awkward()
    data = to_bytes(df, fmt)  # type: ignore[arg-type]
    back = from_bytes(data, fmt)  # type: ignore[arg-type]
    assert list(back.columns) == list(df.columns)
    np.testing.assert_array_equal(back["f"].to_numpy(), df["f"].to_numpy())
    assert back["s"].isna().tolist() == [False, False, True, False, False]
    assert back["s"].dropna().tolist() == df["s"].dropna().tolist()
    assert back["i"].tolist() == [1, 2, 3, 4, 5] and back["i"].dtype == np.int64
    assert back["b"].tolist() == df["b"].tolist()
    assert back["t"].isna().tolist() == df["t"].isna().tolist()
    assert (back["t"].dropna().to_numpy() == df["t"].dropna().to_numpy()).all()
    assert to_bytes(back, fmt) == data, "written again: the same bytes"  # type: ignore[arg-type]


def test_avro_is_readable_by_fastavro_with_a_nullable_schema() -> None:
    records = list(fastavro.reader(io.BytesIO(to_bytes(awkward(), "avro"))))
    assert records[1]["f"] is None and records[0]["s"] == "a,b" and records[2]["i"] == 3
    schema = fastavro.reader(io.BytesIO(to_bytes(awkward(), "avro"))).writer_schema
    assert [f["type"][0] for f in schema["fields"]] == ["null"] * 5  # type: ignore[index]


def test_jsonl_is_one_json_object_per_line() -> None:
    lines = to_bytes(awkward(), "jsonl").decode().splitlines()
    assert len(lines) == 5
    assert lines[1] == '{"f":null,"s":"quote \\"q\\"","i":2,"b":false,"t":null}'


def test_excel_is_dirty_as_announced() -> None:
    df = pd.DataFrame({"x": ["1", "2.5", "n/a?", None], "y": [1.0, 2.0, 3.0, 4.0]})
    data = to_bytes(df, "excel")
    sheet = openpyxl.load_workbook(io.BytesIO(data)).active
    assert sheet["A1"].value == "Data export" and "A1:B1" in {str(r) for r in sheet.merged_cells.ranges}
    assert [c.value for c in sheet[4]] == ["x", "y"]  # two rows above the header, then a blank one
    column = [sheet.cell(row=r, column=1).value for r in range(5, 9)]
    assert column == [1, 2.5, "n/a?", None], "mixed types in one column"
    assert sheet.cell(row=sheet.max_row, column=1).value == "Total rows: 4"
    back = from_bytes(data, "excel")
    assert back["x"].tolist()[:3] == ["1", "2.5", "n/a?"] and pd.isna(back["x"][3])
    assert back["y"].tolist() == [1.0, 2.0, 3.0, 4.0] and len(back) == 4
    entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    assert {e.date_time for e in entries} == {(1980, 1, 1, 0, 0, 0)}


def test_excel_with_mixed_object_columns_is_written_as_text() -> None:
    back = from_bytes(to_bytes(pd.DataFrame({"m": [1, "a", 2.5]}), "excel"), "excel")
    assert back["m"].tolist() == ["1", "a", "2.5"]


def test_avro_rejects_what_it_cannot_type() -> None:
    with pytest.raises(ValueError, match="cast mixed columns to str"):
        to_bytes(pd.DataFrame({"m": [1, "a", 2.5]}), "avro")


@pytest.mark.parametrize(
    ("key", "fmt"),
    [("raw/a.avro", "avro"), ("raw/a.jsonl", "jsonl"), ("a.NDJSON", "jsonl"), ("b/c.xlsx", "excel")],
)
def test_format_of_new_suffixes(key: str, fmt: str) -> None:
    assert format_of(key) == fmt
    assert format_of(f"x{SUFFIX[fmt]}") == fmt  # type: ignore[index]


def test_an_arrow_table_writes_like_its_frame() -> None:
    df = awkward()
    table = pa.Table.from_pandas(df, preserve_index=False)
    for fmt in ("csv", "parquet", *NEW):
        assert to_bytes(table, fmt) == to_bytes(df, fmt), fmt  # type: ignore[arg-type]
