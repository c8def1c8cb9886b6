"""Shared fixtures: one real local sandbox per test session.

``sandbox`` is a started :class:`~mlsandbox.backends.local.LocalBackend` with a name unique to this pytest
process, ephemeral (owned by this process: if pytest dies, the next garbage collection stops it) and
brought ``down`` at the end of the session. ``runtime`` is its :class:`~mlsandbox.backends.protocols.Runtime`.
Every test using either fixture is marked ``services`` automatically. ``MLSANDBOX_HOME`` is left as it is:
the MinIO binary lives there.

``control_plane`` is the kube tier's cluster (see tests/kube/conftest.py), here so that every tier using it
(tests/kube, tests/conformance) shares one per session. Its operator is stopped after the last test
that names the fixture (it keeps re-checking every Sandbox those tests left); the control plane stays
until the session ends.

The real-node tier's cluster is here too, for the same reason (tests/node, tests/conformance): ``node_cluster``
(a control plane and one real node on this machine: containerd, kubelet, kube-proxy, kube-router, CoreDNS),
``kube_node_cluster`` (the same with the chart installed) and ``node_sandbox`` (a Sandbox of the chart's
namespace, Ready, and the environment ``mlsandbox --backend kube`` needs to use it). A node needs root:
without it, every test using them is skipped with that reason. Tests using them are marked ``node`` and
``services``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mlsandbox.backends.kube.backend import KubeBackend
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.backends.protocols import Runtime
    from mlsandbox.k8s_operator.node_testbed import NodeCluster
    from mlsandbox.k8s_operator.testbed import Testbed

SERVICE_FIXTURES = frozenset({"sandbox", "runtime", "s3"})
NODE_FIXTURES = frozenset({"node_session", "node_cluster", "kube_node_cluster", "node_sandbox"})
NODE_NEEDS_ROOT = (
    "the real-node tier needs root: containerd and runc, the kubelet's cgroups, kube-proxy's and "
    "kube-router's iptables rules and the pods' network namespaces (run it as root, as .ci/run does)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if SERVICE_FIXTURES & names:
            item.add_marker(pytest.mark.services)
        if NODE_FIXTURES & names:
            item.add_marker(pytest.mark.node)
            item.add_marker(pytest.mark.services)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # The last test (in run order, after every reordering hook) that uses the shared control plane.
    users = [item for item in session.items if "control_plane" in getattr(item, "fixturenames", ())]
    _control_plane_session.last_user = users[-1].nodeid if users else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    # Once the last test using the control plane is done (its own fixtures torn down), stop its operator:
    # it keeps re-checking every Sandbox the kube tests made (tens of API requests a second, half a core
    # of API server) for as long as it runs. The control plane itself stays until the session ends, for
    # the session fixtures built on it (conformance's kube-kwok target needs no operator).
    if item.nodeid == _control_plane_session.last_user and _control_plane_session.bed is not None:
        _control_plane_session.bed.stop_operator()
    return result


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


@dataclass
class ControlPlaneSession:
    """The session's control plane; its operator is stopped after the last test that uses it."""

    bed: Testbed | None = None
    last_user: str | None = None


_control_plane_session = ControlPlaneSession()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Testbed]:
    from mlsandbox.k8s_operator.testbed import testbed

    with testbed() as bed:
        _control_plane_session.bed = bed
        try:
            yield bed
        finally:
            _control_plane_session.bed = None


# ----------------------------------------------------------------------------------- the real node


class NodeSession:
    """The session's real node: the cluster (None once stopped; the lifecycle tests stop it). What the
    machine was before it started is the node's own ``baseline``."""

    def __init__(self) -> None:
        self.cluster: NodeCluster | None = None
        self.context: contextlib.ExitStack = contextlib.ExitStack()

    def stop(self) -> None:
        self.cluster = None
        self.context.close()


_node_session = NodeSession()


@pytest.fixture(scope="session")
def node_session() -> Iterator[NodeSession]:
    if os.geteuid() != 0:
        pytest.skip(NODE_NEEDS_ROOT)
    yield _node_session
    _node_session.stop()


def start_node_session_cluster(session: NodeSession) -> NodeCluster:
    """The session's cluster, brought up by what ``mlsandbox cluster up`` runs (the built-in real node:
    control plane, node, images, the chart), owned by this process and recorded under a name of this
    session (``t<pid>``); no Sandbox (the tests make theirs) and no Chaos Mesh (its test installs it)."""
    from mlsandbox.k8s_operator.local_cluster import Progress, UpOptions, running

    options = UpOptions(
        name=session_sandbox_name(), engine="node", sandbox=None, chaos_mesh=False, detach=False
    )
    progress = Progress()
    local = session.context.enter_context(running(options, progress))
    assert local.node_cluster is not None
    print(f"node cluster up: {progress.timings}")
    return local.node_cluster


@pytest.fixture(scope="session")
def node_cluster(node_session: NodeSession) -> NodeCluster:
    """A control plane and one real node, Ready with CoreDNS, the chart installed and the images episodes
    run imported (shared by the session)."""
    if node_session.cluster is None:
        node_session.cluster = start_node_session_cluster(node_session)
    return node_session.cluster


@pytest.fixture(scope="session")
def kube_node_cluster(node_cluster: NodeCluster) -> NodeCluster:
    """The shared node with the chart installed and every image episodes run (``node_cluster`` has them:
    it is what ``mlsandbox cluster up`` brings up)."""
    assert node_cluster.chart_installed
    return node_cluster


@dataclass
class NodeSandbox:
    """A Ready Sandbox of the chart's namespace on the real node, and how a client of this machine uses it."""

    cluster: NodeCluster
    name: str
    namespace: str
    env: dict[str, str] = field(default_factory=dict)
    """``KUBECONFIG``, the control namespace, the services' NodePort URLs and S3 keys, the images."""

    def backend_config(self) -> dict[str, Any]:
        """The kube backend's typed config for this sandbox (``backend_config`` of the env, or of
        ``get_backend``): the cluster, the endpoints and images of :attr:`env`, whatever the process's
        environment holds."""
        from mlsandbox.backends.kube.backend import KubeBackendConfig
        from mlsandbox.backends.kube.runtime import client_endpoints

        config = KubeBackendConfig(
            name=self.name,
            control_namespace=self.env["MLSANDBOX_CONTROL_NAMESPACE"],
            kubeconfig=self.env["KUBECONFIG"],
            endpoints=client_endpoints(environ=self.env),
            image=self.env["MLSANDBOX_TRAINER_IMAGE"],
            server_image=self.env["MLSANDBOX_MODEL_SERVER_IMAGE"],
        )
        return config.model_dump(exclude={"type", "name"})

    def backend(self) -> KubeBackend:
        """The sandbox as the kube backend (:meth:`backend_config`, not the process's environment)."""
        from mlsandbox.backends.kube.backend import KubeBackend
        from mlsandbox.backends.registry import get_backend

        backend = get_backend("kube", self.name, **self.backend_config())
        assert isinstance(backend, KubeBackend)
        return backend


def make_node_sandbox(
    cluster: NodeCluster, name: str, scenario: str = "tabular-quality-basic"
) -> NodeSandbox:
    """A Sandbox ``name`` in the chart's namespace, once Ready (the operator in its pod made its namespace,
    quota, policies and RBAC), as ``mlsandbox cluster up`` makes its own (the same budget)."""
    from mlsandbox.k8s_operator.local_cluster import SANDBOX_BUDGET, create_ready_sandbox
    from mlsandbox.k8s_operator.resources import sandbox_namespace_name
    from mlsandbox.k8s_operator.testbed import CONTROL_NAMESPACE

    spec = {"scenario": scenario, "seed": 1, "budget": SANDBOX_BUDGET}
    create_ready_sandbox(cluster.api, name, spec, timeout=180)
    return NodeSandbox(cluster, name, sandbox_namespace_name(CONTROL_NAMESPACE, name), cluster.client_env())


@pytest.fixture(scope="session")
def node_sandbox(node_session: NodeSession, kube_node_cluster: NodeCluster) -> Iterator[NodeSandbox]:
    """One Sandbox for the session's episodes on real pods (deleted at the end, unless the lifecycle
    tests took the cluster down with it already)."""
    from mlsandbox.k8s_operator.testbed import CONTROL_NAMESPACE

    box = make_node_sandbox(kube_node_cluster, "episodes")
    yield box
    if node_session.cluster is not kube_node_cluster:
        return  # the control plane is gone, and everything on it
    with contextlib.suppress(Exception):
        box.backend().down()
        kube_node_cluster.delete_sandbox(CONTROL_NAMESPACE, box.name)


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
