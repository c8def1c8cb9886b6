"""Frozen suites with train/dev/test splits that cannot leak.

A candidate instance belongs to exactly one split, decided by the hash of its parameters
(:func:`split_of`): one in five is ``test``, one in ten ``dev``, the rest ``train``. So no parameter set of
the test split can ever be drawn into train, whatever seed or size is asked for.

A suite (``suites/<id>.yaml`` in this package) names its families and how many instances of each split it
holds. Its train and dev instances are frozen in a manifest shipped beside it (``<id>.manifest.json``):
every instance's parameters and hashes, a hash per split, and the hash of each family as it was frozen (an
edited family is detected, never silently graded differently). The test split is *not* in the package: it
is generated at run time, gated in ``sim``, from a secret seed the user supplies
(``MLSANDBOX_TEST_SEED``), or read from a separate file written by ``mlsandbox tasks freeze --split test``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlsandbox.errors import ScenarioError
from mlsandbox.instances.generate import Gates, generate
from mlsandbox.instances.models import Instance, Rejection, canonical, materialize, scenario_hash
from mlsandbox.scenario import Scenario, load_builtin

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
TEST_SEED_ENV = "MLSANDBOX_TEST_SEED"
SUITES_PACKAGE = "mlsandbox.instances"
SUITES_DIR = "suites"


def split_of(params_sha256: str) -> Split:
    """The split a parameter set belongs to, from its hash: 2 in 10 test, 1 in 10 dev, 7 in 10 train."""
    bucket = int(params_sha256[:16], 16) % 10
    return "test" if bucket < 2 else ("dev" if bucket == 2 else "train")


def in_split(split: Split) -> Callable[[str], bool]:
    return lambda h: split_of(h) == split


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteSpec(_Model):
    """A frozen suite's declaration."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,62}$")
    title: str
    families: list[str] = Field(min_length=1)
    per_family: dict[Split, int]
    """Instances of each split per family."""
    seed: int = 0
    """The generation seed of train and dev (public; the test split's seed is not)."""


class SplitManifest(_Model):
    sha256: str
    """The hash over the split's instance hashes (sorted): one number that says the split is unchanged."""
    instances: list[Instance]


class Manifest(_Model):
    """What a suite froze: the family hashes and the train and dev instances."""

    suite: str
    families: dict[str, str]
    """Family id -> sha256 of the family's scenario as frozen."""
    splits: dict[Split, SplitManifest]


class TestSplitFile(_Model):
    """A test split shipped apart from the package (``tasks freeze --split test``)."""

    suite: str
    split: Literal["test"] = "test"
    families: dict[str, str]
    sha256: str
    instances: list[Instance]


def family_hash(family: Scenario) -> str:
    """The hash of a family's declaration: its values other than the schema's defaults, so a field the
    scenario schema gains later, with a default, leaves every frozen family as it was."""
    return hashlib.sha256(
        canonical(family.model_dump(mode="json", exclude_defaults=True)).encode()
    ).hexdigest()


def split_hash(instances: list[Instance]) -> str:
    return hashlib.sha256(canonical(sorted(i.params_sha256 for i in instances)).encode()).hexdigest()


def _resource(name: str) -> Any:
    return resources.files(SUITES_PACKAGE) / SUITES_DIR / name


def suite_ids() -> list[str]:
    return sorted(f.name[: -len(".yaml")] for f in _resource("").iterdir() if f.name.endswith(".yaml"))


def load_spec(suite: str) -> SuiteSpec:
    f = _resource(f"{suite}.yaml")
    if not f.is_file():
        raise ScenarioError(f"unknown suite {suite!r}; frozen suites: {', '.join(suite_ids()) or 'none'}")
    try:
        return SuiteSpec.model_validate(yaml.safe_load(f.read_text()))
    except ValidationError as e:
        raise ScenarioError(f"{f.name}: invalid suite: {e}") from None


def manifest_path(suite: str) -> Path:
    with resources.as_file(_resource(f"{suite}.manifest.json")) as p:
        return Path(p)


def load_manifest(suite: str) -> Manifest:
    f = _resource(f"{suite}.manifest.json")
    if not f.is_file():
        raise ScenarioError(f"suite {suite!r} has no manifest: run `mlsandbox tasks freeze {suite}`")
    return Manifest.model_validate_json(f.read_text())


def _families(spec: SuiteSpec) -> dict[str, Scenario]:
    return {fid: load_builtin(fid) for fid in spec.families}


def _check_families(suite: str, frozen: dict[str, str], families: dict[str, Scenario]) -> None:
    changed = [fid for fid, h in frozen.items() if fid in families and family_hash(families[fid]) != h]
    if changed:
        raise ScenarioError(
            f"suite {suite!r}: famil{'ies' if len(changed) > 1 else 'y'} {', '.join(changed)} changed since"
            " the suite was frozen (a new suite version is needed)"
        )


def generate_split(
    spec: SuiteSpec,
    split: Split,
    *,
    seed: int,
    gates: Gates,
    on_result: Callable[[Instance | Rejection], None] | None = None,
) -> tuple[list[Instance], list[Rejection]]:
    """The split's instances of every family (only candidates whose parameters the split owns)."""
    kept: list[Instance] = []
    rejected: list[Rejection] = []
    for fid, family in _families(spec).items():
        g = generate(
            family,
            spec.per_family.get(split, 0),
            gates=gates,
            seed=seed,
            accept=in_split(split),
            on_result=on_result,
        )
        if not g.complete:
            raise ScenarioError(
                f"suite {spec.id!r}: family {fid!r} gave {len(g.instances)} valid {split} instances of"
                f" {g.requested} ({len(g.rejected)} rejected)"
            )
        kept += g.instances
        rejected += g.rejected
    return kept, rejected


def freeze(
    spec: SuiteSpec, *, gates: Gates, on_result: Callable[[Instance | Rejection], None] | None = None
) -> Manifest:
    """Generate and gate the train and dev splits (the test split is never frozen into the package)."""
    families = _families(spec)
    splits: dict[Split, SplitManifest] = {}
    for split in ("train", "dev"):
        inst, _ = generate_split(spec, split, seed=spec.seed, gates=gates, on_result=on_result)
        splits[split] = SplitManifest(sha256=split_hash(inst), instances=inst)
    return Manifest(
        suite=spec.id, families={fid: family_hash(f) for fid, f in families.items()}, splits=splits
    )


def test_seed_from_env() -> int | None:
    raw = os.environ.get(TEST_SEED_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        # Any text is a seed: its hash, so a passphrase works as well as a number.
        return int.from_bytes(hashlib.sha256(raw.encode()).digest()[:8], "big")


def freeze_test(
    spec: SuiteSpec,
    secret_seed: int,
    *,
    gates: Gates,
    on_result: Callable[[Instance | Rejection], None] | None = None,
) -> TestSplitFile:
    """The test split drawn from a secret seed (to ship as a separate file, or to use at once)."""
    inst, _ = generate_split(spec, "test", seed=secret_seed, gates=gates, on_result=on_result)
    return TestSplitFile(
        suite=spec.id,
        families={fid: family_hash(f) for fid, f in _families(spec).items()},
        sha256=split_hash(inst),
        instances=inst,
    )


def read_test_file(path: Path, suite: str) -> TestSplitFile:
    try:
        doc = TestSplitFile.model_validate_json(path.read_text())
    except (OSError, ValidationError) as e:
        raise ScenarioError(f"{path}: not a test split file: {e}") from None
    if doc.suite != suite:
        raise ScenarioError(f"{path}: a test split of suite {doc.suite!r}, not {suite!r}")
    if split_hash(doc.instances) != doc.sha256:
        raise ScenarioError(f"{path}: its instances do not match its hash")
    leaked = [i.id for i in doc.instances if split_of(i.params_sha256) != "test"]
    if leaked:
        raise ScenarioError(f"{path}: instances outside the test split: {', '.join(leaked[:5])}")
    return doc


def scenarios(
    instances: list[Instance], families: dict[str, Scenario], suite: str
) -> list[tuple[Instance, Scenario]]:
    """Each instance with its scenario, checked against the hash it was frozen with."""
    out: list[tuple[Instance, Scenario]] = []
    for inst in instances:
        sc = materialize(families[inst.family], inst.params)
        if scenario_hash(sc) != inst.scenario_sha256:
            raise ScenarioError(f"suite {suite!r}: instance {inst.id} no longer builds the scenario it froze")
        out.append((inst, sc))
    return out


def load_split(
    suite: str,
    split: Split,
    *,
    test_file: Path | None = None,
    test_seed: int | None = None,
    gates: Gates | None = None,
) -> list[tuple[Instance, Scenario]]:
    """A split's instances with their scenarios: train and dev from the shipped manifest; test from
    ``test_file``, or generated from ``test_seed`` (default: ``MLSANDBOX_TEST_SEED``) in ``sim``."""
    spec = load_spec(suite)
    families = _families(spec)
    if split != "test":
        manifest = load_manifest(suite)
        _check_families(suite, manifest.families, families)
        part = manifest.splits[split]
        if split_hash(part.instances) != part.sha256:
            raise ScenarioError(f"suite {suite!r}: the {split} split does not match its hash")
        return scenarios(part.instances, families, suite)
    if test_file is not None:
        doc = read_test_file(test_file, suite)
        _check_families(suite, doc.families, families)
        return scenarios(doc.instances, families, suite)
    seed = test_seed if test_seed is not None else test_seed_from_env()
    if seed is None:
        raise ScenarioError(
            f"the test split of {suite!r} is not shipped: set {TEST_SEED_ENV} to your secret seed, or pass"
            " a test split file (mlsandbox tasks freeze --split test)"
        )
    if gates is None:
        with Gates() as own:
            doc = freeze_test(spec, seed, gates=own)
    else:
        doc = freeze_test(spec, seed, gates=gates)
    return scenarios(doc.instances, families, suite)


def dump_json(model: BaseModel) -> str:
    return json.dumps(model.model_dump(mode="json"), indent=1, sort_keys=False) + "\n"


__all__ = [
    "SPLITS",
    "TEST_SEED_ENV",
    "Manifest",
    "SuiteSpec",
    "TestSplitFile",
    "dump_json",
    "family_hash",
    "freeze",
    "freeze_test",
    "generate_split",
    "load_manifest",
    "load_spec",
    "load_split",
    "read_test_file",
    "split_hash",
    "split_of",
    "suite_ids",
]
