"""The local cluster ``mlsandbox cluster up`` made: its record, how clients use it, how it goes away.

The record is ``$MLSANDBOX_HOME/clusters/<name>.json`` (:class:`ClusterState`): the engine and why it was
chosen, what runs (the control plane's and the node's directories, or the kind cluster), the timings of
each step, and :class:`ClientSettings`, what a client of this machine needs to use the sandbox there (the
kubeconfig, the chart's namespace, its services' URLs and S3 keys, the images). The kube backend reads
them (:func:`recorded_client`) when it is given no cluster of its own: ``mlsandbox run --backend kube``
finds the cluster with no flag. The cluster it reads is ``$MLSANDBOX_CLUSTER`` (default ``mlsandbox``).

A real-node cluster left running has an *owner*: a small keeper process started by :func:`hand_over`,
which holds the machine's node lock (one node per machine) for as long as the cluster lives; the control
plane's and the node's directories name it as their owner. :func:`remove` takes everything down (the node's
own teardown, then the control plane, then the keeper); :func:`collect_garbage` (``mlsandbox gc``) removes
the clusters whose owner died, and the control planes and nodes of dead owners that no record names.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field

from mlsandbox import paths
from mlsandbox.backends.protocols import Endpoints

CLUSTER_ENV = "MLSANDBOX_CLUSTER"
DEFAULT_CLUSTER = "mlsandbox"
KEEPER_ENV = "MLSANDBOX_CLUSTER_KEEPER"
"""Carried by the keeper process: the path of its cluster's record."""
Engine = Literal["node", "kind"]


class Owner(BaseModel):
    """A process, by pid and start time (a reused pid is not the owner)."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> Owner:
        return cls(pid=pid, create_time=psutil.Process(pid).create_time())

    def alive(self) -> bool:
        try:
            proc = psutil.Process(self.pid)
            return proc.status() != psutil.STATUS_ZOMBIE and abs(proc.create_time() - self.create_time) < 1.0
        except (psutil.Error, OSError):
            return False


class ClientSettings(BaseModel):
    """What ``mlsandbox --backend kube`` on this machine needs to use the cluster's sandboxes."""

    model_config = ConfigDict(extra="forbid")

    kubeconfig: str
    control_namespace: str
    endpoints: Endpoints
    """The chart's MinIO, MLflow and Prefect as this machine reaches them, with the S3 keys."""
    image: str | None = None
    """The trainer image of Jobs and flow runs."""
    server_image: str | None = None
    """The model server image of deployments."""
    server_cpu_request: float | None = Field(default=None, gt=0, le=1)
    """The share of its machine's CPU a model-server replica requests (None: all of it)."""
    sandbox: str | None = None
    """The Sandbox ``cluster up`` made (Ready when it finished)."""


class ClusterState(BaseModel):
    """The record of one local cluster (``$MLSANDBOX_HOME/clusters/<name>.json``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    engine: Engine
    reason: str
    """Why this engine was chosen."""
    phase: Literal["starting", "running"] = "starting"
    created_at: float = Field(default_factory=time.time)
    owner: Owner | None = None
    """Whose death makes the cluster garbage: the keeper once detached, else the process that made it
    (None for kind: its containers are Docker's)."""
    detached: bool = False
    control_plane: str | None = None
    """The control plane's directory (real node)."""
    node: str | None = None
    """The node's directory (real node)."""
    node_ip: str | None = None
    kind_cluster: str | None = None
    chaos_mesh: bool = False
    docker_started: bool = False
    """A docker engine was started to build images (``scripts/docker-engine.sh``): stopped once the node
    is gone, which puts back what it changed."""
    steps: dict[str, float] = Field(default_factory=dict)
    """Seconds each step of ``up`` took, in order."""
    client: ClientSettings | None = None


# ------------------------------------------------------------------------------------------- record


def clusters_dir() -> Path:
    return paths.home() / "clusters"


def state_path(name: str) -> Path:
    return clusters_dir() / f"{paths.validate_sandbox_name(name)}.json"


def default_name() -> str:
    return os.environ.get(CLUSTER_ENV) or DEFAULT_CLUSTER


def read(name: str) -> ClusterState | None:
    """The record of the cluster ``name``, or None when there is none (or it cannot be read)."""
    try:
        return ClusterState.model_validate_json(state_path(name).read_text())
    except (OSError, ValueError):
        return None


def write(state: ClusterState) -> Path:
    path = state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=1))
    tmp.chmod(0o600)  # it holds the S3 keys
    tmp.replace(path)
    return path


def records() -> list[ClusterState]:
    found = []
    for path in sorted(clusters_dir().glob("*.json")) if clusters_dir().is_dir() else []:
        state = read(path.stem)
        if state is not None:
            found.append(state)
    return found


def recorded_client(name: str | None = None) -> ClientSettings | None:
    """The client settings of the running cluster ``name`` (default :func:`default_name`), or None when
    no such cluster runs (no record, not finished, its owner gone, its kubeconfig gone)."""
    state = read(name or default_name())
    if state is None or state.phase != "running" or state.client is None:
        return None
    if state.owner is not None and not state.owner.alive():
        return None
    if not Path(state.client.kubeconfig).is_file():
        return None
    return state.client


# ------------------------------------------------------------------------------------------- owner


KEEPER = "import signal\nsignal.pause()\n"


def hand_over(state: ClusterState, lock_fd: int | None) -> Owner:
    """Give the cluster an owner that outlives this process: a keeper (a Python process that sleeps in
    its own session) holding ``lock_fd`` (the machine's node lock: a lock held through a descriptor is
    held as long as any process has it open), named as owner in the control plane's and the node's
    directories and in the record."""
    keeper = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", KEEPER],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(lock_fd,) if lock_fd is not None else (),
        start_new_session=True,
        env={**os.environ, KEEPER_ENV: str(state_path(state.name))},
    )
    owner = Owner.of(keeper.pid)
    for directory in (state.control_plane, state.node):
        if directory and Path(directory).is_dir():
            (Path(directory) / "owner").write_text(
                json.dumps({"pid": owner.pid, "create_time": owner.create_time})
            )
    state.owner = owner
    state.detached = True
    write(state)
    return owner


def _stop_owner(state: ClusterState) -> None:
    """Stop the keeper (releasing the node lock it holds); never the process that made a cluster it did
    not hand over."""
    owner = state.owner
    if owner is None or not state.detached or not owner.alive():
        return
    with contextlib.suppress(psutil.Error, OSError):
        proc = psutil.Process(owner.pid)
        if proc.environ().get(KEEPER_ENV) != str(state_path(state.name)):
            return
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


# ------------------------------------------------------------------------------------------- removal


def remove(state: ClusterState) -> list[str]:
    """Take down everything the cluster of ``state`` runs and its record; one line per kind of thing
    removed. For a real node: the node's own teardown (processes, pods, cgroups, iptables chains, ipsets,
    links, mounts, kernel settings), then the control plane, then the keeper. For kind: ``kind delete
    cluster``. Idempotent."""
    from . import controlplane
    from .node_host import teardown

    lines: list[str] = []
    if state.engine == "node":
        if state.node and Path(state.node).is_dir():
            lines += [f"node: {line}" for line in teardown(Path(state.node))] or ["node: stopped"]
        if state.control_plane and Path(state.control_plane).is_dir():
            stopped = controlplane.stop_root(Path(state.control_plane))
            lines.append(f"control plane: {stopped} process(es) stopped")
    elif state.kind_cluster:
        lines += _delete_kind(state.kind_cluster)
    if state.docker_started:
        stop_docker_engine(lines.append)
    _stop_owner(state)
    forget(state.name)
    return lines


def forget(name: str) -> None:
    """Remove the record of the cluster ``name`` and the kubeconfig written beside it."""
    for path in (state_path(name), state_path(name).with_suffix(".kubeconfig")):
        path.unlink(missing_ok=True)


def stop_docker_engine(say: Callable[[str], None]) -> None:
    """``scripts/docker-engine.sh --stop``: the engine that script started goes, and what it changed on
    the machine is put back (nothing happens to an engine it did not start)."""
    from .schemas import REPO_ROOT

    script = REPO_ROOT / "scripts" / "docker-engine.sh"
    if not script.is_file():
        return
    done = subprocess.run([str(script), "--stop"], capture_output=True, text=True, check=False)
    for line in (done.stdout + done.stderr).splitlines():
        say("docker engine: " + re.sub(r"\x1b\[[0-9;]*m|\[docker-engine\]\s*", "", line).strip())


def _delete_kind(name: str) -> list[str]:
    import shutil

    kind = shutil.which("kind") or str(paths.bin_dir() / "kind")
    if not Path(kind).is_file():
        return [f"kind cluster {name}: kind is not installed, left as it is"]
    known = subprocess.run([kind, "get", "clusters"], capture_output=True, text=True, check=False)
    if name not in known.stdout.split():
        return []
    done = subprocess.run(
        [kind, "delete", "cluster", "--name", name], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return [f"kind delete cluster --name {name} failed: {done.stderr.strip()}"]
    return [f"kind cluster {name} deleted"]


def collect_garbage() -> list[str]:
    """``mlsandbox gc``: the clusters whose owner died (their node and control plane first, under the
    machine's node lock), then the control planes and nodes of dead owners that no record names, then
    the records of kind clusters that no longer exist. One line per thing removed."""
    from . import controlplane, node
    from .node import NodeLock

    lines: list[str] = []
    for state in records():
        if state.engine == "node" and state.owner is not None and not state.owner.alive():
            if os.geteuid() != 0:
                continue  # only root made it, and only root can take it down
            lock = NodeLock()
            try:
                if not lock.try_acquire():
                    continue  # a node starts or runs: it removes what dead nodes left first
                removed = remove(state)
            finally:
                lock.close()
            lines.append(
                f"cluster {state.name}: owner {state.owner.pid} gone; removed "
                + ("; ".join(removed) or "its record")
            )
    lines += node.collect_garbage()  # a node before its control plane
    lines += controlplane.collect_garbage()
    return lines
