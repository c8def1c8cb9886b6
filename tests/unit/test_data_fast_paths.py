"""The fast paths of the tabular generator give exactly the values of the straightforward code."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mlsandbox.data import tabular
from mlsandbox.data.frames import _id_text
from mlsandbox.data.spec import IdColumn


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


def test_chunked_sigmoid_equals_the_one_shot_formula() -> None:
    x = np.random.default_rng(1).normal(0, 3, 3 * tabular._SIGMOID_CHUNK + 17)
    assert np.array_equal(tabular._sigmoid(x), 0.5 * (1.0 + np.tanh(0.5 * x)))
