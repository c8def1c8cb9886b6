"""kopf registrations of the warm pool (loaded with :mod:`.handlers`).

- one daemon per ``SandboxPool`` keeps it full (:func:`~.pool.reconcile_pool`) and records its status;
- one daemon per ``SandboxClaim`` binds it (:func:`~.pool.bind_claim`) and records its status; while the
  pool has no Ready member it waits, and is woken as soon as a member changes;
- deleting a claim releases its Sandbox (:func:`~.pool.release_claim`), deleting a pool deletes its
  unclaimed members (:func:`~.pool.drain_pool`);
- event handlers on member Sandboxes and on pools wake the daemons concerned, so a refill starts the
  moment a member is claimed and a waiting claim binds the moment a member becomes Ready; a periodic
  resync (:data:`RESYNC_S`) covers a missed event.

A daemon is serial per object (kopf runs one per pool and one per claim), so a claim never binds twice;
two claims racing for one member are settled by the optimistic lock of :func:`~.pool.bind_claim`. The
blocking API calls run in threads (``asyncio.to_thread``), the waiting in the operator's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
from collections.abc import Hashable, Mapping
from typing import Any

import kopf

from mlsandbox.backends.kube.client import TransientApiError

from .model import GROUP, VERSION
from .pool import bind_claim, deleting, drain_pool, member_ready, reconcile_pool, release_claim
from .pool_api import KubePoolApi, PoolApi, Refused
from .pool_model import (
    CLAIM_NAME_LABEL,
    CLAIM_PLURAL,
    POOL_LABEL,
    POOL_PLURAL,
    SANDBOX_PLURAL,
    STATE_LABEL,
)
from .reconcile import Invalid, Status

log = logging.getLogger(__name__)

RESYNC_S = float(os.environ.get("MLSANDBOX_POOL_RESYNC_S", "15"))
"""A pool or a waiting claim is looked at again after this long even if no event woke it."""
BOUND_RESYNC_S = 60.0
"""A bound claim checks that its Sandbox still exists (a deletion event wakes it sooner)."""
RETRY_S = 2.0
"""After an API failure."""


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Wakeups:
    """Keys (a pool, a claim) that waiters sleep on until :meth:`wake`; lives in the operator's loop."""

    def __init__(self) -> None:
        self._events: dict[Hashable, asyncio.Event] = {}

    def event(self, key: Hashable) -> asyncio.Event:
        """The event the next :meth:`wake` of ``key`` sets: take it *before* looking at the state."""
        return self._events.setdefault(key, asyncio.Event())

    def wake(self, key: Hashable) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()


def _pool_key(namespace: str, pool: str) -> tuple[str, str, str]:
    return ("pool", namespace, pool)


def _claim_key(namespace: str, claim: str) -> tuple[str, str, str]:
    return ("claim", namespace, claim)


async def _sleep(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


def _changed(old: Mapping[str, Any] | None, new: Status) -> bool:
    return any((old or {}).get(k) != v for k, v in new.items())


def _ns(namespace: str | None) -> str:
    if namespace is None:
        raise kopf.PermanentError("pools and claims are namespaced objects: no namespace was given")
    return namespace


@kopf.on.startup()
def configure_pool(memo: kopf.Memo, **_: Any) -> None:
    if "pool_api" not in memo:
        memo["pool_api"] = KubePoolApi()
    memo.setdefault("wakeups", Wakeups())
    memo.setdefault("member_states", {})


def _api(memo: Any) -> PoolApi:
    return memo["pool_api"]


def _wakeups(memo: Any) -> Wakeups:
    return memo["wakeups"]


# ------------------------------------------------------------------------------------------------ pools


@kopf.daemon(GROUP, VERSION, POOL_PLURAL, cancellation_timeout=5.0)
async def keep_pool(
    name: str, namespace: str | None, uid: str, memo: Any, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """Keep the pool full and its status current, until it is deleted."""
    ns, api = _ns(namespace), _api(memo)
    known = memo.get("known_scenarios") or []
    while not stopped:
        woken = _wakeups(memo).event(_pool_key(ns, name))
        delay = RESYNC_S
        try:
            pool = await asyncio.to_thread(api.get, POOL_PLURAL, ns, name)
            if pool is None or deleting(pool):
                return
            old = pool.get("status") or {}
            try:
                status = await asyncio.to_thread(
                    reconcile_pool,
                    api=api,
                    namespace=ns,
                    name=name,
                    uid=uid,
                    spec=pool.get("spec") or {},
                    generation=int(pool["metadata"].get("generation", 0)),
                    known_scenarios=known,
                    previous=old.get("conditions") or [],
                    now=now(),
                )
            except Invalid as exc:
                status = exc.status  # waits for a change of the spec (an event wakes the daemon)
            if _changed(old, status):
                await asyncio.to_thread(api.patch_status, POOL_PLURAL, ns, name, status)
        except TransientApiError as exc:
            log.warning("pool %s/%s: %s; retrying in %.0f s", ns, name, exc, RETRY_S)
            delay = RETRY_S
        except Refused as exc:  # RBAC or admission: nothing changes until someone fixes it
            log.error("pool %s/%s: the API server refused: %s", ns, name, exc)
        await _sleep(woken, delay)


@kopf.on.delete(GROUP, VERSION, POOL_PLURAL)
async def drain(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    """Delete the pool's unclaimed members; claimed ones stay with their claims."""
    ns = _ns(namespace)
    try:
        await asyncio.to_thread(drain_pool, api=_api(memo), namespace=ns, name=name)
    except (TransientApiError, Refused) as exc:
        raise kopf.TemporaryError(str(exc), delay=RETRY_S) from exc
    _wakeups(memo).wake(_pool_key(ns, name))  # waiting claims now see the pool going


@kopf.on.event(GROUP, VERSION, POOL_PLURAL)
async def pool_changed(
    name: str,
    namespace: str | None,
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: Any,
    **_: Any,
) -> None:
    """A new spec (its generation not yet observed) or a deletion wakes the pool and its waiting claims;
    the daemon's own status patches do not."""
    fresh = meta.get("generation") != (status or {}).get("observedGeneration")
    if namespace is not None and (fresh or meta.get("deletionTimestamp")):
        _wakeups(memo).wake(_pool_key(namespace, name))


@kopf.on.event(GROUP, VERSION, SANDBOX_PLURAL, labels={POOL_LABEL: kopf.PRESENT})
async def member_changed(
    type: str,
    body: Mapping[str, Any],
    namespace: str | None,
    uid: str,
    labels: Mapping[str, str],
    memo: Any,
    **_: Any,
) -> None:
    """A member was created, became Ready, was claimed, returned, reset or deleted: wake its pool, the
    claims waiting on that pool and the claim holding it. Other changes (a deleting member's finalizer
    retries, a status rewritten the same) wake nobody."""
    if namespace is None:
        return
    seen: dict[str, tuple[Any, ...]] = memo["member_states"]
    state = (
        labels.get(STATE_LABEL),
        labels.get(CLAIM_NAME_LABEL),
        member_ready(body),
        deleting(body),
        (body.get("status") or {}).get("phase"),
    )
    if type == "DELETED":
        seen.pop(uid, None)
    elif seen.get(uid) == state:
        return
    else:
        seen[uid] = state
    _wakeups(memo).wake(_pool_key(namespace, labels[POOL_LABEL]))
    if labels.get(CLAIM_NAME_LABEL):
        _wakeups(memo).wake(_claim_key(namespace, labels[CLAIM_NAME_LABEL]))


# ----------------------------------------------------------------------------------------------- claims


@kopf.daemon(GROUP, VERSION, CLAIM_PLURAL, cancellation_timeout=5.0)
async def bind(
    name: str, namespace: str | None, uid: str, memo: Any, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """Bind the claim as soon as its pool has a Ready member; then watch that its Sandbox stays."""
    ns, api = _ns(namespace), _api(memo)
    while not stopped:
        claim = None
        delay = RESYNC_S
        try:
            claim = await asyncio.to_thread(api.get, CLAIM_PLURAL, ns, name)
            if claim is None or deleting(claim):
                return
            pool = ((claim.get("spec") or {}).get("poolRef") or {}).get("name", "")
            old = claim.get("status") or {}
            bound = old.get("phase") == "Bound"
            # Sleep on the pool while waiting for a member, on the claim once bound (its member's events).
            woken = _wakeups(memo).event(_claim_key(ns, name) if bound else _pool_key(ns, pool))
            try:
                status = await asyncio.to_thread(
                    bind_claim,
                    api=api,
                    namespace=ns,
                    name=name,
                    uid=uid,
                    spec=claim.get("spec") or {},
                    generation=int(claim["metadata"].get("generation", 0)),
                    previous=old,
                    now=now(),
                )
            except Invalid as exc:
                status = exc.status
            if _changed(old, status):
                await asyncio.to_thread(api.patch_status, CLAIM_PLURAL, ns, name, status)
            if status["phase"] == "Bound":
                if not bound:  # the member just left the pool: refill now, watch the member from here on
                    _wakeups(memo).wake(_pool_key(ns, pool))
                    woken = _wakeups(memo).event(_claim_key(ns, name))
                delay = BOUND_RESYNC_S
            elif status["phase"] in ("Lost", "Failed"):
                return  # final: the claimer deletes the claim
        except TransientApiError as exc:
            log.warning("claim %s/%s: %s; retrying in %.0f s", ns, name, exc, RETRY_S)
            woken, delay = asyncio.Event(), RETRY_S
        except Refused as exc:
            log.error("claim %s/%s: the API server refused: %s", ns, name, exc)
            woken = asyncio.Event()
        await _sleep(woken, delay)


@kopf.on.delete(GROUP, VERSION, CLAIM_PLURAL)
async def release(name: str, namespace: str | None, uid: str, memo: Any, **_: Any) -> None:
    """Give the claim's Sandbox back to its pool (warm reset) or delete it (see release_claim)."""
    ns = _ns(namespace)
    try:
        done = await asyncio.to_thread(release_claim, api=_api(memo), namespace=ns, uid=uid)
    except (TransientApiError, Refused) as exc:
        raise kopf.TemporaryError(str(exc), delay=RETRY_S) from exc
    if done["returned"] or done["deleted"]:
        log.info("claim %s/%s released: %s", ns, name, done)
