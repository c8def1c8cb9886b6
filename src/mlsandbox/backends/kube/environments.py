"""Named Python environments on the kube backend: pinned packages unpacked into the job's pod.

An environment is the packages of a pinned requirement set (plus what every job needs,
:func:`~mlsandbox.backends.common.uv.base_requirements`), resolved and installed by uv on the client
for the workload image's interpreter (:data:`IMAGE_PYTHON` on Linux, the node's architecture:
``uv pip install --target --python-version --python-platform``), packed as one uncompressed tar and
stored in the sandbox's object store (:data:`~mlsandbox.backends.kube.manifests.ENV_BUCKET`,
``<key>/site.tar`` then ``<key>/info.json``, which marks it complete). No image is built and no
registry is needed: a job in the environment gets an init container that streams the archive into an
``emptyDir``, and its workload runs on those packages alone (``python -S`` and :func:`site.addsitedir`,
so the image's own site-packages stay out, as in a venv). Keys are content addresses: every sandbox
sharing the object store, and every later episode, reuses a built environment; the client keeps the
archive under ``$MLSANDBOX_HOME/kube-envs`` so that a new cluster uploads it again without resolving.

:meth:`KubeEnvironments.score` runs the production scorer (:mod:`mlsandbox.workloads.scorer`) as a Job in
the environment: the rows go through the object store and come back as probabilities.
Replicas and flow runs in a named environment stay refused (``serving.environment``,
``flows.environment``): they run the model-server and trainer images' own interpreters.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import platform
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mlsandbox import paths
from mlsandbox.backends.common.uv import base_requirements, dead_builds, normalise, uv_binary
from mlsandbox.backends.common.uv import install as uv_install
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.backends.protocols.environments import (
    DEFAULT_KEY,
    EnvironmentInfo,
    ModelScoreError,
)
from mlsandbox.errors import Unsupported

from . import manifests as M

if TYPE_CHECKING:
    from mlsandbox.backends.common.s3 import S3ObjectStore
    from mlsandbox.backends.protocols import JobStatus


class ScorerJobs(Protocol):
    """What runs the scorer: the sandbox's :class:`~mlsandbox.backends.kube.jobs.KubeJobs`."""

    def submit_module(self, spec: JobSpec, module: str) -> JobStatus: ...

    def get(self, job_id: str) -> JobStatus: ...

    def logs(self, job_id: str, tail: int = 50) -> str: ...

    def delete(self, job_id: str) -> bool: ...


BACKEND = "kube"
REASON = "a named environment needs the sandbox's object store, which this client has not"
UNSUPPORTED: dict[str, str] = {}
SERVING_REASON = "replicas run the model-server image"
"""Why ``serving.environment`` is refused (replicas of a named environment would need its image)."""
IMAGE_PYTHON = "3.11"
"""The Python of the workload images (Debian bookworm's): what environments are resolved for."""
MANYLINUX = "manylinux_2_36"
"""Debian bookworm's glibc (2.36): the newest wheels its interpreter can load."""
SCORE_TIMEOUT_S = 600.0
SCORE_CPUS = 1.0
SCORE_MEMORY_MB = 1024
_POLL_S = 1.0
_TERMINAL = {"succeeded", "failed", "cancelled"}
_BUILD_LOCK = threading.Lock()


def image_platform(machine: str | None = None) -> str:
    """uv's ``--python-platform`` for the node: its architecture, the image's glibc."""
    arch = (machine or platform.machine()).lower()
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
    return f"{arch}-{MANYLINUX}"


def env_key(requirements: list[str], target: str | None = None) -> str:
    """The content address of an environment of ``requirements`` (normalised) for the image."""
    blob = json.dumps(["kube", IMAGE_PYTHON, target or image_platform(), requirements, base_requirements()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def archive_dir() -> Path:
    """Where the client keeps built archives (``<key>.tar``, ``<key>.json``)."""
    return paths.home() / "kube-envs"


def installed_packages(site: Path) -> dict[str, str]:
    """Distribution name -> version of what uv installed in ``site`` (its ``*.dist-info``)."""
    found = {
        str(d.metadata["Name"]).lower().replace("_", "-"): d.version
        for d in importlib.metadata.distributions(path=[str(site)])
    }
    return dict(sorted(found.items()))


def build_archive(
    requirements: list[str], key: str, target: str | None = None
) -> tuple[Path, dict[str, Any]]:
    """Resolve and install ``requirements`` (normalised) for the image into a folder, pack it as
    ``<key>.tar`` under :func:`archive_dir` and return the archive and its info; cached by key."""
    root = archive_dir()
    tar_path, info_path = root / f"{key}.tar", root / f"{key}.json"
    if tar_path.is_file() and info_path.is_file():
        return tar_path, json.loads(info_path.read_text())
    root.mkdir(parents=True, exist_ok=True)
    uv = uv_binary()
    t0 = time.monotonic()
    site, tmp = root / f".{key}.{os.getpid()}.site", root / f".{key}.{os.getpid()}.tar"
    for stale in dead_builds(root, ".*.site"):  # half-made by a builder that died
        shutil.rmtree(stale, ignore_errors=True)
        stale.with_suffix(".tar").unlink(missing_ok=True)
    shutil.rmtree(site, ignore_errors=True)
    try:
        install = [uv, "pip", "install", "--quiet", "--target", str(site)]
        install += ["--python-version", IMAGE_PYTHON, "--python-platform", target or image_platform()]
        install += ["--compile-bytecode", *requirements, *base_requirements()]
        uv_install(install)
        packages = installed_packages(site)
        with tarfile.open(tmp, "w") as tar:
            for child in sorted(site.iterdir()):
                tar.add(child, arcname=child.name)
        info = {
            "key": key,
            "requirements": requirements,
            "packages": packages,
            "python": IMAGE_PYTHON,
            "platform": target or image_platform(),
            "bytes": tmp.stat().st_size,
            "build_s": round(time.monotonic() - t0, 1),
        }
        tmp.rename(tar_path)
        info_path.write_text(json.dumps(info, indent=1))
    finally:
        shutil.rmtree(site, ignore_errors=True)
        tmp.unlink(missing_ok=True)
    return tar_path, info


class KubeEnvironments:
    """The :class:`~mlsandbox.backends.protocols.Environments` of the kube backend (see the module).

    ``store`` is the sandbox's object store (as this client reaches it), ``jobs`` what runs the scorer;
    without a store, building is refused (``environments.build``)."""

    def __init__(
        self, store: S3ObjectStore | None = None, jobs: Callable[[], ScorerJobs] | None = None
    ) -> None:
        self.store = store
        self._jobs = jobs
        self._known: dict[str, EnvironmentInfo] = {}
        self._lock = threading.Lock()

    def default(self) -> EnvironmentInfo:
        return EnvironmentInfo(key=DEFAULT_KEY, requirements=[], packages={})

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        """The environment of ``requirements``: already in the object store, or built, packed and
        uploaded now (:class:`ValueError` for a requirement that is not a pinned name,
        :class:`EnvironmentBuildError` with uv's message when it cannot be resolved)."""
        reqs = normalise(requirements)
        store = self._store()
        key = env_key(reqs)
        with self._lock:
            if key in self._known:
                return self._known[key]
        found = self._read_info(key)
        if found is None:
            with _BUILD_LOCK:
                found = self._read_info(key)
                if found is None:
                    tar_path, info = build_archive(reqs, key)
                    store.create_bucket(M.ENV_BUCKET)
                    store.client.upload_file(str(tar_path), M.ENV_BUCKET, M.environment_object(key))
                    body = json.dumps(info).encode()
                    store.put_object(M.ENV_BUCKET, f"{key}/info.json", body)
                    found = _model(info)
        with self._lock:
            self._known[key] = found
        return found

    def get(self, key: str) -> EnvironmentInfo:
        if key == DEFAULT_KEY:
            return self.default()
        with self._lock:
            if key in self._known:
                return self._known[key]
        found = self._read_info(key) if self.store is not None else None
        if found is None:
            raise KeyError(f"environment {key!r} has not been built")
        with self._lock:
            self._known[key] = found
        return found

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        if env.key == DEFAULT_KEY:
            return env
        raise Unsupported("serving.environment", BACKEND, SERVING_REASON)

    def score(self, key: str, model_name: str, version: str, rows: Any) -> list[float]:
        """The production scorer as a Job in environment ``key``: the model comes through the tracking
        server, the rows and the probabilities through the object store (both removed after)."""
        store = self._store()
        if self._jobs is None:
            raise ModelScoreError("no jobs to run the scorer on this client")
        self.get(key)
        jobs = self._jobs()
        run = uuid.uuid4().hex[:12]
        features, out = f"scoring/{run}/rows.parquet", f"scoring/{run}/proba.json"
        buf = io.BytesIO()
        rows.to_parquet(buf)
        store.create_bucket(M.ENV_BUCKET)
        store.put_object(M.ENV_BUCKET, features, buf.getvalue())
        spec = JobSpec(
            job_id=f"score-{run}",
            workload="trainer",
            args=[
                *("--model-uri", f"models:/{model_name}/{version}"),
                *("--features", f"s3://{M.ENV_BUCKET}/{features}"),
                *("--out", f"s3://{M.ENV_BUCKET}/{out}"),
            ],
            cpus=SCORE_CPUS,
            memory_mb=SCORE_MEMORY_MB,
            timeout_s=SCORE_TIMEOUT_S,
            environment=key,
            labels={"mlsandbox.dev/role": "scorer"},
        )
        try:
            jobs.submit_module(spec, "scorer")
            status = jobs.get(spec.job_id)
            deadline = time.monotonic() + SCORE_TIMEOUT_S + 120
            while status.state not in _TERMINAL and time.monotonic() < deadline:
                time.sleep(_POLL_S)
                status = jobs.get(spec.job_id)
            if status.state != "succeeded":
                log = jobs.logs(spec.job_id, tail=40)
                lines = [ln for ln in log.strip().splitlines() if ln.strip()]
                errors = [ln for ln in lines if not ln.startswith("[mlsandbox]")]
                raise ModelScoreError((errors or lines or [f"the scorer ended {status.state}"])[-1])
            body = store.get_object(M.ENV_BUCKET, out)
            return [float(v) for v in json.loads(body)]
        finally:
            jobs.delete(spec.job_id)
            for obj in (features, out):
                store.delete_object(M.ENV_BUCKET, obj)

    # ---------------------------------------------------------------------------------------- helpers

    def _store(self) -> S3ObjectStore:
        if self.store is None:
            raise Unsupported("environments.build", BACKEND, REASON)
        return self.store

    def _read_info(self, key: str) -> EnvironmentInfo | None:
        assert self.store is not None
        try:
            return _model(json.loads(self.store.get_object(M.ENV_BUCKET, f"{key}/info.json")))
        except KeyError:  # not built (or no bucket yet)
            return None


def _model(info: dict[str, Any]) -> EnvironmentInfo:
    return EnvironmentInfo(
        key=info["key"], requirements=list(info["requirements"]), packages=dict(info["packages"])
    )


__all__ = ["REASON", "UNSUPPORTED", "KubeEnvironments", "build_archive", "env_key", "image_platform"]
