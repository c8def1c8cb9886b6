"""Shared fixtures: one real local sandbox per test session.

``sandbox`` is a started :class:`~mlsandbox.backends.local.LocalBackend` with a name unique to this pytest
process, ephemeral (owned by this process: if pytest dies, the next garbage collection stops it) and
brought ``down`` at the end of the session. ``runtime`` is its :class:`~mlsandbox.backends.base.Runtime`.
Every test using either fixture is marked ``services`` automatically. ``MLSANDBOX_HOME`` is left as it is:
the MinIO binary lives there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mlsandbox.backends.base import Runtime
    from mlsandbox.backends.local import LocalBackend

SERVICE_FIXTURES = frozenset({"sandbox", "runtime"})


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
def runtime(sandbox: LocalBackend) -> Runtime:
    return sandbox.runtime()
