"""``scripts/docker-engine.sh --stop`` undoes what dockerd did to iptables: the script it feeds to
``iptables-restore`` against the ruleset recorded before dockerd started (no iptables needed here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker-engine.sh"

BEFORE = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:MINE - [0:0]
-A INPUT -i lo -j ACCEPT
-A FORWARD -j MINE
COMMIT
"""
AFTER = """*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:MINE - [0:0]
:DOCKER - [0:0]
:DOCKER-USER - [0:0]
-A INPUT -i lo -j ACCEPT
-A FORWARD -j MINE
-A FORWARD -j DOCKER-USER
-A FORWARD -o docker0 -j DOCKER
-A DOCKER-USER -j RETURN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
COMMIT
"""


def undo(before: str, after: str, tmp_path: Path) -> str:
    recorded = tmp_path / "iptables"
    recorded.write_text(before)
    done = subprocess.run(
        ["bash", "-c", f'source <(sed -n "/^undo_script()/,/^}}/p" {SCRIPT}); undo_script {recorded}'],
        input=after,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_dockerd_rules_chains_and_policy_are_undone_and_nothing_else(tmp_path: Path) -> None:
    script = undo(BEFORE, AFTER, tmp_path)
    assert script.splitlines() == [
        "*filter",
        "-D FORWARD -j DOCKER-USER",
        "-D FORWARD -o docker0 -j DOCKER",
        "-F DOCKER",
        "-F DOCKER-USER",
        "-X DOCKER",
        "-X DOCKER-USER",
        "-P FORWARD ACCEPT",
        "COMMIT",
        "*nat",
        "-D PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
        "-D POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE",
        "-F DOCKER",
        "-X DOCKER",
        "COMMIT",
    ]


def test_with_no_table_before_the_policy_goes_back_to_accept(tmp_path: Path) -> None:
    script = undo("", AFTER, tmp_path)
    assert "-P FORWARD ACCEPT" in script and "-D FORWARD -j MINE" not in script


def test_nothing_to_undo_when_dockerd_changed_nothing(tmp_path: Path) -> None:
    assert undo(BEFORE, BEFORE, tmp_path) == ""
