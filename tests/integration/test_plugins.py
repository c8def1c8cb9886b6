"""Plug-ins through entry points: the example package under examples/ is installed (into a directory put
on PYTHONPATH of subprocesses, so this test session's own catalog stays the built-in one) and exercised:
its action pack, scenario catalog and reward term; a broken plug-in is reported and the rest still work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "mlsandbox-plugin-example"
UV = Path(os.environ.get("MLSANDBOX_HOME", Path.home() / ".cache" / "mlsandbox")) / "tools" / "bin" / "uv"

BROKEN_PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "mlsandbox-plugin-broken"
version = "0.0.1"

[project.entry-points."mlsandbox.scenarios"]
missing = "mlsandbox_plugin_broken:nowhere"

[project.entry-points."mlsandbox.reward_terms"]
not_callable = "mlsandbox_plugin_broken:NOT_CALLABLE"
import_fails = "mlsandbox_plugin_broken_gone.module:term"

[project.entry-points."mlsandbox.services"]
queue = "mlsandbox_plugin_broken:NOT_CALLABLE"
"""


def _install(src: Path, target: Path) -> None:
    uv = str(UV) if UV.exists() else shutil.which("uv")
    if uv is not None:
        cmd = [uv, "pip", "install", "-q", "--no-deps", "--target", str(target), str(src)]
        env = {**os.environ, "VIRTUAL_ENV": sys.prefix}
    else:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(src)]
        env = dict(os.environ)
    subprocess.run(cmd, check=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("plugins")
    work = base / "src"
    shutil.copytree(EXAMPLE, work / "example", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    broken = work / "broken"
    (broken / "mlsandbox_plugin_broken").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(BROKEN_PYPROJECT)
    (broken / "mlsandbox_plugin_broken" / "__init__.py").write_text("NOT_CALLABLE = 42\n")
    good, bad = base / "good", base / "bad"
    _install(work / "example", good)
    _install(broken, bad)
    yield f"{good}{os.pathsep}{bad}"


def run(args: list[str], pythonpath: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "250"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, **kw)


def test_plugins_lists_every_entry_point_with_origin_and_status(plugin_path: str) -> None:
    res = run([sys.executable, "-m", "mlsandbox.cli", "plugins", "--json"], plugin_path)
    assert res.returncode == 0, res.stderr
    rows = {(r["group"], r["name"]): r for r in json.loads(res.stdout)}
    for key in [("mlsandbox.action_packs", "example"), ("mlsandbox.scenarios", "example"),
                ("mlsandbox.reward_terms", "example_lineage")]:  # fmt: skip
        assert rows[key]["status"] == "ok" and rows[key]["origin"] == "mlsandbox-plugin-example 0.1.0"
    missing = rows[("mlsandbox.scenarios", "missing")]
    assert missing["status"] == "error" and missing["origin"] == "mlsandbox-plugin-broken 0.0.1"
    assert "plug-in 'missing' (mlsandbox_plugin_broken:nowhere" in missing["detail"]
    assert "AttributeError" in missing["detail"]
    assert "expected a callable" in rows[("mlsandbox.reward_terms", "not_callable")]["detail"]
    assert "ModuleNotFoundError" in rows[("mlsandbox.reward_terms", "import_fails")]["detail"]
    assert rows[("mlsandbox.services", "queue")]["status"] == "unsupported"
    table = run([sys.executable, "-m", "mlsandbox.cli", "plugins"], plugin_path)
    assert table.returncode == 0 and "error" in table.stdout and "ok" in table.stdout


def test_plugin_scenarios_and_actions_join_the_catalogs(plugin_path: str) -> None:
    listed = run([sys.executable, "-m", "mlsandbox.cli", "scenarios", "list"], plugin_path)
    assert listed.returncode == 0, listed.stderr
    assert "example-lineage" in listed.stdout and "tabular-quality-basic" in listed.stdout
    tools = run([sys.executable, "-m", "mlsandbox.cli", "tools", "--format", "json-schema"], plugin_path)
    assert tools.returncode == 0, tools.stderr
    assert "dataset_lineage" in tools.stdout
    # Without the plug-ins, neither is there.
    bare = run([sys.executable, "-m", "mlsandbox.cli", "scenarios", "list"], "")
    assert "example-lineage" not in bare.stdout


EPISODE = textwrap.dedent(
    """
    import json, sys
    from mlsandbox import plugins
    from mlsandbox.env import MLSandboxEnv, decode_observation
    from mlsandbox.env.wrappers import DiscreteActions

    env = DiscreteActions(MLSandboxEnv("example-lineage", sandbox=sys.argv[1], start_sandbox=False))
    out = {}
    try:
        env.reset(seed=4)
        masks = env.action_masks()
        out["lineage_slots_masked"] = [bool(m) for t, m in zip(env.slot_types, masks) if t == "dataset_lineage"]
        inner = env.unwrapped
        o = inner.step({"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "drop_na"})[0]
        out["clean_ok"] = decode_observation(o)["ok"]
        o = inner.step({"type": "dataset_lineage", "dataset": "clean/customers-drop-na.parquet"})[0]
        out["lineage"] = decode_observation(o)["result"]
        o = inner.step({"type": "dataset_lineage", "dataset": "raw/nope.csv"})[0]
        out["missing"] = decode_observation(o)["error"]["code"]
        out["terms"] = plugins.evaluate_reward_terms(inner.gateway.state)
    finally:
        env.close()
    print(json.dumps(out))
    """
)


def test_plugin_action_scenario_and_reward_term_in_an_episode(plugin_path: str, sandbox: Any) -> None:
    res = run([sys.executable, "-c", EPISODE, sandbox.name], plugin_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["clean_ok"] is True
    assert out["lineage"]["lineage"] == [
        {"dataset": "clean/customers-drop-na.parquet", "origin": "clean_dataset"},
        {"dataset": "raw/customers.parquet", "origin": "scenario"},
    ]
    assert out["missing"] == "not_found"
    assert out["lineage_slots_masked"] == [False]  # no curated template: the RL encoding never offers it
    assert out["terms"] == {"example_lineage.cleaned_datasets": pytest.approx(0.1)}


def test_reward_term_loader_in_process() -> None:
    from mlsandbox import plugins

    # This test session has no plug-in installed: the loader answers empty, never fails.
    assert plugins.reward_terms() == {}
    assert plugins.evaluate_reward_terms(object()) == {}
