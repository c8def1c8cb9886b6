"""A real Kubernetes node on this machine, against a control plane of :mod:`.controlplane`.

Pods here run real containers: Debian's containerd (its own config, state and socket; its root, which
holds the images, is kept between runs under ``$MLSANDBOX_HOME/node/containerd``), runc and the CNI
plugins, the kubelet, kube-proxy (iptables mode) and kube-router (firewall only: NetworkPolicies are
enforced), built by ``scripts/install-kube-tools.sh --with-node``; CoreDNS runs as a pod behind the
``kube-dns`` Service. No registry is needed: the images come from :mod:`.node_images`.

What this machine needs, learned the hard way:

- containerd's CRI option ``restrict_oom_score_adj``: without CAP_SYS_RESOURCE the pause container's
  negative ``oom_score_adj`` is refused and every pod sandbox fails to start;
- the kubelet's ``failCgroupV1: false`` and ``cgroupDriver: cgroupfs`` (cgroup v1, no systemd);
- the API server reaches the kubelet at its InternalIP (``start(kwok=False)`` of the control plane).

The node is one per machine (kube-proxy and kube-router own machine-wide iptables chains): a lock file
serializes nodes, and :func:`start` waits for it. Everything a node creates is removed by :meth:`Node.stop`
and, when its owner died, by :func:`collect_garbage` (``mlsandbox gc``): its processes and the
containers' (its cgroup subtree ``/mlsandbox-node`` in every hierarchy), the pod sandboxes in containerd
(with their network namespaces, veths and addresses), the bridge, its routing rule, the iptables chains
and rules and the ipsets that appeared while it ran (by name against a snapshot taken at start), the
mounts under its directories, and the kernel settings the kubelet and kube-proxy changed (restored to
their values at start). Every process carries ``MLSANDBOX_NODE=<its directory>`` in its environment,
and the directory holds the owner's pid.

Needs root. Missing binaries are named with the command that provides them. What the node writes and
applies is built in :mod:`.node_manifests`; what it does to the machine and how that is undone is in
:mod:`.node_host`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from mlsandbox.errors import BackendError

from . import controlplane, node_images
from .controlplane import CA_FILE, SERVICE_CIDR, ControlPlane
from .manifests import QDISC_LABEL_PREFIX
from .node_host import (
    CGROUP_BASE,
    CHAIN_PREFIXES,
    MARKER_ENV,
    allow_forwarding,
    base_dir,
    check_prerequisites,
    containerd_root,
    crictl,
    env,
    make_cgroups,
    node_binary,
    qdiscs,
    remove_stale_network,
    runs_dir,
    snapshot,
    teardown,
    tool,
)
from .node_manifests import (
    BRIDGE,
    CGROUP_ROOT,
    CLUSTER_DNS,
    KUBE_ROUTER_USER,
    NODE_NAME,
    POD_CIDR,
    cni_conflist,
    containerd_config,
    dns_manifests,
    kube_proxy_config,
    kube_router_rbac,
    kubeconfig,
    kubelet_config,
)

__all__ = [
    "BRIDGE",
    "CGROUP_ROOT",
    "CHAIN_PREFIXES",
    "CLUSTER_DNS",
    "DEFAULT_IMAGES",
    "MARKER_ENV",
    "NODE_NAME",
    "POD_CIDR",
    "Node",
    "NodeLock",
    "base_dir",
    "check_prerequisites",
    "collect_garbage",
    "containerd_root",
    "dns_manifests",
    "running",
    "snapshot",
    "start",
]

SANDBOX_IMAGE = "pause"
DEFAULT_IMAGES = ("base", "pause", "coredns")
"""What :func:`start` imports unless told otherwise: the pod sandbox, CoreDNS, and Debian with Python."""

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -------------------------------------------------------------------------------------------- lock


class NodeLock:
    """The machine-wide node lock (an flock on ``$MLSANDBOX_HOME/node/lock``)."""

    def __init__(self) -> None:
        base_dir().mkdir(parents=True, exist_ok=True)
        self.fd = os.open(base_dir() / "lock", os.O_RDWR | os.O_CREAT, 0o600)

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def acquire(self, timeout: float, say: Say) -> None:
        deadline = time.monotonic() + timeout
        told = False
        while not self.try_acquire():
            if time.monotonic() > deadline:
                self.close()
                raise BackendError(
                    f"another node runs on this machine ({_holder()}) and did not stop within {timeout:.0f} s; "
                    "one node at a time can run here (kube-proxy and kube-router own machine-wide iptables chains)"
                )
            if not told:
                say(f"waiting for the node lock: another node runs on this machine ({_holder()})")
                told = True
            time.sleep(1)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _holder() -> str:
    for root in sorted(runs_dir().glob("node-*")) if runs_dir().is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            owner = json.loads((root / "owner").read_text())
            return f"owner pid {owner['pid']}, {root.name}"
    return "owner unknown"


# -------------------------------------------------------------------------------------------- node


@dataclass
class Node:
    """A running node. Use :func:`start` (or the :func:`running` context manager)."""

    root: Path
    cp: ControlPlane
    name: str = NODE_NAME
    ip: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    lock: NodeLock | None = None
    image_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds spent building/importing each image at start (empty when all were cached)."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """The machine's state before this node changed anything (:func:`snapshot`, taken under the node
    lock): what its teardown compares against, and what "nothing left behind" means for it."""

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    def ctr(self) -> list[str]:
        """The ``ctr`` command line that reaches this node's containerd."""
        return [tool("ctr"), "--address", str(self.socket)]

    def crictl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return crictl(self.root, list(args), timeout)

    def log(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def import_images(self, names: Iterable[str], say: Say = _quiet) -> dict[str, float]:
        """Build (when their inputs changed) and import these images of :mod:`.node_images`."""
        spent = node_images.ensure(self.ctr(), containerd_root().parent / "images.json", names, say)
        self.image_seconds.update(spent)
        return spent

    def memory(self) -> dict[str, int]:
        """Bytes of memory: RSS of each node process (containerd with its shims, kubelet, kube-proxy,
        kube-router) and ``pods``, what the pods' cgroup holds (the kernel's usage, page cache
        excluded)."""
        usage: dict[str, int] = {}
        for proc in psutil.process_iter(["name"]):
            with contextlib.suppress(psutil.Error, OSError):
                if proc.environ().get(MARKER_ENV) != str(self.root):
                    continue
                name = "containerd" if "containerd" in (proc.info["name"] or "") else proc.info["name"]
                usage[name] = usage.get(name, 0) + proc.memory_info().rss
        stat = CGROUP_BASE / "memory" / CGROUP_ROOT / "memory.stat"
        with contextlib.suppress(OSError, ValueError):
            values = dict(line.split() for line in stat.read_text().splitlines())
            usage["pods"] = int(values["total_rss"]) + int(values.get("total_mapped_file", 0))
        return usage

    def stop(self, *, release_lock: bool = True) -> list[str]:
        """Remove everything the node created (see the module's docstring); one line per kind of thing
        removed. The images stay in containerd's root. A second call does nothing. With
        ``release_lock=False`` the machine's node lock stays held (until :meth:`release`), so that no
        other node starts meanwhile (to look at the machine once this node is gone)."""
        if not self.root.exists():
            if release_lock:
                self.release()
            return []
        with contextlib.suppress(Exception):
            from kubernetes import client

            client.CoreV1Api(self.cp.api_client()).delete_node(self.name, _request_timeout=5)
        try:
            return teardown(self.root, self.procs)
        finally:
            if release_lock:
                self.release()

    def release(self) -> None:
        """Release the machine's node lock (:meth:`stop` does, unless told not to)."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def _spawn(node: Node, name: str, args: list[str]) -> None:
    log = open(node.root / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
    node.procs[name] = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env(node.root),
        start_new_session=True,
    )
    log.close()


def _wait(node: Node, name: str, check: Callable[[], bool], timeout: float, what: str = "") -> None:
    """Until ``check()`` holds; BackendError with the log of ``name`` when it exits or time is up (and
    any component that exited meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for component, proc in node.procs.items():
            if proc.poll() is not None:
                raise BackendError(f"{component} exited with {proc.returncode}:\n{node.log(component)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise BackendError(
        f"{what or name + ' ready'}: not after {timeout:.0f} s; {name}'s log:\n{node.log(name)}"
    )


def start(
    cp: ControlPlane,
    *,
    images: Iterable[str] = DEFAULT_IMAGES,
    timeout: float = 180.0,
    lock_timeout: float = 900.0,
    say: Say = _quiet,
) -> Node:
    """Start a node on this machine that registers with ``cp`` (started with ``kwok=False``) and is
    Ready with CoreDNS serving; ``images`` (names of :mod:`.node_images`) are built if their inputs
    changed and imported into its containerd (the pause and CoreDNS images always are).

    Waits up to ``lock_timeout`` for another node of this machine to stop. Raises
    :class:`MissingToolError` naming what to install, :class:`BackendError` with a component's log tail
    when one does not come up (everything started is removed again).
    """
    check_prerequisites()
    if cp.kwok:
        raise BackendError("this control plane runs kwok: start it with controlplane.start(kwok=False)")
    lock = NodeLock()
    lock.acquire(lock_timeout, say)
    try:
        for line in _collect_dead():
            say(f"removed what a crashed node left: {line}")
        if remove_stale_network():
            say(f"removed the bridge {BRIDGE} and its links, left by a node whose directory is gone")
        runs_dir().mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="node-", dir=runs_dir()))
    except BaseException:
        lock.close()
        raise
    node = Node(root=root, cp=cp, ip=cp.node_ip, lock=lock)
    try:
        (root / "owner").write_text(
            json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time()})
        )
        node.baseline = snapshot()
        (root / "baseline.json").write_text(json.dumps(node.baseline))
        if len(str(node.socket)) > 100:
            raise BackendError(
                f"containerd's socket path {node.socket} is too long for a unix socket: use a shorter MLSANDBOX_HOME"
            )
        node.ports = {
            name: _free_port()
            for name in ("kubelet", "kubelet-healthz", "proxy-healthz", "proxy-metrics", "router-health")
        }
        _write_configs(node)
        make_cgroups()
        allow_forwarding()
        wanted = list(dict.fromkeys(["pause", "coredns", *images]))
        started = time.monotonic()
        _start_containerd(node, timeout)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            importing = pool.submit(node.import_images, wanted, say)
            _start_kubelet(node)
            _start_kube_proxy(node)
            core = _core(cp)
            _wait(node, "kubelet", lambda: core.read_node(node.name) is not None, timeout, "node registered")
            say(f"node {node.name} registered ({time.monotonic() - started:.1f} s)")
            _start_kube_router(node)
            importing.result()
        _install_dns(cp)
        _wait(node, "kubelet", lambda: _node_ready(core, node.name), timeout, "node Ready")
        _wait(node, "kubelet", lambda: _dns_ready(core), timeout, "CoreDNS Ready")
        say(f"node {node.name} Ready with CoreDNS ({time.monotonic() - started:.1f} s)")
    except BaseException:
        node.stop()
        raise
    return node


@contextlib.contextmanager
def running(cp: ControlPlane, **kwargs: Any) -> Iterator[Node]:
    node = start(cp, **kwargs)
    try:
        yield node
    finally:
        node.stop()


def _core(cp: ControlPlane) -> Any:
    from kubernetes import client

    return client.CoreV1Api(cp.api_client())


def _node_ready(core: Any, name: str) -> bool:
    node = core.read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def _dns_ready(core: Any) -> bool:
    pods = core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-dns").items
    return any(
        any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])) for p in pods
    )


# ------------------------------------------------------------------------------------------ configs


def _write_configs(node: Node) -> None:
    """The node's directories, its components' certificates (from the control plane's CA: the API server
    verifies and accepts them) and kubeconfigs, and the configuration of each component."""
    root, cp = node.root, node.cp
    pki = cp.root / "pki"
    for name in ("containerd/state", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
        (root / name).mkdir(parents=True, exist_ok=True)
    containerd_root().mkdir(parents=True, exist_ok=True)
    issue = controlplane.issue_certificate
    issue(pki, "kubelet-serving", node.name, ips=(node.ip,), dns_names=(node.name,), server=True)
    clients = {
        "kubelet": issue(
            pki, "kubelet-client", f"system:node:{node.name}", organizations=("system:nodes",), client=True
        ),
        "kube-proxy": issue(pki, "kube-proxy-client", "system:kube-proxy", client=True),
        "kube-router": issue(pki, "kube-router-client", KUBE_ROUTER_USER, client=True),
    }
    for name, (crt, key) in clients.items():
        config = kubeconfig(cp.server, cp.ca_cert, name, crt, key)
        (root / f"{name}.kubeconfig").write_text(yaml.safe_dump(config))
    (root / "containerd" / "config.toml").write_text(
        containerd_config(
            root=containerd_root(),
            state=root / "containerd" / "state",
            socket=node.socket,
            sandbox_image=node_images.by_name([SANDBOX_IMAGE])[0].cri_ref,
            cni_conf_dir=root / "cni" / "net.d",
        )
    )
    conflist = cni_conflist(root / "cni" / "ipam")
    (root / "cni" / "net.d" / "10-mlsandbox.conflist").write_text(json.dumps(conflist, indent=1))
    kubelet = kubelet_config(
        ip=node.ip,
        port=node.ports["kubelet"],
        healthz_port=node.ports["kubelet-healthz"],
        socket=node.socket,
        pki=pki,
        ca_file=CA_FILE,
        pod_logs=root / "pod-logs",
    )
    (root / "kubelet.yaml").write_text(yaml.safe_dump(kubelet))
    proxy = kube_proxy_config(
        node_name=node.name,
        kubeconfig=root / "kube-proxy.kubeconfig",
        healthz_port=node.ports["proxy-healthz"],
        metrics_port=node.ports["proxy-metrics"],
    )
    (root / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy))


# -------------------------------------------------------------------------------------- components


def _start_containerd(node: Node, timeout: float) -> None:
    _spawn(
        node, "containerd", [tool("containerd"), "--config", str(node.root / "containerd" / "config.toml")]
    )

    def answers() -> bool:
        done = subprocess.run([*node.ctr(), "version"], capture_output=True, timeout=5, check=False)
        return done.returncode == 0

    _wait(node, "containerd", answers, timeout)


def _start_kubelet(node: Node) -> None:
    _spawn(
        node,
        "kubelet",
        [
            str(node_binary("kubelet")),
            f"--config={node.root / 'kubelet.yaml'}",
            f"--kubeconfig={node.root / 'kubelet.kubeconfig'}",
            f"--root-dir={node.root / 'kubelet'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            *_qdisc_labels(),
        ],
    )


def _qdisc_labels() -> list[str]:
    """The node says which queueing disciplines its kernel has (label ``qdisc.mlsandbox.dev/<name>``),
    so that a sandbox refuses the NetworkChaos faults it would need them for before an episode starts."""
    found = qdiscs()
    if not found:
        return []
    labels = ",".join(f"{QDISC_LABEL_PREFIX}{name}={str(ok).lower()}" for name, ok in sorted(found.items()))
    return [f"--node-labels={labels}"]


def _start_kube_proxy(node: Node) -> None:
    _spawn(node, "kube-proxy", [str(node_binary("kube-proxy")), f"--config={node.root / 'kube-proxy.yaml'}"])


def _start_kube_router(node: Node) -> None:
    api = _api(node.cp)
    for manifest in kube_router_rbac():
        api.apply(manifest)
    _spawn(
        node,
        "kube-router",
        [
            str(node_binary("kube-router")),
            f"--kubeconfig={node.root / 'kube-router.kubeconfig'}",
            f"--hostname-override={node.name}",
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--enable-cni=false",
            "--enable-ipv6=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--health-port={node.ports['router-health']}",
            "--metrics-port=0",
        ],
    )


def _api(cp: ControlPlane) -> Any:
    from .client import KubernetesApi

    return KubernetesApi(cp.api_client())


def _install_dns(cp: ControlPlane) -> None:
    api = _api(cp)
    for manifest in dns_manifests(node_images.by_name(["coredns"])[0].ref):
        api.apply(manifest)


# ------------------------------------------------------------------------------------------- garbage


def _owner_alive(root: Path) -> bool:
    try:
        owner = json.loads((root / "owner").read_text())
        proc = psutil.Process(int(owner["pid"]))
        return abs(proc.create_time() - float(owner["create_time"])) < 1.0
    except (OSError, ValueError, KeyError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _collect_dead() -> list[str]:
    """Tear down the nodes whose owner died (the caller holds the lock)."""
    lines = []
    for root in sorted(runs_dir().glob("node-*")) if runs_dir().is_dir() else []:
        if root.is_dir() and not _owner_alive(root):
            removed = teardown(root)
            lines.append(f"node {root.name}: owner gone; removed " + ("; ".join(removed) or "its directory"))
    return lines


def collect_garbage() -> list[str]:
    """Stop the nodes whose owner process is gone (``mlsandbox gc``); one line per node removed.

    Does nothing while a live node holds the machine's node lock (a dead node's remains are removed by
    the next node's start before it does anything, under that lock)."""
    if not runs_dir().is_dir() or not any(runs_dir().iterdir()):
        return []
    if os.geteuid() != 0:
        return []  # only root made a node, and only root can take one down
    lock = NodeLock()
    try:
        if not lock.try_acquire():
            return []
        return _collect_dead()
    finally:
        lock.close()
