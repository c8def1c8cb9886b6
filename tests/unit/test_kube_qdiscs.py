"""Fault types whose Chaos Mesh mechanism needs a queueing discipline the nodes' kernel lacks are
refused by name, from the nodes' labels (the real node probes its kernel at start)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from mlsandbox.backends.kube.cluster import ApiRefused
from mlsandbox.backends.kube.faults import control
from mlsandbox.backends.kube.manifests import QDISC_LABEL_PREFIX
from mlsandbox.backends.kube.node_host import qdiscs
from mlsandbox.faultkinds import qdiscs_needed


class Nodes:
    """The one call the check makes of a cluster, over a list of node label sets."""

    def __init__(self, *labels: dict[str, str], refuse: bool = False) -> None:
        self.nodes = [{"metadata": {"name": f"n{i}", "labels": dict(ls)}} for i, ls in enumerate(labels)]
        self.refuse = refuse

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> Any:
        assert (api_version, kind) == ("v1", "Node")
        if self.refuse:
            raise ApiRefused(403, "nodes is forbidden")
        return self.nodes


def label(**qdiscs: bool) -> dict[str, str]:
    return {f"{QDISC_LABEL_PREFIX}{k}": str(v).lower() for k, v in qdiscs.items()}


def test_the_declarations_name_the_disciplines() -> None:
    needed = qdiscs_needed("kube")
    assert needed["latency"] == ("netem",) and needed["bandwidth"] == ("tbf",)
    assert needed["timeout"] == ("netem",) and needed["endpoint_down"] == ("netem",)
    assert qdiscs_needed("local") == {}  # Toxiproxy needs no qdisc


def test_a_kernel_without_netem_refuses_delay_and_loss_but_not_bandwidth() -> None:
    refused = control.without_qdiscs(Nodes(label(netem=False, tbf=True)))  # type: ignore[arg-type]
    assert set(refused) == {"latency", "timeout", "endpoint_down"}
    assert "no netem queueing discipline" in refused["latency"]
    both = control.without_qdiscs(Nodes(label(netem=False, tbf=False)))  # type: ignore[arg-type]
    assert set(both) == {"latency", "timeout", "endpoint_down", "bandwidth"}


@pytest.mark.parametrize(
    "cluster",
    [
        Nodes({}),  # kind, or any cluster whose nodes do not say: taken to have them
        Nodes(label(netem=False), label(netem=True)),  # one node that has it is enough
        Nodes(label(netem=False), refuse=True),  # no right to read nodes: not refused on a guess
        Nodes(),
    ],
)
def test_nodes_that_do_not_all_lack_it_refuse_nothing(cluster: Nodes) -> None:
    assert control.without_qdiscs(cluster) == {}  # type: ignore[arg-type]


@pytest.mark.skipif(not all(shutil.which(t) for t in ("unshare", "tc")), reason="needs unshare and tc")
def test_the_probe_answers_for_each_discipline_and_leaves_the_host_alone() -> None:
    before = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True).stdout
    found = qdiscs()
    if not found:  # unshare --net needs root (CI runs as root)
        pytest.skip("cannot make a network namespace here")
    assert set(found) == {"netem", "tbf"} and all(isinstance(v, bool) for v in found.values())
    assert found["tbf"], "tbf is in every kernel Debian builds"
    after = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True).stdout
    assert after == before  # the host's loopback keeps its qdisc
