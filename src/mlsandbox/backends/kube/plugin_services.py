"""Services added by plug-ins (entry points ``mlsandbox.services``, a :class:`~mlsandbox.plugins.ServiceSpec`
each), run by the kube backend as pods of the sandbox's namespace, as the local backend runs them as
processes of the sandbox (:mod:`mlsandbox.backends.local.plugin_services`).

- **The plug-in's code.** The client packs the package of the entry point's module (the whole top-level
  package, with the distribution's metadata) into a tar in the sandbox's MinIO (``mlsandbox-plugins/<digest>/
  plugin.tar``, content-addressed, so an unchanged plug-in is uploaded once). No image is built: the pod
  runs the gateway image, which carries mlsandbox (what a plug-in imports), and an init container
  unpacks the archive into an ``emptyDir`` on ``PYTHONPATH``, as a job's named environment is unpacked
  (:data:`~mlsandbox.backends.kube.manifests.ENV_FETCH`). A plug-in that declares requirements of its own
  is refused (:class:`~mlsandbox.errors.Unsupported` ``plugin_services.requirements``): only its
  package travels.
- **The command.** The spec's placeholders are filled for the pod: ``{python}`` the image's interpreter,
  ``{port}`` the container port :data:`PLUGIN_PORT`, ``{dir}`` a writable ``emptyDir`` of its own,
  ``{sandbox}`` the sandbox's name, ``{s3_url}``/``{mlflow_url}``/``{prefect_api_url}`` the in-cluster
  endpoints (the S3 keys come from the sandbox's Secret, as for jobs). The pod has the restricted security
  of every workload pod.
- **Health.** With a ``health_url``, the pod's readiness probe asks it from inside the pod (its loopback
  address, where a plug-in may listen), so a Ready pod is a healthy service; without one, a running pod
  is. :meth:`KubePluginServices.ensure` applies the Deployment and waits for a Ready pod within the spec's
  ``start_timeout_s``; a pod that exits or stays unready is a
  :class:`~mlsandbox.errors.ServiceStartError` with its log tail, and its Deployment is deleted.
- **Its address.** :meth:`KubePluginServices.url` is the health URL (or the base URL) on a port-forward
  of this client (the plug-in's port is behind no Service, as the local one listens on loopback only); it
  lives as long as the :class:`KubePluginServices` object.
- ``mlsandbox up --backend kube`` starts the ``start: up`` ones (a failure is a warning, never a failed
  ``up``); ``mlsandbox status --backend kube`` lists them; ``down`` deletes them, and so does the
  namespace's deletion with its Sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import tarfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mlsandbox import plugins
from mlsandbox.errors import NotRunningError, ServiceStartError, Unsupported
from mlsandbox.plugins import ServiceSpec

from . import manifests as M
from .cluster import ApiRefused, Cluster
from .control_listener import running_pod
from .portforward import PortForwarder

BACKEND = "kube"
PLUGIN_BUCKET = "mlsandbox-plugins"
PLUGIN_DIR = "/opt/mlsandbox-plugin"
WORK_DIR = "/work"
PLUGIN_PORT = 8080
COMPONENT = "plugin-service"
SERVICE_LABEL = "mlsandbox.dev/plugin-service"
DEPLOYMENT_API = ("apps/v1", "Deployment")
CPUS = 0.5
MEMORY_MB = 512
LOG_TAIL_LINES = 20
REQUIREMENTS_REASON = (
    "a plug-in service on kube runs the plug-in's own package in the gateway image; a plug-in that "
    "declares requirements of its own would need them installed there"
)
RESERVED = frozenset({"minio", "mlflow", "prefect-server", "prefect-worker", "operator", "gateway"})


def deployment_name(name: str) -> str:
    return f"plugin-{name}"


class PluginArchive:
    """The package of a plug-in service's entry point, as one tar (bytes) and its content digest."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.digest = hashlib.sha256(data).hexdigest()[:24]

    @property
    def key(self) -> str:
        return f"{self.digest}/plugin.tar"


def _entry_point(name: str) -> importlib.metadata.EntryPoint:
    for ep in importlib.metadata.entry_points(group="mlsandbox.services"):
        if ep.name == name:
            return ep
    raise ValueError(f"no installed plug-in declares the service {name!r}")


def pack_plugin(name: str) -> PluginArchive:
    """The tar of the package holding service ``name``'s entry point (its top-level package, without
    byte-code caches) and of its distribution's metadata directory; :class:`Unsupported` when the
    distribution requires other packages."""
    ep = _entry_point(name)
    dist = ep.dist
    requires = (dist.requires or []) if dist is not None else []
    own = [
        r for r in requires if "extra ==" not in r and not r.lower().replace("_", "-").startswith("mlsandbox")
    ]
    if own:
        raise Unsupported(
            "plugin_services.requirements", BACKEND, f"{REQUIREMENTS_REASON} ({', '.join(own)})"
        )
    root = ep.module.split(".")[0]
    spec = importlib.util.find_spec(root)
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        raise ValueError(f"plug-in service {name!r}: its module {root!r} cannot be found")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                _add_tree(tar, Path(location), root)
        else:
            assert spec.origin is not None
            _add_file(tar, Path(spec.origin), Path(spec.origin).name)
        meta = getattr(dist, "_path", None)
        if isinstance(meta, Path) and meta.is_dir():
            _add_tree(tar, meta, meta.name)
    return PluginArchive(buf.getvalue())


def _add_tree(tar: tarfile.TarFile, top: Path, arcname: str) -> None:
    for path in sorted(top.rglob("*")):
        if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
            continue
        _add_file(tar, path, f"{arcname}/{path.relative_to(top).as_posix()}")


def _add_file(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    """Add ``path`` with fixed owner and times (the same files make the same archive, the same digest)."""
    info = tarfile.TarInfo(arcname)
    data = path.read_bytes()
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def render_for_pod(spec: ServiceSpec, *, sandbox: str, endpoints: Any) -> ServiceSpec:
    """The spec with its placeholders filled in for the pod (see the module docstring)."""
    return spec.render(
        {
            "python": "python",
            "port": str(PLUGIN_PORT),
            "dir": WORK_DIR,
            "sandbox": sandbox,
            "s3_url": endpoints.s3_url,
            "mlflow_url": endpoints.mlflow_url,
            "prefect_api_url": endpoints.prefect_api_url,
        }
    )


def health_probe(url: str) -> dict[str, Any]:
    """A readiness probe asking ``url`` from inside the pod (healthy below status 500, as on local)."""
    program = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        "    urllib.request.urlopen(sys.argv[1], timeout=4)\n"
        "except urllib.error.HTTPError as e:\n"
        "    sys.exit(e.code >= 500)\n"
        "except Exception:\n"
        "    sys.exit(1)\n"
    )
    return {
        "exec": {"command": ["python", "-I", "-c", program, url]},
        "periodSeconds": 5,
        "timeoutSeconds": 5,
        "failureThreshold": 2,
    }


def plugin_deployment(
    name: str,
    spec: ServiceSpec,
    archive_key: str,
    *,
    namespace: str,
    sandbox: str,
    image: str,
    endpoints: Any,
    s3_secret: str,
    image_pull_policy: str = "IfNotPresent",
) -> M.Manifest:
    """The one-replica Deployment running plug-in service ``name`` (``spec`` not rendered yet)."""
    rendered = render_for_pod(spec, sandbox=sandbox, endpoints=endpoints)
    labels = {
        "app.kubernetes.io/part-of": "mlsandbox",
        M.COMPONENT_LABEL: COMPONENT,
        M.SANDBOX_LABEL: M.check_labels({M.SANDBOX_LABEL: sandbox})[M.SANDBOX_LABEL],
        SERVICE_LABEL: name,
    }
    env = M.container_env(endpoints, CPUS, s3_secret, {"PYTHONPATH": PLUGIN_DIR, **rendered.env})
    resources = {"cpu": M.cpu_quantity(CPUS), "memory": M.memory_quantity(MEMORY_MB)}
    init = {
        "name": "plugin",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["python", "-I", "-c", M.ENV_FETCH, PLUGIN_BUCKET, archive_key, PLUGIN_DIR],
        "env": M.container_env(endpoints, CPUS, s3_secret, {}),
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": [{"name": "plugin", "mountPath": PLUGIN_DIR}],
        "securityContext": M.container_security(),
    }
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": list(rendered.argv),
        "env": env,
        "workingDir": WORK_DIR,
        "ports": [{"name": "http", "containerPort": PLUGIN_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [
            {"name": "plugin", "mountPath": PLUGIN_DIR, "readOnly": True},
            {"name": "work", "mountPath": WORK_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": M.container_security(),
    }
    if rendered.health_url:
        container["readinessProbe"] = health_probe(rendered.health_url)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(name),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"mlsandbox.dev/plugin-archive": archive_key},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {M.SANDBOX_LABEL: labels[M.SANDBOX_LABEL], SERVICE_LABEL: name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": M.pod_security(),
                    "initContainers": [init],
                    "containers": [container],
                    "volumes": [
                        {"name": "plugin", "emptyDir": {"sizeLimit": "256Mi"}},
                        {"name": "work", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
                    ],
                },
            },
        },
    }


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _exited(pod: Mapping[str, Any]) -> str | None:
    """Why the pod's service is not coming up without a change (exited, crash loop, no image); None."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        term = state.get("terminated") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        if term and term.get("exitCode", 0) != 0:
            return f"{cs.get('name')} exited (code {term.get('exitCode')})"
        if waiting in ("CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "CreateContainerError"):
            code = f" (code {last.get('exitCode')})" if last else ""
            return f"{cs.get('name')} {waiting}{code}"
    return None


class KubePluginServices:
    """The plug-in services of one kube sandbox (see the module docstring); ``runtime`` is its
    :class:`~mlsandbox.backends.kube.runtime.KubeRuntime`."""

    def __init__(self, runtime: Any, specs: Mapping[str, ServiceSpec] | None = None, *, image: str) -> None:
        self.runtime = runtime
        self.cluster: Cluster = runtime.cluster
        self.namespace: str = runtime.namespace
        self.sandbox: str = runtime.sandbox_name
        self.image = image
        self.specs = dict(plugins.services() if specs is None else specs)
        self._lock = threading.Lock()
        self._forwards: dict[str, PortForwarder] = {}

    def spec(self, name: str) -> ServiceSpec:
        if name in RESERVED:
            raise ValueError(f"plug-in service {name!r} takes the name of a built-in service")
        if name not in self.specs:
            known = ", ".join(self.specs) or "none installed"
            raise ValueError(f"unknown plug-in service {name!r}; plug-in services: {known}")
        return self.specs[name]

    # ---------------------------------------------------------------------------------- lifecycle

    def pods(self, name: str) -> list[dict[str, Any]]:
        selector = f"{M.SANDBOX_LABEL}={self.sandbox},{SERVICE_LABEL}={name}"
        return self.cluster.list("v1", "Pod", self.namespace, selector)

    def is_running(self, name: str) -> bool:
        return running_pod(self.pods(name)) is not None

    def healthy(self, name: str) -> bool:
        """A pod of it is Ready (its readiness probe asks the health URL from inside the pod)."""
        return any(_ready(p) and not p["metadata"].get("deletionTimestamp") for p in self.pods(name))

    def ensure(self, name: str, timeout: float | None = None) -> str:
        """Start plug-in service ``name`` unless a healthy pod of it runs; wait until one is Ready; its
        URL (:meth:`url`). :class:`ServiceStartError` (with its log tail) when it does not come up, and
        its Deployment is deleted then."""
        spec = self.spec(name)
        if not self.healthy(name):
            archive = pack_plugin(name)
            self._upload(archive)
            manifest = plugin_deployment(
                name,
                spec,
                archive.key,
                namespace=self.namespace,
                sandbox=self.sandbox,
                image=self.image,
                endpoints=self.runtime.workload_endpoints,
                s3_secret=M.S3_SECRET_NAME,
            )
            self.runtime._secret.ensure()
            try:
                self.cluster.apply(manifest)
            except ApiRefused as exc:
                raise ServiceStartError(f"the cluster refused plug-in service {name!r}: {exc}") from None
            self._wait_ready(name, timeout or spec.start_timeout_s)
        return self.url(name)

    def url(self, name: str) -> str:
        """The service's health URL (or its base URL) on this client's port-forward to its pod."""
        spec = self.spec(name)
        if not self.is_running(name):
            raise NotRunningError(f"plug-in service {name!r} is not running in sandbox {self.sandbox!r}")
        with self._lock:
            forward = self._forwards.get(name)
            if forward is None:
                forward = self._forwards[name] = PortForwarder(
                    self.cluster.api_client,
                    self.namespace,
                    lambda: running_pod(self.pods(name)),
                    PLUGIN_PORT,
                )
        host, port = forward.address
        path = urlsplit(spec.health_url).path if spec.health_url else ""
        return f"http://{host}:{port}{path}"

    def stop(self, name: str) -> bool:
        """Delete its Deployment (and its pods); True when it had one."""
        with self._lock:
            forward = self._forwards.pop(name, None)
        if forward is not None:
            forward.close()
        return self.cluster.delete(*DEPLOYMENT_API, deployment_name(name), self.namespace)

    def start_up(self) -> dict[str, str]:
        """Start the ``start: up`` services not running yet: ``{name: "running" | <why it failed>}``; a
        failure is logged as a warning, never raised."""
        return plugins.start_up_services(self.specs, self.ensure)

    def deployed(self) -> list[dict[str, Any]]:
        """The plug-in services' Deployments in the sandbox's namespace."""
        selector = f"{M.SANDBOX_LABEL}={self.sandbox},{M.COMPONENT_LABEL}={COMPONENT}"
        return self.cluster.list(*DEPLOYMENT_API, self.namespace, selector)

    def cleanup(self) -> int:
        """Delete every plug-in service of the sandbox; how many."""
        deps = self.deployed()
        for dep in deps:
            self.cluster.delete(*DEPLOYMENT_API, dep["metadata"]["name"], self.namespace)
        self.close()
        return len(deps)

    def close(self) -> None:
        """Stop this client's port-forwards (the services keep running)."""
        with self._lock:
            forwards, self._forwards = list(self._forwards.values()), {}
        for forward in forwards:
            forward.close()

    # ------------------------------------------------------------------------------------ helpers

    def _upload(self, archive: PluginArchive) -> None:
        store = self.runtime.object_store
        store.create_bucket(PLUGIN_BUCKET)
        if not store.object_exists(PLUGIN_BUCKET, archive.key):  # content-addressed: uploaded once
            store.put_object(PLUGIN_BUCKET, archive.key, archive.data)

    def _wait_ready(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            pods = [p for p in self.pods(name) if not p["metadata"].get("deletionTimestamp")]
            if any(_ready(p) for p in pods):
                return
            why = next((w for p in pods if (w := _exited(p)) is not None), None)
            if why is not None or time.monotonic() > deadline:
                tail = self._tail(pods) or "(empty)"
                with contextlib.suppress(Exception):
                    self.stop(name)
                what = why or f"not healthy within {timeout:.0f} s"
                raise ServiceStartError(
                    f"plug-in service {name!r} of sandbox {self.sandbox!r}: {what}.\nLast lines of its log:\n{tail}"
                )
            time.sleep(0.5)

    def _tail(self, pods: list[dict[str, Any]]) -> str:
        for pod in pods:
            for container in (COMPONENT, "plugin"):
                with contextlib.suppress(Exception):
                    text = self.cluster.pod_log(
                        pod["metadata"]["name"], self.namespace, tail=LOG_TAIL_LINES, container=container
                    )
                    if text.strip():
                        return text.rstrip()
        return ""


__all__ = [
    "PLUGIN_BUCKET",
    "KubePluginServices",
    "PluginArchive",
    "pack_plugin",
    "plugin_deployment",
    "render_for_pod",
]
