"""Nothing outlives a node: ``down`` of the session's node (after every other test used it, with the
chart's pods running) and ``mlsandbox gc`` after a node's owner was SIGKILLed leave no process, cgroup,
iptables chain, ipset, network link or mount behind. Each compares the machine with the snapshot its node
took under the node lock before it changed anything (what that node left, whatever ran before it). These
tests run last in the session (see conftest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from mlsandbox.backends.kube import node

if TYPE_CHECKING:
    from tests.conftest import NodeSession as Session

pytestmark = pytest.mark.timeout(1800)


def _node_processes() -> list[str]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if node.MARKER_ENV in proc.environ() or any(
                str(node.base_dir()) in a for a in proc.info["cmdline"] or []
            ):
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:120]}")
        except (psutil.Error, OSError):
            continue
    return found


def _leftovers(baseline: dict[str, Any]) -> dict[str, Any]:
    """What differs from the state before the node, in the node's own kinds of things."""
    now = node.snapshot()
    chains = {
        f"{family}/{table}/{chain}"
        for family, tables in now["chains"].items()
        for table, names in tables.items()
        for chain in names
        if chain.startswith(node.CHAIN_PREFIXES)
        and chain not in baseline["chains"].get(family, {}).get(table, [])
    }
    runs = node.base_dir() / "runs"
    return {
        "processes": _node_processes(),
        "chains": sorted(chains),
        "ipsets": sorted(set(now["ipsets"]) - set(baseline["ipsets"])),
        "links": sorted(set(now["links"]) - set(baseline["links"])),
        "mounts": sorted(
            m for m in set(now["mounts"]) - set(baseline["mounts"]) if str(node.base_dir()) in m
        ),
        "cgroups": [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{node.CGROUP_ROOT}")],
        "node directories": sorted(p.name for p in runs.iterdir()) if runs.is_dir() else [],
        "kernel settings": {k: v for k, v in now["sysctls"].items() if baseline["sysctls"].get(k) != v},
        "route rules": sorted(set(now["route rules"]) - set(baseline["route rules"])),
        "directories": sorted(
            set(now["dirs"]) - set(baseline["dirs"]) - {"/run/containerd", "/run/containerd/s"}
        ),
    }


def _nothing(left: dict[str, Any]) -> bool:
    return not any(left.values())


def test_down_leaves_nothing_behind(node_session: Session) -> None:
    from tests.conftest import start_node_session_cluster

    if node_session.cluster is None:  # run alone: make a node to take down
        node_session.cluster = start_node_session_cluster(node_session)
    cluster = node_session.cluster
    # What this node left is measured against the machine as it found it (its snapshot, taken under the
    # node lock before it changed anything), not against a state some other node may have been in.
    baseline = cluster.node.baseline
    try:
        # The node made real things: its bridge, its pods' veths and mounts, kube-proxy's and
        # kube-router's chains; its pods run (the chart's, with whatever state the tests left them in).
        during = _leftovers(baseline)
        running = cluster.node.crictl("pods", "-q", "--state", "ready").stdout.split()
        cluster.node.stop(release_lock=False)  # no other node may start while the machine is looked at
        left = _leftovers(baseline)
    finally:
        cluster.node.release()
        node_session.stop()  # the control plane goes too
    assert node.BRIDGE in during["links"] and during["chains"] and during["mounts"], during
    assert running, "no pod ran on the node when it was taken down"
    assert _nothing(left), {k: v for k, v in left.items() if v}


CHILD = """
import sys, time
from mlsandbox.backends.kube import controlplane, node
cp = controlplane.start(kwok=False)
n = node.start(cp)
from kubernetes import client
core = client.CoreV1Api(cp.api_client())
core.create_namespaced_pod("default", {
    "metadata": {"name": "orphan"},
    "spec": {"containers": [{"name": "c", "image": "mlsandbox/base:bookworm", "imagePullPolicy": "Never",
                             "command": ["sleep", "3600"]}]}})
while core.read_namespaced_pod("orphan", "default").status.phase != "Running":
    time.sleep(0.2)
print("READY", n.root, flush=True)
time.sleep(3600)
"""


def test_gc_removes_a_node_whose_owner_was_killed(node_session: Session) -> None:
    node_session.stop()  # one node at a time on a machine: the shared one must be down
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("READY"), (
            f"the child's node did not start:\n{line}{child.stderr.read() if child.stderr else ''}"
        )
        root = Path(line.split()[1])
        # The machine as the child's node found it (its snapshot, taken under the node lock).
        baseline = json.loads((root / "baseline.json").read_text())
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
        time.sleep(1)
        # Its owner is gone, the node is not: the kubelet, containerd and the pod still run.
        orphans = _leftovers(baseline)
        assert orphans["processes"] and root.is_dir() and orphans["chains"], orphans

        gc = subprocess.run(
            [str(Path(sys.executable).parent / "mlsandbox"), "gc", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert gc.returncode == 0, gc.stderr
        removed = [item["what"] for item in json.loads(gc.stdout)]
        assert any(what.startswith(f"node {root.name}: owner gone") for what in removed), removed
        lock = node.NodeLock()  # no other node may start while the machine is looked at
        lock.acquire(900, print)
        try:
            left = _leftovers(baseline)
        finally:
            lock.close()
        assert _nothing(left), {k: v for k, v in left.items() if v}
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        node.collect_garbage()
