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
    """One column as the Arrow array that is written."""
    values = split.values[column.name]
    if isinstance(column, CategoricalColumn):
        missing = values == MISSING_CODE
        indices = pa.array(values, type=pa.int32(), mask=missing if missing.any() else None)
        dictionary = pa.array(split.dictionaries[column.name], type=pa.large_string())
        return dictionary.take(indices)  # the dense strings (about 3x faster than a dictionary cast)
    mask = _mask(values)
    if isinstance(column, NumericColumn):
        if column.integer:
            array = _over(pa.int64(), _integers(values, mask), mask)
        else:
            array = _over(pa.float64(), values, mask)
        if column.name in split.junk:
            return _junk_text(array, *split.junk[column.name])
        return array
    if isinstance(column, BooleanColumn):
        return pa.array(values == 1.0, type=pa.bool_(), mask=mask)
    if isinstance(column, DatetimeColumn):
        return _over(pa.timestamp("s"), _integers(values, mask), mask)
    assert isinstance(column, IdColumn)
    return _id_text(column, _integers(values, mask), mask)


def _integers(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Integral floats as int64, 0 where missing."""
    with np.errstate(invalid="ignore"):  # NaN has no int64: those cells are set to 0 next
        out = values.astype(np.int64)
    if mask is not None:
        out[mask] = 0
    return out


def _validity(mask: np.ndarray | None) -> pa.Buffer | None:
    """Arrow's validity bitmap for ``mask`` (true = null), or None when nothing is missing."""
    return None if mask is None else pa.py_buffer(np.packbits(~mask, bitorder="little"))


def _over(kind: pa.DataType, values: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    """An Arrow array over the numpy buffer itself (no copy, and no GIL held while converting); ``mask``
    marks the nulls (the values under them are not read)."""
    nulls = 0 if mask is None else int(np.count_nonzero(mask))
    return pa.Array.from_buffers(kind, values.size, [_validity(mask), pa.py_buffer(values)], nulls)


_FOUR_DIGITS = np.frombuffer("".join(f"{i:04d}" for i in range(10_000)).encode(), dtype=np.uint8).reshape(
    -1, 4
)
"""Row i: the ASCII digits of i, zero-padded to four."""
_FOUR_DIGIT_WORDS = _FOUR_DIGITS.copy().view("<u4").ravel()
"""The same four bytes as one little-endian word (written back as little-endian: the same bytes)."""


def _id_text(column: IdColumn, numbers: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    """``prefix`` + the number zero-padded to ``digits``: fixed-width text built as one byte buffer (the
    ids are below ``10**digits``, so every cell has the same length); missing ids are null cells holding
    no text."""
    prefix = column.prefix.encode()
    width = len(prefix) + column.digits
    present = numbers if mask is None else numbers[~mask]
    cells = np.empty((present.size, width), dtype=np.uint8)
    if prefix:
        cells[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    rest, position = present, width
    while position - len(prefix) >= 4:  # four digits at a time, from the right, as one 4-byte word per row
        rest, group = np.divmod(rest, 10_000)
        word = np.ndarray((present.size,), dtype="<u4", buffer=cells, offset=position - 4, strides=(width,))
        word[...] = _FOUR_DIGIT_WORDS[group]
        position -= 4
    if position > len(prefix):  # the leading 1-3 digits (rest < 10**(position - len(prefix)) here)
        cells[:, len(prefix) : position] = _FOUR_DIGITS[rest, 4 - (position - len(prefix)) :]
    offsets = np.empty(numbers.size + 1, dtype=np.int64)
    offsets[0] = 0
    if mask is None:
        np.multiply(np.arange(1, numbers.size + 1, dtype=np.int64), width, out=offsets[1:])
    else:
        np.cumsum(~mask, out=offsets[1:])  # cells present so far
        offsets *= width
    return pa.LargeStringArray.from_buffers(
        numbers.size,
        pa.py_buffer(offsets),
        pa.py_buffer(cells),
        _validity(mask),
        numbers.size - present.size,
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
