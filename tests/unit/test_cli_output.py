"""Output a program can read: nothing cut when stdout is not a terminal, ``--json`` on listing commands,
``replay`` never hard-wrapping the text an LLM agent reads."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.table import Table
from typer.testing import CliRunner

from mlsandbox.agents.runner import EpisodeResult, StepRecord
from mlsandbox.agents.trajectory import write_trajectory
from mlsandbox.cli.common import make_console
from mlsandbox.cli.main import app
from mlsandbox.scenario import catalog_ids, load_builtin

LONG_URL = "http://127.0.0.1:34123/" + "x" * 180


def test_a_console_that_is_not_a_terminal_cuts_no_cell() -> None:
    out = io.StringIO()
    con = make_console()
    con.file = out
    table = Table(title="t")
    table.add_column("id")
    table.add_column("url")
    table.add_row("tabular-quality-basic-variant-0123456789", LONG_URL)
    con.print(table)
    con.print("word " * 100)
    text = out.getvalue()
    assert LONG_URL in text and "tabular-quality-basic-variant-0123456789" in text and "…" not in text
    assert ("word " * 100).strip() in text  # one line, not wrapped at 80 columns


def test_scenarios_list_prints_whole_rows_and_json() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["scenarios", "list"], env={"COLUMNS": "60"})
    assert res.exit_code == 0, res.output
    for sid in catalog_ids():
        sc = load_builtin(sid)
        line = next(ln for ln in res.output.splitlines() if f" {sid} " in ln)
        assert sc.title in line, (sc.title, line)
    res = runner.invoke(app, ["scenarios", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["id"] for r in rows] == catalog_ids()
    assert set(rows[0]) == {"id", "difficulty", "kind", "metric", "title", "max_steps", "credits"}


def test_replay_does_not_hard_wrap_observation_text(tmp_path: Path) -> None:
    long_text = "a long line of data quality findings " * 12
    obs = {"step": 0, "ok": True, "action": None, "result": {"task": long_text.strip()}, "error": None,
           "budget": {"credits": 10, "credits_used": 0, "steps_left": 2}}  # fmt: skip
    res = EpisodeResult("s", "rule", 3, "3-abc", total_reward=-0.02, components={})
    res.first_observation, res.reset_info = obs, {}
    res.steps.append(StepRecord(1, {"type": "submit"}, {**obs, "step": 1}, -0.02, {}, None, info={}))
    path = write_trajectory(res, tmp_path / "ep.jsonl")
    out = CliRunner().invoke(app, ["replay", str(path)], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert long_text.strip() in out.output
