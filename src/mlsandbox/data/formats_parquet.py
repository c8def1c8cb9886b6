"""Parquet written a row group per thread, the bytes of one sequential write.

pyarrow encodes the columns of a file one after the other on one thread. A row group's encoding does not
depend on the others (each column chunk has its own dictionary, pages and statistics), so each row group
is written on the thread pool as a small file of its own, with the same options, and the parts are joined:
their column chunks one after the other, and one footer holding every part's row groups with their
offsets moved to where the chunks now lie. The result is byte for byte what ``pq.write_table`` with the
same ``row_group_size`` writes (the tests compare the two), in about half the time on two cores.

The footer is Thrift's compact protocol. :class:`_Compact` reads it into plain ``(field id, type, value)``
lists and writes them back exactly (field-id deltas, zigzag varints, list headers as Thrift writes them),
so only the offsets and the row-group ordinals change.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mlsandbox.data.randomness import parallel_map

MAGIC = b"PAR1"

# compact protocol types
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# parquet.thrift field ids
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX, _CC_ENCRYPTED = 2, 3, 4, 6, 9
_CM_OFFSETS = (9, 10, 11, 14)  # data, index and dictionary pages, bloom filter
_FILE_ENCRYPTION = 8


@dataclass
class _Field:
    id: int
    type: int
    value: Any
    """ints and floats as such, binary as bytes, lists as ``(element type, [values])``, structs as a list
    of fields, booleans as the type itself (``_TRUE``/``_FALSE``)."""


class _Compact:
    """Thrift compact protocol, just enough to rewrite a Parquet footer."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def _varint(self) -> int:
        shift = result = 0
        while True:
            b = self._byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def _zigzag(self) -> int:
        n = self._varint()
        return (n >> 1) ^ -(n & 1)

    def _value(self, kind: int) -> Any:
        if kind in (_TRUE, _FALSE):  # a boolean inside a list: one byte
            return self._byte()
        if kind == _BYTE:
            return self._byte()
        if kind in (_I16, _I32, _I64):
            return self._zigzag()
        if kind == _DOUBLE:
            self.pos += 8
            return self.data[self.pos - 8 : self.pos]
        if kind == _BINARY:
            size = self._varint()
            self.pos += size
            return self.data[self.pos - size : self.pos]
        if kind in (_LIST, _SET):
            header = self._byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self._varint()
            return (element, [self._value(element) for _ in range(size)])
        if kind == _STRUCT:
            return self.struct()
        raise ValueError(f"unsupported Thrift compact type {kind} at byte {self.pos}")

    def struct(self) -> list[_Field]:
        fields: list[_Field] = []
        last = 0
        while True:
            header = self._byte()
            if header == 0:
                return fields
            delta, kind = header >> 4, header & 0x0F
            field_id = last + delta if delta else self._zigzag()
            value = kind if kind in (_TRUE, _FALSE) else self._value(kind)
            fields.append(_Field(field_id, kind, value))
            last = field_id


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _encode_value(kind: int, value: Any, out: bytearray) -> None:
    if kind in (_TRUE, _FALSE, _BYTE):
        out.append(value)
    elif kind in (_I16, _I32, _I64):
        out += _zigzag(value)
    elif kind == _DOUBLE:
        out += value
    elif kind == _BINARY:
        out += _varint(len(value)) + value
    elif kind in (_LIST, _SET):
        element, items = value
        if len(items) < 15:
            out.append((len(items) << 4) | element)
        else:
            out.append(0xF0 | element)
            out += _varint(len(items))
        for item in items:
            _encode_value(element, item, out)
    elif kind == _STRUCT:
        _encode_struct(value, out)
    else:
        raise ValueError(f"unsupported Thrift compact type {kind}")


def _encode_struct(fields: list[_Field], out: bytearray) -> None:
    last = 0
    for f in fields:
        if 0 < f.id - last <= 15:
            out.append(((f.id - last) << 4) | f.type)
        else:
            out.append(f.type)
            out += _zigzag(f.id)
        if f.type not in (_TRUE, _FALSE):
            _encode_value(f.type, f.value, out)
        last = f.id
    out.append(0)


def _field(fields: list[_Field], field_id: int) -> _Field | None:
    return next((f for f in fields if f.id == field_id), None)


def _footer(data: bytes | memoryview) -> tuple[int, list[_Field]]:
    """``(where the footer starts, the FileMetaData fields)`` of a whole Parquet file in memory."""
    if len(data) < 12 or bytes(data[:4]) != MAGIC or bytes(data[-4:]) != MAGIC:
        raise ValueError("not a Parquet file (no PAR1 magic at both ends)")
    size = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - size
    if start < len(MAGIC):
        raise ValueError("not a Parquet file (its footer length points before its start)")
    return start, _Compact(bytes(data[start : len(data) - 8])).struct()


def _shift(row_group: list[_Field], delta: int, ordinal: int) -> None:
    """A part's row group moved ``delta`` bytes further into the joined file, renumbered ``ordinal``."""
    for f in row_group:
        if f.id == _RG_FILE_OFFSET:
            f.value += delta
        elif f.id == _RG_ORDINAL:
            f.value = ordinal
    columns = _field(row_group, _RG_COLUMNS)
    assert columns is not None
    for chunk in columns.value[1]:
        for f in chunk:
            if f.id in (_CC_FILE_OFFSET, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX) and f.value:  # 0: not set
                f.value += delta
            elif f.id == _CC_ENCRYPTED:
                raise ValueError("encrypted column metadata cannot be moved")
            elif f.id == _CC_META:
                for m in f.value:
                    if m.id in _CM_OFFSETS:
                        m.value += delta


def join_parts(parts: Sequence[bytes | pa.Buffer]) -> bytes:
    """Parquet files of the same schema and options, written with one row group each, as one file whose
    row groups are theirs in order (the chunks are copied once, into the result)."""
    pieces: list[bytes | bytearray | memoryview] = [MAGIC]
    written = len(MAGIC)
    file_meta: list[_Field] | None = None
    row_groups: list[list[_Field]] = []
    num_rows = 0
    for whole in parts:
        part = memoryview(whole)
        start, meta = _footer(part)
        if _field(meta, _FILE_ENCRYPTION) is not None:
            raise ValueError("encrypted Parquet files cannot be joined")
        delta = written - len(MAGIC)  # the part's chunks start after its own magic
        groups = _field(meta, _FILE_ROW_GROUPS)
        rows = _field(meta, _FILE_NUM_ROWS)
        assert groups is not None and rows is not None
        for group in groups.value[1]:
            _shift(group, delta, len(row_groups))
            row_groups.append(group)
        num_rows += rows.value
        pieces.append(part[len(MAGIC) : start])
        written += start - len(MAGIC)
        if file_meta is None:
            file_meta = meta
    assert file_meta is not None
    for f in file_meta:
        if f.id == _FILE_NUM_ROWS:
            f.value = num_rows
        elif f.id == _FILE_ROW_GROUPS:
            f.value = (f.value[0], row_groups)
    footer = bytearray()
    _encode_struct(file_meta, footer)
    pieces += [footer, struct.pack("<I", len(footer)), MAGIC]
    return b"".join(pieces)


def _write(table: pa.Table, options: dict[str, Any]) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def write_table(table: pa.Table, options: dict[str, Any]) -> bytes:
    """``pq.write_table(table, **options)``'s bytes; row groups written on the thread pool when there are
    several (``options["row_group_size"]`` rows each)."""
    size = int(options["row_group_size"])
    if table.num_rows <= size:
        return _write(table, options).to_pybytes()
    slices = [table.slice(start, size) for start in range(0, table.num_rows, size)]
    return join_parts(parallel_map(lambda part: _write(part, options), slices))
