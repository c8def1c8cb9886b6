"""Fault mechanisms of the local backend: real signals, cgroup limits, Toxiproxy toxics, MinIO quotas.

:class:`LocalFaultControl` is what ``LocalRuntime.faults`` hands to the perturbation engine:

- services: SIGKILL / SIGSTOP / SIGCONT of a service's process group, restart through the backend,
  health as clients see it (through the proxy), logs;
- network: toxics on the Toxiproxy proxies in front of MinIO and MLflow (the endpoints the agent's and
  the workloads' clients use), proxies disabled for "endpoint down";
- a hard bucket quota through MinIO's admin API (``PUT /minio/admin/v3/set-bucket-quota``, SigV4-signed);
- job limits through the jobs' cgroups (``LocalJobs.set_resources``).

Every change that would outlive a crash of the process making it (a toxic, a disabled proxy, a quota, a
SIGSTOP, a cut job limit) is written first to a journal, ``<sandbox>/faults/<pid>-<ticks>.json``, and
removed from it once undone. :func:`undo_stale_journals` (called by the garbage collector) undoes the
journal of every process that is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from mlsandbox.backends.base import Endpoints, ServiceHealth
from mlsandbox.errors import BackendError

from . import services as svc
from . import supervisor
from .supervisor import ProcessRecord

JOURNAL_DIR = "faults"
PROBE_TIMEOUT_S = 5.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------- journal


class UndoToxic(_Model):
    type: Literal["toxic"] = "toxic"
    endpoint: str
    name: str


class UndoProxyDisabled(_Model):
    type: Literal["proxy_disabled"] = "proxy_disabled"
    endpoint: str


class UndoBucketQuota(_Model):
    type: Literal["bucket_quota"] = "bucket_quota"
    bucket: str


class UndoFrozen(_Model):
    type: Literal["frozen"] = "frozen"
    service: str
    process: ProcessRecord


class UndoKilled(_Model):
    """Nothing to undo (a restart brings it back): marks a service down on purpose, so that the garbage
    collector does not take the sandbox for broken while the process that killed it lives."""

    type: Literal["killed"] = "killed"
    service: str


class UndoJobLimits(_Model):
    type: Literal["job_limits"] = "job_limits"
    job_id: str
    cpu_dir: str | None = None
    cpu_quota_us: int | None = None
    memory_dir: str | None = None
    memory_limit_bytes: int | None = None


Undo = Annotated[
    UndoToxic | UndoProxyDisabled | UndoBucketQuota | UndoFrozen | UndoKilled | UndoJobLimits,
    Field(discriminator="type"),
]


class JournalFile(_Model):
    owner: ProcessRecord
    entries: dict[str, Undo] = Field(default_factory=dict)


_JOURNAL_ADAPTER: TypeAdapter[JournalFile] = TypeAdapter(JournalFile)


class Journal:
    """The undo records of this process for one sandbox (one file, rewritten atomically)."""

    def __init__(self, sandbox_dir: Path) -> None:
        self.owner = ProcessRecord.of(os.getpid())
        self.path = Path(sandbox_dir) / JOURNAL_DIR / f"{self.owner.pid}-{self.owner.start_ticks}.json"
        self._lock = threading.Lock()
        self._data = JournalFile(owner=self.owner)
        if self.path.is_file():
            with contextlib.suppress(ValueError, OSError):
                self._data = JournalFile.model_validate_json(self.path.read_text())

    def add(self, key: str, undo: Any) -> None:
        with self._lock:
            self._data.entries[key] = undo
            self._write()

    def remove(self, key: str) -> None:
        with self._lock:
            if self._data.entries.pop(key, None) is not None:
                self._write()

    def entry_keys(self) -> list[str]:
        with self._lock:
            return list(self._data.entries)

    def _write(self) -> None:
        if not self._data.entries:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_text(self._data.model_dump_json(indent=2))
        os.replace(tmp, self.path)


# ------------------------------------------------------------------------------------------ mechanisms


def minio_admin(
    endpoints: Endpoints, method: str, path: str, params: dict[str, str], body: bytes
) -> httpx.Response:
    """One SigV4-signed call of MinIO's admin API (what ``mc admin`` does), direct to the server."""
    from urllib.parse import urlencode

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{endpoints.s3_url}/minio/admin/v3/{path}?{urlencode(params)}"
    request = AWSRequest(method=method, url=url, data=body)
    import hashlib

    request.headers["X-Amz-Content-Sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(Credentials(endpoints.s3_access_key, endpoints.s3_secret_key), "s3", "us-east-1").add_auth(
        request
    )
    with httpx.Client(timeout=10.0, trust_env=False) as client:
        return client.request(method, url, content=body, headers=dict(request.headers.items()))


def set_bucket_quota(endpoints: Endpoints, bucket: str, quota_bytes: int | None) -> None:
    body = json.dumps({"size": quota_bytes or 0, "quota": quota_bytes or 0, "quotatype": "hard"}).encode()
    resp = minio_admin(endpoints, "PUT", "set-bucket-quota", {"bucket": bucket}, body)
    if resp.status_code != 200:
        raise BackendError(
            f"setting the quota of bucket {bucket!r} failed: {resp.status_code} {resp.text[:300]}"
        )


class ToxiproxyControl:
    """Toxics and proxy switches on a sandbox's Toxiproxy (its proxies are named after the services)."""

    def __init__(self, api_url: str, journal: Journal) -> None:
        self.api_url = api_url
        self.journal = journal

    def endpoints(self) -> list[str]:
        return list(svc.PROXIED)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        with httpx.Client(timeout=10.0, trust_env=False) as client:
            return client.request(method, f"{self.api_url}{path}", json=body)

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        self._check(endpoint)
        self.journal.add(f"toxic:{endpoint}:{name}", UndoToxic(endpoint=endpoint, name=name))
        self._call("DELETE", f"/proxies/{endpoint}/toxics/{name}")
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        resp = self._call("POST", f"/proxies/{endpoint}/toxics", body)
        if resp.status_code not in (200, 201):
            raise BackendError(
                f"toxiproxy refused toxic {name!r} on {endpoint}: {resp.status_code} {resp.text}"
            )

    def remove_toxic(self, endpoint: str, name: str) -> None:
        self._check(endpoint)
        resp = self._call("DELETE", f"/proxies/{endpoint}/toxics/{name}")
        if resp.status_code not in (200, 204, 404):
            raise BackendError(f"toxiproxy: removing toxic {name!r} failed: {resp.status_code} {resp.text}")
        self.journal.remove(f"toxic:{endpoint}:{name}")

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        self._check(endpoint)
        if not enabled:
            self.journal.add(f"proxy:{endpoint}", UndoProxyDisabled(endpoint=endpoint))
        resp = self._call("POST", f"/proxies/{endpoint}", {"enabled": enabled})
        if resp.status_code != 200:
            raise BackendError(f"toxiproxy: switching {endpoint} failed: {resp.status_code} {resp.text}")
        if enabled:
            self.journal.remove(f"proxy:{endpoint}")

    def toxics(self, endpoint: str) -> list[dict[str, Any]]:
        resp = self._call("GET", f"/proxies/{endpoint}/toxics")
        resp.raise_for_status()
        return list(resp.json())

    def reset(self) -> None:
        """Every toxic removed, every proxy enabled (Toxiproxy's own ``POST /reset``)."""
        resp = self._call("POST", "/reset")
        if resp.status_code not in (200, 204):
            raise BackendError(f"toxiproxy reset failed: {resp.status_code} {resp.text}")
        for key in self.journal.entry_keys():
            if key.startswith(("toxic:", "proxy:")):
                self.journal.remove(key)

    def _check(self, endpoint: str) -> None:
        if endpoint not in svc.PROXIED:
            raise ValueError(f"unknown endpoint {endpoint!r}; endpoints: {', '.join(svc.PROXIED)}")


class LocalServiceControl:
    """Kill, freeze, thaw, restart, probe and read the logs of a local sandbox's services."""

    def __init__(self, backend: Any, journal: Journal, client_endpoints: Endpoints) -> None:
        self.backend = backend  # a LocalBackend (not imported: it imports this module's package)
        self.journal = journal
        self.client_endpoints = client_endpoints

    def _state(self) -> Any:
        return self.backend._running_state()

    def names(self) -> list[str]:
        return list(self._state().service_names())

    def _record(self, service: str) -> ProcessRecord:
        state = self._state()
        if service not in state.service_names():
            raise ValueError(f"unknown service {service!r}; services: {', '.join(state.service_names())}")
        record = state.services.get(service)
        if record is None:
            raise BackendError(f"service {service!r} was never started")
        return record.process

    def kill(self, service: str) -> None:
        record = self._record(service)
        self.journal.add(f"killed:{service}", UndoKilled(service=service))
        if supervisor.is_alive(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGKILL)
            for proc in supervisor.process_tree(record):  # descendants that left the group
                with contextlib.suppress(Exception):
                    proc.kill()
            deadline = time.monotonic() + 5.0
            while supervisor.is_alive(record) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.journal.remove(f"frozen:{service}")

    def freeze(self, service: str) -> None:
        record = self._record(service)
        self.journal.add(f"frozen:{service}", UndoFrozen(service=service, process=record))
        if supervisor.is_alive(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGSTOP)

    def thaw(self, service: str) -> None:
        record = self._record(service)
        if supervisor.is_alive(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGCONT)
        self.journal.remove(f"frozen:{service}")

    def is_running(self, service: str) -> bool:
        return supervisor.is_alive(self._record(service))

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        self._record(service)
        t0 = time.monotonic()
        self.backend.start_service(service)
        self.journal.remove(f"frozen:{service}")
        self.journal.remove(f"killed:{service}")
        if not wait:
            return ServiceHealth(service=service, healthy=False, error="starting")
        with svc.http_client() as client:
            while time.monotonic() - t0 < timeout:
                if self.backend.service_healthy(service, client):
                    return ServiceHealth(
                        service=service, healthy=True, latency_ms=round((time.monotonic() - t0) * 1000, 1)
                    )
                time.sleep(0.2)
        return ServiceHealth(service=service, healthy=False, error=f"not healthy {timeout:g} s after restart")

    def health(self, service: str, *, timeout: float = PROBE_TIMEOUT_S) -> ServiceHealth:
        """Probe as a client would: MinIO and MLflow through the proxy, the others directly."""
        state = self._state()
        record = self._record(service)
        ep = self.client_endpoints
        t0 = time.perf_counter()
        try:
            with httpx.Client(timeout=timeout, trust_env=False) as client:
                if service == svc.MINIO:
                    resp = client.get(f"{ep.s3_url}/minio/health/live")
                    ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}"
                elif service == svc.MLFLOW:
                    resp = client.get(f"{ep.mlflow_url}/health")
                    ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}"
                elif service == svc.PREFECT_SERVER:
                    resp = client.get(f"{state.endpoints.prefect_api_url}/health")
                    ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}"
                elif service == svc.PREFECT_WORKER:
                    ok = supervisor.is_alive(record) and svc.probe(
                        service, state.endpoints, state.worker_name, client
                    )
                    detail = "worker not online"
                else:
                    ok = self.backend.service_healthy(service, client)
                    detail = "no answer"
        except httpx.TimeoutException:
            return ServiceHealth(service=service, healthy=False, error=f"timed out after {timeout:g} s")
        except httpx.HTTPError as exc:
            return ServiceHealth(service=service, healthy=False, error=f"{type(exc).__name__}: {exc}")
        latency = round((time.perf_counter() - t0) * 1000, 1)
        return ServiceHealth(service=service, healthy=ok, latency_ms=latency, error=None if ok else detail)

    def logs(self, service: str, tail: int = 50) -> str:
        self._record(service)
        return supervisor.tail(self.backend.log_path(service), tail)


class LocalFaultControl:
    """The :class:`~mlsandbox.backends.base.FaultControl` of a local sandbox."""

    def __init__(self, backend: Any, client_endpoints: Endpoints, jobs: Any) -> None:
        self.backend = backend
        self.journal = Journal(backend.dir)
        self.jobs = jobs
        self._services = LocalServiceControl(backend, self.journal, client_endpoints)
        state = backend._running_state()
        url = svc.toxiproxy_url(state.ports)
        self._network = ToxiproxyControl(url, self.journal) if url else None
        self._direct = state.endpoints

    @property
    def services(self) -> LocalServiceControl:
        return self._services

    @property
    def network(self) -> ToxiproxyControl | None:
        return self._network

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        key = f"quota:{bucket}"
        if quota_bytes:
            self.journal.add(key, UndoBucketQuota(bucket=bucket))
        set_bucket_quota(self._direct, bucket, quota_bytes)
        if not quota_bytes:
            self.journal.remove(key)

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Cut a running job's limits (journaled: the garbage collector restores the cgroup values)."""
        key = f"job:{job_id}"
        if key not in self.journal.entry_keys():
            dirs = self.jobs.cgroup_dirs(job_id)
            undo = UndoJobLimits(job_id=job_id)
            if dirs:
                memory, cpu = dirs
                with contextlib.suppress(OSError, ValueError):
                    undo.cpu_dir, undo.cpu_quota_us = str(cpu), int((cpu / "cpu.cfs_quota_us").read_text())
                    undo.memory_dir = str(memory)
                    undo.memory_limit_bytes = int((memory / "memory.limit_in_bytes").read_text())
            self.journal.add(key, undo)
        self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)
        self.journal.remove(f"job:{job_id}")

    def unavailable(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self._network is None:
            reason = "toxiproxy-server is not installed (run `make setup`)"
            out.update(
                dict.fromkeys(("latency", "bandwidth", "timeout", "reset_peer", "endpoint_down"), reason)
            )
        if not getattr(self.jobs, "use_cgroups", False):
            reason = "job cgroups need root and a cgroup v1 hierarchy"
            out.update(dict.fromkeys(("memory_limit", "cpu_throttle"), reason))
        return out


# ------------------------------------------------------------------------------------ garbage collection


def _undo(entry: Any, state: Any) -> None:
    if isinstance(entry, UndoToxic | UndoProxyDisabled):
        url = svc.toxiproxy_url(state.ports)
        if url is None:
            return
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            if isinstance(entry, UndoToxic):
                client.delete(f"{url}/proxies/{entry.endpoint}/toxics/{entry.name}")
            else:
                client.post(f"{url}/proxies/{entry.endpoint}", json={"enabled": True})
    elif isinstance(entry, UndoBucketQuota):
        with contextlib.suppress(BackendError):
            set_bucket_quota(state.endpoints, entry.bucket, None)
    elif isinstance(entry, UndoFrozen):
        if supervisor.is_alive(entry.process):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(entry.process.pgid, signal.SIGCONT)
    elif isinstance(entry, UndoJobLimits):
        if entry.cpu_dir and entry.cpu_quota_us is not None:
            with contextlib.suppress(OSError):
                (Path(entry.cpu_dir) / "cpu.cfs_quota_us").write_text(str(entry.cpu_quota_us))
        if entry.memory_dir and entry.memory_limit_bytes is not None:
            with contextlib.suppress(OSError):
                (Path(entry.memory_dir) / "memory.limit_in_bytes").write_text(str(entry.memory_limit_bytes))


def _journals(sandbox_dir: Path) -> list[tuple[Path, JournalFile | None]]:
    root = Path(sandbox_dir) / JOURNAL_DIR
    if not root.is_dir():
        return []
    out: list[tuple[Path, JournalFile | None]] = []
    for path in sorted(root.glob("*.json")):
        try:
            out.append((path, _JOURNAL_ADAPTER.validate_json(path.read_text())))
        except (ValueError, OSError):
            out.append((path, None))
    return out


def killed_on_purpose(sandbox_dir: Path) -> set[str]:
    """Services that a live process killed as a fault (down on purpose, not broken)."""
    return {
        e.service
        for _, journal in _journals(sandbox_dir)
        if journal is not None and supervisor.is_alive(journal.owner)
        for e in journal.entries.values()
        if isinstance(e, UndoKilled)
    }


def undo_stale_journals(sandbox_dir: Path, state: Any) -> list[str]:
    """Undo the journaled faults of every process that is gone; one line per journal undone."""
    lines = []
    for path, journal in _journals(sandbox_dir):
        if journal is None:
            path.unlink(missing_ok=True)
            continue
        if supervisor.is_alive(journal.owner):
            continue
        failed = 0
        for entry in journal.entries.values():
            try:
                _undo(entry, state)
            except Exception:  # best effort: the rest is still undone
                failed += 1
        path.unlink(missing_ok=True)
        kinds = sorted({e.type for e in journal.entries.values()})
        lines.append(
            f"sandbox {state.name}: undid {len(journal.entries)} fault change(s) of gone process "
            f"{journal.owner.pid} ({', '.join(kinds)}){f'; {failed} failed' if failed else ''}"
        )
    return lines
