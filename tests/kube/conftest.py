"""The kube tier: a real API server, controllers, scheduler and kwok (no containers), shared per session.

``control_plane`` (defined in tests/conftest.py, so that the conformance tier shares it) is the running
:class:`~mlsandbox.k8s_operator.testbed.Testbed`: the Sandbox CRD and Chaos Mesh's kinds installed, the
operator running as its own process under the chart's ClusterRole. Attributes used by the tests:
``kubeconfig`` (admin), ``api`` (a ``KubernetesApi``), ``api_client`` (a ``kubernetes.client.ApiClient``),
``namespace(name)``, ``cp`` (the control plane: audit log, logs). kwok runs one node; a pod annotated
``mlsandbox.dev/kwok-outcome: Succeeded|Failed|OOMKilled`` ends so.
The binaries come from ``scripts/install-kube-tools.sh --with-control-plane`` (setup runs it); when one
is missing the fixture fails with that instruction.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from mlsandbox.backends.kube.backend import KubeBackend, sandbox_namespace
from mlsandbox.k8s_operator.testbed import Testbed


@pytest.fixture()
def backend(control_plane: Testbed) -> Iterator[KubeBackend]:
    """A sandbox: its namespace made here (as the operator would), a control namespace of its own;
    brought down after the test."""
    name = f"t{secrets.token_hex(3)}"
    control = f"ctl-{name}"
    control_plane.namespace(control)
    control_plane.namespace(sandbox_namespace(control, name))
    b = KubeBackend(name, control_namespace=control, api_client=control_plane.api_client)
    yield b
    b.down()
