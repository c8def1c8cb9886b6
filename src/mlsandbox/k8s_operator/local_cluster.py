"""A local cluster running the sandbox, left running: ``mlsandbox cluster up|down|status`` (``make
sandbox-up``/``sandbox-down``) and the real-node test tier, which brings its cluster up with the same
:func:`up`.

Two engines, chosen by :func:`choose_engine` (which says why):

- **kind**, when Docker answers and runs privileged containers (probed each time: ``docker run --rm
  --privileged --user 0`` of an image present locally) and kind is installed: a kind cluster, Chaos Mesh from its
  Helm repository, the workload images built by Docker and loaded into kind, the chart;
- **the built-in real node** otherwise (root needed): a control plane of this machine's own processes
  (:mod:`mlsandbox.backends.kube.controlplane`), a real node (:mod:`mlsandbox.backends.kube.node`:
  containerd, kubelet, kube-proxy, kube-router, CoreDNS), the images built and imported without a registry
  (:mod:`mlsandbox.backends.kube.node_images`), Chaos Mesh where its binaries were built
  (:mod:`.chaos_node`), the chart (:meth:`.node_testbed.NodeCluster.install_chart`).

Then one Sandbox, Ready. What runs, and how clients reach it, is recorded by
:mod:`mlsandbox.backends.kube.cluster_state` (the kube backend reads it); a detached real-node cluster is
handed to a keeper process that holds the machine's node lock until :func:`down`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil
import yaml
from pydantic import BaseModel, ConfigDict

from mlsandbox import paths
from mlsandbox.backends.kube import cluster_state as cs
from mlsandbox.backends.kube import controlplane, node, node_images
from mlsandbox.backends.kube.client import KubernetesApi
from mlsandbox.backends.kube.runtime import DEFAULT_IMAGE, DEFAULT_SERVER_IMAGE, KIND_ENDPOINTS
from mlsandbox.backends.kube.schemas import CHART_DIR, REPO_ROOT, tool
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import MissingToolError, MLSandboxError
from mlsandbox.versions import pinned

from .model import GROUP, VERSION
from .node_testbed import CHART_IMAGES, EPISODE_IMAGES, NodeCluster
from .testbed import CONTROL_NAMESPACE

Requested = Literal["auto", "node", "kind"]
SANDBOX_BUDGET: dict[str, Any] = {"cpu": "3", "memory": "6Gi", "maxPods": 30}
"""What one sandbox's episodes need at most at once on a node: a training job or a flow run, model
replicas and the feature service (requests = limits)."""
KIND_RELEASE = "mls"
SERVER_CPU_REQUEST = 0.25
"""The share of its machine's CPU a model-server replica requests on a cluster of this machine (its
limit stays the machine's). Every pod of such a cluster shares the machine's few CPUs (two on a small
one) with the control plane and the client: with requests = limits, the chart and one 1-CPU replica
already hold the scheduler's whole share of two CPUs, so a second replica (a scale-out for a traffic
spike, the new version of a rolling update) or the retraining job never starts. At a quarter, two to
four replicas, the feature service and a job fit, and they contend for the CPUs they share as a local
sandbox's processes do."""
KIND_IMAGES = {
    "workloads/Dockerfile.trainer": DEFAULT_IMAGE,
    "workloads/Dockerfile.model-server": DEFAULT_SERVER_IMAGE,
    "workloads/Dockerfile.gateway": "mlsandbox/gateway:0.1.0",
}
NEEDS_ROOT = (
    "the built-in real node needs root (containerd, the kubelet's cgroups, kube-proxy's and kube-router's "
    "iptables rules): run `sudo mlsandbox cluster up` (or `sudo make sandbox-up`)"
)


class ClusterError(MLSandboxError):
    """The cluster cannot be brought up, found or taken down (the message says why and what to do)."""


# ------------------------------------------------------------------------------------------ progress


class Progress:
    """Steps with their timings; ``say`` prints (the CLI's is richer). :attr:`timings` keeps seconds per
    step, in order."""

    def __init__(self, say: Callable[[str], None] = print) -> None:
        self._say = say
        self.timings: dict[str, float] = {}

    def say(self, line: str) -> None:
        self._say(line)

    def started(self, title: str) -> None:
        self.say(f"{title} ...")

    def finished(self, title: str, seconds: float) -> None:
        self.say(f"{title}: {seconds:.1f} s")

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.started(title)
        began = time.monotonic()
        yield
        self.timings[title] = round(time.monotonic() - began, 1)
        self.finished(title, self.timings[title])


# ------------------------------------------------------------------------------------------- engines


@dataclass(frozen=True)
class EngineChoice:
    engine: cs.Engine | None
    """None: neither engine can run here (:attr:`reason` says why and what to do)."""
    reason: str


def _run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(args, 1, "", str(exc))


def _first_line(text: str) -> str:
    """The line of a command's output that says what went wrong: the first naming an error, else the
    last (``docker run`` ends with a hint to read ``--help``, after its error)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "no output")
    return said[:200]


def kind_binary() -> str | None:
    found = shutil.which("kind")
    if found:
        return found
    local = paths.bin_dir() / "kind"
    return str(local) if local.is_file() else None


def docker_privileged() -> tuple[bool, str]:
    """Whether this machine's Docker answers and runs privileged containers (kind's nodes are), probed
    now: ``docker run --rm --privileged --user 0`` of an image present locally (as root, as kind's node
    runs: an image whose user is not root starts with no capabilities to apply, so it would pass where
    kind's node cannot), or, with no image at hand, what ``docker info`` says of its security options
    (rootless, user namespaces)."""
    docker = shutil.which("docker")
    if docker is None:
        return False, "docker is not installed"
    info = _run([docker, "info", "--format", "{{json .SecurityOptions}}"], timeout=15)
    if info.returncode != 0:
        return False, f"docker's daemon does not answer ({_first_line(info.stderr)})"
    if "rootless" in info.stdout or "userns" in info.stdout:
        return False, f"docker runs rootless or with user namespaces ({info.stdout.strip()})"
    listed = _run([docker, "images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=15).stdout.split()
    image = next((i for i in listed if not i.endswith(":<none>")), None)
    if image is None:
        return (
            True,
            "docker answers (no local image to probe --privileged with; its security options allow it)",
        )
    probe = _run(
        [docker, "run", "--rm", "--privileged", "--user", "0", "--entrypoint", "true", image], timeout=60
    )
    if probe.returncode != 0:
        return False, f"docker refuses privileged containers ({_first_line(probe.stderr)})"
    return True, "docker answers and runs privileged containers"


def choose_engine(requested: Requested = "auto") -> EngineChoice:
    """kind when Docker runs privileged containers and kind is installed, else the built-in real node
    (root needed); ``requested`` forces one (still checked)."""
    docker_ok, docker_why = (False, "not probed") if requested == "node" else docker_privileged()
    kind = kind_binary()
    if requested in ("auto", "kind") and docker_ok and kind:
        return EngineChoice("kind", f"kind: {docker_why} and kind is installed ({kind})")
    if requested == "kind":
        why = (
            docker_why
            if not docker_ok
            else "kind is not installed (scripts/install-kube-tools.sh --with-kind)"
        )
        return EngineChoice(None, f"kind cannot run here: {why}")
    if requested == "node":
        why = "requested"
    elif not docker_ok:
        why = f"kind cannot run here: {docker_why}"
    else:
        why = "kind is not installed (scripts/install-kube-tools.sh --with-kind builds it)"
    if os.geteuid() != 0:
        return EngineChoice(None, f"{why}; {NEEDS_ROOT}")
    return EngineChoice("node", f"the built-in real node: {why}")


# ------------------------------------------------------------------------------------------- cluster


@dataclass
class LocalCluster:
    """A cluster :func:`up` brought up: its record, and (real node, in the process that made it) the
    :class:`NodeCluster` running it."""

    state: cs.ClusterState
    node_cluster: NodeCluster | None = None
    progress_timings: dict[str, float] = field(default_factory=dict)

    def down(self) -> list[str]:
        """Take it down: in the process that runs it, through its objects; else from its record."""
        if self.node_cluster is not None and not self.state.detached:
            try:
                lines = self.node_cluster.stop()
                if self.state.docker_started:
                    cs.stop_docker_engine(lines.append)
            finally:
                cs.forget(self.state.name)
            return lines
        return cs.remove(self.state)


@dataclass(frozen=True)
class UpOptions:
    name: str = cs.DEFAULT_CLUSTER
    engine: Requested = "auto"
    sandbox: str | None = "default"
    """The Sandbox to make Ready (None: none)."""
    scenario: str = "tabular-quality-basic"
    seed: int = 7
    budget: Mapping[str, Any] = field(default_factory=lambda: dict(SANDBOX_BUDGET))
    chaos_mesh: bool | None = None
    """None: install it where its binaries were built (real node) or always (kind)."""
    detach: bool = True
    """Leave it running after this process ends (a keeper owns it), else it is this process's."""
    timeout: float = 900.0


def up(
    options: UpOptions, progress: Progress | None = None, choice: EngineChoice | None = None
) -> LocalCluster:
    """Bring the cluster up (see the module's docstring); :class:`ClusterError` when it cannot be, or
    when a cluster of that name runs already (:func:`running_state` tells first)."""
    progress = progress or Progress()
    choice = choice or choose_engine(options.engine)
    if choice.engine is None:
        raise ClusterError(choice.reason)
    existing = cs.read(options.name)
    resumable = (
        existing is not None and existing.engine == "kind" == choice.engine and existing.phase == "starting"
    )
    if existing is not None and not resumable:
        if existing.owner is None or existing.owner.alive():
            raise ClusterError(
                f"cluster {options.name!r} ({existing.engine}, {existing.phase}) is recorded: "
                f"`mlsandbox cluster down --name {options.name}` first"
            )
        for line in cs.remove(existing):
            progress.say(f"removed what a dead cluster {options.name!r} left: {line}")
    if choice.engine == "node":
        return _up_node(options, choice, progress)
    return _up_kind(options, choice, progress)


@contextlib.contextmanager
def running(options: UpOptions, progress: Progress | None = None) -> Iterator[LocalCluster]:
    """:func:`up` (owned by this process), then down."""
    local = up(options, progress)
    try:
        yield local
    finally:
        local.down()


def chaos_mesh_built() -> bool:
    from .chaos_node import check_binaries

    try:
        check_binaries()
    except MissingToolError:
        return False
    return True


def _up_node(options: UpOptions, choice: EngineChoice, progress: Progress) -> LocalCluster:
    say = progress.say
    state = cs.ClusterState(
        name=options.name, engine="node", reason=choice.reason, owner=cs.Owner.of(os.getpid())
    )
    cs.write(state)
    cluster: NodeCluster | None = None
    cp: controlplane.ControlPlane | None = None
    try:
        _ensure_tools(progress)
        chaos = chaos_mesh_built() if options.chaos_mesh is None else options.chaos_mesh
        # A docker engine started to build images changes the machine (its bridge, chains, forwarding)
        # before the node takes its snapshot: it stops after the node has gone (`down`), so that each
        # puts back what it found.
        state.docker_started = _ensure_docker_if_building(progress, chaos)
        cs.write(state)
        with progress.step("control plane (etcd, kube-apiserver, controller manager, scheduler)"):
            cp = controlplane.start(kwok=False)
        state.control_plane = str(cp.root)
        cs.write(state)
        with progress.step("node (containerd, kubelet, kube-proxy, kube-router, CoreDNS)"):
            real = node.start(cp, say=say)
        cluster = NodeCluster(cp, real)
        state.node, state.node_ip = str(real.root), real.ip
        cs.write(state)
        with progress.step(
            "images (operator and API source, MinIO, MLflow, Prefect, trainer, model server, PostgreSQL)"
        ):
            real.import_images(dict.fromkeys([*CHART_IMAGES, *EPISODE_IMAGES]), say)
        if chaos:
            from . import chaos_node

            with progress.step("Chaos Mesh (controller manager, chaos-daemon)"):
                chaos_node.install(cluster, say=say)
            state.chaos_mesh = True
        elif options.chaos_mesh is None:
            say(
                "Chaos Mesh: not built on this machine (scripts/build-chaos-mesh.sh, about 40 minutes once): "
                "its fault types are refused, native faults work"
            )
        with progress.step("chart (MinIO, MLflow, Prefect server and worker, operator)"):
            cluster.install_chart(timeout=options.timeout)
        env = cluster.client_env()
        state.client = cs.ClientSettings(
            kubeconfig=str(_self_contained_kubeconfig(options.name, cp.kubeconfig)),
            control_namespace=CONTROL_NAMESPACE,
            endpoints=Endpoints(
                s3_url=env["MLSANDBOX_KUBE_S3_URL"],
                s3_access_key=env.get("MLSANDBOX_KUBE_S3_ACCESS_KEY", ""),
                s3_secret_key=env.get("MLSANDBOX_KUBE_S3_SECRET_KEY", ""),
                mlflow_url=env["MLSANDBOX_KUBE_MLFLOW_URL"],
                prefect_api_url=env["MLSANDBOX_KUBE_PREFECT_URL"],
            ),
            image=env["MLSANDBOX_TRAINER_IMAGE"],
            server_image=env["MLSANDBOX_MODEL_SERVER_IMAGE"],
            server_cpu_request=SERVER_CPU_REQUEST,
        )
        if options.sandbox:
            with progress.step(f"Sandbox {options.sandbox} (scenario {options.scenario})"):
                create_ready_sandbox(cluster.api, options.sandbox, _spec(options))
            state.client.sandbox = options.sandbox
        state.steps = dict(progress.timings)
        state.phase = "running"
        if options.detach:
            cs.hand_over(state, real.lock.fd if real.lock is not None else None)
        else:
            cs.write(state)
    except BaseException:
        if cluster is not None:
            cluster.stop()
        elif cp is not None:
            cp.stop()
        if state.docker_started:
            cs.stop_docker_engine(say)
        cs.forget(options.name)
        raise
    return LocalCluster(state, cluster)


TOOLS_SCRIPT = ("install-kube-tools.sh", "--with-control-plane", "--with-node")


def _script(name: str, *args: str, say: Callable[[str], None]) -> None:
    """Run ``scripts/<name>`` of the checkout, each line of its output said; :class:`ClusterError` with
    its last lines when it fails."""
    script = REPO_ROOT / "scripts" / name
    if not script.is_file():
        raise ClusterError(f"scripts/{name} is part of a checkout of mlsandbox: run it from one")
    proc = subprocess.Popen(
        [str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for raw in proc.stdout:
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).rstrip()
        tail = [*tail[-19:], line]
        say(line)
    if proc.wait() != 0:
        raise ClusterError(f"scripts/{name} {' '.join(args)} failed:\n" + "\n".join(tail))


def _ensure_tools(progress: Progress) -> None:
    """The control plane's and the node's binaries and packages; built when missing (the first time:
    30 to 50 minutes of Go builds on two cores), said so."""
    try:
        for name in controlplane.BINARIES:
            if name != "kwok":
                controlplane.binary(name)
        node.check_prerequisites()
    except MissingToolError as missing:
        progress.say(f"{missing}")
        title = (
            "Kubernetes tools: scripts/install-kube-tools.sh --with-control-plane --with-node (built from "
            "source with Go: 30-50 minutes the first time, cached after)"
        )
        with progress.step(title):
            _script(*TOOLS_SCRIPT, say=progress.say)
        node.check_prerequisites()


def _ensure_docker_if_building(progress: Progress, chaos: bool) -> bool:
    """Start a docker engine (``scripts/docker-engine.sh``) when an image must be built and none answers;
    whether it was started here (then it is stopped once the images are in)."""
    imported = node_images.imported_keys(node.containerd_root().parent / "images.json")
    wanted = node_images.by_name(dict.fromkeys([*node.DEFAULT_IMAGES, *CHART_IMAGES, *EPISODE_IMAGES]))
    stale = [image.name for image in wanted if imported.get(image.name) != node_images.key(image)]
    if chaos:
        from . import chaos_node

        imported = node_images.imported_keys(node.containerd_root().parent / "chaos-images.json")
        stale += [i.name for i in chaos_node.images() if imported.get(i.name) != node_images.key(i)]
    if not stale:
        return False
    progress.say(
        f"images to build or import (new inputs, or not in the node's containerd yet): {', '.join(stale)}"
    )
    if _run(["docker", "version", "--format", "{{.Server.Version}}"]).returncode == 0:
        return False
    with progress.step("docker engine, to build the images (scripts/docker-engine.sh)"):
        _script("docker-engine.sh", say=progress.say)
    return True


def _spec(options: UpOptions) -> dict[str, Any]:
    return {"scenario": options.scenario, "seed": options.seed, "budget": dict(options.budget)}


def _self_contained_kubeconfig(name: str, source: Path) -> Path:
    """A copy of ``source`` at ``$MLSANDBOX_HOME/clusters/<name>.kubeconfig`` with its CA inlined (a
    stable path to export as ``KUBECONFIG``)."""
    config = yaml.safe_load(source.read_text())
    for entry in config.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        ca = cluster.pop("certificate-authority", None)
        if ca:
            cluster["certificate-authority-data"] = base64.b64encode(Path(ca).read_bytes()).decode()
    path = cs.state_path(name).with_suffix(".kubeconfig")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))
    return path


def create_ready_sandbox(
    api: KubernetesApi, name: str, spec: Mapping[str, Any], timeout: float = 300.0
) -> float:
    """Apply the Sandbox ``name`` in the chart's namespace and wait until the operator made it Ready;
    seconds waited. :class:`ClusterError` with its last condition otherwise."""
    api.apply(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Sandbox",
            "metadata": {"name": name, "namespace": CONTROL_NAMESPACE},
            "spec": dict(spec),
        }
    )
    started = time.monotonic()
    conditions: list[dict[str, Any]] = []
    while time.monotonic() - started < timeout:
        with contextlib.suppress(Exception):
            found = api.get(f"{GROUP}/{VERSION}", "Sandbox", name, CONTROL_NAMESPACE) or {}
            conditions = (found.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return time.monotonic() - started
        time.sleep(0.5)
    raise ClusterError(f"Sandbox {CONTROL_NAMESPACE}/{name} not Ready after {timeout:.0f} s: {conditions}")


# ---------------------------------------------------------------------------------------------- kind


def _up_kind(options: UpOptions, choice: EngineChoice, progress: Progress) -> LocalCluster:
    kind = kind_binary()
    assert kind is not None
    docker, helm = "docker", str(tool("helm"))
    versions = pinned()
    name = options.name
    context = f"kind-{name}"
    state = cs.ClusterState(name=name, engine="kind", reason=choice.reason, kind_cluster=name)
    cs.write(state)

    def run(args: list[str], timeout: float = 1800) -> str:
        done = _run(args, timeout)
        if done.returncode != 0:
            raise ClusterError(
                f"{' '.join(args[:4])} ... failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done.stdout

    try:
        with progress.step("workload images (docker build: trainer, model server, gateway)"):
            for dockerfile, ref in KIND_IMAGES.items():
                progress.say(f"{ref}: docker build ({dockerfile})")
                run([docker, "build", "-q", "-f", str(REPO_ROOT / dockerfile),
                     "--build-arg", "BASE_IMAGE=debian:bookworm-slim", "-t", ref, str(REPO_ROOT)])  # fmt: skip
        with progress.step(f"kind cluster {name} ({versions['KIND_NODE_IMAGE'].split('@')[0]})"):
            if name not in run([kind, "get", "clusters"]).split():
                run([kind, "create", "cluster", "--name", name, "--config", str(REPO_ROOT / "kind-config.yaml"),
                     "--image", versions["KIND_NODE_IMAGE"], "--wait", "120s"])  # fmt: skip
        kubeconfig = cs.state_path(name).with_suffix(".kubeconfig")
        kubeconfig.touch(mode=0o600)
        kubeconfig.write_text(run([kind, "get", "kubeconfig", "--name", name]))
        if options.chaos_mesh is not False:
            with progress.step(f"Chaos Mesh {versions['CHAOS_MESH_VERSION']} (its Helm repository)"):
                run([helm, "repo", "add", "chaos-mesh", "https://charts.chaos-mesh.org", "--force-update"])
                run([helm, "upgrade", "--install", "chaos-mesh", "chaos-mesh/chaos-mesh",
                     "--version", versions["CHAOS_MESH_VERSION"], "--kubeconfig", str(kubeconfig),
                     "--namespace", "chaos-mesh", "--create-namespace",
                     "--set", "chaosDaemon.runtime=containerd",
                     "--set", "chaosDaemon.socketPath=/run/containerd/containerd.sock",
                     "--set", "dashboard.create=false", "--set", "controllerManager.replicaCount=1",
                     "--wait", "--timeout", "10m"])  # fmt: skip
            state.chaos_mesh = True
        with progress.step("loading the images into kind"):
            run([kind, "load", "docker-image", "--name", name, *KIND_IMAGES.values()])
        with progress.step("chart (MinIO, MLflow, Prefect server and worker, operator)"):
            run([helm, "upgrade", "--install", KIND_RELEASE, str(CHART_DIR), "--kubeconfig", str(kubeconfig),
                 "--kube-context", context, "--namespace", CONTROL_NAMESPACE, "--create-namespace",
                 "-f", str(CHART_DIR / "ci" / "kind-values.yaml"),
                 "--set", "operator.image.tag=0.1.0", "--set", "workloads.trainerImage.tag=0.1.0",
                 "--wait", "--timeout", f"{int(options.timeout)}s"])  # fmt: skip
        from kubernetes import config as kube_config

        api_client = kube_config.new_client_from_config(config_file=str(kubeconfig))
        api = KubernetesApi(api_client)
        state.client = cs.ClientSettings(
            kubeconfig=str(kubeconfig),
            control_namespace=CONTROL_NAMESPACE,
            endpoints=Endpoints(**KIND_ENDPOINTS, **_s3_keys(api_client)),
            image=DEFAULT_IMAGE,
            server_image=DEFAULT_SERVER_IMAGE,
            server_cpu_request=SERVER_CPU_REQUEST,
        )
        if options.sandbox:
            with progress.step(f"Sandbox {options.sandbox} (scenario {options.scenario})"):
                create_ready_sandbox(api, options.sandbox, _spec(options))
            state.client.sandbox = options.sandbox
        state.steps = dict(progress.timings)
        state.phase = "running"
        cs.write(state)
    except BaseException:
        # The record stays (phase starting): `up` again carries on, `down` deletes the kind cluster.
        raise
    return LocalCluster(state)


def _s3_keys(api_client: Any) -> dict[str, str]:
    from kubernetes import client

    secrets: list[Any] = (
        client.CoreV1Api(api_client)
        .list_namespaced_secret(CONTROL_NAMESPACE, label_selector="app.kubernetes.io/component=minio")
        .items
    )
    for secret in secrets:
        data = secret.data or {}
        if "access-key" in data and "secret-key" in data:
            return {
                "s3_access_key": base64.b64decode(data["access-key"]).decode(),
                "s3_secret_key": base64.b64decode(data["secret-key"]).decode(),
            }
    return {"s3_access_key": "", "s3_secret_key": ""}


# ------------------------------------------------------------------------------------------ down, status


def down(name: str | None = None) -> list[str]:
    """Take down the cluster ``name`` (default: :func:`~mlsandbox.backends.kube.cluster_state.default_name`)
    from its record; what was removed. :class:`ClusterError` when there is no such cluster."""
    name = name or cs.default_name()
    state = cs.read(name)
    if state is None:
        raise ClusterError(f"no cluster {name!r} is recorded on this machine (nothing to take down)")
    if state.engine == "node" and os.geteuid() != 0:
        raise ClusterError(f"cluster {name!r} runs a real node: only root can take it down (sudo)")
    if (
        state.owner is not None
        and not state.detached
        and state.owner.alive()
        and state.owner.pid != os.getpid()
    ):
        raise ClusterError(
            f"cluster {name!r} belongs to the running process {state.owner.pid} (a test session or a "
            "benchmark): it takes it down when it ends"
        )
    return cs.remove(state)


class Component(BaseModel):
    """One component of a running cluster, as ``mlsandbox cluster status`` shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["process", "deployment", "daemonset", "node", "sandbox", "container"]
    state: Literal["running", "starting", "stopped", "unhealthy"]
    detail: str = ""
    memory_bytes: int | None = None


class ClusterStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    engine: cs.Engine
    reason: str
    phase: str
    created_at: float
    owner_pid: int | None
    owner_alive: bool | None
    kubeconfig: str | None
    components: list[Component]
    memory_bytes: int
    """Processes of the control plane and the node, and what the pods' cgroup holds (real node)."""
    steps: dict[str, float]


def status(name: str | None = None) -> ClusterStatus:
    """What runs of the cluster ``name``: processes (real node), the node, the chart's Deployments,
    CoreDNS, Chaos Mesh, the Sandbox; :class:`ClusterError` when there is no such cluster."""
    name = name or cs.default_name()
    state = cs.read(name)
    if state is None:
        raise ClusterError(
            f"no cluster {name!r} is recorded on this machine: `mlsandbox cluster up` makes one"
        )
    components: list[Component] = []
    if state.engine == "node":
        components += _process_components(state)
    else:
        components.append(_kind_container(state))
    if state.client is not None:
        components += _api_components(state)
    memory = sum(c.memory_bytes or 0 for c in components if c.kind == "process")
    return ClusterStatus(
        name=state.name,
        engine=state.engine,
        reason=state.reason,
        phase=state.phase,
        created_at=state.created_at,
        owner_pid=state.owner.pid if state.owner else None,
        owner_alive=state.owner.alive() if state.owner else None,
        kubeconfig=state.client.kubeconfig if state.client else None,
        components=components,
        memory_bytes=memory,
        steps=state.steps,
    )


def _process_components(state: cs.ClusterState) -> list[Component]:
    wanted = {
        controlplane.MARKER_ENV: (
            state.control_plane,
            ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"),
        ),
        node.MARKER_ENV: (state.node, ("containerd", "kubelet", "kube-proxy", "kube-router")),
    }
    rss: dict[str, int] = {}
    count: dict[str, int] = {}
    for proc in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error, OSError):
            environ = proc.environ()
            for marker, (root, _) in wanted.items():
                if root and environ.get(marker) == root:
                    pname = str(proc.info["name"] or "")
                    pname = "containerd" if pname.startswith("containerd") else pname
                    pname = "kube-controller-manager" if pname.startswith("kube-controller") else pname
                    rss[pname] = rss.get(pname, 0) + proc.memory_info().rss
                    count[pname] = count.get(pname, 0) + 1
    out = []
    for _, (_, names) in wanted.items():
        for pname in names:
            alive = pname in rss
            detail = f"{count[pname]} process(es)" if count.get(pname, 0) > 1 else ""
            out.append(
                Component(
                    name=pname,
                    kind="process",
                    state="running" if alive else "stopped",
                    detail=detail,
                    memory_bytes=rss.get(pname),
                )
            )
    stat = Path("/sys/fs/cgroup/memory") / node.CGROUP_ROOT / "memory.stat"
    with contextlib.suppress(OSError, ValueError, KeyError):
        values = dict(line.split() for line in stat.read_text().splitlines())
        used = int(values["total_rss"]) + int(values.get("total_mapped_file", 0))
        out.append(
            Component(
                name="pods", kind="process", state="running", detail="the pods' cgroup", memory_bytes=used
            )
        )
    return out


def _kind_container(state: cs.ClusterState) -> Component:
    done = _run(["docker", "inspect", "-f", "{{.State.Status}}", f"{state.kind_cluster}-control-plane"], 15)
    running = done.returncode == 0 and done.stdout.strip() == "running"
    return Component(
        name=f"{state.kind_cluster}-control-plane",
        kind="container",
        state="running" if running else "stopped",
        detail=done.stdout.strip() or _first_line(done.stderr),
    )


def _api_components(state: cs.ClusterState) -> list[Component]:
    from kubernetes import client
    from kubernetes import config as kube_config

    assert state.client is not None
    out: list[Component] = []
    try:
        api_client = kube_config.new_client_from_config(config_file=state.client.kubeconfig)
        core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
        nodes: list[Any] = core.list_node(_request_timeout=5).items
        for item in nodes:
            ok = any(c.type == "Ready" and c.status == "True" for c in item.status.conditions or [])
            detail = f"kubelet {item.status.node_info.kubelet_version}"
            out.append(Component(name=item.metadata.name, kind="node", state=_state(ok), detail=detail))
        for ns in ("kube-system", state.client.control_namespace, "chaos-mesh"):
            deployments: list[Any] = apps.list_namespaced_deployment(ns, _request_timeout=5).items
            for dep in deployments:
                want, ready = dep.spec.replicas or 0, dep.status.ready_replicas or 0
                out.append(_workload(f"{ns}/{dep.metadata.name}", "deployment", want, ready))
            daemons: list[Any] = apps.list_namespaced_daemon_set(ns, _request_timeout=5).items
            for ds in daemons:
                want, ready = ds.status.desired_number_scheduled or 0, ds.status.number_ready or 0
                out.append(_workload(f"{ns}/{ds.metadata.name}", "daemonset", want, ready))
        boxes: Any = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            GROUP, VERSION, state.client.control_namespace, "sandboxes", _request_timeout=5
        )
        for box in boxes.get("items") or []:
            status = box.get("status") or {}
            conditions = {c.get("type"): c for c in status.get("conditions") or []}
            ok = (conditions.get("Ready") or {}).get("status") == "True"
            detail = f"{status.get('phase') or '-'}, namespace {status.get('namespace') or '-'}"
            out.append(
                Component(
                    name=box["metadata"]["name"], kind="sandbox", state=_state(ok, "starting"), detail=detail
                )
            )
    except Exception as exc:  # the API server does not answer
        out.append(Component(name="API server", kind="process", state="unhealthy", detail=str(exc)[:200]))
    return out


def _state(
    ok: bool, otherwise: Literal["starting", "unhealthy"] = "unhealthy"
) -> Literal["running", "starting", "unhealthy"]:
    return "running" if ok else otherwise


def _workload(name: str, kind: Literal["deployment", "daemonset"], want: int, ready: int) -> Component:
    return Component(
        name=name, kind=kind, state=_state(ready >= want, "starting"), detail=f"{ready}/{want} ready"
    )


def usage(state: cs.ClusterState) -> list[str]:
    """How to use the cluster from this machine (what ``cluster up`` prints at the end)."""
    lines = []
    sandbox = state.client.sandbox if state.client else None
    name_flag = "" if sandbox in (None, paths.default_sandbox_name()) else f" --name {sandbox}"
    lines.append(
        f"mlsandbox run --backend kube{name_flag} --scenario tabular-quality-basic --agent rule"
        + ("" if state.name == cs.DEFAULT_CLUSTER else f"   (with {cs.CLUSTER_ENV}={state.name})")
    )
    if state.client is not None:
        lines.append(f"export KUBECONFIG={state.client.kubeconfig}")
        lines.append(f"kubectl -n {state.client.control_namespace} get sandboxes,pods")
        e = state.client.endpoints
        lines.append(f"S3 (MinIO) {e.s3_url}   MLflow {e.mlflow_url}   Prefect {e.prefect_api_url}")
    lines.append(
        f"mlsandbox cluster status{'' if state.name == cs.DEFAULT_CLUSTER else f' --name {state.name}'}"
    )
    lines.append(
        f"mlsandbox cluster down{'' if state.name == cs.DEFAULT_CLUSTER else f' --name {state.name}'}   (or make sandbox-down)"
    )
    return lines


__all__ = [
    "SANDBOX_BUDGET",
    "ClusterError",
    "ClusterStatus",
    "EngineChoice",
    "LocalCluster",
    "Progress",
    "UpOptions",
    "choose_engine",
    "create_ready_sandbox",
    "down",
    "running",
    "status",
    "up",
    "usage",
]
