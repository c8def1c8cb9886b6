"""A built split as an Arrow table (what is written) and as a pandas frame (what v1 callers use).

Arrow types are exactly what ``pa.Table.from_pandas`` gives for the pandas frame, so writing either gives
the same bytes: numeric -> double (int64 for integer columns), categorical/id/corrupted -> large_string,
boolean -> bool, datetime -> timestamp[s], the target -> int64 (classification) or double (regression).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mlsandbox.data.columns import MISSING_CODE, Split
from mlsandbox.data.formats import render_text
from mlsandbox.data.randomness import parallel_map
from mlsandbox.data.spec import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    DatetimeColumn,
    IdColumn,
    NumericColumn,
    TabularDataset,
)


def _mask(values: np.ndarray) -> np.ndarray | None:
    missing = np.isnan(values)
    return missing if missing.any() else None


def _junk_text(values: pa.Array, rows: np.ndarray, patterns: list[str]) -> pa.Array:
    text = render_text(pa.chunked_array([values])).combine_chunks()
    cells = text.to_numpy(zero_copy_only=False).astype(object)
    for row, pattern in zip(rows.tolist(), patterns, strict=True):
        cells[row] = pattern.format(cells[row])
    return pa.array(cells, type=pa.large_string())


def arrow_column(column: Column, split: Split) -> pa.Array:
    values = split.values[column.name]
    if isinstance(column, CategoricalColumn):
        missing = values == MISSING_CODE
        indices = pa.array(values, type=pa.int32(), mask=missing if missing.any() else None)
        dictionary = pa.array(split.dictionaries[column.name], type=pa.large_string())
        return pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.large_string())
    mask = _mask(values)
    if isinstance(column, NumericColumn):
        if column.integer:
            array = pa.array(np.nan_to_num(values).astype(np.int64), mask=mask)
        else:
            array = pa.array(values, type=pa.float64(), from_pandas=True)
        if column.name in split.junk:
            return _junk_text(array, *split.junk[column.name])
        return array
    if isinstance(column, BooleanColumn):
        return pa.array(values == 1.0, type=pa.bool_(), mask=mask)
    if isinstance(column, DatetimeColumn):
        return pa.array(np.nan_to_num(values).astype(np.int64), type=pa.timestamp("s"), mask=mask)
    assert isinstance(column, IdColumn)
    return _id_text(column, np.nan_to_num(values).astype(np.int64), mask)


def _id_text(column: IdColumn, numbers: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    """``prefix`` + the number zero-padded to ``digits``: fixed-width text built as one byte buffer (the
    ids are below ``10**digits``, so every cell has the same length)."""
    prefix = column.prefix.encode()
    width = len(prefix) + column.digits
    cells = np.empty((numbers.size, width), dtype=np.uint8)
    if prefix:
        cells[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    rest = numbers.copy()
    for position in range(width - 1, len(prefix) - 1, -1):
        cells[:, position] = ord("0") + rest % 10
        rest //= 10
    offsets = np.arange(0, (numbers.size + 1) * width, width, dtype=np.int64)
    if mask is not None:  # missing ids: null cells holding no text
        lengths = np.where(mask, 0, width)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        cells = cells[~mask]
    validity = None if mask is None else pa.array(~mask).buffers()[1]
    return pa.LargeStringArray.from_buffers(
        numbers.size,
        pa.py_buffer(offsets),
        pa.py_buffer(np.ascontiguousarray(cells)),
        validity,
        int(mask.sum()) if mask is not None else 0,
    )


def label_array(spec: TabularDataset, labels: np.ndarray) -> pa.Array:
    if spec.task == "classification":
        return pa.array(labels.astype(np.int64))
    return pa.array(labels, type=pa.float64())


def build_table(spec: TabularDataset, split: Split, labels: np.ndarray) -> pa.Table:
    arrays = parallel_map(lambda c: arrow_column(c, split), spec.columns)
    names = [c.name for c in spec.columns] + [spec.target]
    return pa.Table.from_arrays([*arrays, label_array(spec, labels)], names=names)


def _pandas_column(array: pa.ChunkedArray, numpy_values: np.ndarray | None) -> Any:
    """A column as v1 frames hold it: numpy float64 with NaN, numpy int64/bool, nullable Int64/boolean
    when there are missing values, datetime64[s], and pandas strings."""
    t = array.type
    if pa.types.is_floating(t) and numpy_values is not None:
        return numpy_values
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        if array.null_count == 0:
            return array.to_numpy()
        return pd.array(
            array.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}.get)
        )
    if pa.types.is_timestamp(t):
        return array.to_numpy()
    return array.to_pandas()


def to_frame(spec: TabularDataset, split: Split, table: pa.Table) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for column in spec.columns:
        direct = (
            split.values[column.name]
            if isinstance(column, NumericColumn) and not column.integer and column.name not in split.junk
            else None
        )
        data[column.name] = _pandas_column(table.column(column.name), direct)
    data[spec.target] = _pandas_column(table.column(spec.target), None)
    return pd.DataFrame(data)
