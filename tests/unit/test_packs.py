"""Scenario packs: the built-in packs name built-in families of the kinds their business needs; a broken
pack declaration is an error that names the pack; the CLI lists packs and filters by them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mlsandbox.cli.main import app
from mlsandbox.errors import ScenarioError
from mlsandbox.scenario import catalog_ids, load_builtin
from mlsandbox.scenario.packs import pack_families, packs, parse_packs


def test_the_three_business_packs_are_built_in_families_of_their_kinds() -> None:
    built = packs()
    assert {"retail", "credit-risk", "image-quality"} <= set(built)
    ids = set(catalog_ids())
    for pack in built.values():
        assert set(pack.families) <= ids and len(set(pack.families)) == len(pack.families)
    kinds = {name: {load_builtin(f).work()[0] for f in p.families} for name, p in built.items()}
    assert kinds["retail"] == {"timeseries_forecasting"}
    assert kinds["image-quality"] == {"image_classification"}
    assert kinds["credit-risk"] == {"tabular"}


def test_a_pack_naming_an_unknown_family_or_missing_a_field_is_refused_by_name() -> None:
    with pytest.raises(ScenarioError, match=r"pack 'shop' names families that are not built in: \['nope'\]"):
        parse_packs({"shop": {"title": "t", "business": "b", "families": ["nope"]}}, known=["a"])
    with pytest.raises(ScenarioError, match=r"pack 'shop': families"):
        parse_packs({"shop": {"title": "t", "business": "b", "families": []}}, known=["a"])
    with pytest.raises(ScenarioError, match=r"pack 'shop': colour"):
        parse_packs({"shop": {"title": "t", "business": "b", "families": ["a"], "colour": 1}}, known=["a"])
    with pytest.raises(ScenarioError, match="mapping"):
        parse_packs(["a"], known=["a"])


def test_pack_families_keep_pack_order_once_and_refuse_an_unknown_pack() -> None:
    both = pack_families(["retail", "credit-risk", "retail"])
    assert both == [*packs()["retail"].families, *packs()["credit-risk"].families]
    with pytest.raises(ScenarioError, match="unknown pack"):
        pack_families(["bakery"])


def test_cli_lists_packs_and_filters_scenarios_by_pack() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["scenarios", "packs", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["retail"]["kinds"] == ["timeseries_forecasting"]
    listed = runner.invoke(app, ["scenarios", "list", "--pack", "credit-risk", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.stdout)] == list(packs()["credit-risk"].families)
    bad = runner.invoke(app, ["scenarios", "list", "--pack", "bakery"])
    assert bad.exit_code != 0 and "unknown pack" in bad.output
