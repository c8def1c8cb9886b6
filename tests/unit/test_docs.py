"""The README stays a front page, and the generated reference pages cover the whole command line and every
action, so that a new command or action cannot be missing from the documentation site.

The generators are those of the site's MkDocs hook (``docs/hooks/reference.py``), run here without MkDocs.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer

from mlsandbox.cli.main import app
from mlsandbox.gateway.registry import get_catalog

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TWO_COMMANDS = """# mlsandbox

```bash
make demo   # set everything up, then run one episode of tabular-quality-basic with the rule agent (local backend)
make test   # set everything up, then run the test suite against real services (.ci/run calls this)
```
"""


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mlsandbox_docs_hook", ROOT / "docs" / "hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_front_page_that_opens_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 300, "README.md is the front page: move manual text to a page under docs/"
    assert text.startswith(TWO_COMMANDS)


def test_readme_links_point_at_files_that_exist() -> None:
    text = README.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert local, "the README links to the site's pages"
    missing = sorted({t for t in local if t and not (ROOT / t).exists()})
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_page_under_docs_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert pages
    missing = [p for p in pages if p not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


def test_the_cli_reference_names_every_top_level_command(hook: ModuleType) -> None:
    root: Any = typer.main.get_command(app)  # a group: list_commands, get_command
    ctx = root.context_class(root, info_name="mlsandbox")
    names = [n for n in root.list_commands(ctx) if not getattr(root.get_command(ctx, n), "hidden", False)]
    assert {"up", "down", "run", "bench", "tools", "scenarios"} <= set(names)
    page = hook.cli_reference()
    missing = [n for n in names if f"## `mlsandbox {n}`" not in page]
    assert not missing, f"commands missing from the CLI reference: {missing}"
    # sub-commands too, with their options
    assert "`mlsandbox scenarios list`" in page
    assert "--backend" in page and "--no-start" in page


def test_the_action_reference_names_every_action_type(hook: ModuleType) -> None:
    builtin = [t for p in get_catalog().packs if p.origin == "builtin" for t in p.types]
    assert len(builtin) > 40
    page = hook.action_reference()
    missing = [t for t in builtin if f"### `{t}`" not in page]
    assert not missing, f"actions missing from the action reference: {missing}"
    for pack in {p.name for p in get_catalog().packs if p.origin == "builtin"}:
        assert f"## Pack `{pack}`" in page
    assert "needs `serving`" in page  # the capability a backend may refuse


def test_the_benchmark_page_without_published_results(hook: ModuleType, tmp_path: Path) -> None:
    page = hook.benchmark_reference(tmp_path / "none")
    assert "No published results yet: run `make bench && make bench-publish`" in page


def test_the_benchmark_page_flattens_any_json_into_one_table_per_file(
    hook: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "faults.json").write_text(
        json.dumps(
            {
                "machine": {"cpus": 2, "cpu_model": "x", "reference_ms": 115.04, "load_average_1m": 7.2},
                "up_s": 9.8765,
                "faults": {"kill_minio": {"inject_p50_ms": 13.04, "reps": 5}},
                "sizes": [1, 2, 3],
                "runs": [{"n": 1, "ok": True}],
                "rows_per_s": 1330123.4,
                "tiny": 0.000123456,
            }
        )
    )
    (tmp_path / "broken.json").write_text("{")
    page = hook.benchmark_reference(tmp_path)
    assert "## `faults.json`" in page and "## `broken.json`" in page
    assert "Machine: 2 x x, reference workload 115.0 ms, load average 7.2." in page
    for row in (
        "| `up_s` | 9.88 |",
        "| `faults.kill_minio.inject_p50_ms` | 13 |",
        "| `faults.kill_minio.reps` | 5 |",
        "| `sizes` | [1, 2, 3] |",
        "| `runs[0].ok` | true |",
        "| `rows_per_s` | 1,330,123 |",
        "| `tiny` | 0.000123 |",
    ):
        assert row in page
    assert "Cannot be read" in page
