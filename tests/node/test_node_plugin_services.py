"""Plug-in services on real pods: the example plug-in (``examples/mlsandbox-plugin-example``) and a broken
one are installed into a directory on ``PYTHONPATH`` of a client process, as a user installs a plug-in
next to mlsandbox. ``mlsandbox up --backend kube`` starts the example's ``example-labels`` service as a pod
of the sandbox (its package shipped through MinIO, the gateway image running it), and leaves the broken
one's crashing service out with a warning naming it and showing its log; ``mlsandbox status`` lists the
service; the service answers through the client's port-forward with the sandbox's name and the in-cluster
object-store address its env was given; ``cleanup`` leaves no pod of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.integration.test_plugins import install_plugins

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

pytestmark = pytest.mark.timeout(900)

CLI = str(Path(sys.executable).parent / "mlsandbox")

CLIENT = textwrap.dedent(
    """
    import json, sys
    import httpx
    from mlsandbox.backends.kube.plugin_services import COMPONENT, SERVICE_LABEL
    from mlsandbox.backends.registry import get_backend

    backend = get_backend("kube", sys.argv[1])
    services = backend.runtime().plugin_services
    out = {"healthy": services.healthy("example-labels"), "crashes_running": services.is_running("crashes")}
    url = services.url("example-labels")
    out["url"] = url
    out["info"] = httpx.get(url.replace("/health", "/info"), timeout=10).json()
    (pod,) = services.pods("example-labels")
    out["pod"] = {
        "user": pod["spec"]["securityContext"]["runAsUser"],
        "image": pod["spec"]["containers"][0]["image"],
        "init": [c["name"] for c in pod["spec"]["initContainers"]],
    }
    out["cleaned"] = services.cleanup()
    out["left"] = [d["metadata"]["name"] for d in services.deployed()]
    print(json.dumps(out))
    """
)


def test_plugin_services_run_as_pods_of_the_sandbox(node_sandbox: NodeSandbox, tmp_path: Path) -> None:
    pythonpath = install_plugins(tmp_path)
    box = node_sandbox
    env = {**os.environ, **box.env, "PYTHONPATH": pythonpath, "COLUMNS": "250"}

    t0 = time.monotonic()
    up = subprocess.run(
        [CLI, "up", "--backend", "kube", "--name", box.name],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    print(f"mlsandbox up --backend kube with two plug-ins: {time.monotonic() - t0:.1f} s")
    assert up.returncode == 0, up.stdout + up.stderr
    both = up.stdout + up.stderr
    assert "plug-in service 'crashes'" in both and "queue: no config" in both, both
    assert "example-labels" in up.stdout  # its status row

    res = subprocess.run(
        [sys.executable, "-c", CLIENT, box.name], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["healthy"] and not out["crashes_running"], out
    assert out["url"].startswith("http://127.0.0.1:") and out["url"].endswith("/health")
    assert out["info"]["service"] == "example-labels" and out["info"]["sandbox"] == box.name
    assert out["info"]["s3_url"].endswith(".svc:9000"), out["info"]  # the in-cluster address
    assert out["pod"]["user"] == 10001 and out["pod"]["init"] == ["plugin"]
    assert out["pod"]["image"] == box.env.get("MLSANDBOX_KUBE_API_SOURCE_IMAGE", "mlsandbox/gateway:0.1.0")
    assert out["cleaned"] == 1 and out["left"] == []
    cluster = box.backend().cluster
    deadline = time.monotonic() + 120
    while cluster.list("v1", "Pod", box.namespace, "app.kubernetes.io/component=plugin-service"):
        assert time.monotonic() < deadline, "the plug-in service's pod is still there"
        time.sleep(1)
