"""Shared helpers of the integration tests: free ports, a server subprocess, and the documented examples.

Every documented example of an integration (the page ``docs/integrations.md``) sits in a ```python block
right after an HTML comment ``<!-- example: NAME -->``; :func:`readme_example` returns its code and
:func:`run_example` runs it in a fresh interpreter (so it is tested exactly as a user would paste it).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "integrations.md", ROOT / "README.md")
"""Where the examples are looked for, in order."""
FAST_SCENARIO = str(ROOT / "src" / "mlsandbox" / "env" / "scenarios" / "rl-fast.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def readme_example(name: str) -> str:
    for doc in DOCS:
        m = re.search(
            rf"<!-- example: {re.escape(name)} -->\s*```python\n(.*?)```", doc.read_text(), re.DOTALL
        )
        if m:
            return m.group(1)
    raise AssertionError(
        f"no documented example {name!r} (a ```python block after <!-- example: {name} -->) in "
        + ", ".join(str(d.relative_to(ROOT)) for d in DOCS)
    )


def run_example(name: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", readme_example(name)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"documented example {name!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return done


@contextmanager
def server_process(
    args: list[str], port: int, *, ready_path: str = "/health", timeout: float = 120
) -> Iterator[str]:
    """A server started as ``python -m ARGS...`` listening on ``port``; its base URL once ``ready_path``
    answers 200; stopped (SIGTERM, then SIGKILL) at the end."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"mlsandbox-test-server-{os.getpid()}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server not ready after {timeout} s:\n{log.read_text()[-4000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.unlink(missing_ok=True)
