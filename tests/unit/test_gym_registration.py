"""The Gymnasium environments are registered whichever is imported first, mlsandbox or Gymnasium, and
``import mlsandbox`` alone (what every command line does) does not import Gymnasium."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

IDS = ["mlsandbox/MLSandbox-v0", "mlsandbox/RemoteMLSandbox-v0"]
REGISTERED = "print(json.dumps(sorted(k for k in registry if k.startswith('mlsandbox/'))))"


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import mlsandbox\nassert 'gymnasium' not in sys.modules\nfrom gymnasium import registry\n",
        "from gymnasium import registry\nimport mlsandbox\n",
        "import mlsandbox\nfrom gymnasium.envs.registration import registry\n",
        "import mlsandbox.env\nfrom gymnasium import registry\n",
    ],
    ids=["mlsandbox-first", "gymnasium-first", "a-submodule-first", "the-env-package"],
)
def test_both_environments_are_registered_whatever_is_imported_first(code: str) -> None:
    assert _run(code + REGISTERED) == IDS


def test_make_builds_the_env_after_a_plain_import() -> None:
    code = (
        "import mlsandbox, gymnasium as gym\n"
        "env = gym.make('mlsandbox/MLSandbox-v0', scenario='tabular-quality-basic', backend='sim')\n"
        "print(json.dumps([type(env.unwrapped).__name__]))\nenv.close()\n"
    )
    assert _run(code) == ["MLSandboxEnv"]
