"""The serial path of the generator and writers, the parsed-frame cache and the numpy top counts give
exactly what the threaded, uncached and pandas code give."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from test_data_tabular_v2 import rich

from mlsandbox.data import formats, randomness, tabular
from mlsandbox.data.formats import from_bytes, to_bytes
from mlsandbox.data.profile import _top_counts, _value_counts, profile_frame
from mlsandbox.data.tabular import generate_tabular


def _digests(seed: int) -> tuple[str, str, str, str]:
    g = generate_tabular(rich(rows=3000), seed)
    return (
        hashlib.sha256(to_bytes(g.train_table, "csv")).hexdigest(),
        hashlib.sha256(to_bytes(g.train_table, "parquet")).hexdigest(),
        hashlib.sha256(to_bytes(g.holdout_table, "parquet")).hexdigest(),
        hashlib.sha256(json.dumps(g.manifest).encode()).hexdigest(),
    )


@pytest.mark.parametrize("seed", [0, 11])
def test_serial_and_threaded_generation_give_the_same_bytes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial = _digests(seed)  # a small table: the calling thread only
    monkeypatch.setattr(tabular, "SERIAL_BELOW_ROWS", 0)
    monkeypatch.setattr(formats, "SERIAL_BELOW_ROWS", 0)
    monkeypatch.setattr(tabular, "workers", lambda: 2)
    monkeypatch.setattr(randomness, "workers", lambda: 2)
    assert _digests(seed) == serial


def test_serial_if_nests_and_restores() -> None:
    calls: list[int] = []
    with randomness.serial_if(True), randomness.serial_if(False):
        randomness.parallel_map(calls.append, range(4))
    assert calls == [0, 1, 2, 3]
    assert not randomness._SERIAL.get()


def test_from_bytes_gives_each_caller_a_frame_of_its_own() -> None:
    g = generate_tabular(rich(rows=500), 5)
    data = to_bytes(g.train_table, "parquet")
    first = from_bytes(data, "parquet")
    expected = formats._from_bytes(data, "parquet")
    pd.testing.assert_frame_equal(first, expected)
    first.iloc[0, 1] = -1.0  # the caller's frame; the next read must not see it
    first["extra"] = 1
    again = from_bytes(data, "parquet")
    pd.testing.assert_frame_equal(again, expected)
    assert list(again.dtypes) == list(expected.dtypes)
    assert profile_frame(again, g.manifest["target"]["name"]) == profile_frame(
        expected, g.manifest["target"]["name"]
    )


@pytest.mark.parametrize("k", [1, 3, 10])
def test_top_counts_are_the_sorted_value_counts(k: int) -> None:
    rng = np.random.default_rng(k)
    values = rng.choice(np.array(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]), 3000)
    values[rng.random(3000) < 0.1] = None
    for series in (
        pd.Series(values, dtype="str"),
        pd.Series(rng.integers(0, 40, 2000)),
        pd.Series([f"id-{i}" for i in range(1500)], dtype="str"),  # every count tied
        pd.Series(rng.integers(0, 5, 1000).astype(float)),
    ):
        pairs = _value_counts(series)
        distinct, top = _top_counts(series, k)
        assert distinct == len(pairs)
        assert top == pairs[:k]
