"""Validation of every name an agent may send: no path traversal, no escape from its episode."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

_DATASET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
_MODEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


def check_dataset_name(value: str) -> str:
    """A dataset name is a relative object key inside the episode's bucket."""
    if value.startswith("/") or "\\" in value:
        raise ValueError("dataset names are relative object keys (no leading '/', no backslash)")
    if any(part in ("..", ".") for part in value.split("/")):
        raise ValueError("path traversal ('..' or '.' segments) is not allowed in dataset names")
    if not _DATASET_RE.match(value):
        raise ValueError(
            "dataset names use letters, digits, '.', '_', '-' in '/'-separated segments, each starting "
            "with a letter or digit"
        )
    return value


def check_model_name(value: str) -> str:
    if not _MODEL_RE.match(value):
        raise ValueError("model names start with a letter and use letters, digits, '_' and '-' (max 64)")
    return value


DatasetName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(check_dataset_name)]
ModelName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(check_model_name)]
JobId = Annotated[str, Field(pattern=r"^job-[0-9]{1,6}$", description="A job id such as job-1")]
RunId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="A tracking run id (32 hex digits)")]
