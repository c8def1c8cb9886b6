"""Reconcile and finalize one Sandbox over a :class:`ClusterApi`; each returns the status to record.

Plain functions of keyword arguments (no kopf here): the handlers in :mod:`.handlers` pass the API and
translate the two outcomes that are not a status into kopf's errors:

- :class:`Retry` (→ ``kopf.TemporaryError(delay=)``): the API server is unavailable, the sandbox's
  namespace is still being deleted, or (on deletion) is not gone yet;
- :class:`Invalid` (→ ``kopf.PermanentError``): the spec cannot be reconciled (unknown scenario, a
  field the CRD let through but the model refuses, a name too long for a label).

Both carry the status to record first, so ``kubectl get sandbox`` always says why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from mlsandbox.backends.kube.client import ClusterApi, TransientApiError

from .model import ConditionType, Phase, SandboxSpec
from .resources import (
    EPISODE_KINDS,
    SANDBOX_LABEL,
    SANDBOX_NAMESPACE_LABEL,
    sandbox_namespace_name,
    sandbox_resources,
)

RETRY_DELAY_S = 5.0
DELETE_POLL_S = 2.0

Status = dict[str, Any]


class Outcome(Exception):
    def __init__(self, message: str, status: Status) -> None:
        super().__init__(message)
        self.status = status


class Retry(Outcome):
    def __init__(self, message: str, status: Status, delay: float = RETRY_DELAY_S) -> None:
        super().__init__(message, status)
        self.delay = delay


class Invalid(Outcome):
    pass


def condition(
    previous: Sequence[Mapping[str, Any]],
    type_: ConditionType,
    status: bool | None,
    reason: str,
    message: str,
    *,
    now: str,
    generation: int,
) -> dict[str, Any]:
    """One condition; ``lastTransitionTime`` moves only when the status changes."""
    value = "Unknown" if status is None else ("True" if status else "False")
    old = next((c for c in previous if c.get("type") == type_), None)
    since = (
        old["lastTransitionTime"]
        if old and old.get("status") == value and "lastTransitionTime" in old
        else now
    )
    return {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def make_status(
    *,
    phase: Phase,
    target: str,
    generation: int,
    previous: Sequence[Mapping[str, Any]],
    now: str,
    ready: tuple[bool | None, str, str],
    degraded: tuple[bool, str, str] = (False, "AsExpected", ""),
    terminating: tuple[bool, str, str] = (False, "AsExpected", ""),
    episode: int | None = None,
) -> Status:
    conds = [
        condition(previous, "Ready", *ready, now=now, generation=generation),
        condition(previous, "Degraded", *degraded, now=now, generation=generation),
        condition(previous, "Terminating", *terminating, now=now, generation=generation),
    ]
    status: Status = {
        "observedGeneration": generation,
        "namespace": target,
        "phase": phase,
        "conditions": conds,
    }
    if episode is not None:
        status["episode"] = episode
    return status


def exhausted_quota(quota: Mapping[str, Any] | None) -> list[str]:
    """The resources of a ResourceQuota whose use has reached its hard limit (from its status)."""
    if not quota:
        return []
    from kubernetes.utils import parse_quantity

    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    full = []
    for resource, limit in hard.items():
        if (
            resource in used
            and parse_quantity(limit) > 0
            and parse_quantity(used[resource]) >= parse_quantity(limit)
        ):
            full.append(resource)
    return sorted(full)


def reconcile_sandbox(
    *,
    api: ClusterApi,
    name: str,
    namespace: str,
    spec: Mapping[str, Any],
    generation: int,
    control_namespace: str,
    known_scenarios: Collection[str],
    previous: Sequence[Mapping[str, Any]] = (),
    now: str,
    episode: int = 0,
    release: str = "mlsandbox",
) -> Status:
    """Bring the sandbox's namespace, quota, limits, network policies, agent RBAC and service aliases to
    the spec; when ``spec.episode`` is past ``episode`` (the last reset done), delete the previous
    episode's objects first (a warm reset) and report the new episode."""
    target = sandbox_namespace_name(namespace, name)
    done = episode

    def status(phase: Phase, ready: tuple[bool | None, str, str], **extra: tuple[bool, str, str]) -> Status:
        return make_status(
            phase=phase,
            target=target,
            generation=generation,
            previous=previous,
            now=now,
            ready=ready,
            episode=done,
            **extra,
        )

    try:
        model = SandboxSpec.model_validate(dict(spec))
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise Invalid(f"invalid spec: {message}", status("Failed", (False, "InvalidSpec", message))) from None
    if len(name) > 63:
        message = f"the name {name!r} is longer than 63 characters (it is used as a label value)"
        raise Invalid(message, status("Failed", (False, "InvalidName", message)))
    if model.scenario not in known_scenarios:
        message = f"unknown scenario {model.scenario!r}; known: {', '.join(sorted(known_scenarios))}"
        raise Invalid(message, status("Failed", (False, "UnknownScenario", message)))

    try:
        existing = api.get("v1", "Namespace", target)
        if existing is not None:
            owner = existing.get("metadata", {}).get("labels", {})
            if (owner.get(SANDBOX_LABEL), owner.get(SANDBOX_NAMESPACE_LABEL)) != (name, namespace):
                message = f"namespace {target} exists and does not belong to this sandbox"
                raise Invalid(message, status("Failed", (False, "NamespaceConflict", message)))
            if existing.get("status", {}).get("phase") == "Terminating":
                message = f"namespace {target} is still being deleted"
                raise Retry(message, status("Pending", (False, "NamespaceTerminating", message)))
        if existing is not None and model.episode > episode:
            reset_episode(api, target)
        for manifest in sandbox_resources(namespace, name, model, control_namespace, release):
            api.apply(manifest)
        done = max(episode, model.episode)
        quota = api.get("v1", "ResourceQuota", "budget", target)
    except TransientApiError as exc:
        raise Retry(str(exc), status("Pending", (None, "ApiUnavailable", str(exc)))) from exc

    full = exhausted_quota(quota)
    if full:
        message = f"quota exhausted: {', '.join(full)}"
        return status("Degraded", (True, "Reconciled", ""), degraded=(True, "QuotaExhausted", message))
    return status("Ready", (True, "Reconciled", f"namespace {target} is ready"))


def reset_episode(api: ClusterApi, target: str) -> int:
    """Delete the per-episode objects of the sandbox's namespace; how many were asked to go."""
    return sum(
        api.delete_collection(api_version, kind, target, selector)
        for api_version, kind, selector in EPISODE_KINDS
    )


def finalize_sandbox(
    *,
    api: ClusterApi,
    name: str,
    namespace: str,
    generation: int,
    previous: Sequence[Mapping[str, Any]] = (),
    now: str,
) -> Status:
    """Delete the sandbox's namespace (and so everything in it); :class:`Retry` until it is gone.

    A namespace of that name that does not carry this sandbox's labels is left alone.
    """
    target = sandbox_namespace_name(namespace, name)
    terminating = make_status(
        phase="Terminating",
        target=target,
        generation=generation,
        previous=previous,
        now=now,
        ready=(False, "Terminating", "the sandbox is being deleted"),
        terminating=(True, "Deleting", f"deleting namespace {target}"),
    )
    try:
        existing = api.get("v1", "Namespace", target)
        if existing is None:
            return terminating
        owner = existing.get("metadata", {}).get("labels", {})
        if (owner.get(SANDBOX_LABEL), owner.get(SANDBOX_NAMESPACE_LABEL)) != (name, namespace):
            return terminating
        if existing.get("status", {}).get("phase") != "Terminating":
            api.delete("v1", "Namespace", target)
    except TransientApiError as exc:
        raise Retry(str(exc), terminating) from exc
    raise Retry(f"waiting for namespace {target} to be deleted", terminating, delay=DELETE_POLL_S)
