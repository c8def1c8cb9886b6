"""Plug-ins through entry points: the example package under examples/ is installed (into a directory put
on PYTHONPATH of subprocesses, so this test session's own catalog stays the built-in one) and exercised:
its action pack, scenario catalog, reward term, service and fault type; a broken plug-in is reported and the
rest still work."""

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
crashes = "mlsandbox_plugin_broken:CRASHES"

[project.entry-points."mlsandbox.faults"]
no_class = "mlsandbox_plugin_broken:NOT_CALLABLE"
no_targets = "mlsandbox_plugin_broken:NoTargets"
"""
BROKEN_MODULE = """
NOT_CALLABLE = 42
CRASHES = {"argv": ["{python}", "-c", "import sys; print('queue: no config'); sys.exit(3)"],
           "health_url": "http://127.0.0.1:{port}/health", "start_timeout_s": 10}


class NoTargets:
    targets = ()

    def inject(self, ctx):
        pass

    def recover(self, ctx):
        pass
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


def install_plugins(base: Path) -> str:
    """The example plug-in and the broken one installed under ``base``: the ``PYTHONPATH`` holding them."""
    work = base / "src"
    shutil.copytree(EXAMPLE, work / "example", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    broken = work / "broken"
    (broken / "mlsandbox_plugin_broken").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(BROKEN_PYPROJECT)
    (broken / "mlsandbox_plugin_broken" / "__init__.py").write_text(BROKEN_MODULE)
    good, bad = base / "good", base / "bad"
    _install(work / "example", good)
    _install(broken, bad)
    return f"{good}{os.pathsep}{bad}"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield install_plugins(tmp_path_factory.mktemp("plugins"))


def run(args: list[str], pythonpath: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "250"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, **kw)


def test_plugins_lists_every_entry_point_with_origin_and_status(plugin_path: str) -> None:
    res = run([sys.executable, "-m", "mlsandbox.cli.main", "plugins", "--json"], plugin_path)
    assert res.returncode == 0, res.stderr
    rows = {(r["group"], r["name"]): r for r in json.loads(res.stdout)}
    for key in [("mlsandbox.action_packs", "example"), ("mlsandbox.scenarios", "example"),
                ("mlsandbox.reward_terms", "example_lineage"), ("mlsandbox.services", "example-labels"),
                ("mlsandbox.faults", "example_truncated_upload"), ("mlsandbox.kinds", "example_counts")]:  # fmt: skip
        assert rows[key]["status"] == "ok" and rows[key]["origin"] == "mlsandbox-plugin-example 0.1.0"
    missing = rows[("mlsandbox.scenarios", "missing")]
    assert missing["status"] == "error" and missing["origin"] == "mlsandbox-plugin-broken 0.0.1"
    assert "plug-in 'missing' left out (mlsandbox_plugin_broken:nowhere" in missing["detail"]
    assert "AttributeError" in missing["detail"]
    assert "expected a callable" in rows[("mlsandbox.reward_terms", "not_callable")]["detail"]
    assert "ModuleNotFoundError" in rows[("mlsandbox.reward_terms", "import_fails")]["detail"]
    assert "expected a ServiceSpec" in rows[("mlsandbox.services", "queue")]["detail"]
    assert rows[("mlsandbox.services", "crashes")]["status"] == "ok"  # loads; fails when started
    assert "expected a fault behaviour class" in rows[("mlsandbox.faults", "no_class")]["detail"]
    assert "targets must be a non-empty tuple" in rows[("mlsandbox.faults", "no_targets")]["detail"]
    assert not any(r["status"] == "unsupported" for r in rows.values())
    table = run([sys.executable, "-m", "mlsandbox.cli.main", "plugins"], plugin_path)
    assert table.returncode == 0 and "error" in table.stdout and "ok" in table.stdout


def test_plugin_scenarios_and_actions_join_the_catalogs(plugin_path: str) -> None:
    listed = run([sys.executable, "-m", "mlsandbox.cli.main", "scenarios", "list"], plugin_path)
    assert listed.returncode == 0, listed.stderr
    assert "example-lineage" in listed.stdout and "tabular-quality-basic" in listed.stdout
    tools = run([sys.executable, "-m", "mlsandbox.cli.main", "tools", "--format", "json-schema"], plugin_path)
    assert tools.returncode == 0, tools.stderr
    assert "dataset_lineage" in tools.stdout
    # Without the plug-ins, neither is there.
    bare = run([sys.executable, "-m", "mlsandbox.cli.main", "scenarios", "list"], "")
    assert "example-lineage" not in bare.stdout


KIND_EPISODE = textwrap.dedent(
    """
    import json
    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.tasks.registry import names

    env = MLSandboxEnv("example-counts", backend="sim", sandbox="sim-plugin-kind")
    try:
        res = run_episode(env, make_agent("kind_reference", seed=0), seed=0)
    finally:
        env.close()
    print(json.dumps({"kinds": names(), "grade": res.grade}))
    """
)


def test_plugin_kind_joins_the_registry_and_its_family_is_solved_on_sim(plugin_path: str) -> None:
    listed = run([sys.executable, "-m", "mlsandbox.cli.main", "scenarios", "list", "--json"], plugin_path)
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["id"] == "example-counts")
    assert (row["kind"], row["metric"]) == ("example_counts", "mae")
    res = run([sys.executable, "-c", KIND_EPISODE], plugin_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert "example_counts" in out["kinds"] and out["grade"]["success"], out


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


SERVICES = textwrap.dedent(
    """
    import json, logging, sys
    import httpx
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.backends.local import supervisor
    from mlsandbox.backends.local.plugin_services import PluginServices, start_plugin_services

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    backend = LocalBackend(sys.argv[1])
    backend.up(ephemeral=True)  # attaches to the running sandbox, then starts the plug-in services
    out = {"alive": backend.is_alive()}
    services = PluginServices(backend)
    out["healthy"] = services.healthy("example-labels")
    record = services.record("example-labels")
    out["info"] = httpx.get(record.url.replace("/health", "/info"), timeout=5).json()
    out["again"] = start_plugin_services(backend)  # idempotent: the running one is kept
    out["same_pid"] = services.record("example-labels").process.pid == record.process.pid
    out["crashed_alive"] = services.is_running("crashes")
    out["stopped"] = services.stop("example-labels")
    out["gone"] = not supervisor.is_alive(record.process)
    out["runtime_ok"] = backend.runtime() is not None
    print(json.dumps(out))
    """
)


def test_plugin_service_starts_at_up_and_a_crashing_one_is_left_out(plugin_path: str, sandbox: Any) -> None:
    res = run([sys.executable, "-c", SERVICES, sandbox.name], plugin_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["alive"] and out["healthy"] and out["runtime_ok"]
    assert out["info"]["service"] == "example-labels" and out["info"]["sandbox"] == sandbox.name
    assert out["info"]["s3_url"].startswith("http://127.0.0.1:")
    assert out["again"]["example-labels"] == "running" and out["same_pid"]
    assert (
        "plug-in service 'crashes'" in out["again"]["crashes"]
        and "exited (code 3)" in out["again"]["crashes"]
    )
    assert not out["crashed_alive"]
    # The warning names the service and shows what it printed.
    assert "plug-in service 'crashes' left out" in res.stderr and "queue: no config" in res.stderr
    assert out["stopped"] and out["gone"]


FAULT = textwrap.dedent(
    """
    import json, sys
    from mlsandbox.env import MLSandboxEnv, decode_observation

    env = MLSandboxEnv("example-truncated", sandbox=sys.argv[1], start_sandbox=False)
    out = {"steps": []}
    try:
        env.reset(seed=3)
        gw = env.unwrapped.gateway
        store, bucket, key = gw.runtime.object_store, gw.state.bucket, "raw/customers.parquet"
        size = len(store.get_object(bucket, key))
        for action in [{"type": "list_datasets"},
                       {"type": "check_data_quality", "dataset": key},
                       {"type": "check_data_quality", "dataset": key},
                       {"type": "check_data_quality", "dataset": key}]:
            o = decode_observation(env.step(action)[0])
            out["steps"].append({"ok": o["ok"], "bytes": len(store.get_object(bucket, key)),
                                 "error": (o.get("error") or {}).get("message", "")[:200]})
        out["size"] = size
        out["faults"] = [{"fault": r.fault, "error": r.error, "injected": r.injected_step,
                          "recovered": r.recovered_step} for r in gw.state.ground_truth.faults]
    finally:
        env.close()
    print(json.dumps(out, default=str))
    """
)


def test_plugin_fault_type_in_a_perturbation_plan(plugin_path: str, sandbox: Any) -> None:
    res = run([sys.executable, "-c", FAULT, sandbox.name], plugin_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=1))
    sizes = [s["bytes"] for s in out["steps"]]
    assert out["faults"] and out["faults"][0]["error"] is None
    assert any(b < out["size"] * 0.5 for b in sizes), sizes  # cut to 40 %: a real broken object
    assert sizes[-1] == out["size"]  # restored when its 2 steps are over
    broken = [s for s in out["steps"][1:] if s["bytes"] < out["size"]]
    assert broken and not broken[0]["ok"], out["steps"]  # the agent sees a failing read


def test_unknown_fault_type_names_the_plugin_ones(plugin_path: str) -> None:
    code = textwrap.dedent(
        """
        from mlsandbox.scenario.perturbations import Perturbation
        try:
            Perturbation.model_validate({"name": "x", "when": {"at_step": 1}, "target": "dataset:d",
                                         "fault": {"type": "nope"}})
        except ValueError as e:
            print(e)
        try:
            Perturbation.model_validate({"name": "x", "when": {"at_step": 1}, "target": "dataset:d",
                "fault": {"type": "example_truncated_upload", "keep_fraction": 2}})
        except ValueError as e:
            print(e)
        """
    )
    res = run([sys.executable, "-c", code], plugin_path)
    assert res.returncode == 0, res.stderr
    assert "unknown fault type 'nope'" in res.stdout and "example_truncated_upload" in res.stdout
    assert "keep_fraction" in res.stdout and "less than 1" in res.stdout
