"""Optional SDV path: fit SDV's GaussianCopula on a seed table and sample from it.

Needs the ``sdv`` extra (``pip install 'mlsandbox[sdv]'``); the built-in generators never import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


class OptionalDependencyMissing(ImportError):
    """An optional extra is not installed; the message says how to install it."""


def _sdv() -> Any:
    try:
        from sdv.metadata import Metadata
        from sdv.single_table import GaussianCopulaSynthesizer
    except ImportError as e:
        raise OptionalDependencyMissing(
            f"the SDV path needs the optional 'sdv' package ({e}); install it with: pip install 'mlsandbox[sdv]'"
        ) from e
    return Metadata, GaussianCopulaSynthesizer


def fit_gaussian_copula(seed_table: pd.DataFrame, seed: int = 0) -> Any:
    """A fitted ``GaussianCopulaSynthesizer`` for the seed table (metadata detected from the frame)."""
    metadata_cls, synthesizer_cls = _sdv()
    if hasattr(metadata_cls, "detect_from_dataframes"):  # SDV >= 1.15
        metadata = metadata_cls.detect_from_dataframes({"seed": seed_table}, infer_keys="primary_only")
    else:
        metadata = metadata_cls.detect_from_dataframe(seed_table, table_name="seed")
    np.random.seed(seed)  # SDV draws from numpy's global generator
    synthesizer = synthesizer_cls(metadata, enforce_min_max_values=True)
    synthesizer.fit({"seed": seed_table} if _sdv_major() >= 2 else seed_table)  # SDV 2 takes {name: frame}
    return synthesizer


def _sdv_major() -> int:
    import sdv

    return int(str(sdv.__version__).split(".")[0])


def sample_gaussian_copula(seed_table: pd.DataFrame, rows: int, seed: int = 0) -> pd.DataFrame:
    """Fit SDV's GaussianCopula on ``seed_table`` and sample ``rows`` rows."""
    synthesizer = fit_gaussian_copula(seed_table, seed)
    np.random.seed(seed)
    sample = synthesizer.sample(num_rows=rows)
    return next(iter(sample.values())) if isinstance(sample, dict) else sample  # SDV 2: {name: frame}
