"""Harbor export: one task folder per instance, read by Harbor's own task loader; the in-container
verifier's reward file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from mlsandbox.instances.generate import candidates
from mlsandbox.instances.harbor import export_suite
from mlsandbox.instances.harbor_task import reward_of
from mlsandbox.instances.models import AgentRun, Difficulty, Instance, materialize, params_hash, scenario_hash
from mlsandbox.scenario import load_builtin, load_scenario_file


def _pairs(n: int = 2) -> list[tuple[Instance, object]]:
    fam = load_builtin("churn-flaky-lake")
    stream = candidates(fam, 0)
    out = []
    for _ in range(n):
        p = next(stream)
        sc = materialize(fam, p)
        inst = Instance(
            id=sc.id,
            family=fam.id,
            params=p,
            params_sha256=params_hash(fam.id, p),
            scenario_sha256=scenario_hash(sc),
            difficulty=Difficulty(estimate=0.4, reference_margin=0.05, rule_success=False),
            gates=[AgentRun(agent="reference", success=True, score=1.0, reason="ok", steps=9, margin=0.05)],
        )
        out.append((inst, sc))
    return out


def test_export_writes_the_harbor_layout(tmp_path: Path) -> None:
    pairs = _pairs()
    written = export_suite(pairs, tmp_path, split="dev", image="mlsandbox/gateway:test")  # type: ignore[arg-type]
    assert [p.name for p in written] == [i.id for i, _ in pairs]
    for (inst, sc), task in zip(pairs, written, strict=True):
        for rel in (
            "instruction.md",
            "task.toml",
            "environment/Dockerfile",
            "environment/scenario.yaml",
            "environment/entrypoint.sh",
            "tests/test.sh",
            "solution/solve.sh",
        ):
            assert (task / rel).is_file(), rel
        for rel in ("tests/test.sh", "solution/solve.sh", "environment/entrypoint.sh"):
            assert os.access(task / rel, os.X_OK)
        conf = tomllib.loads((task / "task.toml").read_text())
        assert conf["task"]["name"] == f"mlsandbox/{inst.id}"
        assert conf["metadata"]["split"] == "dev" and conf["metadata"]["params_sha256"] == inst.params_sha256
        assert conf["environment"]["mcp_servers"][0]["name"] == "mlsandbox"
        assert conf["agent"]["timeout_sec"] > 0 and conf["verifier"]["timeout_sec"] > 0
        assert "FROM mlsandbox/gateway:test" in (task / "environment/Dockerfile").read_text()
        assert "/logs/verifier/reward.json" in (task / "tests/test.sh").read_text()
        # The scenario in the environment is the instance's, whole.
        assert scenario_hash(load_scenario_file(task / "environment/scenario.yaml")) == inst.scenario_sha256
        assert sc.task.strip().splitlines()[0] in (task / "instruction.md").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing half-written left


def _harbor_python() -> str | None:
    """An interpreter with the `harbor` package (it needs Python 3.12+): MLSANDBOX_HARBOR_PYTHON, or the
    interpreter of a `harbor` command on PATH."""
    env = os.environ.get("MLSANDBOX_HARBOR_PYTHON")
    if env:
        return env
    exe = shutil.which("harbor")
    if exe:
        first = Path(exe).read_text(errors="replace").splitlines()[0]
        if first.startswith("#!"):
            return first[2:].strip()
    return None


LOADER = """
import json, sys
from pathlib import Path
from harbor.models.task.task import Task
out = []
for d in sorted(Path(sys.argv[1]).iterdir()):
    t = Task(d)
    out.append({"name": t.name, "mcp": [s.name for s in t.config.environment.mcp_servers],
                "valid": Task.is_valid_dir(d), "timeout": t.config.agent.timeout_sec,
                "instruction": len(t.instruction)})
print(json.dumps(out))
"""


def test_harbor_own_loader_reads_the_exported_tasks(tmp_path: Path) -> None:
    py = _harbor_python()
    if py is None:
        pytest.skip("no interpreter with the harbor package (set MLSANDBOX_HARBOR_PYTHON)")
    pairs = _pairs(3)
    export_suite(pairs, tmp_path, split="train")  # type: ignore[arg-type]
    res = subprocess.run([py, "-c", LOADER, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert [t["name"] for t in loaded] == sorted(f"mlsandbox/{i.id}" for i, _ in pairs)
    assert all(t["valid"] and t["mcp"] == ["mlsandbox"] and t["instruction"] > 100 for t in loaded)


def test_reward_file_has_the_reward_and_its_components() -> None:
    record = {
        "steps": 9,
        "return": 14.1,
        "over": True,
        "components": {"task": 10.0, "success_bonus": 5.0, "step_cost": -0.18},
        "grade": {"success": True, "score": 1.0, "holdout_auc": 0.81, "model": "churn", "version": "1"},
    }
    r = reward_of(record)
    assert r["reward"] == 1.0 and r["score"] == 1.0 and r["grade_holdout_auc"] == 0.81
    assert r["component_task"] == 10.0 and r["component_step_cost"] == -0.18
    assert all(isinstance(v, float) for v in r.values())
    record["constraint_violation"] = {"kind": "budget"}
    assert reward_of(record)["reward"] == 0.0
    assert reward_of({"over": False})["reward"] == 0.0


def test_export_harbor_command_writes_a_task_per_dev_instance(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mlsandbox.cli.main import app
    from mlsandbox.instances.splits import load_manifest

    res = CliRunner().invoke(app, ["export", "harbor", "mle-core-v1", str(tmp_path), "--split", "dev"])
    assert res.exit_code == 0, res.output
    dev = load_manifest("mle-core-v1").splits["dev"].instances
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(i.id for i in dev)
    res = CliRunner().invoke(app, ["export", "harbor", "mle-core-v1", str(tmp_path), "--split", "test"])
    if "MLSANDBOX_TEST_SEED" not in os.environ:
        assert res.exit_code == 1 and "MLSANDBOX_TEST_SEED" in res.output
