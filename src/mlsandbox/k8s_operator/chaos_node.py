"""Chaos Mesh on a real node of this machine, without a registry: for the real-node tier.

- **Binaries**: ``scripts/build-chaos-mesh.sh`` builds chaos-controller-manager, chaos-daemon and cdh from
  Chaos Mesh's Go module (pinned in versions.env) into ``$MLSANDBOX_HOME/bin``.
- **Images**: ``mlsandbox/chaos-mesh`` (the controller manager) and ``mlsandbox/chaos-daemon`` (the daemon,
  cdh, Debian's stress-ng, iptables, ipset and iproute2, and our ``pause`` and ``nsexec``, see
  ``workloads/chaos/``), both on the local Debian base, built by the docker engine when their inputs
  change (the same keys as :mod:`mlsandbox.backends.kube.node_images`) and imported into the node's
  containerd.
- **Install**: Chaos Mesh's own Helm chart, from the same module (its ``helm/chaos-mesh``), with those
  images, containerd's socket of the node, one controller replica, no dashboard, no DNS server.

What works here and what cannot (no netem in this kernel; no source on a package registry for memStress,
toda, tproxy, byteman): see :data:`UNAVAILABLE` and the README's Chaos Mesh notes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsandbox import paths
from mlsandbox.backends.kube import node_images
from mlsandbox.backends.kube.node import containerd_root
from mlsandbox.backends.kube.schemas import REPO_ROOT, tool
from mlsandbox.errors import BackendError, MissingToolError
from mlsandbox.versions import pinned

if TYPE_CHECKING:
    from .node_testbed import NodeCluster

NAMESPACE = "chaos-mesh"
RELEASE = "chaos-mesh"
BINARIES = ("chaos-controller-manager", "chaos-daemon", "cdh")
HELPERS = ("pause", "nsexec")
"""Programs of ours (``workloads/chaos/<name>.c``) in the daemon's image."""
_HINT = "run scripts/build-chaos-mesh.sh (builds Chaos Mesh from its Go module; 20-30 minutes once)"

UNAVAILABLE: dict[str, str] = {
    "NetworkChaos delay, loss, duplicate, corrupt": (
        "need the netem queueing discipline (sch_netem), which this kernel does not have"
    ),
    "NetworkChaos bandwidth": "needs tc's tbf inside the pod's namespace through chaos-daemon (untested here)",
    "StressChaos memory": "needs memStress, released only as a GitHub binary (no package registry has it)",
    "IOChaos": "needs toda, released only as a GitHub binary",
    "HTTPChaos": "needs tproxy, released only as a GitHub binary",
    "JVMChaos": "needs byteman, released only as a download from Chaos Mesh's mirror",
    "TimeChaos": "needs the fake clock objects chaos-daemon's build compiles from C with its own toolchain",
}
"""Chaos Mesh features that cannot work with this build on this machine, and why."""

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def version() -> str:
    """The pinned module version (a pseudo-version of Chaos Mesh's master)."""
    return pinned()["CHAOS_MESH_GO_VERSION"]


def image_tag() -> str:
    """A short tag for our images: the commit of the pinned pseudo-version."""
    return version().rsplit("-", 1)[-1][:12]


def images() -> list[node_images.NodeImage]:
    tag = image_tag()
    return [
        node_images.NodeImage(
            "chaos-mesh",
            f"mlsandbox/chaos-mesh:{tag}",
            "workloads/Dockerfile.chaos-mesh",
            staged={"chaos-controller-manager": "chaos-controller-manager"},
        ),
        node_images.NodeImage(
            "chaos-daemon",
            f"mlsandbox/chaos-daemon:{tag}",
            "workloads/Dockerfile.chaos-daemon",
            inputs=("workloads/chaos",),
            staged={"chaos-daemon": "chaos-daemon", "cdh": "cdh"},
        ),
    ]


def check_binaries() -> None:
    """:class:`MissingToolError` naming what to run when a binary is missing or of another version."""
    for name in BINARIES:
        stamp = paths.bin_dir() / f".{name}-version"
        if not (paths.bin_dir() / name).is_file() or not stamp.is_file():
            raise MissingToolError(f"`{name}` is not installed (expected {paths.bin_dir() / name}): {_HINT}")
        if not stamp.read_text().startswith(f"{pinned()['CHAOS_MESH_GO_MODULE']}@{version()} "):
            raise MissingToolError(f"`{name}` is not of the pinned version {version()}: {_HINT}")


def module_dir() -> Path:
    """Chaos Mesh's module in Go's module cache (downloaded from the module proxy when missing)."""
    go = shutil.which("go")
    if go is None:
        raise MissingToolError(f"Chaos Mesh's chart is read from its Go module: install Go ({_HINT})")
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{pinned()['CHAOS_MESH_GO_MODULE']}@{version()}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    try:
        return Path(json.loads(done.stdout)["Dir"])
    except (ValueError, KeyError):
        raise BackendError(f"go mod download of Chaos Mesh failed:\n{done.stdout}{done.stderr}") from None


# ------------------------------------------------------------------------------------------------ images


def _stage(image: node_images.NodeImage, context: Path) -> None:
    for name, source in image.staged.items():
        shutil.copy2(paths.bin_dir() / source, context / name)
    if image.name == "chaos-daemon":
        gcc = shutil.which("gcc")
        if gcc is None:
            raise MissingToolError(
                "the chaos-daemon image's helpers are compiled with gcc: apt-get install gcc"
            )
        for helper in HELPERS:
            program = REPO_ROOT / "workloads" / "chaos" / f"{helper}.c"
            done = subprocess.run(
                [gcc, "-O2", "-static", "-s", "-o", str(context / helper), str(program)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise BackendError(
                    f"compiling {program.name} failed (apt-get install libc6-dev):\n{done.stderr}"
                )


def build(image: node_images.NodeImage, say: Say = _quiet) -> bool:
    """Build ``image`` unless an image of that name carries its key; True if built."""
    check_binaries()
    want = node_images.key(image)
    if node_images._docker_key(image.ref) == want:
        return False
    node_images.build(node_images.by_name(["base"])[0], say)
    started = time.monotonic()
    say(f"{image.ref}: docker build ({image.dockerfile})")
    with tempfile.TemporaryDirectory(prefix="mlsandbox-chaos-") as tmp:
        _stage(image, Path(tmp))
        node_images._docker(
            "build", "-q", "-f", str(REPO_ROOT / image.dockerfile),
            f"--build-arg=BASE_IMAGE={node_images.BASE_IMAGE}",
            "--label", f"{node_images.INPUTS_LABEL}={want}", "-t", image.ref, tmp, timeout=3600,
        )  # fmt: skip
    say(f"{image.ref}: built in {time.monotonic() - started:.0f} s")
    return True


def import_images(cluster: NodeCluster, say: Say = _quiet) -> dict[str, float]:
    """Build what changed and import what the node's containerd lacks; seconds spent per image."""
    ctr = cluster.node.ctr()
    # Beside containerd's root, with the node's own record of its images (so it goes when the images go),
    # not among the node runs' directories.
    stamp = containerd_root().parent / "chaos-images.json"
    done = node_images.imported_keys(stamp)
    present = set(
        subprocess.run(
            [*ctr, "-n", node_images.NAMESPACE, "images", "ls", "-q"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
    spent: dict[str, float] = {}
    for image in images():
        want = node_images.key(image)
        if done.get(image.name) == want and image.cri_ref in present:
            continue
        started = time.monotonic()
        build(image, say)
        say(f"{image.ref}: importing into containerd")
        node_images.import_image(ctr, image, say)
        done[image.name] = want
        stamp.write_text(json.dumps(done, indent=1, sort_keys=True))
        spent[image.name] = time.monotonic() - started
    return spent


# ------------------------------------------------------------------------------------------------ install


def helm_values(cluster: NodeCluster) -> list[str]:
    """``helm --set`` arguments: our images (never pulled), the node's containerd, one controller, our
    pause image for ``pod-failure``, no dashboard and no DNS server."""
    refs = {i.name: i.ref.rpartition(":") for i in images()}
    pause = node_images.by_name(["pause"])[0].cri_ref
    values = {
        "images.registry": "docker.io",
        "controllerManager.image.repository": refs["chaos-mesh"][0],
        "controllerManager.image.tag": refs["chaos-mesh"][2],
        "controllerManager.imagePullPolicy": "Never",
        "controllerManager.replicaCount": "1",
        "controllerManager.leaderElection.enabled": "false",
        "controllerManager.podChaos.podFailure.pauseImage": pause,
        "chaosDaemon.image.repository": refs["chaos-daemon"][0],
        "chaosDaemon.image.tag": refs["chaos-daemon"][2],
        "chaosDaemon.imagePullPolicy": "Never",
        "chaosDaemon.runtime": "containerd",
        "chaosDaemon.socketPath": str(cluster.node.socket),
        "dashboard.create": "false",
        "dnsServer.create": "false",
        "enableProfiling": "false",
    }
    args: list[str] = []
    for key, value in values.items():
        args += ["--set-string" if key.endswith(".tag") else "--set", f"{key}={value}"]
    return args


def install(cluster: NodeCluster, *, timeout: float = 600.0, say: Say = _quiet) -> float:
    """``helm upgrade --install`` of Chaos Mesh's chart on the node (images built and imported first),
    waiting for the controller manager and the daemon; seconds the install took (images excluded)."""
    import_images(cluster, say)
    chart = module_dir() / "helm" / "chaos-mesh"
    started = time.monotonic()
    done = subprocess.run(
        [
            str(tool("helm")), "upgrade", "--install", RELEASE, str(chart),
            "--kubeconfig", str(cluster.cp.kubeconfig), "--namespace", NAMESPACE, "--create-namespace",
            *helm_values(cluster), "--wait", "--timeout", f"{int(timeout)}s",
        ],
        capture_output=True, text=True, timeout=timeout + 60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BackendError(
            f"helm install of Chaos Mesh failed:\n{done.stdout}\n{done.stderr}\n{cluster.describe_pods(NAMESPACE)}"
        )
    _add_missing_fields(cluster)
    return time.monotonic() - started


MISSING_FIELDS: dict[str, dict[str, str]] = {
    "networkchaos.chaos-mesh.org": {"partitionBehavior": "string"},
}
"""Spec fields of the API module the binaries are built with (``CHAOS_MESH_API_GO_VERSION``, newer than
the chart's commit) that the chart's CRDs lack. The API server prunes them on create; the mutating webhook
defaults them again on every update and the validating webhook then rejects the update as a change of
spec ("Cannot update chaos spec"), so the controller could never record anything on such an object."""


def _add_missing_fields(cluster: NodeCluster) -> None:
    from kubernetes import client

    api = client.ApiextensionsV1Api(cluster.api_client)
    for crd, fields in MISSING_FIELDS.items():
        found: dict[str, Any] = cluster.api_client.sanitize_for_serialization(
            api.read_custom_resource_definition(crd)
        )
        patch = [
            {
                "op": "add",
                "path": f"/spec/versions/{i}/schema/openAPIV3Schema/properties/spec/properties/{name}",
                "value": {"type": kind},
            }
            for i, version in enumerate(found["spec"]["versions"])
            for name, kind in fields.items()
            if name not in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ]
        if patch:
            api.patch_custom_resource_definition(crd, patch)


def uninstall(cluster: NodeCluster, timeout: float = 300.0) -> None:
    """``helm uninstall`` (its CRDs stay, as Helm leaves them)."""
    subprocess.run(
        [
            str(tool("helm")), "uninstall", RELEASE, "--kubeconfig", str(cluster.cp.kubeconfig),
            "--namespace", NAMESPACE, "--wait", "--timeout", f"{int(timeout)}s",
        ],
        capture_output=True, text=True, timeout=timeout + 60, check=False,
    )  # fmt: skip
