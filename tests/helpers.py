"""Helpers every test tier shares: one step helper pair for gateway episodes, one set of endpoints.

``ok(gw, action)`` takes a step that must succeed and returns its result; ``err(gw, action)`` takes a
step that must fail and returns its error (``code``, ``message``, ``details``). ``ENDPOINTS`` are a
sandbox's endpoints as the chart's Services name them inside a cluster (what workloads get in their
environment); nothing listens there, so they suit manifest builders and unit tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from mlsandbox.backends.protocols import Endpoints

ENDPOINTS = Endpoints(
    s3_url="http://mls-mlsandbox-minio.mlsandbox.svc:9000",
    s3_access_key="mlsandbox",
    s3_secret_key="secret-secret",
    mlflow_url="http://mls-mlsandbox-mlflow.mlsandbox.svc:5000",
    prefect_api_url="http://mls-mlsandbox-prefect-server.mlsandbox.svc:4200/api",
)


class Steps(Protocol):
    """What the helpers need of a gateway (:class:`mlsandbox.gateway.Gateway` or an episode host)."""

    def step(self, raw: Any) -> Any: ...


def ok(gw: Steps, action: dict[str, Any]) -> dict[str, Any]:
    """Run ``action``; it must succeed. Its result."""
    obs = gw.step(action).observation
    assert obs["ok"], (action, obs["error"])
    result: dict[str, Any] = obs["result"]
    return result


def err(gw: Steps, action: dict[str, Any]) -> dict[str, Any]:
    """Run ``action``; it must fail. Its error (``code``, ``message``, maybe ``details``)."""
    obs = gw.step(action).observation
    assert not obs["ok"], (action, obs["result"])
    error: dict[str, Any] = obs["error"]
    return error


__all__ = ["ENDPOINTS", "Steps", "err", "ok"]


_T = TypeVar("_T")


def run_async(fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """``anyio.run`` in a thread of its own: a synchronous Playwright session alive in this process (the
    console tier's browser) marks this thread's event loop as running between its calls, and no other
    event loop starts in a thread where one runs."""
    import anyio

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, fn, *args).result()


_REFERENCE_EPISODES: dict[str, tuple[Any, list[Any]]] = {}
"""Reference episodes of this test session, by scenario: each is a real episode of minutes, run once."""


def reference_episode(env: Any, scenario: str) -> tuple[Any, list[Any]]:
    """The scenario's reference solution played once per session on ``env`` (an ``MLSandboxEnv``): its
    :class:`~mlsandbox.agents.validate.Validation` and its steps (``StepRecord``), shared by the modules that
    check it solves the scenario and the ones that check how."""
    from mlsandbox.agents.validate import validate_scenario

    if scenario not in _REFERENCE_EPISODES:
        steps: list[Any] = []
        validation = validate_scenario(env, scenario, on_step=steps.append)
        _REFERENCE_EPISODES[scenario] = (validation, steps)
    return _REFERENCE_EPISODES[scenario]


JOB_TERMINAL = ("succeeded", "failed", "cancelled")


def job_until_done(rt: Any, job_id: str, limit_s: float = 600.0) -> Any:
    """The job's status once it ended, sleeping the runtime's clock a second at a time (at most ``limit_s``)."""
    for _ in range(int(limit_s)):
        status = rt.jobs.get(job_id)
        if status.state in JOB_TERMINAL:
            return status
        rt.clock.sleep(1.0)
    raise AssertionError(f"{job_id} still {status.state}")
