"""Keep a pool full, bind a claim, release it: plain functions of keyword arguments over a
:class:`~.pool_api.PoolApi`, each returning the status to record (no kopf here; see
:mod:`.pool_handlers`). Every one is idempotent: called again on the same state it changes nothing.

- :func:`reconcile_pool`: create members up to ``size``, delete the excess and the unclaimed members of
  an older template; the pool's status. :class:`~.reconcile.Invalid` for a spec that cannot be served.
- :func:`bind_claim`: the claim's member if it has one, else take a Ready unclaimed member under an
  optimistic lock (of two claims racing for one member, one wins; the other tries the next, or waits);
  the claim's status (``Pending`` while the pool has no Ready member).
- :func:`release_claim`: give the claim's member back to the pool after a warm reset (``onRelease:
  Reset`` and room in the pool), or delete it.
- :func:`drain_pool`: delete a deleted pool's unclaimed members (its bound members stay with their claims).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from .model import API_VERSION, KIND
from .pool_api import Conflict, Object, PoolApi, Refused
from .pool_model import (
    AVAILABLE,
    CLAIM_KIND,
    CLAIM_NAME_LABEL,
    CLAIM_UID_LABEL,
    CLAIMED,
    MAX_POOL_NAME,
    POOL_KIND,
    POOL_LABEL,
    POOL_PLURAL,
    SANDBOX_PLURAL,
    STATE_LABEL,
    TEMPLATE_HASH_LABEL,
    ClaimPhase,
    SandboxClaimSpec,
    SandboxPoolSpec,
)
from .reconcile import Invalid, Status
from .resources import MANAGED_BY, sandbox_namespace_name

BIND_ATTEMPTS = 3
"""How often a release retries its optimistic patch of a member changed under it."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def member_ready(member: Mapping[str, Any]) -> bool:
    """Ready for an agent: reconciled at its current generation, its last warm reset done, not deleting."""
    status = member.get("status") or {}
    spec = member.get("spec") or {}
    return (
        not deleting(member)
        and status.get("phase") == "Ready"
        and status.get("observedGeneration") == _meta(member).get("generation")
        and int(status.get("episode", 0) or 0) == int(spec.get("episode", 0) or 0)
    )


def _oldest_first(objs: Sequence[Object]) -> list[Object]:
    return sorted(objs, key=lambda o: (_meta(o).get("creationTimestamp") or "", _meta(o).get("name", "")))


def condition(
    previous: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: str,
    generation: int,
) -> dict[str, Any]:
    """One condition; ``lastTransitionTime`` moves only when the status changes."""
    value = "True" if status else "False"
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


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def _owner(kind: str, obj_name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "name": obj_name, "uid": uid, "controller": True}


# ------------------------------------------------------------------------------------------------- pool


def pool_selector(pool: str) -> str:
    """The unclaimed members of ``pool``."""
    return f"{POOL_LABEL}={pool},{STATE_LABEL}={AVAILABLE}"


def validate_pool(
    *, name: str, spec: Mapping[str, Any], known_scenarios: Collection[str]
) -> tuple[SandboxPoolSpec | None, str, str]:
    """The pool's spec as a model, or ``None`` with the reason and message of why it cannot be served."""
    try:
        model = SandboxPoolSpec.model_validate(dict(spec))
    except ValidationError as exc:
        return None, "InvalidSpec", f"invalid spec: {_errors(exc)}"
    if len(name) > MAX_POOL_NAME:
        return None, "InvalidName", f"the pool's name is longer than {MAX_POOL_NAME} characters"
    if model.template.scenario not in known_scenarios:
        known = ", ".join(sorted(known_scenarios))
        return None, "UnknownScenario", f"unknown scenario {model.template.scenario!r}; known: {known}"
    return model, "", ""


def member_manifest(*, namespace: str, pool: str, pool_uid: str, model: SandboxPoolSpec) -> Object:
    """A new member: ``<pool>-<random>``, owned by the pool, from its template."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "generateName": f"{pool}-",
            "namespace": namespace,
            "labels": {
                **MANAGED_BY,
                POOL_LABEL: pool,
                STATE_LABEL: AVAILABLE,
                TEMPLATE_HASH_LABEL: model.template.digest(),
            },
            "ownerReferences": [_owner(POOL_KIND, pool, pool_uid)],
        },
        "spec": model.template.sandbox_spec(),
    }


def reconcile_pool(
    *,
    api: PoolApi,
    namespace: str,
    name: str,
    uid: str,
    spec: Mapping[str, Any],
    generation: int,
    known_scenarios: Collection[str],
    previous: Sequence[Mapping[str, Any]] = (),
    now: str,
) -> Status:
    """Bring the pool's unclaimed members to ``size`` Sandboxes of the current template; its status.

    Members of an older template that nobody holds are deleted (and so replaced); above ``size``, the
    members that are not Ready go first, then the newest. A creation the API server refuses (a quota on
    Sandboxes, say) makes the pool ``Degraded`` with its message and is tried again on the next pass.
    A member that failed stays (its condition says
    why, in the pool's ``Degraded`` condition) until someone deletes it: the pool does not loop making
    Sandboxes that fail the same way.
    """
    selector = f"{POOL_LABEL}={name}"

    def status(
        *,
        available: Sequence[Object] = (),
        claimed: int = 0,
        ready: tuple[bool, str, str],
        degraded: tuple[bool, str, str] = (False, "AsExpected", ""),
        template: str = "",
    ) -> Status:
        return {
            "observedGeneration": generation,
            "replicas": len(available),
            "readyReplicas": sum(1 for m in available if member_ready(m)),
            "claimed": claimed,
            "selector": pool_selector(name),
            "template": template,
            "conditions": [
                condition(previous, "Ready", *ready, now=now, generation=generation),
                condition(previous, "Degraded", *degraded, now=now, generation=generation),
            ],
        }

    model, reason, message = validate_pool(name=name, spec=spec, known_scenarios=known_scenarios)
    if model is None:
        raise Invalid(message, status(ready=(False, reason, message)))
    digest = model.template.digest()
    members = [m for m in api.list(SANDBOX_PLURAL, namespace, selector) if not deleting(m)]
    claimed = [m for m in members if _labels(m).get(STATE_LABEL) == CLAIMED]
    available = [m for m in members if _labels(m).get(STATE_LABEL) == AVAILABLE]

    stale = [m for m in available if _labels(m).get(TEMPLATE_HASH_LABEL) != digest]
    for member in stale:
        api.delete(SANDBOX_PLURAL, namespace, _meta(member)["name"])
    available = [m for m in available if m not in stale]

    if len(available) > model.size:
        # Not Ready first, then the newest: the Ready ones that waited longest stay.
        ordered = sorted(
            _oldest_first(available), key=lambda m: member_ready(m), reverse=True
        )  # stable: Ready (oldest first), then not Ready (oldest first)
        keep, excess = ordered[: model.size], ordered[model.size :]
        for member in excess:
            api.delete(SANDBOX_PLURAL, namespace, _meta(member)["name"])
        available = keep
    refused = ""
    for _ in range(model.size - len(available)):
        try:
            created = api.create(
                SANDBOX_PLURAL,
                namespace,
                member_manifest(namespace=namespace, pool=name, pool_uid=uid, model=model),
            )
        except Refused as exc:  # e.g. a quota on Sandboxes in this namespace: tried again on the next pass
            refused = f"creating a Sandbox was refused ({exc.status}): {exc}"
            break
        available.append(created)

    failed = [m for m in available if (m.get("status") or {}).get("phase") == "Failed"]
    degraded: tuple[bool, str, str] = (False, "AsExpected", "")
    if failed:
        first = failed[0]
        why = next(
            (
                f"{c.get('reason')}: {c.get('message')}"
                for c in (first.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            "failed",
        )
        degraded = (
            True,
            "MemberFailed",
            f"{len(failed)} member(s) failed (delete them to replace them); {_meta(first)['name']}: {why}",
        )
    if refused:
        degraded = (True, "CreateRefused", refused)
    ready_count = sum(1 for m in available if member_ready(m))
    ready = (
        (True, "Full", f"{ready_count} Sandbox(es) ready")
        if ready_count >= model.size
        else (False, "Filling", f"{ready_count} of {model.size} Sandbox(es) ready")
    )
    return status(available=available, claimed=len(claimed), ready=ready, degraded=degraded, template=digest)


def drain_pool(*, api: PoolApi, namespace: str, name: str) -> int:
    """Delete the pool's unclaimed members (bound ones stay with their claims); how many were asked to go."""
    members = api.list(SANDBOX_PLURAL, namespace, pool_selector(name))
    gone = 0
    for member in members:
        if not deleting(member):
            api.delete(SANDBOX_PLURAL, namespace, _meta(member)["name"])
            gone += 1
    return gone


# ----------------------------------------------------------------------------------------------- claims


def _claim_status(
    *,
    phase: ClaimPhase,
    bound: tuple[bool, str, str],
    previous: Mapping[str, Any],
    now: str,
    generation: int,
    member: Mapping[str, Any] | None = None,
    namespace: str = "",
) -> Status:
    status: Status = {
        "observedGeneration": generation,
        "phase": phase,
        "conditions": [
            condition(previous.get("conditions") or [], "Bound", *bound, now=now, generation=generation)
        ],
    }
    if member is not None:
        member_name = _meta(member)["name"]
        status["sandbox"] = member_name
        status["namespace"] = (member.get("status") or {}).get("namespace") or sandbox_namespace_name(
            namespace, member_name
        )
        same = previous.get("sandbox") == member_name and previous.get("boundAt")
        status["boundAt"] = previous["boundAt"] if same else now
    else:
        for key in ("sandbox", "namespace", "boundAt"):
            if previous.get(key):
                status[key] = previous[key]
    return status


def bind_claim(
    *,
    api: PoolApi,
    namespace: str,
    name: str,
    uid: str,
    spec: Mapping[str, Any],
    generation: int,
    previous: Mapping[str, Any] | None = None,
    now: str,
) -> Status:
    """The claim's status after binding it to a Ready member of its pool, if it has none yet.

    The member's labels say who holds it: a member labelled with this claim's uid is this claim's (found
    again after a crash between the bind and the status). Otherwise the oldest Ready unclaimed member of
    the pool's current template is taken by a merge patch carrying its ``resourceVersion``: if another
    claim took it first the patch fails with a conflict and the next member is tried. ``Pending`` when
    none is left (the caller waits for a member to become Ready); ``Lost`` when the claim's member was
    deleted under it.
    """
    prev = dict(previous or {})

    def status(phase: ClaimPhase, bound: tuple[bool, str, str], member: Object | None = None) -> Status:
        return _claim_status(
            phase=phase,
            bound=bound,
            previous=prev,
            now=now,
            generation=generation,
            member=member,
            namespace=namespace,
        )

    try:
        model = SandboxClaimSpec.model_validate(dict(spec))
    except ValidationError as exc:
        message = f"invalid spec: {_errors(exc)}"
        raise Invalid(message, status("Failed", (False, "InvalidSpec", message))) from None
    pool_name = model.pool_ref.name

    mine = [m for m in api.list(SANDBOX_PLURAL, namespace, f"{CLAIM_UID_LABEL}={uid}") if not deleting(m)]
    if mine:
        return status("Bound", (True, "Bound", f"bound to Sandbox {_meta(mine[0])['name']}"), mine[0])
    if prev.get("sandbox"):
        message = f"Sandbox {prev['sandbox']} was deleted while this claim held it"
        return status("Lost", (False, "SandboxLost", message))

    pool = api.get(POOL_PLURAL, namespace, pool_name)
    if pool is None:
        return status("Pending", (False, "PoolNotFound", f"no SandboxPool {pool_name} in {namespace}"))
    if deleting(pool):
        return status("Pending", (False, "PoolDeleting", f"SandboxPool {pool_name} is being deleted"))
    try:
        digest = SandboxPoolSpec.model_validate(pool.get("spec") or {}).template.digest()
    except ValidationError as exc:
        return status("Pending", (False, "PoolInvalid", f"SandboxPool {pool_name}: {_errors(exc)}"))

    members = [m for m in api.list(SANDBOX_PLURAL, namespace, pool_selector(pool_name)) if not deleting(m)]
    candidates = [
        m for m in _oldest_first(members) if member_ready(m) and _labels(m).get(TEMPLATE_HASH_LABEL) == digest
    ]
    for member in candidates:
        meta = _meta(member)
        patch = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "labels": {STATE_LABEL: CLAIMED, CLAIM_NAME_LABEL: name, CLAIM_UID_LABEL: uid},
                "ownerReferences": [_owner(CLAIM_KIND, name, uid)],
            }
        }
        try:
            taken = api.patch(SANDBOX_PLURAL, namespace, meta["name"], patch)
        except Conflict:
            continue  # another claim (or the pool) changed it first
        if taken is not None:
            return status("Bound", (True, "Bound", f"bound to Sandbox {meta['name']}"), taken)
    waiting = len(members)
    message = (
        f"no Ready Sandbox in pool {pool_name} ({waiting} on the way); the claim binds when one is Ready"
    )
    return status("Pending", (False, "PoolEmpty", message))


def release_claim(*, api: PoolApi, namespace: str, uid: str) -> dict[str, list[str]]:
    """Release what the claim ``uid`` holds: each member goes back to its pool after a warm reset (its
    ``spec.episode`` bumped) when the pool exists, says ``onRelease: Reset``, is of the same template and
    has room; otherwise it is deleted. ``{"returned": [...], "deleted": [...]}``."""
    out: dict[str, list[str]] = {"returned": [], "deleted": []}
    for member in api.list(SANDBOX_PLURAL, namespace, f"{CLAIM_UID_LABEL}={uid}"):
        member_name = _meta(member)["name"]
        if not deleting(member) and _return_to_pool(api, namespace, member):
            out["returned"].append(member_name)
        else:
            api.delete(SANDBOX_PLURAL, namespace, member_name)
            out["deleted"].append(member_name)
    return out


def _return_to_pool(api: PoolApi, namespace: str, member: Object) -> bool:
    for _ in range(BIND_ATTEMPTS):
        pool_name = _labels(member).get(POOL_LABEL, "")
        pool = api.get(POOL_PLURAL, namespace, pool_name) if pool_name else None
        if pool is None or deleting(pool):
            return False
        try:
            model = SandboxPoolSpec.model_validate(pool.get("spec") or {})
        except ValidationError:
            return False
        if model.on_release != "Reset" or _labels(member).get(TEMPLATE_HASH_LABEL) != model.template.digest():
            return False
        available = [
            m for m in api.list(SANDBOX_PLURAL, namespace, pool_selector(pool_name)) if not deleting(m)
        ]
        if len(available) >= model.size:
            return False
        meta = _meta(member)
        episode = int((member.get("spec") or {}).get("episode", 0) or 0)
        patch = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "labels": {STATE_LABEL: AVAILABLE, CLAIM_NAME_LABEL: None, CLAIM_UID_LABEL: None},
                "ownerReferences": [_owner(POOL_KIND, pool_name, _meta(pool)["uid"])],
            },
            "spec": {"episode": episode + 1},
        }
        try:
            return api.patch(SANDBOX_PLURAL, namespace, meta["name"], patch) is not None
        except Conflict:
            fresh = api.get(SANDBOX_PLURAL, namespace, meta["name"])
            if fresh is None or deleting(fresh):
                return False
            member = fresh
    return False
