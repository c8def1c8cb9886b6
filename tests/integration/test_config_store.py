"""The config store on the sandbox's real Prefect server: names under a prefix (exactly: ``_`` is not a
wildcard), scopes journaled so a crashed writer leaves none behind, and the tags the kube backend deletes
a sandbox's variables by."""

from __future__ import annotations

import secrets
from typing import Any

from mlsandbox.backends.common.config_store import PrefectConfigStore


def test_scopes_names_and_tags_on_prefect(runtime: Any) -> None:
    url = runtime.endpoints.prefect_api_url
    run = secrets.token_hex(3)
    opened: list[str] = []
    closed: list[str] = []
    store = PrefectConfigStore(url, tags=[f"mls-test:{run}"], on_open=opened.append, on_close=closed.append)
    other = PrefectConfigStore(url, tags=[f"mls-test:other-{run}"])
    scope, lookalike = f"mls-t{run}_a-", f"mls-t{run}xa-"  # "_" would match "x" as a LIKE wildcard
    try:
        store.open_scope(scope, {"k1": "v1", "k2": "v2"})
        other.set(lookalike + "k1", "other")
        assert opened == [scope]
        assert store.names(scope) == [scope + "k1", scope + "k2"]
        assert store.get(scope + "k1") == "v1" and store.get(scope + "missing") is None
        store.set(scope + "k1", "v1b")  # an update keeps the variable (and its tags)
        assert store.get(scope + "k1") == "v1b"
        assert store.tagged() == [scope + "k1", scope + "k2"]
        store.close_scope(scope)
        assert store.names(scope) == [] and closed == [scope]
        store.close_scope(scope)  # idempotent

        store.set(scope + "left", "behind")  # what a crashed client would leave
        assert store.delete_tagged() == 1
        assert store.get(scope + "left") is None
        assert other.get(lookalike + "k1") == "other"  # another sandbox's variable is not touched
    finally:
        other.delete_tagged()
        store.close()
        other.close()


def test_the_runtime_config_store_is_journaled(runtime: Any, sandbox: Any) -> None:
    import json

    store = runtime.config
    prefix = f"mls-j{secrets.token_hex(3)}-"
    store.open_scope(prefix, {"s3_endpoint_url": store.job_config()["s3_endpoint_url"]})
    try:
        journals = [json.loads(p.read_text()) for p in (sandbox.dir / "faults").glob("*.json")]
        scopes = [e["prefix"] for j in journals for e in j["entries"].values() if e["type"] == "config_scope"]
        assert prefix in scopes
        assert store.references()["@service:minio"] == runtime.endpoints.s3_url
    finally:
        store.close_scope(prefix)
    journals = [json.loads(p.read_text()) for p in (sandbox.dir / "faults").glob("*.json")]
    assert prefix not in [e.get("prefix") for j in journals for e in j["entries"].values()]
