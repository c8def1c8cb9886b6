"""kopf registrations for ``Sandbox`` resources: ``kopf run --standalone -m mlsandbox.k8s_operator.handlers``.

Each handler is a small function of keyword arguments: it calls :mod:`.reconcile` with the cluster API
from ``memo`` (a real :class:`~mlsandbox.backends.kube.client.KubernetesApi` set at startup unless one
is given, e.g. a fake in tests), records the returned status in ``patch.status``, and turns
:class:`~.reconcile.Retry` / :class:`~.reconcile.Invalid` into ``kopf.TemporaryError(delay=)`` /
``kopf.PermanentError`` after recording their status. kopf's own bookkeeping goes to annotations
(``mlsandbox.dev/...``), so the status holds only what the CRD declares.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from mlsandbox.backends.kube.client import KubernetesApi

from .model import FINALIZER, GROUP, PLURAL, VERSION
from .reconcile import Invalid, Retry, Status, finalize_sandbox, reconcile_sandbox
from .resources import EPISODE_KINDS

CONTROL_NAMESPACE_ENV = "MLSANDBOX_CONTROL_NAMESPACE"
RELEASE_ENV = "MLSANDBOX_RELEASE"
"""The chart's full name (``mlsandbox.fullname``): the shared services are ``<release>-minio`` etc."""
HEALTH_INTERVAL_S = float(os.environ.get("MLSANDBOX_OPERATOR_HEALTH_INTERVAL_S", "30"))
"""How often each Sandbox is re-checked (drift repaired, quota reported); tests set it lower."""


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def known_scenarios() -> list[str]:
    from mlsandbox.scenario.loader import catalog_ids

    return catalog_ids()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.WARNING
    if "api" not in memo:
        memo["api"] = KubernetesApi()
    memo.setdefault("control_namespace", os.environ.get(CONTROL_NAMESPACE_ENV, "mlsandbox"))
    memo.setdefault("release", os.environ.get(RELEASE_ENV, "mlsandbox"))
    memo.setdefault("known_scenarios", known_scenarios())
    # Look each kind a warm reset deletes up once now: the API discovery behind the first lookup of a
    # group takes seconds, which the first warm reset (a pool's first returned Sandbox) would pay.
    for api_version, kind, _selector in EPISODE_KINDS:
        with contextlib.suppress(Exception):  # a kind not served (no Chaos Mesh) is skipped by resets
            memo["api"].get(api_version, kind, "-", "default")


def _record(patch: kopf.Patch, compute: Callable[[], Status]) -> None:
    try:
        status = compute()
    except Retry as exc:
        patch.status.update(exc.status)
        raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
    except Invalid as exc:
        patch.status.update(exc.status)
        raise kopf.PermanentError(str(exc)) from exc
    patch.status.update(status)


def _namespace(namespace: str | None) -> str:
    """The object's namespace (a ``Sandbox`` is namespaced: kopf always gives one)."""
    if namespace is None:
        raise kopf.PermanentError("a Sandbox is a namespaced object: no namespace was given")
    return namespace


def _reconcile(
    spec: Mapping[str, Any],
    name: str,
    namespace: str | None,
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: Any,
    patch: kopf.Patch,
) -> None:
    ns = _namespace(namespace)
    _record(
        patch,
        lambda: reconcile_sandbox(
            api=memo["api"],
            name=name,
            namespace=ns,
            spec=spec,
            generation=int(meta.get("generation", 0)),
            control_namespace=memo["control_namespace"],
            known_scenarios=memo["known_scenarios"],
            previous=status.get("conditions", []),
            now=now(),
            episode=int(status.get("episode", 0) or 0),
            release=memo.get("release", "mlsandbox"),
        ),
    )


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile(
    spec: Mapping[str, Any],
    name: str,
    namespace: str | None,
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: Any,
    patch: kopf.Patch,
    **_: Any,
) -> None:
    """Create or update the sandbox's namespace, quota, limits, network policies and agent RBAC."""
    _reconcile(spec, name, namespace, meta, status, memo, patch)


@kopf.timer(GROUP, VERSION, PLURAL, interval=HEALTH_INTERVAL_S, idle=HEALTH_INTERVAL_S)
def health(
    spec: Mapping[str, Any],
    name: str,
    namespace: str | None,
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: Any,
    patch: kopf.Patch,
    **_: Any,
) -> None:
    """Re-apply what drifted (a deleted quota or policy comes back) and report an exhausted quota."""
    if meta.get("deletionTimestamp"):
        return
    _reconcile(spec, name, namespace, meta, status, memo, patch)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def finalize(
    name: str,
    namespace: str | None,
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: Any,
    patch: kopf.Patch,
    **_: Any,
) -> None:
    """Delete the sandbox's namespace and hold the finalizer until it is gone."""
    ns = _namespace(namespace)
    _record(
        patch,
        lambda: finalize_sandbox(
            api=memo["api"],
            name=name,
            namespace=ns,
            generation=int(meta.get("generation", 0)),
            previous=status.get("conditions", []),
            now=now(),
        ),
    )


# The warm pool's handlers (SandboxPool, SandboxClaim) run in the same operator.
from . import pool_handlers as pool_handlers  # noqa: E402
