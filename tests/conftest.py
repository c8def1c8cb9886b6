"""Shared fixtures: one real local sandbox per test session.

``sandbox`` is a started :class:`~mlsandbox.backends.local.LocalBackend` with a name unique to this pytest
process, ephemeral (owned by this process: if pytest dies, the next garbage collection stops it) and
brought ``down`` at the end of the session. ``runtime`` is its :class:`~mlsandbox.backends.protocols.Runtime`.
Every test using either fixture is marked ``services`` automatically. ``MLSANDBOX_HOME`` is left as it is:
the MinIO binary lives there.

``control_plane`` is the kube tier's cluster (see tests/kube/conftest.py), here so that every tier using it
(tests/kube, tests/conformance) shares one per session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.backends.protocols import Runtime
    from mlsandbox.k8s_operator.testbed import Testbed

SERVICE_FIXTURES = frozenset({"sandbox", "runtime", "s3"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)


def session_sandbox_name() -> str:
    return f"t{os.getpid()}"


@pytest.fixture(scope="session")
def sandbox() -> Iterator[LocalBackend]:
    from mlsandbox.backends.local import LocalBackend, collect_garbage

    collect_garbage()  # what crashed earlier runs left behind
    backend = LocalBackend(session_sandbox_name())
    try:
        backend.up(ephemeral=True)
        yield backend
    finally:
        backend.down()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Testbed]:
    from mlsandbox.k8s_operator.testbed import testbed

    with testbed() as bed:
        yield bed


@pytest.fixture(scope="session")
def runtime(sandbox: LocalBackend) -> Runtime:
    return sandbox.runtime()


@pytest.fixture(scope="session")
def s3(sandbox: LocalBackend) -> Any:
    """A plain boto3 S3 client on the sandbox's object store (to check what actions really wrote)."""
    import boto3
    from botocore.config import Config

    ep = sandbox.endpoints()
    return boto3.client(
        "s3",
        endpoint_url=ep.s3_url,
        aws_access_key_id=ep.s3_access_key,
        aws_secret_access_key=ep.s3_secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )
