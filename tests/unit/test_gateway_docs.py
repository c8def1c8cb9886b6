"""The gateway's interactive docs work offline: /docs is Swagger UI whose script and stylesheet the
gateway serves itself (vendored from npm with their licence), and nothing on the page is fetched elsewhere."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from mlsandbox.gateway import action_catalog
from mlsandbox.gateway.http import SWAGGER_DIR, create_app
from mlsandbox.gateway.sessions import ActionSpec, ToolsResponse


class _Manager:
    def tools(self) -> ToolsResponse:
        return ToolsResponse(actions=[ActionSpec(**a) for a in action_catalog()])

    def close_all(self) -> None:
        pass


def test_docs_page_and_its_assets_are_served_by_the_gateway() -> None:
    client = TestClient(create_app(_Manager()))  # type: ignore[arg-type]
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    html = page.text
    assert "/openapi.json" in html and '"validatorUrl": null' in html
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert urls and all(u.startswith("/docs/assets/") for u in urls), urls
    assert not re.search(r"https?://", html), "the page must load nothing from the network"
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200 and len(asset.content) > 500, url
    assert "SwaggerUIBundle" in client.get("/docs/assets/swagger-ui-bundle.js").text
    assert "Apache License" in (SWAGGER_DIR / "LICENSE").read_text()
    assert client.get("/redoc").status_code == 404  # not served (it would need a CDN)
    paths = client.get("/openapi.json").json()["paths"]
    assert not any(p.startswith("/docs") for p in paths)
