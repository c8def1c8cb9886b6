"""A real Kubernetes control plane on this machine, without containers: the test and benchmark tier.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built from their Go modules by
``scripts/install-kube-tools.sh --with-control-plane``) run as child processes on free loopback ports;
kwok plays the node and the pods' kubelet. The operator and the kube backend talk to it exactly as they
talk to a kind cluster: the same API server code, admission (ResourceQuota, LimitRange,
ServiceAccount), RBAC, the Job, namespace and garbage-collector controllers, the scheduler.

What kwok does to pods here (:data:`STAGES`): a scheduled pod becomes Running with ready containers and
stays so; a pod annotated ``mlsandbox.dev/kwok-outcome`` ends the way it names: ``Succeeded`` (exit 0),
``Failed`` (exit 1) or ``OOMKilled`` (exit 137, the reason a real kubelet reports); a deleted pod goes.
Nothing runs inside the pods: there are no logs. Every pod has the node's address, and the node's
address is this machine's (:func:`host_address`), as if every pod ran on the host network: the API
server's proxy (``.../pods/<pod>:<port>/proxy``, ``.../services/<svc>:<port>/proxy``) reaches whatever
listens on this machine at the pod's port. A test stands a real server behind a simulated pod that way.

Every process carries ``MLSANDBOX_CONTROL_PLANE=<dir>`` in its environment and the directory holds the
owner's pid: :func:`collect_garbage` (called by ``mlsandbox gc``) stops the control planes whose owner
died without stopping them (and, first, the real nodes of :mod:`.node` whose owner died).

``start(kwok=False)`` prepares the control plane for a real kubelet instead (:mod:`.node` starts it):
no kwok and no simulated node; the API server listens on every address and advertises this machine's,
so pods reach it through the ``kubernetes`` Service; it accepts client certificates signed by the
control plane's CA (the node's components authenticate so), authorizes kubelets with the Node
authorizer, reaches kubelets by their InternalIP and verifies their serving certificates; the
controller manager allocates node pod CIDRs from :data:`CLUSTER_CIDR` and runs the node lifecycle
controller.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from mlsandbox import paths
from mlsandbox.errors import BackendError, MissingToolError

MARKER_ENV = "MLSANDBOX_CONTROL_PLANE"
CA_FILE = "ca.crt"
"""The control plane's CA, in its ``pki`` folder."""
OUTCOME_ANNOTATION = "mlsandbox.dev/kwok-outcome"
NODE_NAME = "kwok-node-0"
ADMIN_USER = "mlsandbox-admin"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
"""The ``kubernetes`` Service's ClusterIP (the first of :data:`SERVICE_CIDR`)."""
CLUSTER_CIDR = "10.244.0.0/16"
"""Pod addresses (with ``kwok=False``, each node gets a /24 of it)."""
_HINT = "run scripts/install-kube-tools.sh --with-control-plane (builds them with Go; cached after)"

# kwok's script for nodes and pods (its Stage API). Written for this project: a node is Ready as soon as
# it exists; pods run until told how to end.
STAGES: list[dict[str, Any]] = [
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "node-ready"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Node"},
            "selector": {
                "matchExpressions": [
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "NotIn",
                        "values": ["True"],
                    }
                ]
            },
            "next": {
                "statusTemplate": (
                    "{{ $now := Now }}\n"
                    "conditions:\n"
                    "{{ range NodeConditions }}\n"
                    "- lastHeartbeatTime: {{ $now | Quote }}\n"
                    "  lastTransitionTime: {{ $now | Quote }}\n"
                    "  message: {{ .message | Quote }}\n"
                    "  reason: {{ .reason | Quote }}\n"
                    "  status: {{ .status | Quote }}\n"
                    "  type: {{ .type | Quote }}\n"
                    "{{ end }}\n"
                    "addresses:\n"
                    "- address: {{ NodeIP | Quote }}\n"
                    "  type: InternalIP\n"
                    "- address: {{ NodeName | Quote }}\n"
                    "  type: Hostname\n"
                    "phase: Running\n"
                )
            },
        },
    },
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-run"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                ]
            },
            "next": {
                "statusTemplate": (
                    "{{ $now := Now }}\n"
                    "phase: Running\n"
                    "startTime: {{ $now | Quote }}\n"
                    "hostIP: {{ NodeIPWith .spec.nodeName | Quote }}\n"
                    "podIP: {{ NodeIPWith .spec.nodeName | Quote }}\n"
                    "podIPs:\n"
                    "- ip: {{ NodeIPWith .spec.nodeName | Quote }}\n"
                    "conditions:\n"
                    "- lastTransitionTime: {{ $now | Quote }}\n"
                    '  status: "True"\n'
                    "  type: PodScheduled\n"
                    "- lastTransitionTime: {{ $now | Quote }}\n"
                    '  status: "True"\n'
                    "  type: Initialized\n"
                    "- lastTransitionTime: {{ $now | Quote }}\n"
                    '  status: "True"\n'
                    "  type: ContainersReady\n"
                    "- lastTransitionTime: {{ $now | Quote }}\n"
                    '  status: "True"\n'
                    "  type: Ready\n"
                    "containerStatuses:\n"
                    "{{ range .spec.containers }}\n"
                    "- image: {{ .image | Quote }}\n"
                    "  name: {{ .name | Quote }}\n"
                    "  ready: true\n"
                    "  started: true\n"
                    "  restartCount: 0\n"
                    # What a kubelet with in-place resize (on by default since 1.33) reports: the API
                    # server resizes only pods whose running containers carry it.
                    "  resources:{{ with .resources }}{{ YAML . 2 }}{{ else }} {}{{ end }}\n"
                    "  state:\n"
                    "    running:\n"
                    "      startedAt: {{ $now | Quote }}\n"
                    "{{ end }}\n"
                )
            },
        },
    },
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-outcome"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": f'.metadata.annotations["{OUTCOME_ANNOTATION}"]', "operator": "Exists"},
                ]
            },
            "next": {
                "statusTemplate": (
                    "{{ $now := Now }}\n"
                    f'{{{{ $outcome := index .metadata.annotations "{OUTCOME_ANNOTATION}" }}}}\n'
                    '{{ $code := 1 }}{{ if eq $outcome "Succeeded" }}{{ $code = 0 }}{{ end }}'
                    '{{ if eq $outcome "OOMKilled" }}{{ $code = 137 }}{{ end }}\n'
                    'phase: {{ if eq $outcome "Succeeded" }}Succeeded{{ else }}Failed{{ end }}\n'
                    "conditions:\n"
                    "- lastTransitionTime: {{ $now | Quote }}\n"
                    '  status: "False"\n'
                    "  type: Ready\n"
                    "containerStatuses:\n"
                    "{{ range .spec.containers }}\n"
                    "- image: {{ .image | Quote }}\n"
                    "  name: {{ .name | Quote }}\n"
                    "  ready: false\n"
                    "  started: false\n"
                    "  restartCount: 0\n"
                    "  state:\n"
                    "    terminated:\n"
                    "      exitCode: {{ $code }}\n"
                    '      reason: {{ if eq $outcome "Succeeded" }}Completed{{ else if eq $outcome "OOMKilled" }}'
                    "OOMKilled{{ else }}Error{{ end }}\n"
                    "      startedAt: {{ $now | Quote }}\n"
                    "      finishedAt: {{ $now | Quote }}\n"
                    "{{ end }}\n"
                )
            },
        },
    },
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-delete"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}]},
            "next": {"finalizers": {"empty": True}, "delete": True},
        },
    },
]

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_address() -> str:
    """An IPv4 address of this machine that the API server accepts as a pod's (not loopback, not
    link-local); ``10.0.0.1`` (reaching nothing) when it has none."""
    import ipaddress

    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(a.address)
            if not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified):
                return a.address
    return "10.0.0.1"


def binary(name: str) -> Path:
    path = paths.bin_dir() / name
    if not path.is_file():
        raise MissingToolError(f"`{name}` is not installed (expected {path}): {_HINT}")
    return path


def _write_service_account_keys(pki: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (pki / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _write_ca(pki: Path) -> None:
    """A CA of this control plane's own (``ca.crt``, and ``ca.key`` readable by its owner only)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mlsandbox-control-plane-ca")])
    ca = (
        x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name, public_key=ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (pki / CA_FILE).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    key_file = pki / "ca.key"
    key_file.touch(mode=0o600)
    key_file.write_bytes(_pem_key(ca_key))


def issue_certificate(
    pki: Path,
    name: str,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> tuple[Path, Path]:
    """A certificate signed by the control plane's CA (in ``pki``): ``<name>.crt`` and ``<name>.key``.

    ``common_name`` and ``organizations`` are the user and groups the API server sees for a client
    certificate; ``ips`` and ``dns_names`` the names a serving certificate is valid for.
    """
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate((pki / CA_FILE).read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    builder = (
        x509.CertificateBuilder(
            subject_name=x509.Name(subject), issuer_name=ca.subject, public_key=key.public_key()
        )
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(ca.not_valid_after_utc)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if ips or dns_names:
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        sans += [x509.DNSName(d) for d in dns_names]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    crt, key_file = pki / f"{name}.crt", pki / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(_pem_key(key))
    return crt, key_file


def _write_serving_certificate(pki: Path, ips: tuple[str, ...] = (), dns_names: tuple[str, ...] = ()) -> None:
    """A CA of this control plane's own and the API server's serving certificate it signs, for
    127.0.0.1 and localhost (and ``ips``/``dns_names``): every client verifies the server against
    ``ca.crt``."""
    _write_ca(pki)
    issue_certificate(
        pki,
        "apiserver",
        "kube-apiserver",
        ips=("127.0.0.1", *ips),
        dns_names=("localhost", *dns_names),
        server=True,
    )


@dataclass
class ControlPlane:
    """A running control plane. Use :func:`start` (or the :func:`running` context manager)."""

    root: Path
    server: str
    token: str
    kubeconfig: Path
    audit_log: Path
    node_ip: str = "10.0.0.1"
    """The node's address (under kwok every pod has it too; with a real node, the API server
    advertises it)."""
    kwok: bool = True
    """Whether kwok plays the node (else a real kubelet is expected: :mod:`.node`)."""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def ca_cert(self) -> Path:
        """The CA that signed the API server's serving certificate (clients verify against it)."""
        return self.root / "pki" / CA_FILE

    def tls_context(self) -> ssl.SSLContext:
        """An SSL context that trusts this API server (for plain HTTP clients such as httpx)."""
        return ssl.create_default_context(cafile=str(self.ca_cert))

    # ---------------------------------------------------------------------------------------- clients

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for this API server (admin unless ``token`` is given)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_cert)
        cfg.api_key = {"authorization": f"Bearer {token or self.token}"}
        return client.ApiClient(cfg)

    def log(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def audit_events(self, since: float = 0.0, user: str | None = None) -> list[dict[str, Any]]:
        """API requests recorded by the API server's audit log (completed ones), oldest first."""
        import datetime as dt

        events: list[dict[str, Any]] = []
        if not self.audit_log.exists():
            return events
        for line in self.audit_log.read_text().splitlines():
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            if user is not None and event.get("user", {}).get("username") != user:
                continue
            stamp = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() >= since:
                events.append(event)
        return events

    # ---------------------------------------------------------------------------------------- lifecycle

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def stop(self) -> None:
        """Stop every process (kwok and the controllers first, etcd last) and remove the directory."""
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _spawn(cp: ControlPlane, name: str, args: list[str]) -> None:
    env = {**os.environ, MARKER_ENV: str(cp.root)}
    log = open(cp.root / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
    cp.procs[name] = subprocess.Popen(
        [str(binary(name)), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    log.close()


def _wait(cp: ControlPlane, name: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = cp.procs[name]
        if proc.poll() is not None:
            raise BackendError(f"{name} exited with {proc.returncode}:\n{cp.log(name)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise BackendError(f"{name} not ready after {timeout:.0f} s:\n{cp.log(name)}")


def _kubeconfig(server: str, token: str, ca_cert: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "mlsandbox", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": "mlsandbox", "context": {"cluster": "mlsandbox", "user": ADMIN_USER}}],
        "current-context": "mlsandbox",
    }


def start(
    *,
    extra_tokens: dict[str, tuple[str, tuple[str, ...]]] | None = None,
    node_ip: str | None = None,
    kwok: bool = True,
    timeout: float = 120.0,
) -> ControlPlane:
    """Start etcd, the API server, the controllers, the scheduler and kwok with one Ready node.

    ``extra_tokens`` maps bearer tokens to (user, groups) besides the admin's (``system:masters``).
    ``node_ip`` is the node's (and so every pod's) address, by default :func:`host_address`.
    ``kwok=False``: no kwok and no node; ready for a real kubelet (:func:`mlsandbox.backends.kube.node.start`).
    Raises :class:`MissingToolError` when a binary is missing, :class:`BackendError` with the component's
    log tail when one does not come up (everything started is stopped again).
    """
    for name in BINARIES:
        if kwok or name != "kwok":
            binary(name)
    base = paths.home() / "controlplanes"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="cp-", dir=base))
    (root / "owner").write_text(
        json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time()})
    )
    pki = root / "pki"
    pki.mkdir()
    node_ip = node_ip or host_address()
    _write_service_account_keys(pki)
    if kwok:
        _write_serving_certificate(pki)
    else:
        # In-cluster clients reach the API server at the `kubernetes` Service's address and names.
        _write_serving_certificate(
            pki,
            ips=(node_ip, SERVICE_IP),
            dns_names=(
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        issue_certificate(
            pki,
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            organizations=("system:masters",),
            client=True,
        )
    token = secrets.token_hex(16)
    tokens = {token: (ADMIN_USER, ("system:masters",)), **(extra_tokens or {})}
    (root / "tokens.csv").write_text(
        "".join(f'{t},{user},{user},"{",".join(groups)}"\n' for t, (user, groups) in tokens.items())
    )
    (root / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    ports = {name: _free_port() for name in ("etcd", "peer", "apiserver", "kcm", "scheduler", "kwok")}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    cp = ControlPlane(
        root=root,
        server=server,
        token=token,
        kubeconfig=root / "kubeconfig",
        audit_log=root / "audit.log",
        node_ip=node_ip,
        kwok=kwok,
    )
    cp.kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, token, cp.ca_cert)))
    try:
        _start_processes(cp, ports, timeout)
    except BaseException:
        cp.stop()
        raise
    return cp


def _start_processes(cp: ControlPlane, ports: dict[str, int], timeout: float) -> None:
    root, pki = cp.root, cp.root / "pki"
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['peer']}"
    _spawn(
        cp,
        "etcd",
        [
            f"--data-dir={root / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=1073741824",
        ],
    )
    _wait(
        cp, "etcd", lambda: httpx.get(f"{etcd_url}/health", timeout=2).json().get("health") == "true", timeout
    )
    if cp.kwok:
        network = [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--authorization-mode=RBAC",
            # The loopback address cannot back the `kubernetes` Service: nothing in-cluster needs it here.
            "--endpoint-reconciler-type=none",
        ]
    else:
        network = [
            # Pods reach the API server through the `kubernetes` Service, which points at this address.
            "--bind-address=0.0.0.0",
            f"--advertise-address={cp.node_ip}",
            "--authorization-mode=Node,RBAC",
            # As on kind: node agents such as Chaos Mesh's chaos-daemon run privileged.
            "--allow-privileged=true",
            f"--client-ca-file={pki / CA_FILE}",
            # The node's hostname may resolve to 127.0.0.1: reach kubelets at their InternalIP.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / CA_FILE}",
        ]
    _spawn(
        cp,
        "kube-apiserver",
        [
            f"--etcd-servers={etcd_url}",
            *network,
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--token-auth-file={root / 'tokens.csv'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--audit-policy-file={root / 'audit-policy.yaml'}",
            f"--audit-log-path={cp.audit_log}",
            "--audit-log-format=json",
            "--profiling=false",
        ],
    )
    headers = {"Authorization": f"Bearer {cp.token}"}
    tls = cp.tls_context()
    _wait(
        cp,
        "kube-apiserver",
        lambda: httpx.get(f"{cp.server}/readyz", headers=headers, verify=tls, timeout=2).status_code == 200,
        timeout,
    )
    common = [f"--kubeconfig={cp.kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1"]
    if cp.kwok:
        # No kubelet reports node health here: the node lifecycle controller would evict everything.
        controllers = ["--controllers=*,-nodelifecycle,-nodeipam"]
    else:
        controllers = [
            "--allocate-node-cidrs",
            f"--cluster-cidr={CLUSTER_CIDR}",
            "--node-cidr-mask-size=24",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
        ]
    _spawn(
        cp,
        "kube-controller-manager",
        [
            *common,
            f"--secure-port={ports['kcm']}",
            *controllers,
            f"--service-account-private-key-file={pki / 'sa.key'}",
            # What pods' service account volumes carry as ca.crt (the kube-root-ca.crt ConfigMaps).
            f"--root-ca-file={pki / CA_FILE}",
            "--use-service-account-credentials=false",
            "--concurrent-job-syncs=5",
        ],
    )
    _spawn(cp, "kube-scheduler", [*common, f"--secure-port={ports['scheduler']}"])
    if not cp.kwok:
        for name in ("kube-controller-manager", "kube-scheduler"):
            _wait(cp, name, lambda: True, 5)
        _wait(cp, "kube-controller-manager", _default_service_account(cp), timeout)
        return
    (root / "kwok.yaml").write_text(yaml.safe_dump_all(STAGES))
    _spawn(
        cp,
        "kwok",
        [
            f"--kubeconfig={cp.kubeconfig}",
            f"--config={root / 'kwok.yaml'}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--node-ip={cp.node_ip}",
            "--cidr=10.244.0.0/16",
        ],
    )
    from kubernetes import client

    api = cp.api_client()
    core = client.CoreV1Api(api)
    _create_node(core)

    def node_ready() -> bool:
        status = core.read_node(NODE_NAME).status
        conditions = (status.conditions if status is not None else None) or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    for name in ("kube-controller-manager", "kube-scheduler"):
        _wait(cp, name, lambda: True, 5)
    _wait(cp, "kwok", node_ready, timeout)
    # Admission gives a new node the not-ready taint; the node lifecycle controller (off: no kubelet
    # heartbeats here) would lift it once Ready. Lift it as that controller would.
    core.patch_node(NODE_NAME, {"spec": {"taints": None}})

    _wait(cp, "kube-controller-manager", _default_service_account(cp), timeout)


def _default_service_account(cp: ControlPlane) -> Any:
    """A check that the service account controller made the ``default`` namespace's account."""
    from kubernetes import client

    core = client.CoreV1Api(cp.api_client())

    def made() -> bool:
        core.read_namespaced_service_account("default", "default")
        return True

    return made


def _create_node(core: Any) -> None:
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }
    core.create_node(body)
    core.patch_node_status(NODE_NAME, {"status": {"capacity": capacity, "allocatable": capacity}})


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[ControlPlane]:
    cp = start(**kwargs)
    try:
        yield cp
    finally:
        cp.stop()


# ------------------------------------------------------------------------------------------- CRDs


def chaos_mesh_crds(kinds: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """CustomResourceDefinitions for the Chaos Mesh kinds we create (group ``chaos-mesh.org``).

    Their specs are open (``x-kubernetes-preserve-unknown-fields``): the API server stores what we send
    as Chaos Mesh's own would; strict validation of the same objects against Chaos Mesh's schemas is done
    offline by kubeconform (:mod:`.schemas`).
    """
    kinds = kinds or ("PodChaos", "NetworkChaos", "StressChaos", "HTTPChaos", "IOChaos", "TimeChaos")
    crds = []
    for kind in kinds:
        plural = kind.lower()
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.chaos-mesh.org"},
                "spec": {
                    "group": "chaos-mesh.org",
                    "scope": "Namespaced",
                    "names": {"kind": kind, "plural": plural, "singular": plural, "listKind": f"{kind}List"},
                    "versions": [
                        {
                            "name": "v1alpha1",
                            "served": True,
                            "storage": True,
                            "subresources": {"status": {}},
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "properties": {
                                        "spec": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                        "status": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                    },
                                }
                            },
                        }
                    ],
                },
            }
        )
    return crds


def wait_established(api_client: Any, names: list[str], timeout: float = 30.0) -> None:
    """Wait until the API server serves the CRDs called ``names``."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api_client)
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            status = ext.read_custom_resource_definition(name).status
            conditions = (status.conditions if status is not None else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                pending.discard(name)
        if pending:
            time.sleep(0.1)
    if pending:
        raise BackendError(f"CRDs not established after {timeout:.0f} s: {', '.join(sorted(pending))}")


# --------------------------------------------------------------------------------------- garbage


def collect_garbage() -> list[str]:
    """Stop control planes whose owner process is gone (a crashed test run); one line per removal.

    Collect the real nodes of dead owners first (:func:`mlsandbox.backends.kube.node.collect_garbage`:
    a node sits on its control plane)."""
    lines: list[str] = []
    base = paths.home() / "controlplanes"
    if not base.is_dir():
        return lines
    for root in sorted(base.iterdir()):
        if not root.is_dir() or _owner_alive(root):
            continue
        stopped = stop_root(root, grace=0.0)
        lines.append(f"control plane {root.name}: owner gone; stopped {stopped} process(es), removed it")
    return lines


STOP_ORDER = ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")


def stop_root(root: Path, grace: float = 10.0) -> int:
    """Stop the control plane whose directory is ``root`` from any process (its components are found by
    their marker), the controllers first and etcd last, and remove the directory; processes stopped.
    ``grace=0`` kills at once."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            if proc.environ().get(MARKER_ENV) == str(root):
                found.setdefault(proc.name(), []).append(proc)
    stopped = 0
    names = [*STOP_ORDER, *(n for n in found if n not in STOP_ORDER)]
    for name in names:
        for proc in found.get(name, []):
            with contextlib.suppress(psutil.Error, OSError):
                if grace > 0:
                    proc.terminate()
                    try:
                        proc.wait(grace)
                    except psutil.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
                else:
                    proc.kill()
                stopped += 1
    shutil.rmtree(root, ignore_errors=True)
    return stopped


def _owner_alive(root: Path) -> bool:
    try:
        owner = json.loads((root / "owner").read_text())
        proc = psutil.Process(int(owner["pid"]))
        return abs(proc.create_time() - float(owner["create_time"])) < 1.0
    except (OSError, ValueError, KeyError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False
