"""Synthetic datasets: specs, generators, file formats, data-quality profiles and cleaning.

The bottom layer of mlsandbox: it imports nothing else from the package. Names are loaded lazily, so
importing :mod:`mlsandbox.data.spec` (as scenario models do) does not pull in numpy, pandas or pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlsandbox.data.clean import STRATEGIES, Strategy, clean_frame
    from mlsandbox.data.formats import FORMATS, Format, format_of, from_bytes, to_bytes
    from mlsandbox.data.profile import iqr_fences, outlier_mask, profile_frame
    from mlsandbox.data.spec import (
        CategoricalColumn,
        Column,
        DatasetSpec,
        Defects,
        NumericColumn,
        TabularDataset,
    )
    from mlsandbox.data.tabular import GeneratedTabular, generate_tabular, roc_auc

_EXPORTS = {
    "clean": ("STRATEGIES", "Strategy", "clean_frame"),
    "formats": ("FORMATS", "Format", "format_of", "from_bytes", "to_bytes"),
    "profile": ("iqr_fences", "outlier_mask", "profile_frame"),
    "spec": ("CategoricalColumn", "Column", "DatasetSpec", "Defects", "NumericColumn", "TabularDataset"),
    "tabular": ("GeneratedTabular", "generate_tabular", "roc_auc"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "FORMATS",
    "STRATEGIES",
    "CategoricalColumn",
    "Column",
    "DatasetSpec",
    "Defects",
    "Format",
    "GeneratedTabular",
    "NumericColumn",
    "Strategy",
    "TabularDataset",
    "clean_frame",
    "format_of",
    "from_bytes",
    "generate_tabular",
    "iqr_fences",
    "outlier_mask",
    "profile_frame",
    "roc_auc",
    "to_bytes",
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
