"""Fixtures of the console's browser tier: one console server (``mlsandbox console``, a real process) over
the session's real sandbox, and one Chromium (Debian's ``chromium`` package, driven by Playwright) with a
fresh profile, both shared by the tier."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
TOKEN = "browser-tier-token-0123456789abcdef"


@dataclass
class Console:
    url: str
    token: str
    bench_root: Path
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def console(sandbox: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """``mlsandbox console`` on a free port, its benchmark root an empty temporary directory."""
    bench_root = tmp_path_factory.mktemp("bench-results")
    port = _free_port()
    log = tmp_path_factory.mktemp("console-log") / "console.log"
    script = Path(sys.executable).with_name("mlsandbox")
    cmd = [str(script), "console", "--port", str(port), "--token", TOKEN, "--bench", str(bench_root)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlsandbox console exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlsandbox console did not answer within 90 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield Console(url, TOKEN, bench_root, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Chromium context with a fresh profile (Playwright cannot download browsers here: the system's)."""
    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 860},
        )
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            context.close()


@dataclass
class Page:
    page: Any
    errors: list[str]


@pytest.fixture()
def page(browser: Any, console: Console) -> Iterator[Page]:
    """A signed-in tab; the test fails on any script error or refused resource in it."""
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    tab.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    response = tab.goto(f"{console.url}/?token={console.token}")
    assert response is not None and response.ok
    try:
        yield Page(tab, errors)
    finally:
        tab.close()
    assert not errors, errors
