"""The same flags mean the same on every command: ``--name/--sandbox``, ``--backend``, ``--no-start``;
``run --agent`` takes every agent ``bench`` takes; ``bench --seed`` is absolute as in ``run``; ``status`` of
a sandbox that does not exist fails; ``sandboxes`` lists them; ``mcp`` attaches to the running sandbox;
commands that take a scenario take an id or a YAML file. Episodes run on the sim backend (no service)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from mlsandbox.agents import AGENTS
from mlsandbox.backends.protocols import SandboxListing
from mlsandbox.cli.main import app

COMMAND = typer.main.get_command(app)
SANDBOX_COMMANDS = [
    ("up",), ("down",), ("status",), ("run",), ("bench",), ("serve",), ("mcp",), ("watch",),
    ("scenarios", "validate"), ("tools",), ("faults", "catalog"),
]  # fmt: skip
NO_START_COMMANDS = [("run",), ("bench",), ("serve",), ("mcp",), ("scenarios", "validate")]


def _command(path: tuple[str, ...]) -> Any:
    cmd: Any = COMMAND
    for part in path:
        cmd = cmd.commands[part]
    return cmd


def _option(cmd: Any, flag: str) -> Any:
    return next((p for p in cmd.params if p.param_type_name == "option" and flag in p.opts), None)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty sandbox home: no sandbox exists."""
    monkeypatch.setenv("MLSANDBOX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLSANDBOX_NAME", raising=False)
    return tmp_path / "home"


@pytest.mark.parametrize("path", SANDBOX_COMMANDS, ids=" ".join)
def test_every_command_addressing_a_sandbox_has_the_same_name_option(path: tuple[str, ...]) -> None:
    cmd = _command(path)
    name = _option(cmd, "--name")
    assert name is not None, f"{' '.join(path)} has no --name"
    assert set(name.opts) == {"--name", "--sandbox", "-n"} and name.envvar == "MLSANDBOX_NAME"
    assert _option(cmd, "--backend") is not None, f"{' '.join(path)} has no --backend"


@pytest.mark.parametrize("path", NO_START_COMMANDS, ids=" ".join)
def test_no_start_where_a_command_would_start_a_sandbox(path: tuple[str, ...]) -> None:
    assert _option(_command(path), "--no-start") is not None


def test_run_and_bench_refuse_to_start_a_sandbox_with_no_start(home: Path) -> None:
    for args in (["run", "-q"], ["bench", "--suite", "builtin", "--family", "churn-clean-small"]):
        res = CliRunner().invoke(app, [*args, "--name", "absent", "--no-start"])
        assert res.exit_code == 1, res.output
        assert "sandbox 'absent' is not running (--no-start)" in res.output
    assert not (home / "sandboxes" / "absent").exists()


def test_run_accepts_every_agent_bench_accepts() -> None:
    help_text = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "300"}).output
    for agent in AGENTS:
        assert agent in help_text
    for agent in ("reference", "do-nothing"):
        res = CliRunner().invoke(app, ["run", "--backend", "sim", "--name", "flags", "--agent", agent, "-q"])
        assert res.exit_code == 0, res.output
    assert "success: holdout AUC" in res.output or "not solved" in res.output
    bad = CliRunner().invoke(app, ["run", "--backend", "sim", "--agent", "nope"])
    assert bad.exit_code == 1 and "unknown agent 'nope'" in bad.output


def test_bench_seed_is_absolute_and_bench_prints_json(tmp_path: Path) -> None:
    from mlsandbox.agents.bench import plan_episodes
    from mlsandbox.scenario.suites import suite

    entries = suite("test", families=["tabular-quality-basic"], variants_per_family=2)
    assert {t.seed for t in plan_episodes(entries, ["rule"], episodes=2, base_seed=40, suite="t")} == {40, 41}
    own = plan_episodes(entries, ["rule"], episodes=1, base_seed=None, suite="t")
    assert [t.seed for t in own] == [e.scenario.seed for e in entries]

    out = tmp_path / "bench"
    res = CliRunner().invoke(
        app,
        ["bench", "--backend", "sim", "--name", "flags-bench", "--scenario", "churn-clean-small",
         "--agent", "do-nothing", "--episodes", "2", "--seed", "7", "--out", str(out), "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["agents"][0]["agent"] == "do-nothing" and summary["agents"][0]["episodes"] == 2
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [7, 8] and {r["suite"] for r in rows} == {"custom"}
    from mlsandbox import __version__

    assert all(r["extra"]["mlsandbox"]["version"] == __version__ for r in rows)  # each row says what ran
    assert json.loads((out / "summary.json").read_text())["provenance"]["machine"]["cpus"] >= 1


def test_status_of_a_sandbox_that_does_not_exist_fails(home: Path) -> None:
    res = CliRunner().invoke(app, ["status", "--name", "ghost"])
    assert res.exit_code == 1
    assert "no sandbox named 'ghost' (no local sandbox exists)" in res.output
    assert "minio" not in res.output  # no table of stopped services
    res = CliRunner().invoke(app, ["status", "--sandbox", "ghost", "--json"])
    assert res.exit_code == 1 and res.stdout == ""


def _listing(name: str, *, ephemeral: bool = False, running: bool = True) -> SandboxListing:
    return SandboxListing(
        name=name, phase="running", services_running=running, ephemeral=ephemeral, owner_pid=None,
        created_at=1_700_000_000.0,
    )  # fmt: skip


def test_sandboxes_lists_every_backends_sandboxes(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = CliRunner().invoke(app, ["sandboxes", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == []
    import mlsandbox.backends.registry as registry

    name = "a-sandbox-with-a-long-name-0123456789"
    monkeypatch.setattr(registry, "sandbox_listings", lambda: [("local", _listing(name))])
    rows = json.loads(CliRunner().invoke(app, ["sandboxes", "--json"]).stdout)
    assert rows[0]["backend"] == "local" and rows[0]["name"] == name and rows[0]["services_running"]
    table = CliRunner().invoke(app, ["ls"], env={"COLUMNS": "40"})
    assert table.exit_code == 0 and name in table.output


def test_mcp_attaches_to_the_running_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlsandbox.backends.registry as registry
    import mlsandbox.cli.interfaces as interfaces

    monkeypatch.delenv("MLSANDBOX_NAME", raising=False)
    listed: list[SandboxListing] = []
    alive: set[str] = set()
    monkeypatch.setattr(registry, "backend_type", lambda kind: SimpleNamespace(sandboxes=lambda: listed))
    monkeypatch.setattr(
        interfaces, "get_backend", lambda kind, name: SimpleNamespace(is_alive=lambda: name in alive)
    )
    assert interfaces.running_sandbox("local") == "default"  # none runs: the default one is started
    listed[:] = [_listing("mine"), _listing("owned", ephemeral=True), _listing("dead", running=False)]
    assert interfaces.running_sandbox("local") == "mine"
    alive.add("default")
    assert interfaces.running_sandbox("local") == "default"
    alive.clear()
    listed.append(_listing("other"))
    with pytest.raises(ValueError, match=r"several others are \(mine, other\): choose one with --name"):
        interfaces.running_sandbox("local")


def _scenario_file(tmp_path: Path) -> Path:
    from mlsandbox.scenario import load_builtin

    data = load_builtin("churn-clean-small").model_dump(mode="json", exclude_none=True)
    data["id"] = "my-churn"
    path = tmp_path / "my-churn.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_scenario_commands_take_an_id_or_a_file(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path)
    res = CliRunner().invoke(app, ["scenarios", "validate", str(path), "--load-only", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"scenario": str(path), "loads": True, "problem": None}]
    res = CliRunner().invoke(app, ["scenarios", "validate", "churn-clean-small", "--load-only"])
    assert res.exit_code == 0 and "1 of 1 scenarios load" in res.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: broken\nmax_steps: -1\n")
    res = CliRunner().invoke(app, ["scenarios", "validate", str(broken), "--load-only"])
    assert res.exit_code == 1 and str(broken) in res.output
    show = CliRunner().invoke(app, ["scenarios", "show", str(path)])
    assert show.exit_code == 0 and json.loads(show.stdout)["id"] == "my-churn"
    run = CliRunner().invoke(
        app, ["run", "--backend", "sim", "--name", "flags-file", "--scenario", str(path), "-q"]
    )
    assert run.exit_code == 0, run.output
    assert "success: holdout AUC" in run.output


def test_curriculum_levels_apply_from_run_and_bench(tmp_path: Path) -> None:
    from mlsandbox.faults.curriculum import apply_level
    from mlsandbox.scenario import load_builtin

    run = CliRunner().invoke(
        app,
        ["run", "--backend", "sim", "--name", "flags-level", "--scenario", "churn-clean-small",
         "--level", "slow-lake", "--agent", "do-nothing"],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert "churn-clean-small (level slow-lake)" in run.output
    out = tmp_path / "bench"
    bench = CliRunner().invoke(
        app,
        ["bench", "--backend", "sim", "--name", "flags-level", "--scenario", "churn-clean-small",
         "--level", "perfect-storm", "--agent", "do-nothing", "--out", str(out), "--json"],
    )  # fmt: skip
    assert bench.exit_code == 0, bench.output
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    storm = apply_level(load_builtin("churn-clean-small"), "perfect-storm")
    assert row["difficulty"] == storm.difficulty > load_builtin("churn-clean-small").difficulty
    assert "level: perfect-storm" in (out / "report.html").read_text()
    bad = CliRunner().invoke(app, ["run", "--backend", "sim", "--level", "nope"])
    assert bad.exit_code == 1 and "unknown curriculum level 'nope'; levels: calm" in bad.output
