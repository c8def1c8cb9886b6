"""Pinned versions of external binaries, read from the repository's ``versions.env`` (the one place)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

# Kept in sync with versions.env by tests/unit/test_versions.py.
_DEFAULTS = {
    "MINIO_GO_MODULE": "github.com/minio/minio",
    "MINIO_GO_VERSION": "v0.0.0-20260212201848-7aac2a2c5b7c",
    "MINIO_RELEASE": "RELEASE.2025-09-07T16-13-09Z",
}


def parse_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


@cache
def pinned() -> dict[str, str]:
    """The pinned versions: versions.env when running from a checkout, else the packaged defaults."""
    candidate = Path(__file__).resolve().parents[2] / "versions.env"
    if candidate.is_file():
        return {**_DEFAULTS, **parse_env_file(candidate)}
    return dict(_DEFAULTS)
