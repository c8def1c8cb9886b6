"""Synthetic datasets: specs, generators, file formats, data-quality profiles, cleaning and corruption.

The bottom layer of mlsandbox: it imports nothing else from the package. Names are loaded lazily, so
importing :mod:`mlsandbox.data.spec` (as scenario models do) does not pull in numpy, pandas or pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlsandbox.data.clean import STRATEGIES, Strategy, clean_frame
    from mlsandbox.data.corruption import (
        Corruption,
        change_schema,
        corrupt_bytes,
        inject_drift,
        inject_label_noise,
        inject_nulls,
        inject_outliers,
        truncate_bytes,
    )
    from mlsandbox.data.drift import DriftingDataset, GeneratedBatches, generate_batches
    from mlsandbox.data.drift_stats import column_drift, ks_statistic, psi_categorical, psi_numeric
    from mlsandbox.data.formats import FORMATS, SUFFIX, Format, format_of, from_bytes, to_bytes
    from mlsandbox.data.images import GeneratedImages, ImageDataset, generate_images
    from mlsandbox.data.profile import iqr_fences, outlier_mask, profile_frame
    from mlsandbox.data.sdv_synth import OptionalDependencyMissing, sample_gaussian_copula
    from mlsandbox.data.spec import (
        BooleanColumn,
        CategoricalColumn,
        Column,
        DatasetSpec,
        DatetimeColumn,
        Defects,
        IdColumn,
        NumericColumn,
        TabularDataset,
    )
    from mlsandbox.data.tabular import GeneratedTabular, generate_tabular, roc_auc
    from mlsandbox.data.text import GeneratedText, TextDataset, generate_text
    from mlsandbox.data.timeseries import GeneratedSeries, TimeSeriesSpec, generate_timeseries

_EXPORTS = {
    "clean": ("STRATEGIES", "Strategy", "clean_frame"),
    "drift": ("DriftingDataset", "GeneratedBatches", "generate_batches"),
    "drift_stats": ("column_drift", "ks_statistic", "psi_categorical", "psi_numeric"),
    "corruption": (
        "Corruption",
        "change_schema",
        "corrupt_bytes",
        "inject_drift",
        "inject_label_noise",
        "inject_nulls",
        "inject_outliers",
        "truncate_bytes",
    ),
    "formats": ("FORMATS", "SUFFIX", "Format", "format_of", "from_bytes", "to_bytes"),
    "images": ("GeneratedImages", "ImageDataset", "generate_images"),
    "profile": ("iqr_fences", "outlier_mask", "profile_frame"),
    "sdv_synth": ("OptionalDependencyMissing", "sample_gaussian_copula"),
    "spec": (
        "BooleanColumn",
        "CategoricalColumn",
        "Column",
        "DatasetSpec",
        "DatetimeColumn",
        "Defects",
        "IdColumn",
        "NumericColumn",
        "TabularDataset",
    ),
    "tabular": ("GeneratedTabular", "generate_tabular", "roc_auc"),
    "text": ("GeneratedText", "TextDataset", "generate_text"),
    "timeseries": ("GeneratedSeries", "TimeSeriesSpec", "generate_timeseries"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "FORMATS",
    "STRATEGIES",
    "SUFFIX",
    "BooleanColumn",
    "CategoricalColumn",
    "Column",
    "Corruption",
    "DatasetSpec",
    "DatetimeColumn",
    "Defects",
    "DriftingDataset",
    "Format",
    "GeneratedBatches",
    "GeneratedImages",
    "GeneratedSeries",
    "GeneratedTabular",
    "GeneratedText",
    "IdColumn",
    "ImageDataset",
    "NumericColumn",
    "OptionalDependencyMissing",
    "Strategy",
    "TabularDataset",
    "TextDataset",
    "TimeSeriesSpec",
    "change_schema",
    "clean_frame",
    "column_drift",
    "corrupt_bytes",
    "format_of",
    "from_bytes",
    "generate_batches",
    "generate_images",
    "generate_tabular",
    "generate_text",
    "generate_timeseries",
    "inject_drift",
    "inject_label_noise",
    "inject_nulls",
    "inject_outliers",
    "iqr_fences",
    "ks_statistic",
    "outlier_mask",
    "profile_frame",
    "psi_categorical",
    "psi_numeric",
    "roc_auc",
    "sample_gaussian_copula",
    "to_bytes",
    "truncate_bytes",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
