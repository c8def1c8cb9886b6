"""Scenario spec: pydantic models, YAML loader with precise errors, and the built-in catalog."""

from mlsandbox.scenario.loader import (
    catalog_ids,
    load_builtin,
    load_scenario,
    load_scenario_file,
    parse_scenario,
)
from mlsandbox.scenario.models import Scenario, TabularDataset

__all__ = [
    "Scenario",
    "TabularDataset",
    "catalog_ids",
    "load_builtin",
    "load_scenario",
    "load_scenario_file",
    "parse_scenario",
]
