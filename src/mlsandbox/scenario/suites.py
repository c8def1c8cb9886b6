"""Scenario suites: the built-in curriculum and procedurally generated variants with a held-out test split.

Every built-in scenario is a *family*. A variant of a family changes what an agent cannot memorise: the
episode seed (hence the data), the defect rates of its datasets, when its faults strike and for how long,
and which of its faults are combined; families with faults may also gain a mild extra fault. Variants are
generated from a seeded stream per family, so the same suite is the same list of scenarios everywhere.

Each candidate variant belongs to exactly one split, decided by a hash of its content (everything but its
id and title): about a quarter go to ``test``, the rest to ``train``. So a ``test`` variant can never appear
in ``train``, whatever the sizes asked for; the seeds of the two splits are drawn from disjoint ranges too.

Suites:

- ``builtin``: the catalog scenarios themselves (the curriculum, difficulty 1 to 4);
- ``train``: :data:`TRAIN_VARIANTS` variants per family;
- ``test``: :data:`TEST_VARIANTS` held-out variants per family.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from mlsandbox.scenario.loader import catalog_ids, load_builtin
from mlsandbox.scenario.models import Scenario

SuiteName = Literal["builtin", "train", "test"]
SUITES: tuple[str, ...] = ("builtin", "train", "test")
TRAIN_VARIANTS = 8
TEST_VARIANTS = 2
TEST_SHARE = 4
"""One candidate in ``TEST_SHARE`` (by content hash) belongs to the test split."""
SEED_RANGES = {"train": (1_000, 490_000), "test": (500_000, 990_000)}
"""Variant seeds per split; episodes of a variant use seeds from its seed on (gaps keep them apart)."""

# Mild faults a variant of a family that already has faults may gain (a new combination).
_EXTRA_FAULTS: tuple[dict[str, Any], ...] = (
    {"target": "endpoint:minio", "fault": {"type": "latency", "latency_ms": 200, "jitter_ms": 20}},
    {"target": "endpoint:mlflow", "fault": {"type": "latency", "latency_ms": 150}},
    {"fault": {"type": "cpu_throttle", "cpus": 0.5}},
)


@dataclass(frozen=True)
class SuiteEntry:
    """One scenario of a suite."""

    family: str
    """The built-in scenario it derives from."""
    split: str
    """``builtin``, ``train`` or ``test``."""
    scenario: Scenario

    @property
    def id(self) -> str:
        return self.scenario.id

    @property
    def difficulty(self) -> int:
        return self.scenario.difficulty


def signature(scenario: Scenario) -> str:
    """The content of a scenario without its id, title and parameter space (what makes two variants
    the same)."""
    data = scenario.model_dump(mode="json", exclude={"id", "title", "space"})
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def split_of(scenario: Scenario) -> str:
    digest = hashlib.sha256(signature(scenario).encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_SHARE == 0 else "train"


def _scale_rate(rng: random.Random, value: float, hi: float) -> float:
    if value <= 0:
        return value
    return round(min(hi, max(0.005, value * rng.uniform(0.5, 1.6))), 4)


def _vary_defects(rng: random.Random, datasets: list[dict[str, Any]]) -> None:
    for ds in datasets:
        defects = ds.get("defects")
        if not isinstance(defects, dict):
            continue
        if "missing_rate" in defects:
            defects["missing_rate"] = _scale_rate(rng, defects["missing_rate"], 0.4)
        if "outlier_rate" in defects:
            defects["outlier_rate"] = _scale_rate(rng, defects["outlier_rate"], 0.05)
        for inj in defects.get("injections") or []:
            if isinstance(inj, dict) and isinstance(inj.get("rate"), int | float):
                inj["rate"] = _scale_rate(rng, float(inj["rate"]), 0.3)


def _vary_when(rng: random.Random, when: dict[str, Any], max_steps: int) -> None:
    if "at_step" in when:
        when["at_step"] = max(1, min(max_steps, when["at_step"] + rng.randint(-1, 3)))
    elif "probability" in when:
        when["probability"] = round(min(1.0, max(0.02, when["probability"] * rng.uniform(0.6, 1.5))), 3)
        when["start"] = max(1, min(max_steps, when.get("start", 1) + rng.randint(-1, 2)))
    elif "every" in when:
        when["start"] = max(1, min(max_steps, when.get("start", 1) + rng.randint(-1, 2)))
    elif "at_time" in when:
        when["at_time"] = round(max(1.0, when["at_time"] * rng.uniform(0.6, 1.5)), 1)


def _vary_plan(rng: random.Random, plan: list[dict[str, Any]], max_steps: int) -> list[dict[str, Any]]:
    if not plan:
        return plan
    kept = [p for p in plan if rng.random() >= 0.3] if len(plan) > 1 else list(plan)
    if not kept:
        kept = [rng.choice(plan)]
    for p in kept:
        _vary_when(rng, p["when"], max_steps)
        d = p.get("duration")
        if isinstance(d, dict) and d.get("steps"):
            d["steps"] = max(1, min(max_steps, d["steps"] + rng.randint(-1, 2)))
        elif isinstance(d, dict) and d.get("seconds"):
            d["seconds"] = round(max(1.0, d["seconds"] * rng.uniform(0.6, 1.5)), 1)
    if rng.random() < 0.3:
        extra = json.loads(json.dumps(rng.choice(_EXTRA_FAULTS)))
        names = {p["name"] for p in kept}
        name = "variant-extra"
        if name not in names:
            at = rng.randint(1, max(1, min(max_steps, 6)))
            kept.append({"name": name, "when": {"at_step": at}, "duration": {"steps": 2}, **extra})
    return kept


def make_variant(base: Scenario, split: str, index: int) -> Scenario | None:
    """The ``index``-th candidate variant of ``base`` drawn for ``split`` (None if it is invalid)."""
    rng = random.Random(f"{base.id}/{split}/{index}")
    data = base.model_dump(mode="json")
    lo, hi = SEED_RANGES[split]
    data["seed"] = rng.randrange(lo, hi)
    _vary_defects(rng, data["datasets"])
    data["perturbations"] = _vary_plan(rng, data.get("perturbations") or [], base.max_steps)
    try:
        candidate = Scenario.model_validate(data)
    except ValidationError:
        return None
    digest = hashlib.sha256(signature(candidate).encode()).hexdigest()[:8]
    vid = f"{base.id[:54]}-{digest}"
    return candidate.model_copy(update={"id": vid, "title": f"{base.title} (variant {digest})"})


def variants(base: Scenario, split: str, count: int) -> list[Scenario]:
    """``count`` distinct variants of ``base`` that belong to ``split`` (by content hash)."""
    if split not in ("train", "test"):
        raise ValueError(f"variants are drawn for 'train' or 'test', not {split!r}")
    out: list[Scenario] = []
    seen: set[str] = set()
    index = 0
    while len(out) < count and index < count * 200:
        v = make_variant(base, split, index)
        index += 1
        if v is None or split_of(v) != split:
            continue
        sig = signature(v)
        if sig not in seen:
            seen.add(sig)
            out.append(v)
    return out


def suite(
    name: str,
    *,
    families: list[str] | None = None,
    variants_per_family: int | None = None,
    max_difficulty: int | None = None,
) -> list[SuiteEntry]:
    """The scenarios of a suite, optionally only some families, a number of variants, or a difficulty cap."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
    ids = catalog_ids()
    if families:
        unknown = [f for f in families if f not in ids]
        if unknown:
            raise ValueError(
                f"unknown scenario famil{'ies' if len(unknown) > 1 else 'y'}: {', '.join(unknown)}"
            )
        ids = [i for i in ids if i in families]
    entries: list[SuiteEntry] = []
    for fid in ids:
        base = load_builtin(fid)
        if max_difficulty is not None and base.difficulty > max_difficulty:
            continue
        if name == "builtin":
            entries.append(SuiteEntry(fid, "builtin", base))
            continue
        n = variants_per_family or (TRAIN_VARIANTS if name == "train" else TEST_VARIANTS)
        entries.extend(SuiteEntry(fid, name, v) for v in variants(base, name, n))
    return entries


__all__ = ["SUITES", "SuiteEntry", "make_variant", "signature", "split_of", "suite", "variants"]
