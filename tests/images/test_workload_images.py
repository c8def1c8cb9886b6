"""The workload images, built for real and run: each Dockerfile under ``workloads/`` takes its base image as
a build argument; here it is built with the local docker engine against a base made without any registry
(``scripts/build-base-image.sh``: debootstrap + docker import), then the image's own smoke command (its
``dev.mlsandbox.smoke`` label) runs in a container with no network.

Needs a docker engine: ``scripts/docker-engine.sh`` (as root) installs Debian's docker.io and debootstrap
and starts dockerd. Without one the tests fail with that instruction; they are never skipped.
``MLSANDBOX_TEST_BASE_IMAGE`` uses another base (e.g. ``debian:bookworm-slim`` where a registry is reachable).

Every container started here carries the label ``dev.mlsandbox.test`` and the pytest process id
(``dev.mlsandbox.owner-pid``); it is removed in ``finally``, and containers of dead owners are removed
when the module starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.images, pytest.mark.services]

ROOT = Path(__file__).resolve().parents[2]
DOCKER = os.environ.get("DOCKER", "docker")
IMAGES = ("trainer", "model-server", "gateway")
TEST_LABEL = "dev.mlsandbox.test"
OWNER_LABEL = "dev.mlsandbox.owner-pid"
RESULT_PREFIX = "MLSANDBOX_RESULT "
LOCAL_BASE = "mlsandbox/base:bookworm"
ENGINE_HINT = (
    "run scripts/docker-engine.sh as root (installs Debian's docker.io and debootstrap, starts dockerd), "
    "or start Docker"
)
BUILD_TIMEOUT_S = 1500
SMOKE_TIMEOUT_S = 600


class EngineMissing(RuntimeError):
    """No docker engine can be used from here."""


def docker(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def check_engine(env: dict[str, str] | None = None) -> str:
    """The engine's version, or :class:`EngineMissing` saying precisely what is missing and what to do."""
    try:
        info = docker("version", "--format", "{{.Server.Version}}", timeout=30, env=env)
    except FileNotFoundError:
        raise EngineMissing(f"no docker client {DOCKER!r} on PATH: {ENGINE_HINT}") from None
    if info.returncode != 0 or not info.stdout.strip():
        reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        raise EngineMissing(f"no docker engine answers ({DOCKER} version: {reason}): {ENGINE_HINT}")
    return info.stdout.strip()


def remove_orphan_containers() -> list[str]:
    """Containers of earlier test runs whose pytest process is gone."""
    listed = docker(
        "ps",
        "-a",
        "--filter",
        f"label={TEST_LABEL}",
        "--format",
        f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}',
    )
    stale = []
    for line in listed.stdout.splitlines():
        cid, _, pid = line.partition(" ")
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            stale.append(cid)
    if stale:
        docker("rm", "-f", *stale)
    return stale


@pytest.fixture(scope="module")
def engine() -> str:
    try:
        version = check_engine()
    except EngineMissing as e:
        pytest.fail(str(e), pytrace=False)
    remove_orphan_containers()
    return version


@pytest.fixture(scope="module")
def base_image(engine: str) -> str:
    chosen = os.environ.get("MLSANDBOX_TEST_BASE_IMAGE")
    if chosen:
        return chosen
    done = build_base()
    assert done.returncode == 0, f"build-base-image.sh failed:\n{done.stdout}\n{done.stderr}"
    return LOCAL_BASE


def build(name: str, base: str) -> tuple[str, float]:
    tag = f"mlsandbox/{name}:test"
    started = time.monotonic()
    done = docker(
        "build", "-q", "-f", str(ROOT / "workloads" / f"Dockerfile.{name}"), "--build-arg", f"BASE_IMAGE={base}", "-t", tag,
        str(ROOT), timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"docker build of {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return tag, time.monotonic() - started


@pytest.fixture
def container_name() -> Iterator[str]:
    name = f"mlsandbox-test-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        docker("rm", "-f", name)


def run_smoke(tag: str, name: str) -> subprocess.CompletedProcess[str]:
    labels = json.loads(docker("image", "inspect", tag, "--format", "{{json .Config.Labels}}").stdout)
    command = json.loads(labels["dev.mlsandbox.smoke"])
    return docker(
        "run", "--name", name, "--network", "none",
        "--label", f"{TEST_LABEL}=images", "--label", f"{OWNER_LABEL}={os.getpid()}",
        tag, *command, timeout=SMOKE_TIMEOUT_S,
    )  # fmt: skip


def result_line(out: str) -> dict[str, object]:
    lines = [line for line in out.splitlines() if line.startswith(RESULT_PREFIX)]
    assert lines, f"no {RESULT_PREFIX.strip()} line in the output:\n{out[-3000:]}"
    return dict(json.loads(lines[-1].removeprefix(RESULT_PREFIX)))


def test_a_missing_engine_fails_with_the_remedy() -> None:
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/mlsandbox-docker.sock")
    with pytest.raises(EngineMissing, match=r"no docker engine answers .*scripts/docker-engine\.sh as root"):
        check_engine(env)


def build_base(tag: str = LOCAL_BASE, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    script = str(ROOT / "scripts" / "build-base-image.sh")
    return subprocess.run([script, tag], capture_output=True, text=True, timeout=timeout, check=False)


def test_the_local_base_image_is_built_once_then_cached(engine: str) -> None:
    first = build_base()
    assert first.returncode == 0, f"build-base-image.sh failed:\n{first.stdout}\n{first.stderr}"
    started = time.monotonic()
    again = build_base(timeout=120)
    assert again.returncode == 0, again.stderr
    assert "present (cached" in again.stdout
    assert time.monotonic() - started < 30
    labels = ["--label", f"{TEST_LABEL}=images", "--label", f"{OWNER_LABEL}={os.getpid()}"]
    check = docker("run", "--rm", "--network", "none", *labels, LOCAL_BASE,
                   "python3", "-c", "import sys, venv, ensurepip; print(sys.version_info[:2])")  # fmt: skip
    assert check.returncode == 0 and check.stdout.strip() == "(3, 11)", check.stderr


@pytest.mark.timeout(BUILD_TIMEOUT_S + SMOKE_TIMEOUT_S + 60)
@pytest.mark.parametrize("image", IMAGES)
def test_image_builds_and_passes_its_smoke_check(image: str, base_image: str, container_name: str) -> None:
    tag, seconds = build(image, base_image)
    config = json.loads(docker("image", "inspect", tag, "--format", "{{json .Config}}").stdout)
    assert config["Labels"]["dev.mlsandbox.image"] == image
    assert config["User"] == "10001:10001", "the workload must not run as root"
    size_mb = int(docker("image", "inspect", tag, "--format", "{{.Size}}").stdout) / 1e6
    print(f"{image}: built in {seconds:.1f} s, {size_mb:.0f} MB")

    done = run_smoke(tag, container_name)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"smoke check of {image} exited {done.returncode}:\n{out[-5000:]}"
    if image == "gateway":
        lines = done.stdout.strip().splitlines()
        assert lines[0].startswith("mlsandbox "), out  # --version
        assert any(line.startswith("openenv ") and "healthy" in line for line in lines), out  # its server
        assert int(lines[-1]) > 0, "the operator sees no built-in scenario"
        return
    result = result_line(done.stdout)
    trained = result["trainer"]
    assert isinstance(trained, dict)
    assert trained["model_uri"].startswith("models:/")
    assert 0.7 <= trained["metrics"]["val_auc"] <= 1.0
    if image == "trainer":  # the flow runs of the chart's Prefect worker are Jobs of this image
        assert result["flows"] == {"flows": ["batch_scoring", "ingestion", "training"], "prefect": "3.9.1"}
    if image == "model-server":
        server = result["server"]
        assert isinstance(server, dict)
        assert server["health"] == 200
        assert len(server["predictions"]) == 3
    # The container is gone once the fixture ends; while the test runs it is findable by its label.
    found = docker("ps", "-a", "--filter", f"label={OWNER_LABEL}={os.getpid()}", "--format", "{{.Names}}")
    assert container_name in found.stdout.split()
