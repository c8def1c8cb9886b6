"""Kubernetes-native faults of the kube backend (no add-on needed): a change to one object each.

:class:`ScaleToZero`, :class:`WrongImage`, :class:`WrongServicePort`, :class:`ExhaustQuota`,
:class:`CordonNode`. :func:`inject_patch` builds the strategic-merge patch that makes the change *and*
records the original value on the object itself (annotation :data:`ORIGINAL_ANNOTATION`, JSON) with the
label :data:`NATIVE_FAULT_LABEL` = fault type, so a crashed run leaves a record that :func:`recover_all`
finds by label. Injecting twice keeps the first original; :func:`recover_patch` puts the original back
and removes the record, and is a no-op (None) on an object without one: recovery is idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from mlsandbox.backends.kube.cluster import Cluster

NATIVE_FAULT_LABEL = "mlsandbox.dev/native-fault"
ORIGINAL_ANNOTATION = "mlsandbox.dev/native-fault-original"
SANDBOX_ANNOTATION = "mlsandbox.dev/native-fault-sandbox"
MISSING_IMAGE = "registry.invalid/mlsandbox/missing:0"
WRONG_PORT = 1

Manifest = dict[str, Any]


@dataclass(frozen=True)
class NativeFault:
    """One change to one object; subclasses say which object, what to remember and what to set."""

    type: ClassVar[str]
    api_version: ClassVar[str]
    kind: ClassVar[str]
    name: str
    namespace: str | None

    def original(self, obj: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        raise NotImplementedError

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        raise NotImplementedError


def _containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [])


@dataclass(frozen=True)
class ScaleToZero(NativeFault):
    """A Deployment scaled to zero replicas (remembers its replica count)."""

    type: ClassVar[str] = "scale_to_zero"
    api_version: ClassVar[str] = "apps/v1"
    kind: ClassVar[str] = "Deployment"

    def original(self, obj: Mapping[str, Any]) -> Any:
        return {"replicas": (obj.get("spec") or {}).get("replicas", 1)}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        return {"spec": {"replicas": 0}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"replicas": int(original["replicas"])}}


@dataclass(frozen=True)
class WrongImage(NativeFault):
    """A Deployment's container set to an image that cannot be pulled (remembers the image)."""

    type: ClassVar[str] = "wrong_image"
    api_version: ClassVar[str] = "apps/v1"
    kind: ClassVar[str] = "Deployment"
    container: str | None = None
    image: str = MISSING_IMAGE

    def _container(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        containers = _containers(obj)
        for c in containers:
            if self.container is None or c.get("name") == self.container:
                return c
        raise ValueError(f"{self.kind} {self.name} has no container {self.container!r}")

    def original(self, obj: Mapping[str, Any]) -> Any:
        c = self._container(obj)
        return {"container": c["name"], "image": c["image"]}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        name = self._container(obj)["name"]
        return {"spec": {"template": {"spec": {"containers": [{"name": name, "image": self.image}]}}}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        containers = [{"name": original["container"], "image": original["image"]}]
        return {"spec": {"template": {"spec": {"containers": containers}}}}


@dataclass(frozen=True)
class WrongServicePort(NativeFault):
    """A Service whose ports all point at the wrong container port (remembers each targetPort)."""

    type: ClassVar[str] = "wrong_service_port"
    api_version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Service"
    target_port: int = WRONG_PORT

    def original(self, obj: Mapping[str, Any]) -> Any:
        ports = (obj.get("spec") or {}).get("ports") or []
        return {"ports": [{"port": p["port"], "targetPort": p.get("targetPort", p["port"])} for p in ports]}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        ports = (obj.get("spec") or {}).get("ports") or []
        return {"spec": {"ports": [{"port": p["port"], "targetPort": self.target_port} for p in ports]}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"ports": [dict(p) for p in original["ports"]]}}


@dataclass(frozen=True)
class ExhaustQuota(NativeFault):
    """A ResourceQuota whose every hard limit is set to what is used now: nothing more fits."""

    type: ClassVar[str] = "exhaust_quota"
    api_version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "ResourceQuota"

    def original(self, obj: Mapping[str, Any]) -> Any:
        return {"hard": dict((obj.get("spec") or {}).get("hard") or {})}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        hard = (obj.get("spec") or {}).get("hard") or {}
        used = (obj.get("status") or {}).get("used") or {}
        return {"spec": {"hard": {key: str(used.get(key, "0")) for key in hard}}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"hard": dict(original["hard"])}}


@dataclass(frozen=True)
class CordonNode(NativeFault):
    """A node marked unschedulable (remembers whether it already was)."""

    type: ClassVar[str] = "cordon_node"
    api_version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Node"
    namespace: str | None = None

    def original(self, obj: Mapping[str, Any]) -> Any:
        return {"unschedulable": bool((obj.get("spec") or {}).get("unschedulable", False))}

    def change(self, obj: Mapping[str, Any]) -> Manifest:
        return {"spec": {"unschedulable": True}}

    @classmethod
    def restore(cls, original: Any) -> Manifest:
        return {"spec": {"unschedulable": bool(original["unschedulable"])}}


NATIVE_FAULTS: dict[str, type[NativeFault]] = {
    f.type: f for f in (ScaleToZero, WrongImage, WrongServicePort, ExhaustQuota, CordonNode)
}


def _record(obj: Mapping[str, Any]) -> tuple[str | None, Any]:
    meta = obj.get("metadata") or {}
    kind = (meta.get("labels") or {}).get(NATIVE_FAULT_LABEL)
    raw = (meta.get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    return kind, (json.loads(raw) if raw else None)


def _deep_merge(a: Manifest, b: Mapping[str, Any]) -> Manifest:
    out = dict(a)
    for key, value in b.items():
        out[key] = (
            _deep_merge(out[key], value)
            if isinstance(value, Mapping) and isinstance(out.get(key), dict)
            else value
        )
    return out


def inject_patch(fault: NativeFault, obj: Mapping[str, Any], sandbox: str) -> Manifest:
    """The patch applying ``fault`` to ``obj`` and recording its original value on it. An object already
    carrying a record of this fault keeps that (first) original; :class:`ValueError` when it carries
    another fault's record (two native faults on one object are refused)."""
    kind, original = _record(obj)
    if kind is not None and kind != fault.type:
        raise ValueError(f"{fault.kind} {fault.name} already carries the {kind} fault; recover it first")
    if original is None:
        original = fault.original(obj)
    record = {
        "metadata": {
            "labels": {NATIVE_FAULT_LABEL: fault.type},
            "annotations": {
                ORIGINAL_ANNOTATION: json.dumps(original, sort_keys=True),
                SANDBOX_ANNOTATION: sandbox,
            },
        }
    }
    return _deep_merge(record, fault.change(obj))


def recover_patch(obj: Mapping[str, Any]) -> Manifest | None:
    """The patch putting back what the recorded fault changed and removing the record; None without one."""
    kind, original = _record(obj)
    if kind is None or kind not in NATIVE_FAULTS:
        return None
    erase = {
        "metadata": {
            "labels": {NATIVE_FAULT_LABEL: None},
            "annotations": {ORIGINAL_ANNOTATION: None, SANDBOX_ANNOTATION: None},
        }
    }
    if original is None:
        return erase
    restore = NATIVE_FAULTS[kind].restore(original)
    return _deep_merge(erase, restore)


def inject_native(cluster: Cluster, fault: NativeFault, sandbox: str) -> dict[str, Any]:
    """Apply ``fault`` (idempotent); :class:`KeyError` when its object does not exist."""
    obj = cluster.get(fault.api_version, fault.kind, fault.name, fault.namespace)
    if obj is None:
        raise KeyError(f"{fault.kind} {fault.name} not found")
    patched = cluster.patch(
        fault.api_version, fault.kind, fault.name, fault.namespace, inject_patch(fault, obj, sandbox)
    )
    return patched or obj


def recover_native(cluster: Cluster, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
    """Undo the fault recorded on an object; False when there was nothing to undo (or no object)."""
    obj = cluster.get(api_version, kind, name, namespace)
    patch = recover_patch(obj) if obj is not None else None
    if patch is None:
        return False
    cluster.patch(api_version, kind, name, namespace, patch)
    return True


def recover_all(cluster: Cluster, namespaces: list[str], sandbox: str | None = None) -> list[str]:
    """Undo every recorded native fault in ``namespaces`` and on nodes (only ``sandbox``'s when given)."""
    recovered: list[str] = []
    for fault_type in NATIVE_FAULTS.values():
        scopes: list[str | None] = [None] if fault_type.kind == "Node" else list(namespaces)
        for ns in scopes:
            for obj in cluster.list(fault_type.api_version, fault_type.kind, ns, selector=NATIVE_FAULT_LABEL):
                meta = obj["metadata"]
                if sandbox is not None and (meta.get("annotations") or {}).get(SANDBOX_ANNOTATION) not in (
                    None,
                    sandbox,
                ):
                    continue
                if recover_native(cluster, fault_type.api_version, fault_type.kind, meta["name"], ns):
                    recovered.append(f"{fault_type.kind}/{meta['name']}")
    return recovered
