"""The console's server without services: access with its own token only, the episode API and its event
stream over an audit log in a temporary directory, the sandbox list and a stop through the backend
registry in a temporary sandbox home, and the assets it ships (all in the package, no reference to
anything elsewhere)."""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
import tomllib
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from mlsandbox.backends.common.audit import FileAuditLog
from mlsandbox.console.episodes import AuditSource
from mlsandbox.console.server import COOKIE, STATIC, ConsoleConfig, check_token, create_app

TOKEN = "console-test-token-0123456789"
ROOT = Path(__file__).resolve().parents[2]


def _records(n: int) -> list[dict]:
    start = {"t": 1.0, "event": "start", "episode": "7-abc", "scenario": "tabular-quality-basic", "seed": 7,
             "labels": {"interface": "env", "agent": "rule"}, "max_steps": 30, "credits": 60}  # fmt: skip
    steps = [
        {"t": 1.0 + k, "event": "step", "episode": "7-abc", "raw": {"type": "list_datasets"}, "reward": -0.02,
         "observation": {"step": k, "ok": True, "action": "list_datasets", "result": {"datasets": []}, "error": None,
                         "budget": {"credits": 60, "credits_used": 0, "steps_left": 30 - k}},
         "info": {"step": k, "reward_components": {"step_cost": -0.02}}}
        for k in range(1, n + 1)
    ]  # fmt: skip
    return [start, *steps]


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    ep = tmp_path / "sandboxes" / "sb-one" / "episodes"
    ep.mkdir(parents=True)
    (ep / "7-abc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records(2)))
    return tmp_path


def _sources(home: Path) -> list[AuditSource]:
    """The sandbox ``sb-one`` of ``home``, not running (its episodes are ``stopped``)."""
    return [AuditSource("local", "sb-one", FileAuditLog(home / "sandboxes" / "sb-one" / "episodes"), False)]


@pytest.fixture()
def client(home: Path) -> TestClient:
    app = create_app(
        ConsoleConfig(token=TOKEN, bench_roots=[home / "bench"], sources=lambda: _sources(home), poll_s=0.05)
    )
    return TestClient(app, follow_redirects=False)


def test_only_the_console_token_opens_it(client: TestClient) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        check_token("short")
    page = client.get("/")
    assert page.status_code == 401 and 'name="token"' in page.text and 'role="alert"' not in page.text
    assert client.get("/api/episodes").status_code == 401
    wrong = client.get("/", params={"token": TOKEN + "x"})
    assert (
        wrong.status_code == 401
        and "not valid" in wrong.text
        and COOKIE not in wrong.headers.get("set-cookie", "")
    )
    assert client.post("/login", data={"token": "s-0123456789abcdef"}).status_code == 401
    assert (
        client.get("/api/episodes", headers={"Authorization": "Bearer nope-nope-nope-nope"}).status_code
        == 401
    )
    client.cookies.set(COOKIE, TOKEN)
    assert client.get("/api/episodes").status_code == 401  # the token is not the session cookie
    client.cookies.clear()

    ok = client.get("/", params={"token": TOKEN})
    assert ok.status_code == 303 and ok.headers["location"] == "/"
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and TOKEN not in cookie
    index = client.get("/")
    assert index.status_code == 200 and "/static/app.js" in index.text
    assert "default-src 'self'" in index.headers["content-security-policy"]
    assert client.get("/api/episodes").status_code == 200
    # A state change with the cookie needs the header a cross-site form cannot send.
    assert client.post("/api/sandboxes/sb-one/stop").status_code == 403
    assert client.post("/api/sandboxes/Bad_Name/start", headers={"X-Console": "1"}).status_code == 422
    assert client.post("/api/sandboxes/sb-one/reboot", headers={"X-Console": "1"}).status_code == 404
    assert client.post("/logout").status_code == 303
    client.cookies.clear()
    assert client.get("/api/episodes").status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/api/episodes", headers=bearer).status_code == 200


def test_episode_api_lists_filters_and_views(client: TestClient, home: Path) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    data = client.get("/api/episodes", headers=auth).json()
    [row] = data["episodes"]
    assert (row["sandbox"], row["episode"], row["agent"], row["steps"]) == ("sb-one", "7-abc", "rule", 2)
    assert row["status"] == "stopped" and row["backend"] == "local"  # the sandbox is not running
    assert data["facets"]["agent"] == ["rule"]
    assert client.get("/api/episodes", headers=auth, params={"agent": "random"}).json()["total"] == 0
    assert (
        client.get("/api/episodes", headers=auth, params={"scenario": "tabular-quality-basic"}).json()[
            "total"
        ]
        == 1
    )
    one = client.get("/api/episodes/sb-one/7-abc", headers=auth).json()
    assert [s["step"] for s in one["view"]["steps"]] == [1, 2]
    assert one["offset"] == 3  # records read: the start and two steps
    for bad in ("/api/episodes/sb-one/..%2Fx", "/api/episodes/NOPE/7-abc", "/api/episodes/sb-one/9-none"):
        assert client.get(bad, headers=auth).status_code == 404
    assert client.get("/api/benchmarks", headers=auth).json()["runs"] == []
    assert client.get("/api/benchmarks/abc", headers=auth).status_code == 404
    bad = client.post("/api/replay", headers=auth, params={"name": "up.jsonl"}, content=b"[1]\n")
    assert bad.status_code == 422 and "up.jsonl:1: not a trajectory record" in bad.json()["detail"]


def test_event_stream_sends_the_records_appended_after_the_offset(home: Path) -> None:
    """A real server over a socket (the test client buffers streams): the page's live updates."""
    import socket

    import uvicorn

    app = create_app(ConsoleConfig(token=TOKEN, sources=lambda: _sources(home), poll_s=0.05))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    path = home / "sandboxes/sb-one/episodes/7-abc.jsonl"
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        offset = 3  # the records there are
        url = f"http://127.0.0.1:{port}/api/episodes/sb-one/7-abc/events"
        events: list[tuple[str, dict]] = []
        with httpx.stream(
            "GET", url, params={"offset": offset}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            with path.open("a") as f:
                f.write(json.dumps(_records(3)[3]) + "\n")
            name = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: ") and name:
                    events.append((name, json.loads(line.removeprefix("data: "))))
                    if name == "delta":
                        path.unlink()  # the sandbox went down: the stream says so and ends
                    if name == "gone":
                        break
        assert [n for n, _ in events] == ["delta", "gone"]
        delta = events[0][1]
        assert [s["step"] for s in delta["steps"]] == [3] and "meta" not in delta
        assert delta["offset"] == offset + 1
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_every_asset_ships_in_the_package_and_nothing_is_fetched_from_elsewhere() -> None:
    files = [p for p in STATIC.rglob("*") if p.is_file()]
    assert {"index.html", "login.html", "app.js", "style.css", "chart.umd.min.js", "chart.js.LICENSE.md"} <= {
        p.name for p in files
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["mlsandbox"]
    package = STATIC.parents[1]
    for p in files:
        rel = p.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/") for g in globs), (
            f"{rel} is not package data"
        )
    for p in files:
        if p.suffix not in (".html", ".js", ".css") or p.parent.name == "vendor":
            continue
        text = p.read_text()
        assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", text), (
            f"{p.name} refers elsewhere"
        )
        assert not re.search(r"""\bfrom\s+["']https?:""", text) and 'fetch("http' not in text
        assert "innerHTML" not in text, f"{p.name}: text goes in as text nodes"
    for page in ("index.html", "login.html"):
        html = (STATIC / page).read_text()
        for ref in re.findall(r"""(?:src|href)="([^"#]+)""", html):
            if ref.startswith("/static/"):
                assert (STATIC / ref.removeprefix("/static/")).is_file(), ref
    modules = [p for p in files if p.suffix == ".js" and p.parent.name != "vendor"]
    for p in modules:
        for ref in re.findall(r"""from\s+["'](\.[^"']+)["']""", p.read_text()):
            assert (p.parent / ref).resolve().is_file(), f"{p.name} imports {ref}"


def test_stop_from_the_console_runs_down_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox of a private home with nothing running: ``stop`` is the real ``down`` (which removes the
    sandbox's directory), reported in the list while it runs and once it is over."""
    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path))
    (tmp_path / "sandboxes" / "sb-old" / "episodes").mkdir(parents=True)
    client = TestClient(create_app(ConsoleConfig(token=TOKEN)))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    [row] = client.get("/api/sandboxes", headers=auth).json()
    assert (row["name"], row["phase"], row["running"], row["operation"]) == ("sb-old", "unknown", False, None)
    started = client.post("/api/sandboxes/sb-old/stop", headers=auth)
    assert started.status_code == 202 and started.json()["op"] == "stop"
    deadline = time.monotonic() + 30
    while (tmp_path / "sandboxes" / "sb-old").exists():
        assert time.monotonic() < deadline, "down did not remove the sandbox"
        time.sleep(0.05)
    while True:
        rows = client.get("/api/sandboxes", headers=auth).json()
        if not rows or rows[0]["operation"]["running"] is False:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert rows == []  # gone, and a finished operation on a missing sandbox is not listed
