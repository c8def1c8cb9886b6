"""``python -m mlsandbox.integrations.openenv.smoke``: the OpenEnv server answers, with no sandbox and no network.

Builds the app in-process and calls it through Starlette's test client: ``/health``, ``/metadata``,
``/schema`` (the catalog in the action schema) and MCP ``tools/list``; prints one line ``openenv ...`` and
exits 0, or names what failed and exits 1. The gateway image runs it as part of its smoke check.
"""

from __future__ import annotations

import sys


def main() -> int:
    from fastapi.testclient import TestClient

    from mlsandbox.gateway.registry import get_catalog
    from mlsandbox.integrations.openenv.server import create_openenv_app

    types = list(get_catalog().types)
    with TestClient(create_openenv_app(sandbox="smoke")) as client:
        health = client.get("/health").json()
        meta = client.get("/metadata").json()
        schema = client.get("/schema").json()
        tools = client.post("/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "id": 1}).json()
    problems = []
    if health.get("status") != "healthy":
        problems.append(f"/health: {health}")
    if meta.get("name") != "mlsandbox":
        problems.append(f"/metadata: {meta}")
    if schema["action"]["properties"]["type"].get("enum") != types:
        problems.append("/schema: the action schema does not list the catalog")
    if [t["name"] for t in tools.get("result", {}).get("tools", [])] != types:
        problems.append(f"/mcp tools/list: {tools}")
    if problems:
        print("openenv smoke check failed: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"openenv {meta['version']}: healthy, {len(types)} actions in /schema and MCP tools/list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
