"""Scenario packs: the built-in families a business would play, grouped under the business's name.

A pack is declared in ``packs.yaml`` beside the catalog (its title, a sentence on the business, its
families). ``mlsandbox scenarios packs`` lists them; ``mlsandbox bench --pack NAME`` plays a pack's
families. Every family a pack names must be a built-in scenario: a pack that names another is an error
that names it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlsandbox.errors import ScenarioError
from mlsandbox.scenario.loader import CATALOG_PACKAGE, catalog_ids

PACKS_FILE = "packs.yaml"


class Pack(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str = Field(min_length=1)
    business: str = Field(min_length=1)
    families: tuple[str, ...] = Field(min_length=1)


def parse_packs(data: object, source: str = PACKS_FILE, known: list[str] | None = None) -> dict[str, Pack]:
    """The packs of a ``packs.yaml`` mapping; a ScenarioError names the pack and what is wrong with it."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: packs must be a mapping of pack name to pack")
    ids = set(catalog_ids() if known is None else known)
    packs: dict[str, Pack] = {}
    for name, body in data.items():
        try:
            pack = Pack.model_validate({"name": name, **(body if isinstance(body, dict) else {})})
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
            raise ScenarioError(f"{source}: pack {name!r}: {problems}") from None
        unknown = [f for f in pack.families if f not in ids]
        if unknown:
            raise ScenarioError(f"{source}: pack {name!r} names families that are not built in: {unknown}")
        packs[str(name)] = pack
    return packs


@cache
def packs() -> dict[str, Pack]:
    """The built-in packs, by name."""
    text = resources.files(CATALOG_PACKAGE).joinpath(PACKS_FILE).read_text()
    return parse_packs(yaml.safe_load(text))


def pack_families(names: list[str]) -> list[str]:
    """The families of the named packs, in pack order, each once; an unknown pack is a ScenarioError."""
    known = packs()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ScenarioError(f"unknown pack(s) {unknown}; packs: {', '.join(known)}")
    out: list[str] = []
    for n in names:
        out += [f for f in known[n].families if f not in out]
    return out


__all__ = ["PACKS_FILE", "Pack", "pack_families", "packs", "parse_packs"]
