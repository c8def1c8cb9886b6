"""The kube tier: a real API server, controllers, scheduler and kwok (no containers), shared per session.

``control_plane`` is the running :class:`~mlsandbox.k8s_operator.testbed.Testbed`: the Sandbox CRD and
Chaos Mesh's kinds installed, the operator running as its own process under the chart's ClusterRole.
Attributes used by the tests: ``kubeconfig`` (admin), ``api`` (a ``KubernetesApi``), ``api_client``
(a ``kubernetes.client.ApiClient``), ``namespace(name)``, ``cp`` (the control plane: audit log, logs).
kwok runs one node; a pod annotated ``mlsandbox.dev/kwok-outcome: Succeeded|Failed|OOMKilled`` ends so.
The binaries come from ``scripts/install-kube-tools.sh --with-control-plane`` (setup runs it); when one
is missing the fixture fails with that instruction.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mlsandbox.k8s_operator.testbed import Testbed, testbed


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Testbed]:
    with testbed() as bed:
        yield bed
