"""Pinned versions live in versions.env; the packaged defaults must agree with it."""

from __future__ import annotations

from pathlib import Path

from mlsandbox.versions import _DEFAULTS, parse_env_file, pinned


def test_packaged_defaults_match_versions_env() -> None:
    env = parse_env_file(Path(__file__).resolve().parents[2] / "versions.env")
    for key, value in _DEFAULTS.items():
        assert env[key] == value, key
    assert pinned()["MINIO_GO_VERSION"] == env["MINIO_GO_VERSION"]
