"""What a real node (:mod:`.node`) writes and applies: the configuration of containerd, the CNI plugins, the
kubelet and kube-proxy, the kubeconfigs of its components, kube-router's role and CoreDNS. Pure builders
of text and plain dicts, and the node's network layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .controlplane import CLUSTER_CIDR

NODE_NAME = "mlsandbox-node"
POD_CIDR = "10.244.0.0/24"
"""The node's pod addresses: the first /24 the controller manager hands out of :data:`CLUSTER_CIDR`."""
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
BRIDGE = "mlsnode0"
CNI_NETWORK = "mlsandbox-node"
CNI_BIN = Path("/usr/lib/cni")
CGROUP_ROOT = "mlsandbox-node"
"""The kubelet's cgroup root: the node's pods live under ``/mlsandbox-node`` in every hierarchy."""
KUBE_ROUTER_USER = "mlsandbox:kube-router"


def kubeconfig(server: str, ca_cert: Path, user: str, crt: Path, key: Path) -> dict[str, Any]:
    """A kubeconfig that authenticates ``user`` with a client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "mlsandbox", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "mlsandbox", "context": {"cluster": "mlsandbox", "user": user}}],
        "current-context": "mlsandbox",
    }


def containerd_config(
    *, root: Path, state: Path, socket: Path, sandbox_image: str, cni_conf_dir: Path
) -> str:
    """containerd's configuration (version 2, containerd 1.6): its own root, state and socket."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
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
  conf_dir = "{cni_conf_dir}"
  max_conf_num = 1
"""


def cni_conflist(ipam_dir: Path) -> dict[str, Any]:
    """The pods' network: a bridge with host-local addresses (masqueraded out) and host ports."""
    return {
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
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(
    *, ip: str, port: int, healthz_port: int, socket: Path, pki: Path, ca_file: str, pod_logs: Path
) -> dict[str, Any]:
    """The kubelet's configuration: cgroup v1 through cgroupfs, certificates from the control plane's CA
    (``pki``), the cluster's DNS, and no image garbage collection (nothing can be pulled again)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(pod_logs),
        "failSwapOn": False,
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


def kube_proxy_config(
    *, node_name: str, kubeconfig: Path, healthz_port: int, metrics_port: int
) -> dict[str, Any]:
    """kube-proxy in iptables mode, leaving the machine's conntrack settings and 127.0.0.1 alone."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "clusterCIDR": CLUSTER_CIDR,
        # NodePorts on the node's address only (not 127.0.0.1: that needs route_localnet).
        "nodePortAddresses": ["primary"],
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }


def kube_router_rbac() -> list[dict[str, Any]]:
    """What kube-router (firewall only) reads, granted to its client certificate's user."""
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
