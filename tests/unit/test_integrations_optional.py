"""The integrations stay optional: nothing of them (nor their libraries) is imported when the CLI starts or
the core is used, and an integration whose extra is missing says which extra to install. Each check runs
in a fresh interpreter, with the extra's module made unimportable there (``sys.modules[name] = None``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("mlsandbox.integrations", "openenv", "ray", "trl", "pettingzoo", "transformers", "torch", "fastmcp")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_cli_start_up_and_the_core_import_no_integration() -> None:
    code = (
        "import sys\n"
        "import mlsandbox.cli.main, mlsandbox.env, mlsandbox.gateway, mlsandbox.backends\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith({HEAVY!r})))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_the_openenv_command_without_its_extra_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['openenv'] = None\n"
        "from mlsandbox.cli.main import app\n"
        "app(['openenv', '--sandbox', 'nothing-here', '--no-start'])\n"
    )
    done = _python(code)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "install the openenv extra, pip install 'mlsandbox[openenv]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("blocked", "extra", "statement"),
    [
        ("openenv", "openenv", "from mlsandbox.integrations.openenv import MLSandboxClient"),
        ("pettingzoo", "pettingzoo", "import mlsandbox.integrations.pettingzoo"),
        ("ray", "ray", "from mlsandbox.integrations.rllib import ppo_config; ppo_config()"),
    ],
)
def test_a_missing_extra_is_a_typed_error_naming_it(blocked: str, extra: str, statement: str) -> None:
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from mlsandbox.integrations import MissingExtra\n"
        f"try:\n    {statement}\nexcept MissingExtra as e:\n    print(e)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"pip install 'mlsandbox[{extra}]'" in done.stdout


def test_listing_scenarios_and_tools_loads_no_backend_nor_numpy() -> None:
    """The CLI's quick commands stay light: ``scenarios list`` and ``tools`` load neither the backends'
    protocols (every backend's models), nor numpy, nor pandas (the figures: benchmarks/bench_cli_startup.py)."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from mlsandbox.cli.main import app\n"
        "for args in (['scenarios', 'list', '--json'], ['tools', '--format', 'openai']):\n"
        "    out = CliRunner().invoke(app, args)\n"
        "    assert out.exit_code == 0, out.output\n"
        "heavy = ('numpy', 'pandas', 'pyarrow', 'mlsandbox.backends.protocols', 'mlsandbox.backends.local')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
