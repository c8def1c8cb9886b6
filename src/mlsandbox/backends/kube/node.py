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
their values at start). Every process carries ``MLSANDBOX_NODE=<its directory>`` in its environment, and the directory
holds the owner's pid.

Needs root. Missing binaries are named with the command that provides them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
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

from mlsandbox import paths
from mlsandbox.errors import BackendError, MissingToolError

from . import controlplane, node_images
from .controlplane import CA_FILE, CLUSTER_CIDR, SERVICE_CIDR, ControlPlane

MARKER_ENV = "MLSANDBOX_NODE"
NODE_NAME = "mlsandbox-node"
POD_CIDR = "10.244.0.0/24"
"""The node's pod addresses: the first /24 the controller manager hands out of :data:`CLUSTER_CIDR`."""
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
BRIDGE = "mlsnode0"
CNI_NETWORK = "mlsandbox-node"
CGROUP_ROOT = "mlsandbox-node"
CGROUP_BASE = Path("/sys/fs/cgroup")
SANDBOX_IMAGE = "pause"
DEFAULT_IMAGES = ("base", "pause", "coredns")
"""What :func:`start` imports unless told otherwise: the pod sandbox, CoreDNS, and Debian with Python."""
KUBE_ROUTER_USER = "mlsandbox:kube-router"
CHAIN_PREFIXES = ("KUBE-", "CNI-", "MLSANDBOX-")
NODE_CHAIN = "MLSANDBOX-NODE"
ROUTE_RULE = ("priority", "900", "iif", BRIDGE, "to", SERVICE_CIDR, "unreachable")
IPSET_PREFIXES = ("kube-router-", "KUBE-", "inet6:kube-router-", "inet6:KUBE-")
KERNEL_SETTINGS = (
    # The kubelet's (it sets them unless protectKernelDefaults).
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    # kube-proxy's and the bridge plugin's.
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/ipv4/ip_forward",
)
_INSTALL = "run scripts/install-kube-tools.sh --with-node (as root; builds it with Go, cached after)"
_APT = "run scripts/install-kube-tools.sh --with-node as root (apt-get install {pkg})"
SYSTEM_TOOLS = {
    # command -> Debian package
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "iptables-restore": "iptables",
    "ipset": "ipset",
    "conntrack": "conntrack",
    "umount": "mount",
    "ip": "iproute2",
}
HOST_DIRS = (
    "/run/containerd",
    "/run/containerd/s",
    "/var/lib/cni",
    "/var/lib/cni/results",
    "/var/log/containers",
    "/var/log/pods",
)
"""Directories outside the node's own that containerd, its shims, the CNI plugins or the kubelet create
when missing: removed again when they were absent at start and are empty at the end."""
CNI_BIN = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
NODE_BINARIES = ("kubelet", "kube-proxy", "kube-router", "crictl", "coredns")

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


# ------------------------------------------------------------------------------------------- tools


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise MissingToolError(f"`{name}` is not installed: {_APT.format(pkg=SYSTEM_TOOLS[name])}")
    return found


def node_binary(name: str) -> Path:
    path = paths.bin_dir() / name
    if not path.is_file():
        raise MissingToolError(f"`{name}` is not installed (expected {path}): {_INSTALL}")
    return path


def check_prerequisites() -> None:
    """Raise :class:`MissingToolError` naming the first missing piece, :class:`BackendError` if not root."""
    if os.geteuid() != 0:
        raise BackendError("a real node needs root (containerd, the kubelet and iptables do)")
    for name in NODE_BINARIES:
        node_binary(name)
    for name in SYSTEM_TOOLS:
        _tool(name)
    for plugin in CNI_PLUGINS:
        if not (CNI_BIN / plugin).is_file():
            raise MissingToolError(
                f"the CNI plugin {CNI_BIN / plugin} is missing: "
                + _APT.format(pkg="containernetworking-plugins")
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_dir() -> Path:
    return paths.home() / "node"


def containerd_root() -> Path:
    """containerd's root (its content store and snapshots: the imported images), kept between nodes."""
    return base_dir() / "containerd"


def _runs() -> Path:
    return base_dir() / "runs"


# ------------------------------------------------------------------------------------------- state


def _iptables_chains() -> dict[str, dict[str, list[str]]]:
    """``{"iptables"|"ip6tables": {table: [chain, ...]}}`` as ``*-save`` lists them."""
    found: dict[str, dict[str, list[str]]] = {}
    for family in ("iptables", "ip6tables"):
        save = shutil.which(f"{family}-save")
        if save is None:
            continue
        done = subprocess.run([save], capture_output=True, text=True, check=False)
        tables: dict[str, list[str]] = {}
        table = ""
        for line in done.stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
                tables[table] = []
            elif line.startswith(":") and table:
                tables[table].append(line[1:].split()[0])
        found[family] = tables
    return found


def _ipsets() -> list[str]:
    ipset = shutil.which("ipset")
    if ipset is None:
        return []
    done = subprocess.run([ipset, "list", "-n"], capture_output=True, text=True, check=False)
    return done.stdout.split()


def _sysctls() -> dict[str, str]:
    values = {}
    for key in KERNEL_SETTINGS:
        with contextlib.suppress(OSError):
            values[key] = (Path("/proc/sys") / key).read_text().strip()
    return values


def snapshot() -> dict[str, Any]:
    """What the node's cleanup compares against: iptables chains, ipsets, kernel settings, links, mounts."""
    return {
        "chains": _iptables_chains(),
        "ipsets": _ipsets(),
        "sysctls": _sysctls(),
        "links": sorted(psutil.net_if_addrs()),
        "mounts": sorted(m for _, m in _mounts()),
        "dirs": [d for d in HOST_DIRS if Path(d).is_dir()],
        "route rules": _route_rules(),
    }


def _mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount, from /proc/self/mountinfo (octal escapes decoded)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split(" - ", 1)
        fields = parts[0].split()
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        source = parts[1].split()[1] if len(parts) > 1 and len(parts[1].split()) > 1 else ""
        out.append((source, point))
    return out


# -------------------------------------------------------------------------------------------- lock


class _Lock:
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
    for root in sorted(_runs().glob("node-*")) if _runs().is_dir() else []:
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
    lock: _Lock | None = None
    image_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds spent building/importing each image at start (empty when all were cached)."""

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    def ctr(self) -> list[str]:
        """The ``ctr`` command line that reaches this node's containerd."""
        return [_tool("ctr"), "--address", str(self.socket)]

    def crictl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return _crictl(self.root, list(args), timeout)

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
            return _teardown(self.root, self.procs)
        finally:
            if release_lock:
                self.release()

    def release(self) -> None:
        """Release the machine's node lock (:meth:`stop` does, unless told not to)."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, MARKER_ENV: str(root)}


def _spawn(node: Node, name: str, args: list[str]) -> None:
    log = open(node.root / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
    node.procs[name] = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=_env(node.root),
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
    lock = _Lock()
    lock.acquire(lock_timeout, say)
    try:
        for line in _collect_dead():
            say(f"removed what a crashed node left: {line}")
        _runs().mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="node-", dir=_runs()))
    except BaseException:
        lock.close()
        raise
    node = Node(root=root, cp=cp, ip=cp.node_ip, lock=lock)
    try:
        (root / "owner").write_text(
            json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time()})
        )
        (root / "baseline.json").write_text(json.dumps(snapshot()))
        if len(str(node.socket)) > 100:
            raise BackendError(
                f"containerd's socket path {node.socket} is too long for a unix socket: use a shorter MLSANDBOX_HOME"
            )
        node.ports = {
            name: _free_port()
            for name in ("kubelet", "kubelet-healthz", "proxy-healthz", "proxy-metrics", "router-health")
        }
        _write_configs(node)
        _make_cgroups()
        _allow_forwarding()
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


def _kubeconfig(cp: ControlPlane, user: str, crt: Path, key: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "mlsandbox", "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_cert)}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "mlsandbox", "context": {"cluster": "mlsandbox", "user": user}}],
        "current-context": "mlsandbox",
    }


def _write_configs(node: Node) -> None:
    root, cp = node.root, node.cp
    pki = cp.root / "pki"
    for name in ("containerd/state", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
        (root / name).mkdir(parents=True, exist_ok=True)
    containerd_root().mkdir(parents=True, exist_ok=True)
    # Credentials: the kubelet's serving certificate and the components' client certificates, from the
    # control plane's CA (the API server verifies and accepts them).
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
        (root / f"{name}.kubeconfig").write_text(yaml.safe_dump(_kubeconfig(cp, name, crt, key)))

    state = root / "containerd" / "state"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    sandbox = node_images.by_name([SANDBOX_IMAGE])[0].cri_ref
    (root / "containerd" / "config.toml").write_text(
        f"""version = 2
root = "{containerd_root()}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{node.socket}"

[ttrpc]
  address = "{node.socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{containerd_root() / "opt"}"

[{cri}]
  sandbox_image = "{sandbox}"
  # Without CAP_SYS_RESOURCE (this machine), runc cannot lower oom_score_adj below the caller's.
  restrict_oom_score_adj = true
  # Pods' network namespaces under the node's state directory (removed with it), not /var/run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{state / "runc"}"

[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{root / "cni" / "net.d"}"
  max_conf_num = 1
"""
    )
    conflist = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(root / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    (root / "cni" / "net.d" / "10-mlsandbox.conflist").write_text(json.dumps(conflist, indent=1))

    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "address": node.ip,
        "port": node.ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.ports["kubelet-healthz"],
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / CA_FILE)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(root / "pod-logs"),
        "failSwapOn": False,
        # The images cannot be pulled again: never garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "protectKernelDefaults": False,
        "maxPods": 110,
    }
    (root / "kubelet.yaml").write_text(yaml.safe_dump(kubelet))
    proxy = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(root / "kube-proxy.kubeconfig")},
        "hostnameOverride": node.name,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": f"127.0.0.1:{node.ports['proxy-healthz']}",
        "metricsBindAddress": f"127.0.0.1:{node.ports['proxy-metrics']}",
        "clusterCIDR": CLUSTER_CIDR,
        # NodePorts on the node's address only (not 127.0.0.1: that needs route_localnet).
        "nodePortAddresses": ["primary"],
        # Leave the machine's conntrack settings as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }
    (root / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy))


def _allow_forwarding() -> None:
    """The node's own routing rule and filter rules, so that connections behave as on any node:

    - a pod's connection to the Service range that kube-proxy has not translated (a Service without
      endpoints, or not programmed yet) fails at once (an ``unreachable`` routing rule for what arrives
      from the bridge), instead of leaving the machine by the default route, where whatever answers
      would keep answering on that connection. (kube-proxy's own REJECT for a Service without endpoints
      sits in FORWARD behind kube-router's ACCEPT of policy-compliant traffic, so it never applies.)
      The same from this machine is refused in OUTPUT (chain :data:`NODE_CHAIN`);
    - the pods' traffic is accepted in FORWARD (a docker engine sets its policy to DROP), after kube-proxy's
      and kube-router's rules, which insert theirs at the top: NetworkPolicies still drop what they deny.
      (CNI's firewall plugin would accept it before them.)
    """
    present = _iptables_chains().get("iptables", {}).get("filter", [])
    rules = [f":{NODE_CHAIN} - [0:0]"] if NODE_CHAIN not in present else [f"-F {NODE_CHAIN}"]
    rules += [
        f"-A {NODE_CHAIN} -d {SERVICE_CIDR} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {NODE_CHAIN} -d {SERVICE_CIDR} -j REJECT --reject-with icmp-port-unreachable",
        f"-A {NODE_CHAIN} -s {CLUSTER_CIDR} -j ACCEPT",
        f"-A {NODE_CHAIN} -d {CLUSTER_CIDR} -j ACCEPT",
    ]
    if NODE_CHAIN not in present:
        for hook in ("FORWARD", "OUTPUT"):
            rules.append(f'-A {hook} -m comment --comment "mlsandbox node" -j {NODE_CHAIN}')
    done = subprocess.run(
        [_tool("iptables-restore"), "--noflush"],
        input="*filter\n" + "\n".join(rules) + "\nCOMMIT\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BackendError(f"iptables-restore could not add the node's filter rules: {done.stderr.strip()}")
    if not _route_rules():
        done = subprocess.run(
            [_tool("ip"), "rule", "add", *ROUTE_RULE], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise BackendError(f"ip rule add {' '.join(ROUTE_RULE)} failed: {done.stderr.strip()}")
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        with contextlib.suppress(OSError):
            (Path("/proc/sys") / key).write_text("1")


def _route_rules() -> list[str]:
    """The routing rules of the node (``ip rule`` lines naming its bridge)."""
    done = subprocess.run(["ip", "rule", "show"], capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if f"iif {BRIDGE} " in line + " "]


def _make_cgroups() -> None:
    """The node's cgroup root (the kubelet's ``cgroupRoot``) in every hierarchy; a new cpuset cgroup
    needs its CPUs and memory nodes before a task can join it."""
    for hierarchy in CGROUP_BASE.iterdir():
        if not (hierarchy / "cgroup.procs").exists():
            continue
        path = hierarchy / CGROUP_ROOT
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())


# -------------------------------------------------------------------------------------- components


def _start_containerd(node: Node, timeout: float) -> None:
    _spawn(
        node, "containerd", [_tool("containerd"), "--config", str(node.root / "containerd" / "config.toml")]
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
        ],
    )


def _start_kube_proxy(node: Node) -> None:
    _spawn(node, "kube-proxy", [str(node_binary("kube-proxy")), f"--config={node.root / 'kube-proxy.yaml'}"])


def _start_kube_router(node: Node) -> None:
    api = _api(node.cp)
    for manifest in _kube_router_rbac():
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


def _kube_router_rbac() -> list[dict[str, Any]]:
    read = ["get", "list", "watch"]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": KUBE_ROUTER_USER},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
                    "verbs": read,
                },
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": KUBE_ROUTER_USER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": KUBE_ROUTER_USER,
            },
            "subjects": [{"kind": "User", "name": KUBE_ROUTER_USER, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    ]


COREFILE = f""".:53 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 30
}}
"""


def dns_manifests(image: str) -> list[dict[str, Any]]:
    """CoreDNS in ``kube-system``: its account and read-only role, its Corefile, one replica listening on
    port 53 (sandboxes' NetworkPolicies admit DNS to ``k8s-app: kube-dns`` pods on port 53), and the
    ``kube-dns`` Service at :data:`CLUSTER_DNS`."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"namespace": "kube-system", "labels": labels}
    read = ["list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "mlsandbox:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": read,
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "mlsandbox:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "mlsandbox:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", **meta},
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "periodSeconds": 10,
                                },
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "32Mi"},
                                    "limits": {"memory": "128Mi"},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                },
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                                ],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", **meta},
            "spec": {
                "clusterIP": CLUSTER_DNS,
                "selector": labels,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


def _install_dns(cp: ControlPlane) -> None:
    api = _api(cp)
    for manifest in dns_manifests(node_images.by_name(["coredns"])[0].ref):
        api.apply(manifest)


# --------------------------------------------------------------------------------------- teardown


def _crictl(root: Path, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    endpoint = f"unix://{root / 'containerd' / 'containerd.sock'}"
    return subprocess.run(
        [
            str(node_binary("crictl")),
            "--runtime-endpoint",
            endpoint,
            "--image-endpoint",
            endpoint,
            "--timeout",
            "20s",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=_env(root),
    )


def _processes(root: Path) -> list[psutil.Process]:
    """The node's processes: those carrying its marker, and containerd's shims for its socket."""
    sock = str(root / "containerd" / "containerd.sock")
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid == os.getpid():
                continue
            if proc.environ().get(MARKER_ENV) == str(root) or sock in proc.cmdline():
                found.append(proc)
    return found


def _name(proc: psutil.Process) -> str:
    try:
        return str(proc.name())
    except psutil.Error:
        return ""


def _stop_process(proc: psutil.Process | subprocess.Popen[bytes], grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError, psutil.Error, OSError):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
            proc.kill()
            proc.wait(10)


def _cgroup_dirs() -> list[Path]:
    """The node's cgroups in every hierarchy, deepest first."""
    found = []
    if CGROUP_BASE.is_dir():
        for hierarchy in CGROUP_BASE.iterdir():
            top = hierarchy / CGROUP_ROOT
            if top.is_dir():
                found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _kill_cgroups() -> int:
    killed = 0
    for _ in range(50):
        pids = set()
        for d in _cgroup_dirs():
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.1)
    for d in _cgroup_dirs():
        for _ in range(20):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
    return killed


def _remove_chains(baseline: dict[str, dict[str, list[str]]]) -> int:
    """Remove the iptables chains named like the node's (``KUBE-*``, ``CNI-*``) that were not there at
    start, and every rule that jumps to one of them."""
    removed = 0
    for family, tables in _iptables_chains().items():
        restore = shutil.which(f"{family}-restore")
        save = shutil.which(f"{family}-save")
        if restore is None or save is None:
            continue
        rules = subprocess.run([save], capture_output=True, text=True, check=False).stdout.splitlines()
        script: list[str] = []
        for table, chains in tables.items():
            before = set(baseline.get(family, {}).get(table, []))
            new = [c for c in chains if c not in before and c.startswith(CHAIN_PREFIXES)]
            if not new:
                continue
            script.append(f"*{table}")
            in_table = False
            for line in rules:
                if line.startswith("*"):
                    in_table = line[1:] == table
                    continue
                if not in_table or not line.startswith("-A "):
                    continue
                words = line.split()
                chain = words[1]
                target = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-j", "-g")), "")
                if chain not in new and target in new:
                    script.append("-D" + line[2:])
            script += [f"-F {c}" for c in new] + [f"-X {c}" for c in new] + ["COMMIT"]
            removed += len(new)
        if script:
            done = subprocess.run(
                [restore, "--noflush"],
                input="\n".join(script) + "\n",
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise BackendError(
                    f"{family}-restore could not remove the node's chains: {done.stderr.strip()}"
                )
    return removed


def _remove_ipsets(baseline: list[str]) -> int:
    ipset = shutil.which("ipset")
    if ipset is None:
        return 0
    new = [s for s in _ipsets() if s not in set(baseline) and s.startswith(IPSET_PREFIXES)]
    for name in new:
        subprocess.run([ipset, "destroy", name], capture_output=True, check=False)
    return len(new)


def _remove_links() -> int:
    """The bridge, the veths still attached to it, and the node's routing rule."""
    for _ in _route_rules():
        subprocess.run(["ip", "rule", "del", *ROUTE_RULE], capture_output=True, check=False)
    done = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=False)
    links = json.loads(done.stdout or "[]")
    ours = [link["ifname"] for link in links if link.get("master") == BRIDGE]
    ours += [BRIDGE] if any(link["ifname"] == BRIDGE for link in links) else []
    for name in ours:
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
    return len(ours)


def _unmount_under(*dirs: Path) -> int:
    prefixes = [str(d.resolve()) for d in dirs]
    count = 0
    for _ in range(5):
        points = sorted(
            {p for _, p in _mounts() if any(p == d or p.startswith(d + "/") for d in prefixes)},
            key=len,
            reverse=True,
        )
        if not points:
            break
        for point in points:
            done = subprocess.run(["umount", "-l", point], capture_output=True, check=False)
            count += done.returncode == 0
    return count


def _restore_sysctls(before: dict[str, str]) -> list[str]:
    restored = []
    now = _sysctls()
    for key, value in before.items():
        if now.get(key) != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(value)
                restored.append(f"{key.replace('/', '.')}={value}")
    return restored


def _remove_files(root: Path, existed: list[str]) -> int:
    count = 0
    logs = Path("/var/log/containers")
    if logs.is_dir():
        for link in logs.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(root)):
                    link.unlink()
                    count += 1
    cache = Path("/var/lib/cni/results")
    if cache.is_dir():
        for entry in cache.glob(f"{CNI_NETWORK}-*"):
            entry.unlink(missing_ok=True)
            count += 1
    for made in sorted(set(HOST_DIRS) - set(existed), key=len, reverse=True):
        with contextlib.suppress(OSError):
            Path(made).rmdir()  # only when empty
            count += 1
    return count


def _teardown(root: Path, procs: dict[str, subprocess.Popen[bytes]] | None = None) -> list[str]:
    """Remove everything of the node whose directory is ``root`` (see the module's docstring)."""
    lines: list[str] = []
    procs = dict(procs or {})
    try:
        baseline = json.loads((root / "baseline.json").read_text())
    except (OSError, ValueError):
        # Written before anything else is made: without it, nothing of the machine's was touched yet,
        # and there is nothing to tell the node's chains and sets from anybody else's.
        baseline = None
    # 1. Nothing may recreate pods or rules while they go.
    for name in ("kubelet", "kube-router", "kube-proxy"):
        if name in procs:
            _stop_process(procs.pop(name))
    for proc in _processes(root):
        if _name(proc) in ("kubelet", "kube-router", "kube-proxy"):
            _stop_process(proc)
    # 2. The pod sandboxes, through containerd (a dead one is started again on its own config): the CNI
    # plugins take down each pod's network (veth, address, NAT and firewall rules).
    config = root / "containerd" / "config.toml"
    sock = root / "containerd" / "containerd.sock"
    temporary = None
    if config.is_file() and shutil.which("containerd") and (paths.bin_dir() / "crictl").is_file():
        alive = any(_name(p) == "containerd" for p in _processes(root))
        if not alive:
            log = open(root / "containerd-cleanup.log", "wb")  # noqa: SIM115
            temporary = subprocess.Popen(
                ["containerd", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(root),
                start_new_session=True,
            )
            log.close()
            for _ in range(100):
                if sock.exists() and _crictl(root, ["version"], timeout=10).returncode == 0:
                    break
                time.sleep(0.1)
        pods = _crictl(root, ["pods", "-q"]).stdout.split()
        if pods:
            _crictl(root, ["rmp", "--force", "--all"], timeout=120)
            lines.append(f"{len(pods)} pod sandbox(es)")
    # 3. containerd, its shims, and whatever still runs in the node's cgroups.
    if "containerd" in procs:
        _stop_process(procs.pop("containerd"))
    if temporary is not None:
        _stop_process(temporary)
    stopped = 0
    for proc in _processes(root):
        _stop_process(proc, grace=5)
        stopped += 1
    killed = _kill_cgroups()
    if stopped or killed:
        lines.append(f"{stopped} leftover process(es), {killed} in the node's cgroups")
    # 4. Rules, sets, links, mounts, kernel settings, files.
    # Not `kube-proxy --cleanup` nor `kube-router --cleanup-config`: both flush every IPVS table of the
    # machine, whoever made it. The chains and sets that appeared while the node ran go by name instead.
    chains = _remove_chains(baseline["chains"]) if baseline else 0
    sets = _remove_ipsets(baseline["ipsets"]) if baseline else 0
    links = _remove_links()
    mounts = _unmount_under(root, containerd_root())
    restored = _restore_sysctls(baseline["sysctls"]) if baseline else []
    files = _remove_files(root, baseline["dirs"] if baseline else list(HOST_DIRS))
    if chains or sets:
        lines.append(f"{chains} iptables chain(s), {sets} ipset(s)")
    if links or mounts:
        lines.append(f"{links} network link(s), {mounts} mount(s)")
    if restored:
        lines.append("kernel settings restored: " + ", ".join(restored))
    if files:
        lines.append(f"{files} file(s) outside the node's directory")
    shutil.rmtree(root, ignore_errors=True)
    return lines


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
    for root in sorted(_runs().glob("node-*")) if _runs().is_dir() else []:
        if root.is_dir() and not _owner_alive(root):
            removed = _teardown(root)
            lines.append(f"node {root.name}: owner gone; removed " + ("; ".join(removed) or "its directory"))
    return lines


def collect_garbage() -> list[str]:
    """Stop the nodes whose owner process is gone (``mlsandbox gc``); one line per node removed.

    Does nothing while a live node holds the machine's node lock (a dead node's remains are removed by
    the next node's start before it does anything, under that lock)."""
    if not _runs().is_dir() or not any(_runs().iterdir()):
        return []
    if os.geteuid() != 0:
        return []  # only root made a node, and only root can take one down
    lock = _Lock()
    try:
        if not lock.try_acquire():
            return []
        return _collect_dead()
    finally:
        lock.close()
