"""The fast paths of the tabular generator give exactly the values of the straightforward code."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_data_tabular_v2 import rich

from mlsandbox.data import tabular
from mlsandbox.data.formats import to_bytes
from mlsandbox.data.frames import _id_text
from mlsandbox.data.spec import IdColumn
from mlsandbox.data.tabular import generate_tabular


@pytest.mark.parametrize(("prefix", "digits"), [("", 4), ("C", 9), ("ab_-", 12)])
@pytest.mark.parametrize("with_missing", [False, True])
def test_id_text_equals_the_arrow_compute_rendering(prefix: str, digits: int, with_missing: bool) -> None:
    rng = np.random.default_rng(digits)
    numbers = rng.integers(0, 10**digits, 2000)
    numbers[:3] = [0, 10**digits - 1, 7]
    mask = rng.random(2000) < 0.2 if with_missing else None
    padded = pc.utf8_lpad(pa.array(numbers).cast(pa.string()), digits, "0")
    expected = pc.binary_join_element_wise(prefix, padded, "") if prefix else padded
    if mask is not None:
        expected = pc.if_else(pa.array(mask), pa.nulls(len(expected), pa.string()), expected)
    got = _id_text(IdColumn(name="i", prefix=prefix, digits=digits), numbers, mask)
    got.validate(full=True)
    assert got.type == pa.large_string() and got.equals(expected.cast(pa.large_string()))
    assert got.null_count == (int(mask.sum()) if mask is not None else 0)


def _render_every_cell(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The straightforward rendering: every cell's text searched for plain digits."""
    text = pc.cast(column, pa.string())
    integral = pc.match_substring_regex(text, r"^-?[0-9]+$")
    return pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)


EDGE_FLOATS = [1.0, -0.0, 0.0, 2.5, 1e16, 1e21, -1e22, float("inf"), float("-inf"), float("nan"), None, 1e-7]


@pytest.mark.parametrize(
    "column",
    [
        pa.chunked_array([pa.array([*EDGE_FLOATS, 123456789.0, 12.0, -3.0, 5e15, 9007199254740993.0])]),
        pa.chunked_array([pa.array(EDGE_FLOATS[:5]), pa.array(EDGE_FLOATS[5:])]),
        pa.chunked_array([pa.array(np.round(np.random.default_rng(0).normal(0, 3, 20_000), 1))]),
        pa.chunked_array([pa.array([1.5, 2.25, None])]),
        pa.chunked_array([pa.array(np.array([1.0, 2.5, -4.0], dtype=np.float32))]),
    ],
)
def test_float_text_equals_the_every_cell_rendering(column: pa.ChunkedArray) -> None:
    """Only integral values' text is searched for plain digits: the same text as searching every cell."""
    from mlsandbox.data.formats import render_text

    assert render_text(column).combine_chunks().equals(_render_every_cell(column).combine_chunks())


@pytest.mark.parametrize("rows", [0, 1, 3 * (1 << 18) + 5])
def test_csv_written_in_slices_is_the_bytes_of_one_write(rows: int) -> None:
    """Row slices written on the thread pool and joined: the header, then every line, as one write of the
    rendered table gives them (slice edges included)."""
    import pyarrow.csv as pa_csv

    from mlsandbox.data.formats import render_text

    rng = np.random.default_rng(1)
    table = pa.table(
        {
            "x": np.round(rng.normal(0, 3, rows), 2),
            "k": pa.array(rng.integers(0, 9, rows)).cast(pa.string()),
            "n": pa.array(rng.integers(0, 100, rows), mask=rng.random(rows) < 0.1),
        }
    )
    text = pa.table([render_text(c) for c in table.columns], names=table.column_names)
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(text, sink, pa_csv.WriteOptions(include_header=False, quoting_style="none"))
    assert to_bytes(table, "csv") == b"x,k,n\n" + sink.getvalue().to_pybytes()


def test_a_cell_needing_quotes_in_a_late_slice_quotes_the_whole_file_as_pandas_does() -> None:
    import io

    import pandas as pd

    rows = 2 * (1 << 18) + 3
    names = np.array(["plain"] * rows, dtype=object)
    names[-2] = 'has, a "comma"'
    frame = pd.DataFrame({"i": np.arange(rows), "name": names})
    data = to_bytes(frame, "csv")
    assert data == frame.to_csv(index=False, lineterminator="\n").encode()
    assert pd.read_csv(io.BytesIO(data))["name"].iloc[-2] == 'has, a "comma"'


def test_chunked_sigmoid_equals_the_one_shot_formula() -> None:
    x = np.random.default_rng(1).normal(0, 3, 3 * tabular._SIGMOID_CHUNK + 17)
    assert np.array_equal(tabular._sigmoid(x), 0.5 * (1.0 + np.tanh(0.5 * x)))


# ------------------------------------------------------------------------------ unchanged values


REGRESSION = {
    "task": "regression",
    "positive_rate": 0.5,
    "noise_std": 2.0,
    "defects": {
        "missing_rate": 0.05,
        "injections": [
            {"type": "duplicates", "rate": 0.03},
            {"type": "type_corruption", "column": "income", "rate": 0.05},
        ],
    },
}


@pytest.mark.parametrize(
    ("overrides", "seed", "train_csv", "manifest"),
    [
        (
            {},
            3,
            "4f1f474aac849fa38382b77cd841be6f7d72ececc2562eff17f8ef953a65a910",
            "72bd459813ec5cefb1de9ba4c7c16c2dbc4767817d817ccceff0b1c21b3bbc39",
        ),
        (
            REGRESSION,
            2,
            "eea30c9ce5fc04580559d77d6cef44ca1f9eb019ce3bf3d44c3f137811eb442c",
            "dfd40e96c0fbe4788ac72619a6d119e4abbdcc1a6c055bd4b866c79a0b061d93",
        ),
    ],
)
def test_values_and_manifest_are_those_of_the_straightforward_generator(
    overrides: dict[str, Any], seed: int, train_csv: str, manifest: str
) -> None:
    """Hashes of generator version 2 (its defect rows drawn by ``sorted_sample``, its intercept solved
    from a warm start), kept since by every fast path (labels on a second thread, categories by comparison
    and by take, ids four digits at a time, in-place rounding, late row lists): a change of values must
    bump ``GENERATOR_VERSION`` and these hashes together."""
    assert tabular.GENERATOR_VERSION == 2
    g = generate_tabular(rich(**overrides), seed)
    assert hashlib.sha256(to_bytes(g.train_table, "csv")).hexdigest() == train_csv
    assert hashlib.sha256(json.dumps(g.manifest).encode()).hexdigest() == manifest
