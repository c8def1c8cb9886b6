"""Pure builders of the Kubernetes objects one sandbox owns (plain dicts, ready for server-side apply).

A sandbox ``<ns>/<name>`` gets its own namespace (:func:`sandbox_namespace_name`) holding:

- a ResourceQuota from the budget (CPU and memory requests and limits, pods, no NodePort/LoadBalancer);
- a LimitRange: defaults for containers that set nothing, and no container above the whole budget;
- NetworkPolicies: everything denied, then traffic inside the namespace, DNS, and traffic to and from
  the control namespace (the gateway, and the shared services the chart installs there) allowed: a
  sandbox can reach neither other sandboxes nor the outside world;
- for the agent (unless ``agentAccess.mode`` is ``none``): a ServiceAccount and a Role + RoleBinding
  limited to that namespace (``read``: get/list/watch and logs; ``operate``: also Jobs and scaling);
- Services ``minio``, ``mlflow`` and ``prefect``: aliases (``ExternalName``) of the shared services the
  chart runs in the control namespace, so the sandbox's Jobs and servers use the same short names in
  every sandbox.

Per-episode objects (Jobs, model servers, chaos objects) carry the episode label :data:`EPISODE_LABEL`
(or, for chaos objects, :data:`FAULT_LABEL`); a warm reset (:data:`EPISODE_KINDS`) deletes them and keeps
everything above.

The namespace is cluster-scoped and cannot be owned by a namespaced Sandbox, so deletion is driven by
the operator's finalizer: deleting the namespace removes everything in it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .model import SandboxSpec

SANDBOX_LABEL = "mlsandbox.dev/sandbox"
SANDBOX_NAMESPACE_LABEL = "mlsandbox.dev/sandbox-namespace"
EPISODE_LABEL = "mlsandbox.world.episode"
FAULT_LABEL = "mlsandbox.dev/fault"
# What a warm reset deletes: (apiVersion, kind, label selector). Chaos kinds are skipped when their CRDs
# are not installed.
EPISODE_KINDS: tuple[tuple[str, str, str], ...] = (
    ("batch/v1", "Job", EPISODE_LABEL),
    ("apps/v1", "Deployment", EPISODE_LABEL),
    ("v1", "Service", EPISODE_LABEL),
    ("v1", "ConfigMap", EPISODE_LABEL),
    ("v1", "Pod", EPISODE_LABEL),
    *(
        ("chaos-mesh.org/v1alpha1", kind, FAULT_LABEL)
        for kind in ("PodChaos", "NetworkChaos", "StressChaos", "HTTPChaos", "IOChaos", "TimeChaos")
    ),
)
# Shared services the chart runs in the control namespace: alias in the sandbox -> (chart component, port).
SHARED_SERVICES: dict[str, tuple[str, int]] = {
    "minio": ("minio", 9000),
    "mlflow": ("mlflow", 5000),
    "prefect": ("prefect-server", 4200),
}
NOT_SCRIPTS: dict[str, Any] = {"key": "mlsandbox.dev/workload", "operator": "NotIn", "values": ["script"]}
"""Pod selector of the broad allows: every pod but the agent's workspace scripts, whose own policy
(``workspace-scripts``, made by the kube backend) allows DNS, MinIO and MLflow only; network policies add
up, so a broad allow that selected them would open the rest to them."""
SERVING_COMPONENTS = ("model-server", "feature-service")
"""Component labels of the pods the gateway sends requests to (through the API server's proxy)."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "mlsandbox-operator", "app.kubernetes.io/part-of": "mlsandbox"}

Manifest = dict[str, Any]

# What a container gets when it declares nothing (small: the services declare their own).
DEFAULT_REQUEST = {"cpu": "100m", "memory": "128Mi"}
DEFAULT_LIMIT = {"cpu": "500m", "memory": "512Mi"}

_READ_RESOURCES = {
    "": [
        "pods",
        "pods/log",
        "services",
        "endpoints",
        "configmaps",
        "events",
        "resourcequotas",
        "limitranges",
    ],
    "apps": ["deployments", "replicasets", "statefulsets"],
    "batch": ["jobs"],
}


def sandbox_namespace_name(namespace: str, name: str) -> str:
    """``sbx-<namespace>-<name>``; shortened with a hash when longer than a namespace name may be (63)."""
    full = f"sbx-{namespace}-{name}"
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:8]
    return f"{full[:54].rstrip('-')}-{digest}"


def labels(namespace: str, name: str) -> dict[str, str]:
    return {**MANAGED_BY, SANDBOX_LABEL: name, SANDBOX_NAMESPACE_LABEL: namespace}


def _meta(name: str, namespace: str | None, sandbox: tuple[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(*sandbox)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def namespace(target: str, sandbox: tuple[str, str], spec: SandboxSpec) -> Manifest:
    """The sandbox's namespace; Pod Security ``baseline`` enforced, ``restricted`` warned about."""
    meta = _meta(target, None, sandbox)
    meta["labels"].update(
        {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/warn": "restricted",
            "mlsandbox.dev/scenario": spec.scenario,
        }
    )
    meta["annotations"] = {"mlsandbox.dev/seed": str(spec.seed)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_quota(target: str, sandbox: tuple[str, str], spec: SandboxSpec) -> Manifest:
    b = spec.budget
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta("budget", target, sandbox),
        "spec": {
            "hard": {
                "requests.cpu": b.cpu,
                "limits.cpu": b.cpu,
                "requests.memory": b.memory,
                "limits.memory": b.memory,
                "pods": str(b.max_pods),
                "services.nodeports": "0",
                "services.loadbalancers": "0",
                "persistentvolumeclaims": "4",
            }
        },
    }


def limit_range(target: str, sandbox: tuple[str, str], spec: SandboxSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta("defaults", target, sandbox),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": dict(DEFAULT_LIMIT),
                    "defaultRequest": dict(DEFAULT_REQUEST),
                    "max": {"cpu": spec.budget.cpu, "memory": spec.budget.memory},
                }
            ]
        },
    }


def network_policies(target: str, sandbox: tuple[str, str], control_namespace: str) -> list[Manifest]:
    """Deny all, then allow: within the namespace, DNS to kube-system, to and from the control namespace
    (every pod but the workspace scripts: :data:`NOT_SCRIPTS`), and the serving pods' ``http`` port from
    the API server's proxy."""

    def policy(name: str, spec: dict[str, Any]) -> Manifest:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(name, target, sandbox),
            "spec": {"podSelector": {}, **spec},
        }

    own = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": target}}}
    control = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": control_namespace}}}
    dns = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    serving = policy(
        "allow-serving-proxy",
        {
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": "http"}]}
            ],
        },
    )
    serving["spec"]["podSelector"] = {
        "matchExpressions": [
            {"key": "app.kubernetes.io/component", "operator": "In", "values": list(SERVING_COMPONENTS)}
        ]
    }
    same = policy(
        "allow-same-namespace",
        {"policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [own]}], "egress": [{"to": [own]}]},
    )
    to_control = policy(
        "allow-control-plane",
        {
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [control]}],
            "egress": [{"to": [control]}],
        },
    )
    for broad in (same, to_control):
        broad["spec"]["podSelector"] = {
            "matchExpressions": [dict(NOT_SCRIPTS, values=list(NOT_SCRIPTS["values"]))]
        }
    return [
        policy("default-deny", {"policyTypes": ["Ingress", "Egress"]}),
        same,
        policy("allow-dns", {"policyTypes": ["Egress"], "egress": [dns]}),
        # The gateway reaches the model servers and the feature service through the API server's proxy,
        # whose requests come from the control-plane node's address, which no selector names: their
        # "http" port (and only it) accepts connections from any address.
        serving,
        to_control,
    ]


def agent_rules(mode: str) -> list[dict[str, Any]]:
    """The agent's permissions in its namespace (nothing on secrets, RBAC, quotas' spec or the namespace)."""
    if mode == "none":
        return []
    read = ["get", "list", "watch"]
    rules = [
        {"apiGroups": [group], "resources": res, "verbs": read} for group, res in _READ_RESOURCES.items()
    ]
    if mode == "operate":
        rules += [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
            {
                "apiGroups": ["apps"],
                "resources": ["deployments", "deployments/scale"],
                "verbs": ["patch", "update"],
            },
        ]
    return rules


def agent_rbac(target: str, sandbox: tuple[str, str], spec: SandboxSpec) -> list[Manifest]:
    """ServiceAccount, Role and RoleBinding of the agent; empty when ``agentAccess.mode`` is ``none``."""
    access = spec.agent_access
    if access.mode == "none":
        return []
    account = access.service_account_name
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(account, target, sandbox),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(f"{account}-{access.mode}", target, sandbox),
            "rules": agent_rules(access.mode),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(account, target, sandbox),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{account}-{access.mode}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": target}],
        },
    ]


def service_aliases(
    target: str, sandbox: tuple[str, str], control_namespace: str, release: str = "mlsandbox"
) -> list[Manifest]:
    """``ExternalName`` Services naming the shared services of the control namespace inside the sandbox."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(alias, target, sandbox),
            "spec": {
                "type": "ExternalName",
                "externalName": f"{release}-{component}.{control_namespace}.svc.cluster.local",
                "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            },
        }
        for alias, (component, port) in SHARED_SERVICES.items()
    ]


FLOW_WORKER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/log", "pods/status", "events"],
        "verbs": ["get", "list", "watch"],
    },
]
"""What the chart's Prefect worker may do in a sandbox's namespace: run flow runs there as Jobs."""


def flow_worker_rbac(
    target: str, sandbox: tuple[str, str], control_namespace: str, release: str = "mlsandbox"
) -> list[Manifest]:
    """A Role and RoleBinding letting the chart's Kubernetes work-pool worker (ServiceAccount
    ``<release>-prefect-worker`` of the control namespace) run the sandbox's flow runs as Jobs here."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta("prefect-worker", target, sandbox),
            "rules": FLOW_WORKER_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta("prefect-worker", target, sandbox),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "prefect-worker"},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": f"{release}-prefect-worker",
                    "namespace": control_namespace,
                }
            ],
        },
    ]


def sandbox_resources(
    namespace_: str, name: str, spec: SandboxSpec, control_namespace: str, release: str = "mlsandbox"
) -> list[Manifest]:
    """Everything one sandbox consists of, namespace first (the order to apply them in)."""
    target = sandbox_namespace_name(namespace_, name)
    sandbox = (namespace_, name)
    return [
        namespace(target, sandbox, spec),
        resource_quota(target, sandbox, spec),
        limit_range(target, sandbox, spec),
        *network_policies(target, sandbox, control_namespace),
        *agent_rbac(target, sandbox, spec),
        *flow_worker_rbac(target, sandbox, control_namespace, release),
        *service_aliases(target, sandbox, control_namespace, release),
    ]
