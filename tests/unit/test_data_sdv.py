"""The optional SDV path: a clear error without the extra; a sample of the seed table's schema with it."""

from __future__ import annotations

import importlib.util

import pytest

from mlsandbox.data import OptionalDependencyMissing, TabularDataset, generate_tabular, sample_gaussian_copula

HAVE_SDV = importlib.util.find_spec("sdv") is not None


def seed_table():  # type: ignore[no-untyped-def]
    spec = TabularDataset.model_validate(
        {
            "name": "seed",
            "rows": 300,
            "columns": [
                {"type": "numeric", "name": "x", "mean": 10, "std": 2, "weight": 1},
                {"type": "categorical", "name": "c", "categories": ["a", "b", "c"]},
            ],
        }
    )
    return generate_tabular(spec, 1).train


@pytest.mark.skipif(HAVE_SDV, reason="sdv is installed")
def test_missing_sdv_gives_a_clear_error() -> None:
    with pytest.raises(OptionalDependencyMissing, match=r"pip install 'mlsandbox\[sdv\]'"):
        sample_gaussian_copula(seed_table(), 10)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SDV, reason="the optional sdv extra is not installed")
def test_gaussian_copula_samples_the_seed_schema() -> None:
    sample = sample_gaussian_copula(seed_table(), 500, seed=3)
    assert list(sample.columns) == ["x", "c", "label"] and len(sample) == 500
    assert abs(sample["x"].mean() - 10) < 0.5 and set(sample["c"].dropna()) <= {"a", "b", "c"}


@pytest.mark.slow  # a fresh interpreter importing pandas and pyarrow: seconds on a busy machine
def test_the_builtin_engine_does_not_import_sdv() -> None:
    import subprocess
    import sys

    code = "import sys, mlsandbox.data as d; d.generate_tabular; d.to_bytes; print('sdv' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
