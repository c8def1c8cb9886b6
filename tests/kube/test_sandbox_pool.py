"""The warm pool (``SandboxPool``, ``SandboxClaim``) against a real API server, the operator running as its
own process under the chart's ClusterRole.

Each test works in a namespace of its own. Times are printed, not asserted (bench_kube.py measures them).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mlsandbox.k8s_operator.pool import bind_claim
from mlsandbox.k8s_operator.pool_api import KubePoolApi
from mlsandbox.k8s_operator.pool_model import (
    CLAIM_NAME_LABEL,
    CLAIM_UID_LABEL,
    POOL_LABEL,
    STATE_LABEL,
)
from mlsandbox.k8s_operator.testbed import Testbed

G, V = "mlsandbox.dev", "v1alpha1"
TEMPLATE = {
    "scenario": "tabular-quality-basic",
    "seed": 1,
    "budget": {"cpu": "1", "memory": "1Gi", "maxPods": 5},
}


def _custom(bed: Testbed) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(bed.api_client)


def _namespace(bed: Testbed) -> str:
    return bed.namespace(f"pool-{secrets.token_hex(3)}")


def create_pool(bed: Testbed, ns: str, name: str, size: int, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{G}/{V}",
        "kind": "SandboxPool",
        "metadata": {"name": name},
        "spec": {"size": size, "template": TEMPLATE, **spec},
    }
    return _custom(bed).create_namespaced_custom_object(G, V, ns, "sandboxpools", body)


def create_claim(bed: Testbed, ns: str, name: str, pool: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{G}/{V}",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"poolRef": {"name": pool}},
    }
    return _custom(bed).create_namespaced_custom_object(G, V, ns, "sandboxclaims", body)


def get(bed: Testbed, ns: str, plural: str, name: str) -> dict[str, Any] | None:
    try:
        return _custom(bed).get_namespaced_custom_object(G, V, ns, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def members(bed: Testbed, ns: str, pool: str, state: str | None = None) -> list[dict[str, Any]]:
    selector = f"{POOL_LABEL}={pool}" + (f",{STATE_LABEL}={state}" if state else "")
    items = _custom(bed).list_namespaced_custom_object(G, V, ns, "sandboxes", label_selector=selector)[
        "items"
    ]
    return [m for m in items if not m["metadata"].get("deletionTimestamp")]


def status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("status") or {}


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in status(obj).get("conditions") or [] if c["type"] == type_), {})


def wait_full(
    bed: Testbed, ns: str, pool: str, size: int, *, claimed: int | None = None, timeout: float = 60
) -> float:
    """Seconds until the pool's status says ``size`` unclaimed Ready Sandboxes (and ``claimed`` bound)."""

    def full() -> bool:
        s = status(get(bed, ns, "sandboxpools", pool))
        return (
            s.get("readyReplicas") == size
            and s.get("replicas") == size
            and (claimed is None or s.get("claimed") == claimed)
        )

    return bed.wait(f"pool {ns}/{pool} full ({size}, {claimed} claimed)", full, timeout)


def wait_claim(bed: Testbed, ns: str, claim: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    bed.wait(
        f"claim {ns}/{claim} {phase}",
        lambda: status(get(bed, ns, "sandboxclaims", claim)).get("phase") == phase,
        timeout,
    )
    found = get(bed, ns, "sandboxclaims", claim)
    assert found is not None
    return found


def namespace_gone(bed: Testbed, name: str) -> bool:
    try:
        client.CoreV1Api(bed.api_client).read_namespace(name)
    except ApiException as exc:
        return exc.status == 404
    return False


def table(bed: Testbed, ns: str, plural: str) -> dict[str, Any]:
    """What ``kubectl get`` shows: the server-side Table of the CRD's printer columns."""
    api = bed.api_client
    request = api.param_serialize(
        "GET",
        f"/apis/{G}/{V}/namespaces/{ns}/{plural}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    response.read()
    return json.loads(response.data)


def test_a_pool_fills_and_a_claim_binds_at_once_and_the_pool_refills(control_plane: Testbed) -> None:
    bed = control_plane
    ns = _namespace(bed)
    t0 = time.monotonic()
    pool = create_pool(bed, ns, "warm", 2)
    print(f"pool of 2: created -> full in {wait_full(bed, ns, 'warm', 2) + 0:.2f} s")
    assert condition(get(bed, ns, "sandboxpools", "warm"), "Ready")["status"] == "True"
    before = members(bed, ns, "warm")
    assert len(before) == 2
    for m in before:
        assert m["metadata"]["name"].startswith("warm-")
        assert m["metadata"]["labels"][STATE_LABEL] == "available"
        (owner,) = m["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "SandboxPool",
            pool["metadata"]["uid"],
            True,
        )
        assert m["spec"]["scenario"] == "tabular-quality-basic" and m["spec"]["episode"] == 0
        assert m["status"]["phase"] == "Ready"
        client.CoreV1Api(bed.api_client).read_namespace(m["status"]["namespace"])  # made by the operator

    t = time.monotonic()
    claim = create_claim(bed, ns, "agent-1", "warm")
    bound = wait_claim(bed, ns, "agent-1", "Bound")
    print(f"claim on a full pool -> Bound: {time.monotonic() - t:.2f} s (pool age {t - t0:.1f} s)")
    sandbox, target = bound["status"]["sandbox"], bound["status"]["namespace"]
    assert sandbox in {m["metadata"]["name"] for m in before}
    assert condition(bound, "Bound")["status"] == "True" and bound["status"]["boundAt"]
    member = get(bed, ns, "sandboxes", sandbox)
    assert member is not None and target == member["status"]["namespace"]
    labels = member["metadata"]["labels"]
    assert labels[STATE_LABEL] == "claimed" and labels[CLAIM_NAME_LABEL] == "agent-1"
    assert labels[CLAIM_UID_LABEL] == claim["metadata"]["uid"]
    (owner,) = member["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("SandboxClaim", "agent-1")  # deleting the pool leaves it alone
    assert (
        "mlsandbox.dev/finalizer"
        in (get(bed, ns, "sandboxclaims", "agent-1") or {})["metadata"]["finalizers"]
    )

    # The pool refills behind the claim: two Ready unclaimed again, one claimed.
    t = time.monotonic()
    wait_full(bed, ns, "warm", 2, claimed=1)
    print(f"refill after a claim -> full: {time.monotonic() - t:.2f} s")
    assert sandbox not in {m["metadata"]["name"] for m in members(bed, ns, "warm", "available")}

    # kubectl get shows the printer columns, filled by the API server from the status.
    pools = table(bed, ns, "sandboxpools")
    columns = [c["name"] for c in pools["columnDefinitions"]]
    assert columns[:5] == ["Name", "Scenario", "Size", "Ready", "Claimed"]
    assert pools["rows"][0]["cells"][:5] == ["warm", "tabular-quality-basic", 2, 2, 1]
    claims = table(bed, ns, "sandboxclaims")
    assert [c["name"] for c in claims["columnDefinitions"]][:5] == [
        "Name",
        "Pool",
        "Phase",
        "Sandbox",
        "Namespace",
    ]
    assert claims["rows"][0]["cells"][:5] == ["agent-1", "warm", "Bound", sandbox, target]

    # A new template replaces the unclaimed Sandboxes; the claimed one keeps its own.
    _custom(bed).patch_namespaced_custom_object(
        G, V, ns, "sandboxpools", "warm", {"spec": {"template": {**TEMPLATE, "seed": 2}}}
    )
    bed.wait(
        "unclaimed members of the new template",
        lambda: (
            len(ms := members(bed, ns, "warm", "available")) == 2
            and all(m["spec"]["seed"] == 2 and m["status"].get("phase") == "Ready" for m in ms)
        ),
    )
    assert (get(bed, ns, "sandboxes", sandbox) or {})["spec"]["seed"] == 1

    # Released into a full pool, the Sandbox is deleted (onRelease Reset returns it only into room).
    _custom(bed).delete_namespaced_custom_object(G, V, ns, "sandboxclaims", "agent-1")
    bed.wait("the released Sandbox deleted", lambda: get(bed, ns, "sandboxes", sandbox) is None, timeout=120)
    bed.wait("its namespace deleted", lambda: namespace_gone(bed, target), timeout=120)
    wait_full(bed, ns, "warm", 2, claimed=0)


def test_a_drained_pool_makes_the_claim_wait_then_bind(control_plane: Testbed) -> None:
    bed = control_plane
    ns = _namespace(bed)
    # A claim on a pool that does not exist yet waits for it.
    create_claim(bed, ns, "early", "later")
    early = wait_claim(bed, ns, "early", "Pending")
    assert condition(early, "Bound")["reason"] == "PoolNotFound"

    create_pool(bed, ns, "empty", 0)
    create_claim(bed, ns, "waiting", "empty")
    pending = wait_claim(bed, ns, "waiting", "Pending")
    assert condition(pending, "Bound")["reason"] == "PoolEmpty"
    assert condition(get(bed, ns, "sandboxpools", "empty"), "Ready")["status"] == "True"  # size 0: full
    time.sleep(1.0)
    assert status(get(bed, ns, "sandboxclaims", "waiting"))["phase"] == "Pending"  # still: nothing to take
    assert members(bed, ns, "empty") == []

    # One Sandbox is made; the claim binds as soon as it is Ready.
    t = time.monotonic()
    _custom(bed).patch_namespaced_custom_object(G, V, ns, "sandboxpools", "empty", {"spec": {"size": 1}})
    bound = wait_claim(bed, ns, "waiting", "Bound")
    print(f"claim on a drained pool -> Bound: {time.monotonic() - t:.2f} s after the pool was given room")
    member = get(bed, ns, "sandboxes", bound["status"]["sandbox"])
    assert member is not None and member["status"]["phase"] == "Ready"
    wait_full(bed, ns, "empty", 1, claimed=1)  # and refills behind it

    create_pool(bed, ns, "later", 1)
    assert wait_claim(bed, ns, "early", "Bound")["status"]["sandbox"].startswith("later-")


def test_two_claims_racing_for_one_ready_sandbox_get_one_each(control_plane: Testbed) -> None:
    bed = control_plane
    ns = _namespace(bed)
    create_pool(bed, ns, "one", 1)
    wait_full(bed, ns, "one", 1)
    (first,) = members(bed, ns, "one")

    barrier = threading.Barrier(2)

    def claim(name: str) -> None:
        barrier.wait()
        create_claim(bed, ns, name, "one")

    threads = [threading.Thread(target=claim, args=(n,)) for n in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left, right = (wait_claim(bed, ns, n, "Bound") for n in ("left", "right"))
    assert left["status"]["sandbox"] != right["status"]["sandbox"]
    assert first["metadata"]["name"] in {left["status"]["sandbox"], right["status"]["sandbox"]}
    for c in (left, right):
        holders = _custom(bed).list_namespaced_custom_object(
            G, V, ns, "sandboxes", label_selector=f"{CLAIM_UID_LABEL}={c['metadata']['uid']}"
        )["items"]
        assert [h["metadata"]["name"] for h in holders] == [c["status"]["sandbox"]]

    # The lock itself, on the API server: between bind_claim's read and its patch another claim takes
    # the only Ready Sandbox; the patch conflicts, nothing else is Ready, the claim stays Pending.
    create_pool(bed, ns, "duel", 1)
    wait_full(bed, ns, "duel", 1)
    (only,) = members(bed, ns, "duel", "available")
    api = KubePoolApi(bed.api_client)

    class Interleaved:
        """The real API; the first patch of a member is preceded by another claim's patch of it."""

        def __init__(self) -> None:
            self.raced = False

        def __getattr__(self, attr: str) -> Any:
            return getattr(api, attr)

        def patch(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> Any:
            if not self.raced:
                self.raced = True
                rival = {"metadata": {"labels": {"mlsandbox.dev/rival": "took-it"}}}
                api.patch(plural, namespace, name, rival)  # bumps its resourceVersion
            return api.patch(plural, namespace, name, body)

    racing = Interleaved()
    result = bind_claim(
        api=racing,  # type: ignore[arg-type]
        namespace=ns,
        name="loser",
        uid="00000000-0000-0000-0000-000000000000",
        spec={"poolRef": {"name": "duel"}},
        generation=1,
        now="2026-01-01T00:00:00Z",
    )
    assert racing.raced
    assert result["phase"] == "Pending" and result["conditions"][0]["reason"] == "PoolEmpty"
    untouched = get(bed, ns, "sandboxes", only["metadata"]["name"])
    assert untouched is not None and untouched["metadata"]["labels"][STATE_LABEL] == "available"


@contextlib.contextmanager
def no_new_sandboxes(bed: Testbed, ns: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy refusing every new Sandbox in ``ns`` while the block runs."""
    name = f"no-new-sandboxes-{ns}"
    bed.api.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [G],
                            "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": ["sandboxes"],
                        }
                    ]
                },
                "validations": [{"expression": "false", "message": "no new Sandboxes here"}],
            },
        }
    )
    bed.api.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
            },
        }
    )
    probe = {"apiVersion": f"{G}/{V}", "kind": "Sandbox", "metadata": {"name": "probe"}, "spec": TEMPLATE}

    def refused() -> bool:
        try:
            _custom(bed).create_namespaced_custom_object(G, V, ns, "sandboxes", probe, dry_run="All")
        except ApiException as exc:
            return "no new Sandboxes here" in exc.body
        return False

    bed.wait("the admission policy in force", refused)
    try:
        yield
    finally:
        bed.api.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", name)
        bed.api.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name)


def test_release_returns_with_a_warm_reset_when_the_pool_has_room_else_deletes(
    control_plane: Testbed,
) -> None:
    bed = control_plane
    core = client.CoreV1Api(bed.api_client)
    # Once the pool is full, an admission policy refuses new Sandboxes in its namespace: the pool cannot
    # refill behind the claim, so it has room when the claim is released, and takes its Sandbox back.
    ns = _namespace(bed)
    create_pool(bed, ns, "tight", 2)
    wait_full(bed, ns, "tight", 2)
    with no_new_sandboxes(bed, ns):
        create_claim(bed, ns, "held", "tight")
        sandbox = wait_claim(bed, ns, "held", "Bound")["status"]["sandbox"]
        refused = bed.wait(
            "the refill refused by admission",
            lambda: (
                condition(get(bed, ns, "sandboxpools", "tight"), "Degraded").get("reason") == "CreateRefused"
            ),
        )
        message = condition(get(bed, ns, "sandboxpools", "tight"), "Degraded")["message"]
        assert "no new Sandboxes here" in message, message
        print(f"refill refused by admission, reported in {refused:.2f} s")
        assert status(get(bed, ns, "sandboxpools", "tight"))["replicas"] == 1
        target = (get(bed, ns, "sandboxes", sandbox) or {})["status"]["namespace"]
        uid = core.read_namespace(target).metadata.uid
        core.create_namespaced_config_map(
            target, {"metadata": {"name": "episode-left", "labels": {"mlsandbox.world.episode": "ep-1"}}}
        )

        t = time.monotonic()
        _custom(bed).delete_namespaced_custom_object(G, V, ns, "sandboxclaims", "held")
        bed.wait("the claim released", lambda: get(bed, ns, "sandboxclaims", "held") is None)
        wait_full(bed, ns, "tight", 2, claimed=0)
        print(f"release -> back in the pool, reset and Ready: {time.monotonic() - t:.2f} s")
    back = get(bed, ns, "sandboxes", sandbox)
    assert back is not None
    assert back["metadata"]["labels"][STATE_LABEL] == "available"
    assert CLAIM_UID_LABEL not in back["metadata"]["labels"]
    assert back["metadata"]["ownerReferences"][0]["kind"] == "SandboxPool"
    assert back["spec"]["episode"] == 1 and back["status"]["episode"] == 1  # a warm reset
    assert core.read_namespace(target).metadata.uid == uid  # the same namespace
    bed.wait(
        "the previous episode's objects gone",
        lambda: not core.list_namespaced_config_map(target, label_selector="mlsandbox.world.episode").items,
    )

    # A full pool, or onRelease: Delete: the released Sandbox is deleted with its namespace.
    ns2 = _namespace(bed)
    create_pool(bed, ns2, "fresh", 1, onRelease="Delete")
    wait_full(bed, ns2, "fresh", 1)
    create_claim(bed, ns2, "once", "fresh")
    used = wait_claim(bed, ns2, "once", "Bound")["status"]
    wait_full(bed, ns2, "fresh", 1, claimed=1)
    _custom(bed).delete_namespaced_custom_object(G, V, ns2, "sandboxclaims", "once")
    seconds = bed.wait(
        "the released Sandbox deleted",
        lambda: get(bed, ns2, "sandboxes", used["sandbox"]) is None,
        timeout=120,
    )
    assert bed.wait("its namespace deleted", lambda: namespace_gone(bed, used["namespace"]), timeout=120) >= 0
    print(f"release (Delete) -> Sandbox gone: {seconds:.2f} s")
    wait_full(bed, ns2, "fresh", 1, claimed=0)


def test_deleting_the_pool_cleans_up_and_leaves_bound_sandboxes_to_their_claims(
    control_plane: Testbed,
) -> None:
    bed = control_plane
    ns = _namespace(bed)
    create_pool(bed, ns, "gone", 2)
    wait_full(bed, ns, "gone", 2)
    create_claim(bed, ns, "keeper", "gone")
    kept = wait_claim(bed, ns, "keeper", "Bound")["status"]
    wait_full(bed, ns, "gone", 2, claimed=1)
    unclaimed = [
        (m["metadata"]["name"], m["status"]["namespace"]) for m in members(bed, ns, "gone", "available")
    ]

    _custom(bed).delete_namespaced_custom_object(G, V, ns, "sandboxpools", "gone")
    seconds = bed.wait("the pool gone", lambda: get(bed, ns, "sandboxpools", "gone") is None)
    for name, target in unclaimed:
        bed.wait(
            f"Sandbox {name} gone", lambda name=name: get(bed, ns, "sandboxes", name) is None, timeout=120
        )
        bed.wait(f"namespace {target} gone", lambda target=target: namespace_gone(bed, target), timeout=120)
    print(f"pool deleted -> gone {seconds:.2f} s, its unclaimed Sandboxes and namespaces after")
    assert (get(bed, ns, "sandboxes", kept["sandbox"]) or {}).get("status", {}).get("phase") == "Ready"
    assert status(get(bed, ns, "sandboxclaims", "keeper"))["phase"] == "Bound"

    # Releasing the claim of a deleted pool deletes its Sandbox.
    _custom(bed).delete_namespaced_custom_object(G, V, ns, "sandboxclaims", "keeper")
    bed.wait(
        "the bound Sandbox deleted", lambda: get(bed, ns, "sandboxes", kept["sandbox"]) is None, timeout=120
    )
    bed.wait("its namespace deleted", lambda: namespace_gone(bed, kept["namespace"]), timeout=120)


def test_a_sandbox_deleted_under_its_claim_is_reported_lost(control_plane: Testbed) -> None:
    bed = control_plane
    ns = _namespace(bed)
    create_pool(bed, ns, "p", 1)
    wait_full(bed, ns, "p", 1)
    create_claim(bed, ns, "c", "p")
    sandbox = wait_claim(bed, ns, "c", "Bound")["status"]["sandbox"]
    _custom(bed).delete_namespaced_custom_object(G, V, ns, "sandboxes", sandbox)
    lost = wait_claim(bed, ns, "c", "Lost", timeout=120)
    assert (
        condition(lost, "Bound")["reason"] == "SandboxLost" and sandbox in condition(lost, "Bound")["message"]
    )


def test_invalid_pools_and_claims_are_refused_with_a_reason(control_plane: Testbed) -> None:
    bed = control_plane
    ns = _namespace(bed)
    custom = _custom(bed)
    refused = {
        "negative size": lambda: create_pool(bed, ns, "neg", -1),
        "unknown onRelease": lambda: create_pool(bed, ns, "bad", 1, onRelease="Keep"),
        "a name too long": lambda: create_pool(bed, ns, "p" * 41, 1),
        "no poolRef": lambda: custom.create_namespaced_custom_object(
            G,
            V,
            ns,
            "sandboxclaims",
            {"apiVersion": f"{G}/{V}", "kind": "SandboxClaim", "metadata": {"name": "x"}, "spec": {}},
        ),
    }
    for what, create in refused.items():
        with pytest.raises(ApiException) as info:
            create()
        assert info.value.status == 422, what

    create_claim(bed, ns, "fixed", "somewhere")
    with pytest.raises(ApiException) as info:
        custom.patch_namespaced_custom_object(
            G, V, ns, "sandboxclaims", "fixed", {"spec": {"poolRef": {"name": "elsewhere"}}}
        )
    assert info.value.status == 422 and "poolRef is immutable" in info.value.body

    # Valid for the API server, not for the operator: no Sandbox is made, the status says why.
    create_pool(bed, ns, "typo", 2, template={"scenario": "no-such-scenario"})
    bed.wait(
        "the pool marked not Ready",
        lambda: condition(get(bed, ns, "sandboxpools", "typo"), "Ready").get("reason") == "UnknownScenario",
    )
    assert "no-such-scenario" in condition(get(bed, ns, "sandboxpools", "typo"), "Ready")["message"]
    assert members(bed, ns, "typo") == []
