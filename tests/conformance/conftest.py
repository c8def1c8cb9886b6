"""The backends the conformance tier checks, one fixture each (``<name>_target``), and what each
environment cannot do.

- ``sim``: in-process, always.
- ``local``: the session's real local sandbox (``sandbox`` in tests/conftest.py).
- ``kube-kwok``: the kube backend on the control-plane tier (a real API server, controllers and scheduler,
  kwok playing the node: ``control_plane`` in tests/conftest.py), its object store, tracker and Prefect
  being the local sandbox's. kwok runs no container: no job runs its workload (a job ends when its pod
  is annotated with an outcome: the job driver), no replica answers a request and no flow run executes,
  so the steps needing those are skipped and listed. Everything else runs: every probe of a bad input,
  submitting, waiting for, failing (through the driver), retrying, resizing and cancelling jobs, the
  tracker and registry reads, deployments' refusals, a flow run's start, the lake source, the config
  store, the refusal of the API and PostgreSQL sources at start, the grade, and the cleanup.

A real-node tier (a kubelet running containers) adds a ``kube_node_target`` fixture here (a KubeRuntime on
its cluster, ``without=frozenset()``, no job driver) and ``kube-node`` to ``BACKENDS`` in
test_conformance.py; every check and pairwise comparison then runs there too.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.protocols import Backend, Runtime
from mlsandbox.checks import JobDriver

KWOK_OUTCOMES = {"succeeded": "Succeeded", "failed": "Failed", "oom_killed": "OOMKilled"}


@dataclass
class Target:
    """A backend under check: its runtime, what its environment cannot do, how its jobs are ended."""

    name: str
    runtime: Runtime
    backend: Backend | None = None
    without: frozenset[str] = frozenset()
    job_driver: JobDriver | None = None


@pytest.fixture(scope="session")
def sim_target() -> Target:
    from mlsandbox.backends import get_backend

    backend = get_backend("sim", "conformance")
    backend.up()
    return Target("sim", backend.runtime(), backend)


@pytest.fixture(scope="session")
def local_target(sandbox: Any) -> Target:
    return Target("local", sandbox.runtime(), sandbox)


def _kwok_driver(rt: Any) -> JobDriver:
    """Ends a job as kwok does when its pod carries the outcome annotation (once the pod runs)."""
    from mlsandbox.backends.kube.controlplane import OUTCOME_ANNOTATION

    def drive(job_id: str, outcome: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            pod = rt.jobs.pod(job_id)
            if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the pod of {job_id} did not run within 60 s (last: {pod!r})")
            time.sleep(0.2)
        patch = {"metadata": {"annotations": {OUTCOME_ANNOTATION: KWOK_OUTCOMES[outcome]}}}
        rt.cluster.patch("v1", "Pod", pod["metadata"]["name"], rt.namespace, patch)

    return drive


@pytest.fixture(scope="session")
def kube_kwok_target(control_plane: Any, sandbox: Any) -> Iterator[Target]:
    from mlsandbox.backends.kube.backend import KubeBackend, sandbox_namespace
    from mlsandbox.backends.kube.runtime import KubeRuntime

    name = f"c{secrets.token_hex(3)}"
    control = f"ctl-{name}"
    control_plane.namespace(control)
    control_plane.namespace(sandbox_namespace(control, name))
    backend = KubeBackend(name, control_namespace=control, api_client=control_plane.api_client)
    rt = KubeRuntime(
        backend.cluster,
        sandbox=backend.name,
        namespace=backend.namespace,
        control_namespace=backend.control_namespace,
        endpoints=sandbox.endpoints(),
        workload_endpoints=ENDPOINTS,
        image="mlsandbox/trainer:0.1.0",
        server_image="mlsandbox/model-server:0.1.0",
    )
    try:
        yield Target(
            "kube-kwok",
            rt,
            without=frozenset({"workloads", "replicas_answer", "flow_runs"}),
            job_driver=_kwok_driver(rt),
        )
    finally:
        backend.down()
