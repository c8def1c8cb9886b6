"""Load scenarios from YAML with precise errors: the file, the field path, what was expected."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mlsandbox.errors import ScenarioError
from mlsandbox.scenario.models import Scenario
from mlsandbox.scenario.perturbations import FAULT_TYPES

CATALOG_PACKAGE = "mlsandbox.scenario"
CATALOG_DIR = "catalog"


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _format_validation_error(source: str, err: ValidationError) -> str:
    lines = [f"{source}: invalid scenario ({err.error_count()} error{'s' if err.error_count() > 1 else ''})"]
    for e in err.errors(include_url=False):
        # Drop the discriminator tag pydantic inserts into union paths (e.g. 'tabular', 'numeric').
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p in _UNION_TAGS))
        got = e.get("input")
        got_s = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        lines.append(f"  - {_format_loc(loc)}: {e['msg']}{got_s}")
    return "\n".join(lines)


_UNION_TAGS = {
    "tabular",
    "numeric",
    "categorical",
    "builtin",
    "plugin",
    "int",
    "float",
    "choice",
    *FAULT_TYPES,
}


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(_format_validation_error(source, e)) from None


def load_scenario_file(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ScenarioError(f"{p}: no such scenario file") from None
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ScenarioError(f"{p}: not valid YAML{where}: {problem}") from None
    return parse_scenario(data, str(p))


def _catalog_files() -> dict[str, Any]:
    """Scenario id -> file: the built-in catalog, then plug-in catalogs (``mlsandbox.scenarios`` entry
    points, see :mod:`mlsandbox.plugins`); a built-in id is never replaced by a plug-in's."""
    from mlsandbox.plugins import scenario_dirs

    root = resources.files(CATALOG_PACKAGE) / CATALOG_DIR
    files: dict[str, Any] = {f.name[: -len(".yaml")]: f for f in root.iterdir() if f.name.endswith(".yaml")}
    for _origin, directory in scenario_dirs():
        for f in sorted(directory.glob("*.yaml")):
            files.setdefault(f.name[: -len(".yaml")], f)
    return files


def catalog_ids() -> list[str]:
    return sorted(_catalog_files())


def load_builtin(scenario_id: str) -> Scenario:
    files = _catalog_files()
    if scenario_id not in files:
        raise ScenarioError(
            f"unknown scenario {scenario_id!r}; built-in scenarios: {', '.join(sorted(files))}"
        )
    f = files[scenario_id]
    with resources.as_file(f) as path:
        scenario = load_scenario_file(path)
    if scenario.id != scenario_id:
        raise ScenarioError(f"{f.name}: id {scenario.id!r} does not match the file name")
    return scenario


def load_scenario(ref: str | Path) -> Scenario:
    """A built-in scenario by id, or a scenario file by path (anything ending in .yaml/.yml or existing)."""
    s = str(ref)
    if s.endswith((".yaml", ".yml")) or Path(s).is_file():
        return load_scenario_file(s)
    return load_builtin(s)
