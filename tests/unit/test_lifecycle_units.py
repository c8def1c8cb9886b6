"""Pure parts of the lifecycle limits: flow usage lines, the model server's pins."""

from __future__ import annotations

import importlib.metadata

from mlsandbox.backends.common.prefect import NO_TORCH_ENV
from mlsandbox.backends.local.venvs import SERVER_PACKAGES, server_requirements
from mlsandbox.gateway.packs.flows.handlers import USAGE_PREFIX, logged_usage
from mlsandbox.workloads import flows


def test_the_flow_and_the_pack_agree_on_the_usage_line() -> None:
    assert flows.USAGE_PREFIX == USAGE_PREFIX
    assert flows.NO_TORCH_ENV == NO_TORCH_ENV


def test_logged_usage_sums_every_execution_and_skips_garbage() -> None:
    lines = [
        "10:00:00 INFO prefect.flow_runs: loaded 2 batch(es)",
        f"10:00:05 INFO prefect.flow_runs: {USAGE_PREFIX}3.250",
        f"10:01:00 INFO prefect.flow_runs: {USAGE_PREFIX}oops",
        f"10:02:05 INFO prefect.flow_runs: {USAGE_PREFIX}1.750",
    ]
    assert logged_usage(lines) == (2, 5.0)
    assert logged_usage([]) == (0, 0.0)


def test_server_requirements_pin_what_the_sandbox_runs() -> None:
    reqs = server_requirements()
    assert len(reqs) == len(SERVER_PACKAGES)
    for dist, req in zip(SERVER_PACKAGES, reqs, strict=True):
        assert req == f"{dist}=={importlib.metadata.version(dist)}"
